"""The probes of issue 56, against a real ``CallServer`` on loopback: requests written by hand
(repeated headers, a Host of our choosing, no proxy header), sockets that never say ``start``.

Most have no models: the server has no runtime, so nothing there may get as far as a call's
pipeline; what is probed is decided on the HTTP request or while a ``/phone`` waits for
``start``. Those that need whole calls (marked slow) load the models once.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from loguru import logger

from agent.live.call import Runtime
from agent.live.haproxy import Haproxy
from agent.live.retention import Retention
from agent.net import free_port
from agent.pipeline import AgentModels, llm_engine
from agent.settings import Settings
from agent.timing.budget import load_budget
from tests.support.handshake import TOKEN, held_request, raw_request
from tests.support.live_server import InProcessServer, serving_in_process, wait_until

TWILIO = "twilio-auth-token-for-tests"
PUBLIC = "wss://voice.example.test"
PUBLIC_HOST = "voice.example.test"


def signed(url: str) -> str:
    mac = hmac.new(TWILIO.encode(), url.encode(), hashlib.sha1)
    return base64.b64encode(mac.digest()).decode()


@contextmanager
def served(
    calls_dir: Path, runtime: Runtime | None = None, **options: Any
) -> Iterator[tuple[InProcessServer, list[str]]]:
    """A server on a free port (with no runtime unless given one), and every log line it
    writes meanwhile."""
    lines: list[str] = []
    sink = logger.add(lines.append, format="{level} {message}\n{exception}", level="INFO")
    try:
        with serving_in_process(runtime, calls_dir, **options) as server:  # type: ignore[arg-type]
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


# -- 2. repeated headers, and what many clients may cost in log lines ----------------------

READ_HEADERS = {"Host": "127.0.0.1:{port}", "Origin": "http://127.0.0.1:{port}",
                "Authorization": f"Bearer {TOKEN}", "Cookie": f"voice_agent_token={TOKEN}",
                "X-Twilio-Signature": "x", "X-Forwarded-For": "198.51.100.7"}  # fmt: skip


def warnings(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("WARNING")]


def test_a_header_sent_twice_is_a_400_in_one_line_not_a_500_with_a_traceback(tmp_path, caplog):
    """websockets' Headers.get raised on a repeated header: 500 and 15 lines of stack, before
    any authentication. Each header the server reads, twice, on each route: 400."""
    options = {"token": TOKEN, "public_url": PUBLIC, "twilio_auth_token": TWILIO}
    with served(tmp_path, **options) as (server, lines):
        for name, value in READ_HEADERS.items():
            value = value.format(port=server.port)
            twice = [(name, value), (name, value)]
            for path in ("/phone", f"/phone/{TOKEN}", "/browser", "/metrics"):
                status, head = raw_request(server.port, path, twice)
                assert status == 400, (name, path, head)
                assert TOKEN.encode() not in head
            assert raw_request(server.port, "/", twice, upgrade=False)[0] == 400
        for _ in range(200):  # a flood of them costs a bounded number of lines
            raw_request(server.port, "/phone", [("Origin", "x"), ("Origin", "y")])
    log = "".join(lines) + caplog.text
    assert "Traceback" not in log and "process_request failed" not in log
    assert 0 < len(warnings(lines)) <= 20, warnings(lines)[-3:]
    assert any("came more than once" in line for line in lines)
    assert TOKEN not in log


async def test_many_connections_sending_junk_cost_a_bounded_number_of_lines(tmp_path):
    """Each connection's own warning limit held, but a thousand connections each within it
    filled the log (655 KB in 2.3 s): the lines of an address and of the server are bounded
    too (token buckets: at most their burst plus one per refill period)."""
    from websockets.asyncio.client import connect

    async def junk(url: str) -> None:  # a token-less /phone connection, waiting for its start
        async with connect(url) as ws:
            for message in ("{", "[]", '{"event": 1}', "null", '{"event": "x"}', "\x00"):
                await ws.send(message)

    with served(tmp_path, token=TOKEN) as (server, lines):
        began = time.monotonic()
        for _ in range(25):  # each connection alone is within its own limit of 5
            await asyncio.gather(*(junk(server.url("/phone")) for _ in range(4)))
        elapsed = time.monotonic() - began
    # The address's bucket: 10 at once, then one per 10 s; the server's: 20, one a second.
    assert 0 < len(warnings(lines)) <= 10 + elapsed / 10 + 1, (elapsed, warnings(lines)[-3:])


needs_haproxy = pytest.mark.skipif(
    shutil.which("haproxy") is None, reason="haproxy: bash scripts/setup.sh --pool"
)


@contextmanager
def balanced(workers: list[InProcessServer], max_per_address: int = 4) -> Iterator[Haproxy]:
    """The pool's HAProxy, as ``voice-agent pool`` configures it, in front of ``workers``."""
    front = Haproxy("127.0.0.1", free_port(), [w.port for w in workers], max_call_secs=60,
                    max_per_address=max_per_address).start()  # fmt: skip
    try:
        front.wait_up([f"w{i}" for i in range(len(workers))], timeout=30)
        yield front
    finally:
        front.stop()


@needs_haproxy
def test_the_pools_haproxy_sends_one_forwarded_for(tmp_path):
    """``option forwardfor`` appended a second X-Forwarded-For to a caller's own, and the
    worker answered 500 to a caller with the right token. Now HAProxy sets the one header,
    and the worker counts the caller's address, not the one the caller claimed."""
    with served(tmp_path, token=TOKEN) as (server, lines), balanced([server]) as front:
        claimed = [("X-Forwarded-For", "198.51.100.7")]
        for path in (f"/phone/{TOKEN}", "/phone"):
            status, head = raw_request(front.port, path, claimed)
            assert status == 101, head
    assert not any("came more than once" in line for line in lines)


# -- 3. token-less sockets wait in a pool of their own -------------------------------------


def start_with(token: str) -> str:
    fmt = {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}
    start = {"streamSid": "MZ" + "1" * 32, "callSid": "CA" + "1" * 32, "mediaFormat": fmt,
             "customParameters": {"token": token}}  # fmt: skip
    return json.dumps({"event": "start", "streamSid": start["streamSid"], "start": start})


def test_a_caller_with_the_token_gets_in_while_16_token_less_sockets_wait(tmp_path):
    """A /phone upgrade without a token waited 5 s for it in ``start`` holding a call's slot:
    from two addresses, 4 each, the server stayed full and a caller with the token got 503."""
    with served(tmp_path, token=TOKEN, max_calls=8, max_calls_per_address=4) as (server, _):
        waiting = [held_request(server.port, "/phone", [], source=f"127.0.0.{2 + i % 4}")
                   for i in range(16)]  # fmt: skip
        try:
            statuses = sorted(status for status, _, _ in waiting)
            assert statuses.count(101) == 8 and statuses.count(503) == 8, statuses
            caller = held_request(server.port, f"/phone/{TOKEN}", [], source="127.0.0.9")
            assert caller[0] == 101, caller[1]
            caller[2].close()
            assert server.server.pending == 8
            assert raw_request(server.port, "/readyz", [], upgrade=False)[0] == 200
        finally:
            for _, _, sock in waiting:
                sock.close()


async def test_a_waiting_socket_whose_token_checks_out_needs_a_free_slot(tmp_path):
    """The token in ``start`` moves a waiting connection into the calls; while they are full
    it is closed with 1013 (try again later), before any call is built."""
    from websockets.asyncio.client import connect

    with served(tmp_path, token=TOKEN, max_calls=2) as (server, lines):
        async with connect(server.url("/phone")) as ws:
            calls = [held_request(server.port, f"/phone/{TOKEN}", [], source=f"127.0.0.{2 + i}")
                     for i in range(2)]  # fmt: skip
            try:
                assert [status for status, _, _ in calls] == [101, 101]
                await ws.send(start_with(TOKEN))
                await asyncio.wait_for(ws.wait_closed(), 10)
                assert ws.close_code == 1013, (ws.close_code, ws.close_reason)
            finally:
                for _, _, sock in calls:
                    sock.close()
    assert not any("call failed" in line for line in lines)
    assert not server.calls("phone")


@needs_haproxy
def test_the_per_address_cap_holds_across_the_pool(tmp_path):
    """Each worker counted its own connections per address: one address held 4 on each of
    two workers. HAProxy counts them across the pool."""
    with (
        served(tmp_path / "w0", token=TOKEN) as (w0, _),
        served(tmp_path / "w1", token=TOKEN) as (w1, _),
        balanced([w0, w1], max_per_address=4) as front,
    ):
        held = [held_request(front.port, f"/phone/{TOKEN}", [], source="127.0.0.2")
                for _ in range(8)]  # fmt: skip
        try:
            statuses = sorted(status for status, _, _ in held)
            assert statuses == [101] * 4 + [503] * 4, statuses
            assert b"retry-after: 5" in next(h for s, h, _ in held if s == 503).lower()
            other = held_request(front.port, f"/phone/{TOKEN}", [], source="127.0.0.3")
            assert other[0] == 101
            other[2].close()
        finally:
            for _, _, sock in held:
                sock.close()


# -- 4. calls that end together, with retention on ------------------------------------------


@pytest.fixture(scope="module")
def runtime() -> Iterator[Runtime]:
    settings = Settings(llm={"greeting": "", "keepalive_secs": 0})
    models = AgentModels.load(settings)
    with llm_engine(settings) as engine:
        yield Runtime(settings, models, engine, load_budget(settings.budget_file))


@pytest.mark.slow
async def test_48_calls_ending_four_at_a_time_end_normally_within_retention(tmp_path, runtime):
    """Concurrent prunes raised FileNotFoundError out of calls that had ended normally: 33
    of 48 browser calls closed 1011 without their ``ended`` event, 8 folders left of 6."""
    from websockets.asyncio.client import connect

    async def one_call(url: str) -> tuple[int | None, list[str]]:
        async with connect(url) as ws:
            events = [json.loads(await ws.recv())["type"]]
            await ws.send(json.dumps({"type": "stop"}))
            async for message in ws:
                if isinstance(message, str):
                    events.append(json.loads(message)["type"])
        return ws.close_code, events

    limits = Retention(max_count=6)
    with served(tmp_path, runtime=runtime, retention=limits) as (server, lines):
        ended = []
        for _ in range(12):
            ended += await asyncio.gather(*(one_call(server.url("/browser")) for _ in range(4)))
        await wait_until(lambda: server.connections() == 0, 30)
        folders = server.calls("browser")
    assert [code for code, _ in ended] == [1000] * 48, [code for code, _ in ended]
    assert all(events[0] == "call" and "ended" in events for _, events in ended)
    assert len(folders) <= 6, [f.name for f in folders]
    for folder in folders:  # the owner's alone: the caller's voice and words
        assert folder.stat().st_mode & 0o777 == 0o700
        assert {p.stat().st_mode & 0o777 for p in folder.iterdir()} == {0o600}, folder
    assert not any("call failed" in line or "retention failed" in line for line in lines)


# -- 5. what a call leaves on disk, where the token may come, what a child inherits ----------


def test_a_calls_files_are_its_owners_alone(tmp_path):
    """Recordings and transcripts were written 0644 in 0755 folders (whatever the umask)."""
    from agent.private_files import create_private, make_private_folder, write_private

    old = os.umask(0o022)
    try:
        folder = tmp_path / "calls" / "one"
        make_private_folder(folder)
        write_private(folder / "turns.jsonl", "{}\n")
        with create_private(folder / "call.wav") as out:
            out.write(b"RIFF")
        with pytest.raises(FileExistsError):  # never written through what is there already
            create_private(folder / "call.wav")
    finally:
        os.umask(old)
    assert folder.stat().st_mode & 0o777 == 0o700
    assert {p.stat().st_mode & 0o777 for p in folder.iterdir()} == {0o600}


def test_a_token_in_the_query_opens_the_page_only_and_is_never_logged(tmp_path):
    """``?token=`` worked on every route, /phone and /metrics included, and a query string
    lands in proxies' access logs. It opens the page (the link a person is given) only."""
    with served(tmp_path, token=TOKEN) as (server, lines):
        for path in ("/phone", "/browser"):
            status, head = raw_request(server.port, f"{path}?token={TOKEN}", [])
            assert status == 401 and b"opens the page only" in head, head
        assert raw_request(server.port, f"/metrics?token={TOKEN}", [], upgrade=False)[0] == 401
        assert raw_request(server.port, f"/?token={TOKEN}", [], upgrade=False)[0] == 200
        assert raw_request(server.port, f"/phone/{TOKEN}x", [])[0] == 401
    assert lines and TOKEN not in "".join(lines + server.lines)


@needs_haproxy
def test_a_server_the_agent_starts_inherits_no_secret(tmp_path, monkeypatch):
    """Child processes (the LLM server, HAProxy) inherited the whole environment, the Twilio
    auth token included: now only what they need (``child_environment``)."""
    monkeypatch.setenv("VOICE_AGENT_SERVE__TWILIO_AUTH_TOKEN", TWILIO)
    monkeypatch.setenv("VOICE_AGENT_SERVE__TOKEN", TOKEN)
    with served(tmp_path, token=TOKEN) as (server, _), balanced([server]) as front:
        environ = Path(f"/proc/{front.pid}/environ").read_bytes().split(b"\0")
    names = {entry.partition(b"=")[0] for entry in environ}
    assert b"PATH" in names and not any(name.startswith(b"VOICE_AGENT") for name in names)
    assert not any(TWILIO.encode() in e or TOKEN.encode() in e for e in environ)
