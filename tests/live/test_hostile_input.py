"""The probes of issue 56, against a real ``CallServer`` on loopback: requests written by hand
(repeated headers, a Host of our choosing, no proxy header), sockets that never say ``start``.

No models: the server has no runtime, so nothing here may get as far as a call's pipeline;
what is probed is decided on the HTTP request or while a ``/phone`` waits for ``start``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from loguru import logger

from tests.support.handshake import TOKEN, raw_request
from tests.support.live_server import InProcessServer, serving_in_process

TWILIO = "twilio-auth-token-for-tests"
PUBLIC = "wss://voice.example.test"
PUBLIC_HOST = "voice.example.test"


def signed(url: str) -> str:
    mac = hmac.new(TWILIO.encode(), url.encode(), hashlib.sha1)
    return base64.b64encode(mac.digest()).decode()


@contextmanager
def served(calls_dir: Path, **options: Any) -> Iterator[tuple[InProcessServer, list[str]]]:
    """A server with no runtime on a free port, and every log line it writes meanwhile."""
    lines: list[str] = []
    sink = logger.add(lines.append, format="{level} {message}\n{exception}", level="INFO")
    try:
        with serving_in_process(None, calls_dir, **options) as server:  # type: ignore[arg-type]
            yield server, lines
    finally:
        logger.remove(sink)


# -- 1. signature-only mode ----------------------------------------------------------------

PROXY_HEADERS = [[], [("X-Forwarded-For", "203.0.113.9")], [("Forwarded", "for=203.0.113.9")]]


@pytest.mark.parametrize("proxy", PROXY_HEADERS, ids=["no-proxy-header", "xff", "forwarded"])
def test_signature_only_mode_serves_only_signed_phone_calls(tmp_path, proxy):
    """No token, a public URL and a Twilio auth token: behind a TCP tunnel (no proxy header)
    an unsigned upgrade was let in (101 and a whole call); every route but a signed /phone
    is refused, and the server says so when it starts."""
    with served(tmp_path, public_url=PUBLIC, twilio_auth_token=TWILIO) as (server, _):
        host = [("Host", PUBLIC_HOST)]
        status, _ = raw_request(server.port, "/phone", host + proxy)
        assert status == 403
        for path in ("/browser", "/metrics"):
            assert raw_request(server.port, path, host + proxy)[0] == 403, path
        assert raw_request(server.port, "/", host + proxy, upgrade=False)[0] == 403
        assert raw_request(server.port, "/metrics", host + proxy, upgrade=False)[0] == 403
        sig = [("X-Twilio-Signature", signed(PUBLIC + "/phone"))]
        assert raw_request(server.port, "/phone", host + sig + proxy)[0] == 101
        assert raw_request(server.port, "/healthz", host, upgrade=False)[0] == 200
    assert any("signature-only mode" in line for line in server.lines), server.lines


def test_a_token_still_opens_every_route_beside_the_signature(tmp_path):
    options = {"token": TOKEN, "public_url": PUBLIC, "twilio_auth_token": TWILIO}
    with served(tmp_path, **options) as (server, _):
        bearer = [("Host", PUBLIC_HOST), ("Authorization", f"Bearer {TOKEN}")]
        assert raw_request(server.port, "/metrics", bearer, upgrade=False)[0] == 200
        assert raw_request(server.port, f"/phone/{TOKEN}", [("Host", PUBLIC_HOST)])[0] == 101
    assert not any("signature-only" in line for line in server.lines)
