"""``voice-agent serve`` hardening against a real server on loopback: token (401) in each of
its places, origin (403, on /phone too), Twilio-signed upgrades, concurrent calls (503),
message size (1009, that connection only), call length.

One server for the module, started with short limits so every test stays bounded.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import http.client
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from agent.audio import load_audio
from agent.errors import UserError
from agent.live.server import MAX_MESSAGE_BYTES, check_serve_security
from agent.net import free_port, is_loopback
from tests.support.caller import PhoneCaller
from tests.support.clips import SAMPLES
from tests.support.live_server import Server, serving

TOKEN = "test-token-0123456789abcdef"
MAX_CALLS = 2
MAX_CALL_SECS = 15
ALLOWED = "http://allowed.example:8080"
TWILIO = "twilio-auth-token-for-tests"
PUBLIC = "wss://voice.example.test"


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    """The server, token from the environment (as in production), limits from flags."""
    calls_dir = tmp_path_factory.mktemp("calls")
    env = {**os.environ, "VOICE_AGENT_SERVE__TOKEN": TOKEN, "VOICE_AGENT_SERVE__PUBLIC_URL": PUBLIC,
           "VOICE_AGENT_SERVE__TWILIO_AUTH_TOKEN": TWILIO}  # fmt: skip
    limits = ["--max-calls", str(MAX_CALLS), "--max-call-secs", str(MAX_CALL_SECS)]
    with serving(calls_dir, *limits, "--allowed-origin", ALLOWED, env=env) as running:
        yield running
    log = "\n".join(running.stdout + running.stderr)
    assert TOKEN not in log and TWILIO not in log, "a secret was logged"
    assert "Traceback" not in log and "call failed" not in log, log[-2000:]


def phone_url(server: Server, token: str | None = TOKEN) -> str:
    return server.url("/phone") + (f"/{token}" if token is not None else "")


async def refused_status(url: str, **kwargs) -> int | None:
    """The HTTP status the handshake was refused with, or None when it was accepted."""
    try:
        async with connect(url, **kwargs):
            return None
    except InvalidStatus as exc:
        return exc.response.status_code


def call_info(server: Server, phone: PhoneCaller) -> tuple[Path, dict]:
    """The folder and call.json of that phone's call (folders of one second sort randomly)."""
    for folder in server.calls("phone"):
        path = folder / "call.json"
        if path.exists():
            info = json.loads(path.read_text())
            if info.get("stream_sid") == phone.stream_sid:
                return folder, info
    raise AssertionError(f"no call.json for stream {phone.stream_sid}")


async def connect_when_free(url: str, timeout: float = 20.0):
    """A raw connection, retrying while the slots of earlier tests' calls are being freed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            return await connect(url)
        except InvalidStatus as exc:
            if exc.response.status_code != 503 or loop.time() > deadline:
                raise
            await asyncio.sleep(0.3)


async def open_caller(url: str, timeout: float = 20.0) -> PhoneCaller:
    """A connected phone, retrying while the slots of earlier tests' calls are being freed."""
    return await open_caller_with(PhoneCaller(url), timeout)


async def open_caller_with(phone: PhoneCaller, timeout: float = 20.0) -> PhoneCaller:
    """``phone`` connected, retrying while the slots of earlier tests' calls are freed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            return await phone.__aenter__()
        except InvalidStatus as exc:
            if exc.response.status_code != 503 or loop.time() > deadline:
                raise
            await asyncio.sleep(0.3)


def test_loopback_and_token_rules():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.com")
    check_serve_security("127.0.0.1", None)
    check_serve_security("0.0.0.0", TOKEN)
    with pytest.raises(UserError, match="without a token"):
        check_serve_security("0.0.0.0", None)
    with pytest.raises(UserError, match="too short"):
        check_serve_security("127.0.0.1", "short")


def test_refuses_a_public_address_without_a_token(tmp_path):
    """One clear line and exit 2, at once: no model is loaded first."""
    env = {k: v for k, v in os.environ.items() if k != "VOICE_AGENT_SERVE__TOKEN"}
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli", "serve", "--host", "0.0.0.0", "--port",
         str(free_port()), "--calls-dir", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "without a token" in lines[0], done.stderr
    assert not list(tmp_path.iterdir())


async def test_token_is_required_and_checked(server):
    assert await refused_status(phone_url(server, "wrong-" + TOKEN)) == 401
    assert await refused_status(phone_url(server, TOKEN[:-1])) == 401
    bearer = {"Authorization": "Bearer nope"}
    assert await refused_status(server.url("/phone"), additional_headers=bearer) == 401
    assert await refused_status(server.url("/browser")) == 401
    # The page too; with the token it comes with the cookie its own websocket will carry.
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("GET", "/")
    assert conn.getresponse().status == 401
    conn.request("GET", f"/?token={TOKEN}")
    response = conn.getresponse()
    assert response.status == 200 and b"<html" in response.read().lower()
    cookie = response.getheader("Set-Cookie", "")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    conn.close()
    # Without a token in the request, /phone wants it as the stream's parameter: the call
    # is refused at the start message.
    async with await connect_when_free(phone_url(server, None)) as ws:
        await ws.send(json.dumps(start_message("MZ" + "0" * 32, {"token": "wrong"})))
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 15)
        assert ws.close_code == 1008
    # A refused handshake creates no call.
    assert not server.calls("phone") and not server.calls("browser")

    # The right token, as a header or in the path: the call works.
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert await refused_status(server.url("/phone"), additional_headers=bearer) is None
    question = load_audio(SAMPLES / "new_home_in_the_stars.wav", 16000)
    phone = await open_caller(phone_url(server))
    try:
        await asyncio.sleep(0.3)
        asked = phone.speak(question)
        await asked.done.wait()
        reply = await phone.wait_for("media", asked.sent_at[-1], 30)
        assert reply is not None, "no answer with the right token"
        assert await phone.hang_up(30)
    finally:
        await phone.__aexit__(None, None, None)
    assert call_info(server, phone)[1]["end_reason"] == "the phone sent stop"


async def test_browser_origin_is_checked(server):
    url, bearer = server.url("/browser"), {"Authorization": f"Bearer {TOKEN}"}
    for evil in ("http://evil.example", f"http://evil.example:{server.port}"):
        assert await refused_status(url, origin=evil, additional_headers=bearer) == 403
    for origin in (f"http://127.0.0.1:{server.port}", f"http://localhost:{server.port}", ALLOWED):
        async with connect(url, origin=origin, additional_headers=bearer) as ws:
            first = json.loads(await asyncio.wait_for(ws.recv(), 30))
            assert first["type"] == "call"
            await ws.send(json.dumps({"type": "stop"}))
            with pytest.raises(ConnectionClosed):
                while True:
                    await asyncio.wait_for(ws.recv(), 30)
    # The page's websocket with the page's cookie and origin (what a browser sends).
    cookie = {"Cookie": f"voice_agent_token={TOKEN}"}
    async with connect(server.url("/browser"), origin=f"http://127.0.0.1:{server.port}",
                       additional_headers=cookie) as ws:  # fmt: skip
        assert json.loads(await asyncio.wait_for(ws.recv(), 30))["type"] == "call"


async def test_too_many_calls_are_refused_with_503(server):
    phones = [await open_caller(phone_url(server)) for _ in range(MAX_CALLS)]
    try:
        assert await refused_status(phone_url(server)) == 503
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        assert await refused_status(server.url("/browser"), additional_headers=bearer) == 503
        assert await phones[0].hang_up(30)
        # A freed slot takes the next caller.
        extra = await open_caller(phone_url(server), timeout=10)
        assert await extra.hang_up(30)
        await extra.__aexit__(None, None, None)
    finally:
        for phone in phones:
            await phone.__aexit__(None, None, None)


async def test_an_oversized_message_closes_only_its_connection(server):
    phone = await open_caller(phone_url(server))
    try:
        async with await connect_when_free(phone_url(server)) as ws:
            await ws.send("x" * (MAX_MESSAGE_BYTES + 1))
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(ws.recv(), 10)
            assert ws.close_code == 1009
        await asyncio.sleep(0.5)
        assert not phone.closed.is_set(), "the other call was closed too"
        assert await phone.hang_up(30)
    finally:
        await phone.__aexit__(None, None, None)
    assert call_info(server, phone)[1]["end_reason"] == "the phone sent stop"


async def test_a_call_ends_at_its_time_limit_with_its_files(server):
    question = load_audio(SAMPLES / "new_home_in_the_stars.wav", 16000)
    phone = await open_caller(phone_url(server))
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        await asyncio.sleep(0.3)
        asked = phone.speak(question)
        await asked.done.wait()
        assert await phone.wait_for("media", asked.sent_at[-1], 30) is not None
        # The caller never hangs up: the server does, at the limit.
        await asyncio.wait_for(phone.closed.wait(), MAX_CALL_SECS + 30)
        lasted = loop.time() - started
    finally:
        await phone.__aexit__(None, None, None)
    assert MAX_CALL_SECS - 1 < lasted < MAX_CALL_SECS + 15, lasted
    folder, info = call_info(server, phone)
    assert info["end_reason"] == f"the call reached its {MAX_CALL_SECS:g} s limit", info
    records = [json.loads(x) for x in (folder / "turns.jsonl").read_text().splitlines()]
    assert records and records[0]["voice_to_voice_ms"] > 0
    assert (folder / "summary.json").exists() and (folder / "call.wav").exists()
    assert np.isfinite(info["duration_s"])


def start_message(sid: str, parameters: dict | None = None) -> dict:
    fmt = {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}
    return {"event": "start", "streamSid": sid, "start": {
        "streamSid": sid, "mediaFormat": fmt, "customParameters": parameters or {}}}  # fmt: skip


async def test_phone_refuses_a_foreign_origin_with_or_without_the_cookie(server):
    cookie = {"Cookie": f"voice_agent_token={TOKEN}"}
    for origin in ("http://evil.example", f"http://evil.example:{server.port}"):
        assert await refused_status(server.url("/phone"), origin=origin) == 403
        assert await refused_status(server.url("/phone"), origin=origin,
                                    additional_headers=cookie) == 403  # fmt: skip
        assert await refused_status(phone_url(server), origin=origin) == 403


async def brief_call(phone: PhoneCaller) -> PhoneCaller:
    """Connect, check the call is up half a second later, hang up."""
    caller = await open_caller_with(phone)
    try:
        await asyncio.sleep(0.5)
        assert not caller.closed.is_set()
        assert await caller.hang_up(30)
    finally:
        await caller.__aexit__(None, None, None)
    return caller


async def test_the_token_as_a_path_segment_or_a_stream_parameter(server):
    for phone in (PhoneCaller(server.url(f"/phone/{TOKEN}")),
                  PhoneCaller(server.url("/phone"), parameters={"token": TOKEN})):  # fmt: skip
        caller = await brief_call(phone)
        folder, info = call_info(server, caller)
        assert info["end_reason"] == "the phone sent stop"
        assert TOKEN not in "".join(p.read_text(errors="ignore") for p in folder.iterdir())


def twilio_signature(url: str, auth_token: str = TWILIO) -> str:
    """Twilio's published algorithm: base64 HMAC-SHA1 of the full URL (no POST parameters
    on a websocket upgrade), keyed with the account's auth token."""
    digest = hmac.new(auth_token.encode("utf-8"), url.encode("utf-8"), hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


async def test_a_twilio_signed_upgrade_is_accepted_and_a_wrongly_signed_one_refused(server):
    good = {"X-Twilio-Signature": twilio_signature(PUBLIC + "/phone")}
    caller = await brief_call(PhoneCaller(server.url("/phone"), headers=good))
    assert call_info(server, caller)[1]["end_reason"] == "the phone sent stop"
    for wrong in (
        twilio_signature(PUBLIC + "/phone", "someone-elses-token"),
        twilio_signature("wss://other.example/phone"),
        "bm90IGEgc2lnbmF0dXJl",
    ):
        headers = {"X-Twilio-Signature": wrong}
        assert await refused_status(server.url("/phone"), additional_headers=headers) == 403


def test_client_text_is_clipped_in_the_log(server):
    """Runs last: a long junk message must not reach the log at full length."""
    junk = "JUNK" * 2000

    async def send_junk() -> None:
        phone = await open_caller(phone_url(server))
        try:
            await phone.send(junk)
            await phone.send(json.dumps({"event": junk}))
            await asyncio.sleep(0.5)
            assert await phone.hang_up(30)
        finally:
            await phone.__aexit__(None, None, None)

    asyncio.run(send_junk())
    log = "\n".join(server.stderr)
    assert "not JSON" in log and "unknown event" in log
    assert "JUNK" * 30 not in log
