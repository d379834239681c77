"""Who may open what on ``voice-agent serve``: token, Twilio signature, Origin and Host.

Everything here runs on the HTTP request of a connection, before any call exists, and
answers with a ``Decision``: the route, or the status and one-line reason of a refusal.

The token may come as ``Authorization: Bearer``, a path segment (``/phone/<token>``:
Twilio's ``<Stream url>`` can carry nothing else), the page's cookie (``/`` and ``/browser``
only, so another site's page cannot ride on it to ``/phone``), or, on ``/phone``, as the
stream's ``token`` parameter in the ``start`` message (``start_token``: checked by the server
before the call is built). ``?token=`` opens the page only (the link a person is given; the
page then takes it out of the address bar): a query string lands in proxies' access logs, so
no other route takes one. A Twilio-signed upgrade
(``X-Twilio-Signature``, Twilio's published HMAC-SHA1 over the public URL) needs no token.

Signature-only mode (no token; a public URL and a Twilio auth token): ``/phone`` needs a valid
signature and every other route, which would need the token, is refused, whatever proxy
headers the request carries or lacks (behind a TCP tunnel there are none to tell by).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit, urlunsplit

from websockets.http11 import Request

from agent.net import is_loopback

TOKEN_COOKIE = "voice_agent_token"
PHONE, BROWSER, PAGE = "/phone", "/browser", "/"
METRICS = "/metrics"
QUERY_TOKEN = (
    "?token= opens the page only: send the token in an Authorization header, or on "
    "/phone as the last path segment or the start message's token parameter"
)
DEFAULT_PORTS = {"https": 443, "wss": 443, "http": 80, "ws": 80}
# The headers whose value the server reads, on one route or another: each must come once.
READ_HEADERS = ("Host", "Origin", "Authorization", "Cookie", "X-Twilio-Signature",
                "X-Forwarded-For")  # fmt: skip


def twilio_signature(auth_token: str, url: str, params: Mapping[str, str] | None = None) -> str:
    """Twilio's request signature: base64 HMAC-SHA1 of the URL and the sorted POST params."""
    data = url + "".join(key + params[key] for key in sorted(params or {}))
    digest = hmac.new(auth_token.encode(), data.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def port_variants(url: str) -> list[str]:
    """The URL as given, with its default port spelled out, and without it (Twilio signs
    whichever form the TwiML used; its own validators accept both)."""
    parts = urlsplit(url)
    default = DEFAULT_PORTS.get(parts.scheme)
    host = parts.hostname or ""
    if default is None or parts.port not in (None, default):
        return [url]
    bare = urlunsplit(parts._replace(netloc=host))
    with_port = urlunsplit(parts._replace(netloc=f"{host}:{default}"))
    return [url, bare if parts.port else with_port]


def valid_twilio_signature(auth_token: str, url: str, signature: str) -> bool:
    """Whether ``signature`` signs ``url`` (a websocket upgrade has no POST params)."""
    return any(
        hmac.compare_digest(twilio_signature(auth_token, u).encode(), signature.encode())
        for u in port_variants(url)
    )


@dataclass
class Decision:
    """What to do with one request: serve ``route`` or refuse with ``status``."""

    route: str
    status: HTTPStatus | None = None
    reason: str = ""
    start_token: bool = False  # /phone: the token must come as the stream's parameter
    signed: bool = False  # a valid Twilio signature: Twilio itself is calling


class DuplicateHeader(ValueError):
    """A header the server reads came more than once: which Host, which token, which
    address would be a guess (websockets' own ``get`` raises on it, a 500 before this)."""


def header(request: Request, name: str) -> str | None:
    """The one value of header ``name`` (None when absent); raises ``DuplicateHeader``.
    Every header the server reads is read through this."""
    values = request.headers.get_all(name)
    if len(values) > 1:
        raise DuplicateHeader(name)
    return values[0] if values else None


def split_route(path: str) -> tuple[str, str | None]:
    """``/phone/<token>`` -> (``/phone``, token); any other path -> (path, None)."""
    head, sep, rest = path.partition(PHONE + "/")
    if not head and sep and rest and "/" not in rest:
        return PHONE, unquote(rest)
    return ("/" if path == "/index.html" else path), None


def _cookie(request: Request) -> str | None:
    for part in (header(request, "Cookie") or "").split(";"):
        name, _, value = part.strip().partition("=")
        if name == TOKEN_COOKIE:
            return unquote(value)
    return None


class AccessPolicy:
    """The serve settings that decide who gets in, and the checks that apply them."""

    def __init__(
        self,
        *,
        token: str | None = None,
        allowed_origins: list[str] | None = None,
        public_url: str | None = None,
        twilio_auth_token: str | None = None,
    ) -> None:
        self._token = token.encode() if token else None
        self._public_url = public_url.rstrip("/") if public_url else None
        self._twilio = twilio_auth_token
        self._extra_origins = {o.rstrip("/") for o in allowed_origins or ()}
        self._own_origins: set[str] = set()
        self._own_hosts: set[str] = set()
        self._loopback = True
        if self._public_url:
            public = urlsplit(self._public_url)
            secure = public.scheme in ("https", "wss")
            self._own_origins.add(f"{'https' if secure else 'http'}://{public.netloc}")
            self._public_hosts = {public.netloc}
        else:
            self._public_hosts = set()

    @property
    def token(self) -> bytes | None:
        return self._token

    @property
    def signature_only(self) -> bool:
        """No token, but Twilio's signature: only Twilio-signed ``/phone`` upgrades get in."""
        return self._token is None and self._twilio is not None and self._public_url is not None

    def bound(self, host: str, port: int) -> None:
        """Learn the address listened on: the server's own origins and Host names follow."""
        names = {host}
        self._loopback = is_loopback(host)
        if self._loopback:
            names |= {"127.0.0.1", "localhost", "[::1]"}
        self._own_origins |= {f"http://{name}:{port}" for name in names}
        self._own_hosts = {f"{name}:{port}" for name in names} | self._public_hosts

    def token_matches(self, given: str | None) -> bool:
        """Constant-time comparison, so the token cannot be guessed a byte at a time."""
        if self._token is None:
            return True
        if given is None:
            return False
        return hmac.compare_digest(given.encode("utf-8", "replace"), self._token)

    def start_token_matches(self, custom_parameters: Any) -> bool:
        """The ``token`` stream parameter of a ``start`` message, checked like the others."""
        params = custom_parameters if isinstance(custom_parameters, dict) else {}
        token = params.get("token")
        return self.token_matches(token if isinstance(token, str) else None)

    def _presented(self, request: Request, route: str, segment: str | None) -> str | None:
        auth = header(request, "Authorization") or ""
        if auth[:7].lower() == "bearer ":
            return auth[7:].strip()
        if segment is not None:
            return segment
        query = parse_qs(urlsplit(request.path).query).get("token")
        if query and route == PAGE:
            return query[0]
        return _cookie(request) if route in (PAGE, BROWSER) else None

    def _origin_allowed(self, request: Request, route: str) -> bool:
        """Browsers always send Origin on a websocket; Twilio and other clients send none.

        On ``/browser`` with a token set, the page's own address (Host) is accepted too: a
        DNS-rebinding page cannot present the token, so it is refused anyway.
        """
        origin = header(request, "Origin")
        if origin is None:
            return True
        allowed = self._own_origins | self._extra_origins
        host = header(request, "Host")
        if route == BROWSER and self._token is not None and host is not None:
            allowed = allowed | {f"http://{host}"}
        return origin.rstrip("/") in allowed

    def decide(self, request: Request) -> Decision:
        """Check one request, cheapest and least revealing checks first; raises
        ``DuplicateHeader`` (a 400) for a header it reads that came twice."""
        for name in READ_HEADERS:  # on every route: the answer does not depend on which
            header(request, name)
        route, segment = split_route(urlsplit(request.path).path)
        signed = False
        host = header(request, "Host")
        if self._token is None and self._loopback and host not in self._own_hosts:
            return Decision(route, HTTPStatus.FORBIDDEN, "host not served here")
        if route in (PHONE, BROWSER) and not self._origin_allowed(request, route):
            return Decision(route, HTTPStatus.FORBIDDEN,
                            "origin not allowed: add it to serve.allowed_origins")  # fmt: skip
        signature = header(request, "X-Twilio-Signature")
        if route == PHONE and signature is not None and self._twilio is not None:
            url = (self._public_url or "") + request.path
            if not self._public_url or not valid_twilio_signature(self._twilio, url, signature):
                return Decision(route, HTTPStatus.FORBIDDEN, "bad Twilio signature")
            signed = True
        if self.signature_only and not signed:
            reason = "Twilio signature required" if route == PHONE else (
                "no serve token is set: only Twilio-signed /phone calls are served")  # fmt: skip
            return Decision(route, HTTPStatus.FORBIDDEN, reason)
        proxied = "Forwarded" in request.headers or "X-Forwarded-For" in request.headers
        if self._token is None and proxied and not signed:
            return Decision(route, HTTPStatus.FORBIDDEN,
                            "proxied request to a server without a token: set a token")  # fmt: skip
        if self._token is None or signed:
            return Decision(route, signed=signed)
        given = self._presented(request, route, segment)
        if given is None and route != PAGE and "token=" in urlsplit(request.path).query:
            return Decision(route, HTTPStatus.UNAUTHORIZED, QUERY_TOKEN)
        if given is None and route == PHONE:
            return Decision(route, start_token=True)
        if not self.token_matches(given):
            return Decision(route, HTTPStatus.UNAUTHORIZED, "missing or wrong token")
        return Decision(route)
