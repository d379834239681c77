"""Who may connect to ``voice-agent serve``, decided on the HTTP request alone: token in its
places, Twilio's signature, Origin, Host, proxies, and the connection counts per server and
per address (pending handshakes included). No models: fake connections, real requests."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
from http import HTTPStatus
from typing import Any

import pytest

from agent.live.access import AccessPolicy, port_variants, split_route
from agent.live.server import CallServer, check_serve_security
from tests.support.handshake import PORT, TOKEN, FakeConnection, request

TWILIO = "twilio-auth-token-for-tests"
PUBLIC = "wss://voice.example.test"


def signed(url: str, auth_token: str = TWILIO) -> str:
    """Twilio's published algorithm, written out here on its own: HMAC-SHA1 of the full URL
    (a websocket upgrade has no POST parameters to append), base64."""
    mac = hmac.new(auth_token.encode("utf-8"), url.encode("utf-8"), hashlib.sha1)
    return base64.b64encode(mac.digest()).decode("ascii")


def policy(**options: Any) -> AccessPolicy:
    access = AccessPolicy(**options)
    access.bound("127.0.0.1", PORT)
    return access


def test_routes_and_the_token_path_segment():
    assert split_route("/phone") == ("/phone", None)
    assert split_route(f"/phone/{TOKEN}") == ("/phone", TOKEN)
    assert split_route("/phone/a/b") == ("/phone/a/b", None)
    assert split_route("/index.html") == ("/", None)
    assert port_variants("wss://h.example/phone") == [
        "wss://h.example/phone", "wss://h.example:443/phone"
    ]  # fmt: skip


def test_a_foreign_origin_is_refused_on_phone_with_or_without_the_cookie():
    access = policy(token=TOKEN)
    cookie = f"voice_agent_token={TOKEN}"
    for headers in ({}, {"Cookie": cookie}):
        decision = access.decide(request("/phone", Origin="http://evil.example", **headers))
        assert decision.status == HTTPStatus.FORBIDDEN
    # The cookie is the page's: it opens /browser, never /phone.
    assert access.decide(request("/browser", Cookie=cookie)).status is None
    phone = access.decide(request("/phone", Cookie=cookie))
    assert phone.status is None and phone.start_token  # must still show the token at start


def test_token_places():
    access = policy(token=TOKEN)
    assert access.decide(request(f"/phone/{TOKEN}")).status is None
    for path in ("/phone", "/browser", "/metrics"):  # a query lands in access logs
        refused = access.decide(request(f"{path}?token={TOKEN}"))
        assert refused.status == HTTPStatus.UNAUTHORIZED and "opens the page only" in refused.reason
    assert access.decide(request(f"/?token={TOKEN}")).status is None
    assert access.decide(request("/phone", Authorization=f"Bearer {TOKEN}")).status is None
    assert access.decide(request("/phone/wrong-token")).status == HTTPStatus.UNAUTHORIZED
    assert access.decide(request("/browser")).status == HTTPStatus.UNAUTHORIZED
    assert access.decide(request("/")).status == HTTPStatus.UNAUTHORIZED
    assert access.start_token_matches({"token": TOKEN})
    assert not access.start_token_matches({"token": TOKEN[:-1]})
    assert not access.start_token_matches({}) and not access.start_token_matches("x")


def test_a_rebinding_host_is_refused_on_loopback_without_a_token():
    access = policy()
    for path in ("/", "/phone", "/browser"):
        assert access.decide(request(path, Host=f"rebind.evil.example:{PORT}")).status == 403
        assert access.decide(request(path)).status is None
        assert access.decide(request(path, Host=f"localhost:{PORT}")).status is None


def test_a_proxied_request_needs_a_token():
    access = policy()
    for header in ("X-Forwarded-For", "Forwarded"):
        decision = access.decide(request("/phone", **{header: "203.0.113.9"}))
        assert decision.status == HTTPStatus.FORBIDDEN and "token" in decision.reason
    with pytest.raises(Exception, match="public URL"):
        check_serve_security("127.0.0.1", None, public_url=PUBLIC)
    check_serve_security("127.0.0.1", None, public_url=PUBLIC, twilio=True)


def test_twilio_signed_upgrades():
    access = policy(token=TOKEN, public_url=PUBLIC, twilio_auth_token=TWILIO)
    for path in ("/phone", "/phone?x=1"):
        ok = access.decide(request(path, X_Twilio_Signature=signed(PUBLIC + path)))
        assert ok.status is None and ok.signed and not ok.start_token
    with_port = signed("wss://voice.example.test:443/phone")
    assert access.decide(request("/phone", X_Twilio_Signature=with_port)).signed
    for bad in (signed(PUBLIC + "/phone", "another-account"), signed(PUBLIC + "/other"), "x"):
        refused = access.decide(request("/phone", X_Twilio_Signature=bad))
        assert refused.status == HTTPStatus.FORBIDDEN


async def test_handshakes_count_per_server_and_per_address_until_their_socket_closes():
    server = CallServer(None, None, max_calls=3, max_calls_per_address=2,  # type: ignore[arg-type]
                        token=TOKEN, public_url=PUBLIC, twilio_auth_token=TWILIO)  # fmt: skip
    server.bound("127.0.0.1", PORT)
    phone, browser = f"/phone/{TOKEN}", request("/browser", Authorization=f"Bearer {TOKEN}")
    a = [FakeConnection("192.0.2.1") for _ in range(3)]
    assert server.process_request(a[0], request(phone)) is None
    assert server.process_request(a[1], browser) is None
    busy = server.process_request(a[2], request(phone))
    assert busy is not None and busy.status_code == 503  # a third one from the same address
    b = FakeConnection("192.0.2.2")
    assert server.process_request(b, request(phone)) is None
    assert server.process_request(FakeConnection("192.0.2.3"), request(phone)).status_code == 503
    a[0].connection_lost_waiter.set_result(None)  # a handshake that never finished
    await asyncio.sleep(0)
    assert server.connections == 2
    assert server.process_request(a[2], request(phone)) is None
    # Twilio's own (signed) connections do not count against its address.
    b.connection_lost_waiter.set_result(None)
    await asyncio.sleep(0)
    third = FakeConnection("192.0.2.1")
    assert server.process_request(third, request(phone)).status_code == 503
    twilio = request("/phone", X_Twilio_Signature=signed(PUBLIC + "/phone"))
    assert server.process_request(third, twilio) is None
