"""``voice-agent serve``: one websocket server, one call per connection.

Paths: ``/`` the browser page (plain HTTP, answered in ``process_request`` before any
handshake), ``/phone`` the Twilio Media Streams bridge, ``/browser`` the page's socket, and
for operators and balancers ``/healthz``, ``/readyz`` (``agent.live.health``, no token) and
``/metrics`` (Prometheus text, ``agent.live.metrics``; the token when one is set).
Each connection runs its own pipeline; models and the LLM engine are shared. A call ends
when its client closes the socket, says ``stop``, or the server shuts down: SIGINT closes
every connection at once, SIGTERM drains first (``agent.live.drain``: no new call, the calls
in progress finish, up to ``drain_secs``); either way every call writes its files. A
client's bad messages cost a warning line each, a broken protocol ends that call only:
nothing a client sends takes the server down.

Hardening (issues 9, 24 and 56): who may connect is decided in ``process_request``, before
any model work (``agent.live.access``: token, Twilio signature, Origin, Host); at most
``max_calls`` connections, pending handshakes included, and ``max_calls_per_address`` from
one address are served at once (the next gets HTTP 503 with ``Retry-After``). A ``/phone``
upgrade without a token, which may bring it in its ``start`` message, waits in a pool of its
own (``max_pending``, and ``max_calls_per_address`` of them per address) and takes a call's
slot only once its token checks out: token-less sockets cannot keep a caller out. A call
with no audio for ``no_media_secs`` is hung up, and one lasts at most ``max_call_secs``; a
message over ``MAX_MESSAGE_BYTES`` closes its own connection; caller audio faster than real
time is dropped; each call's warning lines and the server's refusal lines are rate-limited.
``calls/`` is kept within its retention limits (``agent.live.retention``). No file path is
taken from a client (a call's folder is a timestamp and a random id), and client text is
clipped in log lines. The page is sent with a Content-Security-Policy.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from importlib import resources
from pathlib import Path
from urllib.parse import quote, urlsplit

from loguru import logger
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from agent.csp import content_security_policy
from agent.errors import UserError
from agent.live.access import (
    BROWSER,
    METRICS,
    PAGE,
    PHONE,
    TOKEN_COOKIE,
    AccessPolicy,
    Decision,
    DuplicateHeader,
    header,
    split_route,
)
from agent.live.call import LiveCall, Runtime
from agent.live.drain import Drain
from agent.live.health import PROBES, RETRY_AFTER_SECS, LLMWatch, probe
from agent.live.limits import LogBudget, WarningLimiter
from agent.live.metrics import CONTENT_TYPE, CallMetrics
from agent.live.process_memory import collect_call_garbage
from agent.live.retention import Retention, prune_calls, room_to_record
from agent.net import is_loopback
from agent.private_files import make_private_folder
from agent.redact import clip_text
from agent.transports.browser import BrowserInput, BrowserOutput, EventSender, parse_control
from agent.transports.live import LiveInput, LiveOutput
from agent.transports.phone import PhoneInput, PhoneOutput
from agent.transports.twilio import (
    StreamInfo,
    TwilioProtocolError,
    media_payload,
    parse_message,
    read_start,
)

# Twilio sends ``connected`` and ``start`` at once: a connection that says nothing this long
# is not a phone, and must not hold a slot.
START_TIMEOUT_SECS = 5.0
# Twilio media messages are ~0.4 KiB and the page's audio messages ~0.6 KiB: 64 KiB leaves
# room and keeps what one client can make the server buffer small.
MAX_MESSAGE_BYTES = 64 * 1024
# Outbound backpressure: what one client that stops reading can make the server hold. The
# websocket's own buffer (websockets' write_limit) plus the kernel's send buffer (set per
# connection; Linux doubles it) hold a few seconds of bot audio; a send that stays blocked
# past transports.live.SEND_STALL_SECS drops that call.
WRITE_LIMIT_BYTES = 16 * 1024
# No permessage-deflate: the message size limit counts inflated bytes, but one socket read is
# inflated whole before the read pauses, so 256 KiB of compressed made-up messages became
# ~100 MB held at once; audio compresses poorly anyway, and deflate costs CPU per message.
COMPRESSION = None
SOCKET_SEND_BUFFER_BYTES = 16 * 1024
MIN_TOKEN_CHARS = 16
SECURITY_HEADERS = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}

# A message handler returns a reason to hang up, or None to go on.
MessageHandler = Callable[[str | bytes], str | None]


@dataclass
class Admission:
    """A connection let through ``process_request``: what was decided, and whom it counts
    against (its client's address; behind a proxy on this machine, the one it forwards)."""

    decision: Decision
    address: str
    pending: bool = False  # waiting for the token in its start message: not a call's slot yet

    @property
    def counted_address(self) -> str | None:
        """The address it counts against (None: Twilio-signed, Twilio's own)."""
        return None if self.decision.signed else self.address


def page() -> bytes:
    """The browser page, from the package data."""
    return (resources.files("agent") / "web" / "index.html").read_bytes()


def page_policy(html: str) -> str:
    """The page's CSP: its own script (and the audio worklet it makes from a blob), its own
    style, websockets to its own server, and no framing."""
    return content_security_policy(
        html, script_src="blob:", connect_src="'self'", frame_ancestors="'none'"
    )


def check_serve_security(
    host: str, token: str | None, *, public_url: str | None = None, twilio: bool = False
) -> None:
    """Refuse (one line) to serve without a token where strangers can reach the server, or
    with a guessable one."""
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise UserError(
            f"the serve token is too short ({len(token)} chars): use at least "
            f"{MIN_TOKEN_CHARS}, e.g. `python -c 'import secrets; print(secrets.token_urlsafe())'`"
        )
    if token is None and not is_loopback(host):
        raise UserError(
            f"refusing to serve on {host} without a token: set VOICE_AGENT_SERVE__TOKEN "
            "(or --token), or serve on 127.0.0.1"
        )
    if token is None and public_url and not twilio:
        raise UserError(
            "refusing to serve at a public URL (serve.public_url) without a token: set "
            "VOICE_AGENT_SERVE__TOKEN or VOICE_AGENT_SERVE__TWILIO_AUTH_TOKEN"
        )


class MediaWatch:
    """Hangs a call up when its client has sent no audio for ``secs``: a client that
    connects and then says nothing must not hold a slot until the call's time limit."""

    def __init__(self, secs: float) -> None:
        self.secs = secs
        self._last = time.monotonic()

    def heard(self) -> None:
        self._last = time.monotonic()

    async def watch(self, call: LiveCall) -> None:
        while (left := self._last + self.secs - time.monotonic()) > 0:
            await asyncio.sleep(left)
        call.hang_up(f"no audio from the client for {self.secs:g} s")


class CallServer:
    """Routes each connection to a new call and keeps count of the connections served."""

    def __init__(
        self,
        runtime: Runtime,
        calls_dir: Path,
        *,
        record_wav: bool = True,
        say: Callable[[str], None] = print,
        token: str | None = None,
        allowed_origins: list[str] | None = None,
        public_url: str | None = None,
        twilio_auth_token: str | None = None,
        max_calls: int = 8,
        max_calls_per_address: int | None = None,
        max_pending: int = 8,
        max_call_secs: float | None = None,
        no_media_secs: float = 5.0,
        retention: Retention | None = None,
        drain_secs: float = 60.0,
        llm_watch: LLMWatch | None = None,
    ) -> None:
        self.runtime = runtime
        self.llm_watch = llm_watch
        self.calls_dir = calls_dir
        self.record_wav = record_wav
        self.say = say
        self.calls: dict[str, LiveCall] = {}
        self.max_calls = max_calls
        self.max_calls_per_address = max_calls_per_address or max_calls
        self.max_pending = max_pending
        self.max_call_secs = max_call_secs
        self.no_media_secs = no_media_secs
        self.retention = retention or Retention()
        self.access = AccessPolicy(
            token=token, allowed_origins=allowed_origins, public_url=public_url,
            twilio_auth_token=twilio_auth_token,
        )  # fmt: skip
        # Every websocket connection from its accepted request until its socket closes,
        # handshakes included.
        self._open: dict[ServerConnection, Admission] = {}
        self._log = LogBudget()  # every client's warning lines spend from it too
        self._warn = WarningLimiter(shared=(self._log.server,))
        self.drain = Drain(drain_secs)
        self.metrics = CallMetrics(lambda: len(self.calls), max_calls,
                                   lambda: self.drain.draining)  # fmt: skip
        self._page = page()
        self._page_policy = page_policy(self._page.decode())

    @property
    def connections(self) -> int:
        """Connections open now, handshakes included, but not those still waiting for their
        token in ``start``: what ``max_calls`` counts."""
        return sum(not a.pending for a in self._open.values())

    @property
    def pending(self) -> int:
        """Connections waiting for their token in ``start``: what ``max_pending`` counts."""
        return sum(a.pending for a in self._open.values())

    def bound(self, host: str, port: int) -> None:
        """Learn the address actually listened on: the server's own origins follow from it."""
        self.access.bound(host, port)

    # -- HTTP -------------------------------------------------------------------------------

    def _refuse(
        self, connection: ServerConnection, path: str, status: HTTPStatus, reason: str
    ) -> Response:
        self._warn("refused {} from {}: {}", clip_text(path, 40), _peer(connection), reason)
        response = connection.respond(status, reason + "\n")
        if status == HTTPStatus.UNAUTHORIZED:
            response.headers["WWW-Authenticate"] = "Bearer"
        if status == HTTPStatus.SERVICE_UNAVAILABLE:
            response.headers["Retry-After"] = str(RETRY_AFTER_SECS)
        return _secured(response)

    @property
    def full(self) -> bool:
        return self.connections >= self.max_calls

    def process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        """Answer the probes, refuse what must not become a call, serve the page and the
        metrics, let the websockets through."""
        path = urlsplit(request.path).path
        if path in PROBES:  # before the access checks: a balancer has no token (says one word)
            down = self.llm_watch is not None and self.llm_watch.down
            status, word = probe(path, full=self.full, draining=self.drain.draining,
                                 llm_down=down)  # fmt: skip
            response = _secured(connection.respond(status, word + "\n"))
            response.headers["Cache-Control"] = "no-store"
            return response
        try:
            decision = self.access.decide(request)
            address = _client_address(connection, request)
        except DuplicateHeader as exc:  # before any other check: nothing is read twice
            route = split_route(path)[0]  # never the path itself: /phone/<token>
            return self._refuse(connection, route, HTTPStatus.BAD_REQUEST,
                                f"the {exc} header came more than once: send it once")  # fmt: skip
        route = decision.route
        if decision.status is not None:
            if route in (PHONE, BROWSER):
                self.metrics.refused.labels("denied").inc()
            return self._refuse(connection, route, decision.status, decision.reason)
        if route in (PHONE, BROWSER):
            admission = Admission(decision, address, pending=decision.start_token)
            busy = self._no_room(admission)
            if busy is None:
                self._admit(connection, admission)
                return None
            why, reason = busy
            self.metrics.refused.labels(why).inc()
            return self._refuse(connection, route, HTTPStatus.SERVICE_UNAVAILABLE, reason)
        if route == PAGE:
            return self._page_response(connection)
        if route == METRICS:
            return _secured(_ok(connection, self.metrics.exposition(), CONTENT_TYPE))
        return _secured(connection.respond(
            HTTPStatus.NOT_FOUND, f"no such path {clip_text(route, 60)}: try / /phone /browser\n"
        ))  # fmt: skip

    def _no_room(self, admission: Admission) -> tuple[str, str] | None:
        """Why there is no room for ``admission`` in its pool (calls, or those waiting for
        their start), as a metric label and a reason; None when there is."""
        pool = [a for a in self._open.values() if a.pending == admission.pending]
        counted = admission.counted_address
        from_there = sum(a.counted_address == counted for a in pool) if counted else 0
        if self.drain.draining:
            return "draining", "draining: this server is shutting down, try again"
        if self.full:
            return "full", f"busy: {self.max_calls} calls in progress, try again later"
        if admission.pending and len(pool) >= self.max_pending:
            return "pending", f"busy: {len(pool)} connections wait for their start message"
        if from_there >= self.max_calls_per_address:
            return "per_address", f"busy: {from_there} calls from your address already"
        return None

    def _admit(self, connection: ServerConnection, admission: Admission) -> None:
        """Count the connection from now until its socket closes, handshake or not."""
        self._open[connection] = admission

        def closed(_: object) -> None:
            self._open.pop(connection, None)

        connection.connection_lost_waiter.add_done_callback(closed)

    def _page_response(self, connection: ServerConnection) -> Response:
        response = _ok(connection, self._page, "text/html; charset=utf-8")
        response.headers["Content-Security-Policy"] = self._page_policy
        token = self.access.token
        if token is not None:
            # The page's own websocket cannot add a header: a same-site cookie carries
            # the token there (HttpOnly: the page's scripts never see it).
            value = quote(token.decode(), safe="")
            response.headers["Set-Cookie"] = (
                f"{TOKEN_COOKIE}={value}; HttpOnly; SameSite=Strict; Path=/"
            )
        return _secured(response)

    # -- websocket --------------------------------------------------------------------------

    async def handle(self, ws: ServerConnection) -> None:
        """One connection = one call; any failure ends that call only, in one line."""
        admission = self._open.get(ws)
        decision = admission.decision if admission else Decision(PHONE, start_token=True)
        sock = ws.transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_SEND_BUFFER_BYTES)
        try:
            if decision.route == PHONE:
                await self._phone(ws, decision)
            elif decision.route == BROWSER:
                await self._browser(ws)
        except ConnectionClosed:
            pass
        except Exception as exc:  # noqa: BLE001 - a call's failure must not reach the server
            logger.error("{} call failed: {}: {}", decision.route, type(exc).__name__,
                         clip_text(str(exc), 120))  # fmt: skip
            self.metrics.errors.labels("call").inc()
            await ws.close(1011, "internal error")
        finally:
            collect_call_garbage()  # the call is unreachable now: free what it held at once

    def _promote(self, ws: ServerConnection) -> tuple[str, str] | None:
        """A waiting connection whose token checked out takes a call's slot, if one is free
        (see ``_no_room``: None when it did)."""
        admission = self._open.get(ws)
        if admission is None or not admission.pending:
            return None
        calls = Admission(admission.decision, admission.address)
        busy = self._no_room(calls)
        if busy is None:
            admission.pending = False
        return busy

    def _warnings(self, ws: ServerConnection) -> WarningLimiter:
        """The warning lines of one connection: its own limit, its address's, the server's."""
        admission = self._open.get(ws)
        address = admission.address if admission else _peer(ws).rpartition(":")[0]
        return WarningLimiter(shared=self._log.buckets(address))

    def _new_call(self, kind: str, **options: object) -> LiveCall:
        """A call, recorded unless the disk is nearly full (the call goes on regardless)."""
        record = self.record_wav and room_to_record(self.calls_dir, self.retention)
        if self.record_wav and not record:
            self._warn("not recording: less than {} bytes free under {}",
                           self.retention.min_free_bytes, self.calls_dir)  # fmt: skip
        call = LiveCall(self.runtime, self.calls_dir, kind=kind, record_wav=record,
                        max_secs=self.max_call_secs, on_turns=self.metrics.observe_turns,
                        **options)  # type: ignore[arg-type]  # fmt: skip
        self.metrics.calls.labels(kind).inc()
        if self.record_wav and not record:
            call.info["call_wav"] = "not recorded: the disk is nearly full"
        return call

    async def _phone(self, ws: ServerConnection, decision: Decision) -> None:
        stream = StreamInfo()
        warn = self._warnings(ws)
        try:
            started = await asyncio.wait_for(self._await_start(ws, stream, warn),
                                             START_TIMEOUT_SECS)  # fmt: skip
        except TimeoutError:
            warn("phone: no start message within {:g} s: closing", START_TIMEOUT_SECS)
            await ws.close(1008, "no start message")
            return
        except TwilioProtocolError as exc:
            warn("phone: {}: closing", exc)  # its client parts are clipped
            await ws.close(1003, str(exc).encode()[:120].decode(errors="ignore"))
            return
        if not started:
            return
        token_ok = self.access.start_token_matches(stream.custom_parameters)
        stream.custom_parameters = {}  # it may hold the token: never kept or written
        if decision.start_token and not token_ok:
            self._warn("refused /phone from {}: missing or wrong token in the start "
                           "message", _peer(ws))  # fmt: skip
            self.metrics.refused.labels("denied").inc()
            await ws.close(1008, "missing or wrong token")
            return
        if decision.start_token and (busy := self._promote(ws)) is not None:
            why, reason = busy
            self._warn("refused /phone from {}: {}", _peer(ws), reason)
            self.metrics.refused.labels(why).inc()
            await ws.close(1013, reason)  # try again later
            return
        call = self._new_call("phone", details=lambda: {
            "stream_sid": stream.stream_sid, "call_sid": stream.call_sid,
            "marks_sent": stream.marks_sent, "marks_played": stream.marks_played,
        })  # fmt: skip
        transport_in = PhoneInput(call.clock, call.recorder, rate=call.rate)
        transport_out = PhoneOutput(ws, stream, call.clock, call.recorder, rate=call.rate)
        media = MediaWatch(self.no_media_secs)

        def on_message(raw: str | bytes) -> str | None:
            message = parse_message(raw, warn)
            if message is None:
                return None
            event = message["event"]
            if event == "media":
                payload = media_payload(message, warn)
                if payload:
                    media.heard()
                    transport_in.feed_mulaw(payload)
            elif event == "mark":
                mark = message.get("mark")
                if not stream.mark_played(mark.get("name") if isinstance(mark, dict) else None):
                    warn("phone: ignored a mark the server did not send")
            elif event == "stop":
                return "the phone sent stop"
            elif event not in ("connected", "start", "dtmf"):
                warn("phone: ignored an unknown event {}", clip_text(event, 40))
            return None

        await self._converse(ws, call, transport_in, transport_out, on_message, media)

    async def _await_start(
        self, ws: ServerConnection, stream: StreamInfo, warn: WarningLimiter
    ) -> bool:
        """Read until the ``start`` message; False when the phone hung up before it."""
        async for raw in ws:
            message = parse_message(raw, warn)
            if message is None or message["event"] == "connected":
                continue
            if message["event"] == "start":
                read_start(message, stream)
                return True
            if message["event"] == "stop":
                raise TwilioProtocolError("stop before start")
            warn("phone: ignored {} before the start message", clip_text(message["event"], 40))
        return False

    async def _browser(self, ws: ServerConnection) -> None:
        events = EventSender(ws)
        events.start()
        call = self._new_call("browser", emit=events.emit)
        events.emit({"type": "call", "id": call.id, "folder": call.dir.name,
                     "rate": call.rate})  # fmt: skip
        transport_in = BrowserInput(call.clock, call.recorder, rate=call.rate)
        transport_out = BrowserOutput(ws, events, call.clock, call.recorder, rate=call.rate)
        media = MediaWatch(self.no_media_secs)
        warn = self._warnings(ws)

        def on_message(raw: str | bytes) -> str | None:
            if isinstance(raw, bytes):
                media.heard()
                transport_in.feed_message(raw, warn)
                return None
            control = parse_control(raw, warn)
            if control is not None and control.get("type") == "stop":
                return "the page hung up"
            return None

        records = await self._converse(ws, call, transport_in, transport_out, on_message, media)
        events.emit({"type": "ended", "turns": len(records)})
        await events.close()

    async def _converse(
        self,
        ws: ServerConnection,
        call: LiveCall,
        transport_in: LiveInput,
        transport_out: LiveOutput,
        on_message: MessageHandler,
        media: MediaWatch,
    ) -> list[dict]:
        """Run the call while reading the client; whichever ends first ends the other."""
        self.calls[call.id] = call

        def drop(reason: str) -> None:  # the client stopped reading: free the call now
            call.hang_up(reason)
            ws.transport.abort()

        transport_out.on_stalled = drop
        self.say(f"call {call.id} ({call.kind}) from {_peer(ws)} -> {call.dir}")

        async def read() -> None:
            async for raw in ws:
                reason = on_message(raw)
                if reason:
                    call.hang_up(reason)
                    return
            call.hang_up("the client closed the connection")

        pipeline = asyncio.ensure_future(call.run(transport_in, transport_out))
        reader = asyncio.ensure_future(read())
        watcher = asyncio.ensure_future(media.watch(call))
        try:
            await asyncio.wait({pipeline, reader}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (reader, watcher):
                if not task.done():
                    task.cancel()
            call.hang_up("the client closed the connection")
            records = await pipeline
            del self.calls[call.id]
        if reader.done() and not reader.cancelled() and reader.exception():
            exc = reader.exception()
            if not isinstance(exc, ConnectionClosed):
                logger.error("call {}: reading the client failed: {}", call.id,
                             clip_text(str(exc), 120))  # fmt: skip
        v2v = [r.voice_to_voice_ms for r in records if r.voice_to_voice_ms is not None]
        self.say(
            f"call {call.id} ended ({call.info.get('end_reason', '')}): {len(records)} turn(s)"
            + (f", voice-to-voice {', '.join(f'{x:.0f}' for x in v2v)} ms" if v2v else "")
        )
        await self.prune()
        return records

    async def prune(self) -> None:
        """Keep ``calls/`` within its retention limits (off the event loop: it walks disk)."""
        keep = [call.dir for call in self.calls.values()]
        try:
            await asyncio.to_thread(prune_calls, self.calls_dir, self.retention, keep=keep)
        except OSError as exc:  # the call ended as it should: its client hears no error
            logger.error("calls retention failed: {}", clip_text(str(exc), 160))


def _ok(connection: ServerConnection, body: bytes, content_type: str) -> Response:
    """A 200 carrying ``body``, never cached."""
    response = connection.respond(HTTPStatus.OK, "")
    response.body = body
    del response.headers["Content-Type"]
    del response.headers["Content-Length"]
    response.headers["Content-Type"] = content_type
    response.headers["Content-Length"] = str(len(body))
    response.headers["Cache-Control"] = "no-store"
    return response


def _secured(response: Response) -> Response:
    for name, value in SECURITY_HEADERS.items():
        response.headers[name] = value
    return response


def _client_address(connection: ServerConnection, request: Request) -> str:
    """Whom a connection counts against: its peer, or behind a proxy on this machine, the
    address that proxy says it forwards (the last ``X-Forwarded-For`` entry is its own)."""
    peer = _peer(connection).rpartition(":")[0]
    forwarded = header(request, "X-Forwarded-For")
    if forwarded and is_loopback(peer.strip("[]")):
        return forwarded.split(",")[-1].strip()[:64]
    return peer


def _peer(ws: ServerConnection) -> str:
    """The client's address, for log lines (it comes from the socket, not from the client)."""
    try:
        host, port = ws.remote_address[:2]
        return f"{host}:{port}"
    except (TypeError, ValueError):
        return "?"


async def serve_calls(
    server: CallServer,
    host: str,
    port: int,
    *,
    stop: asyncio.Event | None = None,
    on_ready: Callable[[int], Awaitable[None] | None] | None = None,
) -> None:
    """Serve until ``stop`` is set (or SIGINT), or a drain (SIGTERM) is done; then hang up
    every call left and return. A second SIGTERM stops at once."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)

    def terminate() -> None:
        if server.drain.draining:
            stop.set()
        server.drain.begin()

    try:
        loop.add_signal_handler(signal.SIGINT, stop.set)
        loop.add_signal_handler(signal.SIGTERM, terminate)
    except (NotImplementedError, RuntimeError):  # not the main thread
        signals = ()
    try:
        async with serve(
            server.handle, host, port, process_request=server.process_request,
            max_size=MAX_MESSAGE_BYTES, write_limit=WRITE_LIMIT_BYTES, compression=COMPRESSION,
        ) as ws_server:  # fmt: skip
            bound = next(iter(ws_server.sockets)).getsockname()[1]
            server.bound(host, bound)
            make_private_folder(server.calls_dir, exist_ok=True)  # its free space is checked
            await server.prune()
            server.say(
                f"serving on http://{host}:{bound}/ (phone: ws://{host}:{bound}/phone, "
                f"browser page: http://{host}:{bound}/); calls in {server.calls_dir}/"
            )
            if server.access.signature_only:
                server.say("signature-only mode (no serve token): only Twilio-signed /phone "
                           "calls are served, and /, /browser and /metrics are refused; set "
                           "VOICE_AGENT_SERVE__TOKEN to open them")  # fmt: skip
            watch = server.llm_watch
            watching = asyncio.ensure_future(watch.run()) if watch is not None else None
            if on_ready is not None:
                result = on_ready(bound)
                if asyncio.iscoroutine(result):
                    await result
            await server.drain.wait(stop, lambda: server.connections, server.say)
            if server.calls:
                server.say(f"shutting down: hanging up {len(server.calls)} call(s)")
            if watching is not None:
                watching.cancel()
            ws_server.close()
            await ws_server.wait_closed()
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
