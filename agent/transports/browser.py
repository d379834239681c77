"""Browser page transport: 16 kHz 16-bit PCM both ways as binary websocket messages.

The page (agent/web/index.html) sends microphone audio as binary messages and may send
``{"type": "stop"}`` to hang up. It receives the bot's audio as binary messages and the
call's events as JSON text: ``call``, ``interim``, ``final``, ``bot_text``, ``barge_in``,
``turn`` (a turn record) and ``clear`` (barge-in: drop the audio not played yet).

Events go through a queue drained by their own task, so a slow page never holds up the
pipeline's observer (whose clock readings are the turn timings).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from loguru import logger
from pydantic import BaseModel
from websockets.asyncio.connection import Connection
from websockets.exceptions import ConnectionClosed

from agent.clock import CallClock
from agent.redact import Warn, clip_text
from agent.timing.call_recorder import CallRecorder
from agent.transports.live import LiveInput, WebSocketOutput

MAX_QUEUED_EVENTS = 1000


def _as_json(value: Any) -> Any:
    """Models in events (a ``turn`` event's record) become JSON only here, on the wire."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


class BrowserInput(LiveInput):
    """Microphone audio from the page: binary messages of 16-bit mono PCM at the call rate."""

    def feed_message(self, data: bytes, warn: Warn = logger.warning) -> None:
        if len(data) % 2:
            warn("browser: ignored an audio message of odd length {}", len(data))
            return
        self.feed(data)


class BrowserOutput(WebSocketOutput):
    """Bot audio to the page as binary messages; a ``clear`` event on barge-in."""

    def __init__(
        self, ws: Connection, events: EventSender, clock: CallClock, recorder: CallRecorder,
        *, rate: int,
    ) -> None:  # fmt: skip
        super().__init__(ws, clock, recorder, rate=rate)
        self._events = events

    async def deliver(self, pcm: bytes) -> bool:
        return await self.send_message(pcm)

    async def flush_listener(self) -> None:
        self._events.emit({"type": "clear"})


class EventSender:
    """JSON events to the page, in order, from a queue (``emit`` never blocks)."""

    def __init__(self, ws: Connection) -> None:
        self._ws = ws
        self._queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._task: asyncio.Task | None = None

    def emit(self, event: dict[str, Any]) -> None:
        if self._queue.qsize() < MAX_QUEUED_EVENTS:
            self._queue.put_nowait(event)

    def start(self) -> None:
        self._task = asyncio.create_task(self._drain())

    async def close(self) -> None:
        """Send what is queued, then stop."""
        if self._task is None:
            return
        self._queue.put_nowait(None)
        try:
            await asyncio.wait_for(self._task, 5)
        except TimeoutError:
            self._task.cancel()

    async def _drain(self) -> None:
        while (event := await self._queue.get()) is not None:
            try:
                await self._ws.send(json.dumps(event, default=_as_json))
            except ConnectionClosed:
                return


def parse_control(text: str, warn: Warn = logger.warning) -> dict[str, Any] | None:
    """A text message from the page (only ``{"type": "stop"}`` means something today)."""
    try:
        message = json.loads(text)
    except (ValueError, RecursionError):  # also too deep / over-long numbers: never raises
        warn("browser: ignored a text message that is not JSON: {}", clip_text(text))
        return None
    if not isinstance(message, dict):
        warn("browser: ignored a text message that is not a JSON object")
        return None
    return message
