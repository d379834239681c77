"""``voice-agent serve``: one websocket server, one call per connection.

Paths: ``/`` the browser page (plain HTTP, answered in ``process_request`` before any
handshake), ``/phone`` the Twilio Media Streams bridge, ``/browser`` the page's socket.
Each connection runs its own pipeline; models and the LLM engine are shared. A call ends
when its client closes the socket, says ``stop``, or the server shuts down (SIGINT/SIGTERM
close every connection, so every call writes its files). A client's bad messages cost a
warning line each, a broken protocol ends that call only: nothing a client sends takes the
server down.

Hardening (issue 9): a shared-secret token, when set, is checked on every request before
anything else (``?token=``, ``Authorization: Bearer`` or the cookie the page gets) and is
required off loopback; ``/browser`` only accepts the server's own origin and the configured
ones; at most ``max_calls`` connections are served at once (the next one gets HTTP 503); a
call lasts at most ``max_call_secs``; a message over ``MAX_MESSAGE_BYTES`` closes its own
connection. Refusals happen in ``process_request``, before any model work. No file path is
taken from a client (a call's folder is a timestamp and a random id), and client text is
clipped in log lines.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import signal
import socket
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from importlib import resources
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

from loguru import logger
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from agent.errors import UserError
from agent.live.call import LiveCall, Runtime
from agent.live.io import LiveInput, LiveOutput
from agent.live.process_memory import collect_call_garbage
from agent.transports.browser import BrowserInput, BrowserOutput, EventSender, parse_control
from agent.transports.phone import (
    PhoneInput,
    PhoneOutput,
    StreamInfo,
    TwilioProtocolError,
    clip_text,
    media_payload,
    parse_message,
    read_start,
)

START_TIMEOUT_SECS = 10.0
# Twilio media messages are ~0.4 KiB and the page's audio messages ~0.6 KiB: 64 KiB leaves
# room and keeps what one client can make the server buffer small.
MAX_MESSAGE_BYTES = 64 * 1024
# Outbound backpressure: what one client that stops reading can make the server hold. The
# websocket's own buffer (websockets' write_limit) plus the kernel's send buffer (set per
# connection; Linux doubles it) hold a few seconds of bot audio; a send that stays blocked
# past io.SEND_STALL_SECS drops that call.
WRITE_LIMIT_BYTES = 16 * 1024
SOCKET_SEND_BUFFER_BYTES = 16 * 1024
MIN_TOKEN_CHARS = 16
TOKEN_COOKIE = "voice_agent_token"
WS_PATHS = ("/phone", "/browser")

# A message handler returns a reason to hang up, or None to go on.
MessageHandler = Callable[[str | bytes], str | None]


def page() -> bytes:
    """The browser page, from the package data."""
    return (resources.files("agent") / "web" / "index.html").read_bytes()


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def check_serve_security(host: str, token: str | None) -> None:
    """Refuse (one line) to serve off loopback without a token, or with a guessable one."""
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise UserError(
            f"the serve token is too short ({len(token)} chars): use at least "
            f"{MIN_TOKEN_CHARS}, e.g. `python -c 'import secrets; print(secrets.token_urlsafe())'`"
        )
    if token is None and not is_loopback(host):
        raise UserError(
            f"refusing to serve on {host} without a token: set VOICE_AGENT_SERVE_TOKEN "
            "(or --token), or serve on 127.0.0.1"
        )


class CallServer:
    """Routes each connection to a new call and keeps count of the calls in progress."""

    def __init__(
        self,
        runtime: Runtime,
        calls_dir: Path,
        *,
        record_wav: bool = True,
        say: Callable[[str], None] = print,
        token: str | None = None,
        allowed_origins: list[str] | None = None,
        max_calls: int = 8,
        max_call_secs: float | None = None,
    ) -> None:
        self.runtime = runtime
        self.calls_dir = calls_dir
        self.record_wav = record_wav
        self.say = say
        self.calls: dict[str, LiveCall] = {}
        self.max_calls = max_calls
        self.max_call_secs = max_call_secs
        self._token = token.encode() if token else None
        self._extra_origins = {o.rstrip("/") for o in allowed_origins or ()}
        self._own_origins: set[str] = set()
        self._connections = 0  # websocket connections being served (calls and pending ones)
        self._page = page()

    def bound(self, host: str, port: int) -> None:
        """Learn the address actually listened on: the server's own origins follow from it."""
        names = {host}
        if is_loopback(host):
            names |= {"127.0.0.1", "localhost", "[::1]"}
        self._own_origins = {f"http://{name}:{port}" for name in names}

    # -- checks ----------------------------------------------------------------------------

    def _presented_token(self, request: Request) -> str | None:
        auth = request.headers.get("Authorization", "")
        if auth[:7].lower() == "bearer ":
            return auth[7:].strip()
        query = parse_qs(urlsplit(request.path).query).get("token")
        if query:
            return query[0]
        for part in request.headers.get("Cookie", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == TOKEN_COOKIE:
                return unquote(value)
        return None

    def _authorized(self, request: Request) -> bool:
        """Constant-time comparison, so the token cannot be guessed a byte at a time."""
        if self._token is None:
            return True
        given = self._presented_token(request)
        if given is None:
            return False
        return hmac.compare_digest(given.encode("utf-8", "replace"), self._token)

    def _origin_allowed(self, request: Request) -> bool:
        """Browsers always send Origin on a websocket: another site's page must not call in.

        A request without Origin is not from a browser page (and could forge one anyway).
        With a token set, the page's own address (Host) is accepted too: a DNS-rebinding
        page cannot present the token, so it gets 401 first.
        """
        origin = request.headers.get("Origin")
        if origin is None:
            return True
        allowed = self._own_origins | self._extra_origins
        if self._token is not None and "Host" in request.headers:
            allowed = allowed | {f"http://{request.headers['Host']}"}
        return origin.rstrip("/") in allowed

    # -- HTTP -------------------------------------------------------------------------------

    def process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        """Refuse what must not become a call, serve the page, let the websockets through."""
        path = urlsplit(request.path).path
        if not self._authorized(request):
            logger.warning("refused {} from {}: missing or wrong token", clip_text(path, 40),
                           _peer(connection))  # fmt: skip
            response = connection.respond(HTTPStatus.UNAUTHORIZED, "missing or wrong token\n")
            response.headers["WWW-Authenticate"] = "Bearer"
            return response
        if path == "/browser" and not self._origin_allowed(request):
            logger.warning("refused /browser from {}: origin {} is not allowed", _peer(connection),
                           clip_text(request.headers.get("Origin"), 80))  # fmt: skip
            return connection.respond(
                HTTPStatus.FORBIDDEN,
                "origin not allowed: add it to serve_allowed_origins\n",
            )
        if path in WS_PATHS:
            if self._connections >= self.max_calls:
                logger.warning("refused {} from {}: {} calls already", path, _peer(connection),
                               self._connections)  # fmt: skip
                return connection.respond(
                    HTTPStatus.SERVICE_UNAVAILABLE,
                    f"busy: {self.max_calls} calls in progress, try again later\n",
                )
            return None
        if path in ("/", "/index.html"):
            response = connection.respond(HTTPStatus.OK, "")
            response.body = self._page
            del response.headers["Content-Type"]
            del response.headers["Content-Length"]
            response.headers["Content-Type"] = "text/html; charset=utf-8"
            response.headers["Content-Length"] = str(len(self._page))
            response.headers["Cache-Control"] = "no-store"
            if self._token is not None:
                # The page's own websocket cannot add a header: a same-site cookie carries
                # the token there (HttpOnly: the page's scripts never see it).
                token = quote(self._token.decode(), safe="")
                response.headers["Set-Cookie"] = (
                    f"{TOKEN_COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/"
                )
            return response
        return connection.respond(
            HTTPStatus.NOT_FOUND, f"no such path {clip_text(path, 60)}: try / /phone /browser\n"
        )

    # -- websocket --------------------------------------------------------------------------

    async def handle(self, ws: ServerConnection) -> None:
        """One connection = one call; any failure ends that call only, in one line."""
        path = urlsplit(ws.request.path if ws.request else "").path
        self._connections += 1
        sock = ws.transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_SEND_BUFFER_BYTES)
        try:
            if self._connections > self.max_calls:  # handshakes that raced past the check
                await ws.close(1013, "busy: try again later")
            elif path == "/phone":
                await self._phone(ws)
            elif path == "/browser":
                await self._browser(ws)
        except ConnectionClosed:
            pass
        except Exception as exc:  # noqa: BLE001 - a call's failure must not reach the server
            logger.error("{} call failed: {}: {}", path, type(exc).__name__,
                         clip_text(str(exc), 120))  # fmt: skip
            await ws.close(1011, "internal error")
        finally:
            self._connections -= 1
            collect_call_garbage()  # the call is unreachable now: free what it held at once

    async def _phone(self, ws: ServerConnection) -> None:
        stream = StreamInfo()
        try:
            started = await asyncio.wait_for(self._await_start(ws, stream), START_TIMEOUT_SECS)
        except TimeoutError:
            logger.warning("phone: no start message within {} s: closing", START_TIMEOUT_SECS)
            await ws.close(1008, "no start message")
            return
        except TwilioProtocolError as exc:
            logger.warning("phone: {}: closing", exc)  # its client parts are clipped
            await ws.close(1003, str(exc).encode()[:120].decode(errors="ignore"))
            return
        if not started:
            return
        call = LiveCall(
            self.runtime, self.calls_dir, kind="phone", record_wav=self.record_wav,
            max_secs=self.max_call_secs, details=lambda: {
                "stream_sid": stream.stream_sid, "call_sid": stream.call_sid,
                "marks_sent": stream.marks_sent, "marks_played": len(stream.marks_played),
            },
        )  # fmt: skip
        transport_in = PhoneInput(call.clock, call.recorder, rate=call.rate)
        transport_out = PhoneOutput(ws, stream, call.clock, call.recorder, rate=call.rate)

        def on_message(raw: str | bytes) -> str | None:
            message = parse_message(raw)
            if message is None:
                return None
            event = message["event"]
            if event == "media":
                payload = media_payload(message)
                if payload:
                    transport_in.feed_mulaw(payload)
            elif event == "mark":
                mark = message.get("mark")
                if isinstance(mark, dict) and isinstance(mark.get("name"), str):
                    stream.marks_played.append(mark["name"])
            elif event == "stop":
                return "the phone sent stop"
            elif event not in ("connected", "start", "dtmf"):
                logger.warning("phone: ignored an unknown event {}", clip_text(event, 40))
            return None

        await self._converse(ws, call, transport_in, transport_out, on_message)

    async def _await_start(self, ws: ServerConnection, stream: StreamInfo) -> bool:
        """Read until the ``start`` message; False when the phone hung up before it."""
        async for raw in ws:
            message = parse_message(raw)
            if message is None or message["event"] == "connected":
                continue
            if message["event"] == "start":
                read_start(message, stream)
                return True
            if message["event"] == "stop":
                raise TwilioProtocolError("stop before start")
            logger.warning("phone: ignored {} before the start message",
                           clip_text(message["event"], 40))  # fmt: skip
        return False

    async def _browser(self, ws: ServerConnection) -> None:
        events = EventSender(ws)
        events.start()
        call = LiveCall(
            self.runtime, self.calls_dir, kind="browser", record_wav=self.record_wav,
            emit=events.emit, max_secs=self.max_call_secs,
        )  # fmt: skip
        events.emit({"type": "call", "id": call.id, "folder": call.dir.name,
                     "rate": call.rate})  # fmt: skip
        transport_in = BrowserInput(call.clock, call.recorder, rate=call.rate)
        transport_out = BrowserOutput(ws, events, call.clock, call.recorder, rate=call.rate)

        def on_message(raw: str | bytes) -> str | None:
            if isinstance(raw, bytes):
                transport_in.feed_message(raw)
                return None
            control = parse_control(raw)
            if control is not None and control.get("type") == "stop":
                return "the page hung up"
            return None

        records = await self._converse(ws, call, transport_in, transport_out, on_message)
        events.emit({"type": "ended", "turns": len(records)})
        await events.close()

    async def _converse(
        self,
        ws: ServerConnection,
        call: LiveCall,
        transport_in: LiveInput,
        transport_out: LiveOutput,
        on_message: MessageHandler,
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
        try:
            await asyncio.wait({pipeline, reader}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not reader.done():
                reader.cancel()
            call.hang_up("the client closed the connection")
            records = await pipeline
            del self.calls[call.id]
        if reader.done() and not reader.cancelled() and reader.exception():
            exc = reader.exception()
            if not isinstance(exc, ConnectionClosed):
                logger.error("call {}: reading the client failed: {}", call.id,
                             clip_text(str(exc), 120))  # fmt: skip
        v2v = [r["voice_to_voice_ms"] for r in records if r["voice_to_voice_ms"] is not None]
        self.say(
            f"call {call.id} ended ({call.info.get('end_reason', '')}): {len(records)} turn(s)"
            + (f", voice-to-voice {', '.join(f'{x:.0f}' for x in v2v)} ms" if v2v else "")
        )
        return records


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
    """Serve until ``stop`` is set (or SIGINT/SIGTERM); then hang up every call and return."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    try:
        for sig in signals:
            loop.add_signal_handler(sig, stop.set)
    except (NotImplementedError, RuntimeError):  # not the main thread
        signals = ()
    try:
        async with serve(
            server.handle, host, port, process_request=server.process_request,
            max_size=MAX_MESSAGE_BYTES, write_limit=WRITE_LIMIT_BYTES,
        ) as ws_server:  # fmt: skip
            bound = next(iter(ws_server.sockets)).getsockname()[1]
            server.bound(host, bound)
            server.say(
                f"serving on http://{host}:{bound}/ (phone: ws://{host}:{bound}/phone, "
                f"browser page: http://{host}:{bound}/); calls in {server.calls_dir}/"
            )
            if on_ready is not None:
                result = on_ready(bound)
                if asyncio.iscoroutine(result):
                    await result
            await stop.wait()
            if server.calls:
                server.say(f"shutting down: hanging up {len(server.calls)} call(s)")
            ws_server.close()
            await ws_server.wait_closed()
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
