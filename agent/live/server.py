"""``voice-agent serve``: one websocket server, one call per connection.

Paths: ``/`` the browser page (plain HTTP, answered in ``process_request`` before any
handshake), ``/phone`` the Twilio Media Streams bridge, ``/browser`` the page's socket.
Each connection runs its own pipeline; models and the LLM engine are shared. A call ends
when its client closes the socket, says ``stop``, or the server shuts down (SIGINT/SIGTERM
close every connection, so every call writes its files). A client's bad messages cost a
warning line each, a broken protocol ends that call only: nothing a client sends takes the
server down.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from importlib import resources
from pathlib import Path
from urllib.parse import urlsplit

from loguru import logger
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from agent.live.call import LiveCall, Runtime
from agent.live.io import LiveInput, LiveOutput
from agent.transports.browser import BrowserInput, BrowserOutput, EventSender, parse_control
from agent.transports.phone import (
    PhoneInput,
    PhoneOutput,
    StreamInfo,
    TwilioProtocolError,
    media_payload,
    parse_message,
    read_start,
)

START_TIMEOUT_SECS = 10.0
MAX_MESSAGE_BYTES = 1 << 20

# A message handler returns a reason to hang up, or None to go on.
MessageHandler = Callable[[str | bytes], str | None]


def page() -> bytes:
    """The browser page, from the package data."""
    return (resources.files("agent") / "web" / "index.html").read_bytes()


class CallServer:
    """Routes each connection to a new call and keeps count of the calls in progress."""

    def __init__(
        self,
        runtime: Runtime,
        calls_dir: Path,
        *,
        record_wav: bool = True,
        say: Callable[[str], None] = print,
    ) -> None:
        self.runtime = runtime
        self.calls_dir = calls_dir
        self.record_wav = record_wav
        self.say = say
        self.calls: dict[str, LiveCall] = {}
        self._page = page()

    # -- HTTP -------------------------------------------------------------------------------

    def process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        """Serve the page over plain HTTP; let websocket paths through to the handshake."""
        path = urlsplit(request.path).path
        if path in ("/phone", "/browser"):
            return None
        if path in ("/", "/index.html"):
            response = connection.respond(HTTPStatus.OK, "")
            response.body = self._page
            del response.headers["Content-Type"]
            del response.headers["Content-Length"]
            response.headers["Content-Type"] = "text/html; charset=utf-8"
            response.headers["Content-Length"] = str(len(self._page))
            response.headers["Cache-Control"] = "no-store"
            return response
        return connection.respond(
            HTTPStatus.NOT_FOUND, f"no such path {path}: try / /phone /browser\n"
        )

    # -- websocket --------------------------------------------------------------------------

    async def handle(self, ws: ServerConnection) -> None:
        """One connection = one call; any failure ends that call only, in one line."""
        path = urlsplit(ws.request.path if ws.request else "").path
        try:
            if path == "/phone":
                await self._phone(ws)
            elif path == "/browser":
                await self._browser(ws)
        except ConnectionClosed:
            pass
        except Exception as exc:  # noqa: BLE001 - a call's failure must not reach the server
            logger.error("{} call failed: {}: {}", path, type(exc).__name__, exc)
            await ws.close(1011, "internal error")

    async def _phone(self, ws: ServerConnection) -> None:
        stream = StreamInfo()
        try:
            started = await asyncio.wait_for(self._await_start(ws, stream), START_TIMEOUT_SECS)
        except TimeoutError:
            logger.warning("phone: no start message within {} s: closing", START_TIMEOUT_SECS)
            await ws.close(1008, "no start message")
            return
        except TwilioProtocolError as exc:
            logger.warning("phone: {}: closing", exc)
            await ws.close(1003, str(exc)[:120])
            return
        if not started:
            return
        call = LiveCall(
            self.runtime, self.calls_dir, kind="phone", record_wav=self.record_wav,
            details=lambda: {
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
                logger.warning("phone: ignored an unknown event {!r}", event[:40])
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
            logger.warning("phone: ignored {!r} before the start message", message["event"][:40])
        return False

    async def _browser(self, ws: ServerConnection) -> None:
        events = EventSender(ws)
        events.start()
        call = LiveCall(
            self.runtime, self.calls_dir, kind="browser", record_wav=self.record_wav,
            emit=events.emit,
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
                logger.error("call {}: reading the client failed: {}", call.id, exc)
        v2v = [r["voice_to_voice_ms"] for r in records if r["voice_to_voice_ms"] is not None]
        self.say(
            f"call {call.id} ended ({call.info.get('end_reason', '')}): {len(records)} turn(s)"
            + (f", voice-to-voice {', '.join(f'{x:.0f}' for x in v2v)} ms" if v2v else "")
        )
        return records


def _peer(ws: ServerConnection) -> str:
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
            max_size=MAX_MESSAGE_BYTES,
        ) as ws_server:  # fmt: skip
            bound = next(iter(ws_server.sockets)).getsockname()[1]
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
