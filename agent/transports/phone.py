"""Phone bridge: a call over a Twilio Media Streams websocket, as pipeline input and output.

Caller audio arrives as ``media`` messages (``agent.transports.twilio`` parses them) in
G.711 mu-law at 8 kHz (``agent.transports.g711`` converts it); bot audio goes back the same
way, with a ``mark`` after each phrase and a ``clear`` on barge-in.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
from pipecat.frames.frames import Frame, TTSTextFrame
from websockets.asyncio.connection import Connection

from agent.clock import CallClock
from agent.timing.call_recorder import CallRecorder
from agent.transports.g711 import PHONE_RATE, Rate2Converter, mulaw_decode, mulaw_encode
from agent.transports.live import LiveInput, WebSocketOutput
from agent.transports.twilio import StreamInfo


class PhoneInput(LiveInput):
    """Caller audio from ``media`` messages: mu-law 8 kHz -> 16-bit PCM at the pipeline rate."""

    def __init__(self, clock: CallClock, recorder: CallRecorder, *, rate: int) -> None:
        if rate != 2 * PHONE_RATE:
            raise ValueError(f"the phone bridge needs a {2 * PHONE_RATE} Hz pipeline, not {rate}")
        super().__init__(clock, recorder, rate=rate)
        self._upsample = Rate2Converter(up=True)

    def feed_mulaw(self, payload: bytes) -> None:
        if self.admit(2 * len(payload)):  # before decoding: a flood costs no filtering
            self.enqueue(self._upsample(mulaw_decode(payload)).tobytes())


class PhoneOutput(WebSocketOutput):
    """Bot audio as ``media`` messages; a ``mark`` after each phrase; ``clear`` on barge-in."""

    def __init__(
        self, ws: Connection, stream: StreamInfo, clock: CallClock, recorder: CallRecorder,
        *, rate: int,
    ) -> None:  # fmt: skip
        super().__init__(ws, clock, recorder, rate=rate)
        self._stream = stream
        self._downsample = Rate2Converter(up=False)

    async def _send(self, message: dict[str, Any]) -> bool:
        return await self.send_message(
            json.dumps({**message, "streamSid": self._stream.stream_sid})
        )

    async def deliver(self, pcm: bytes) -> bool:
        ulaw = mulaw_encode(self._downsample(np.frombuffer(pcm, dtype=np.int16)))
        payload = base64.b64encode(ulaw).decode("ascii")
        return await self._send({"event": "media", "media": {"payload": payload}})

    async def flush_listener(self) -> None:
        self._downsample.reset()
        await self._send({"event": "clear"})

    async def write_transport_frame(self, frame: Frame) -> None:
        # A phrase's text is released once its audio has been written: mark that point,
        # so the phone tells us when the caller has heard it.
        if isinstance(frame, TTSTextFrame):
            name = self._stream.next_mark()
            await self._send({"event": "mark", "mark": {"name": name}})
