"""A simulated phone: what Twilio Media Streams would send to ``/phone``, and what it hears.

Used by the tests and ``benchmarks/live.py``; also handy to smoke-test a running server.
Like a real phone line it sends 20 ms of 8 kHz mu-law every 20 ms for the whole call
(silence between utterances), speaks audio files on demand, and records when each frame
went out and when each reply message came in, so latency can be measured from the
caller's side of the socket. Marks are echoed once the audio before them has "played"
(on the caller's own playback clock), and at once on ``clear``, as Twilio does.

``reading=False`` makes a phone that never reads what the server sends (a tiny socket
receive buffer, no reader): the server's backpressure handling is tested with it.
``headers`` go with the websocket upgrade (``X-Twilio-Signature``), ``parameters`` are the
stream's ``customParameters`` (a TwiML ``<Parameter>``, such as the server's ``token``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import socket
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from agent.transports.g711 import PHONE_RATE, Rate2Converter, mulaw_decode, mulaw_encode

FRAME_SECS = 0.02
FRAME_BYTES = int(PHONE_RATE * FRAME_SECS)
SILENCE = b"\xff" * FRAME_BYTES  # mu-law zero


@dataclass
class Utterance:
    """One spoken clip: when each of its 20 ms frames left the phone."""

    samples_16k: np.ndarray
    sent_at: list[float] = field(default_factory=list)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def sent_time(self, sample_16k: int) -> float:
        """When a given sample of the clip (16 kHz index) was sent (monotonic seconds)."""
        frame = min(sample_16k // 320, len(self.sent_at) - 1)
        return self.sent_at[frame] + (sample_16k - frame * 320) / 16000


@dataclass
class Reply:
    """One message from the server, with its arrival time (monotonic seconds)."""

    at: float
    event: str
    audio: bytes = b""  # mu-law, for media
    name: str = ""  # for marks


class PhoneCaller:
    """One simulated call to a ``/phone`` websocket."""

    def __init__(
        self,
        url: str,
        *,
        reading: bool = True,
        headers: dict[str, str] | None = None,
        parameters: dict[str, str] | None = None,
    ) -> None:
        self.url = url
        self.reading = reading
        self.headers = headers or {}
        self.parameters = parameters or {}
        self.stream_sid = "MZ" + secrets.token_hex(16)
        self.replies: list[Reply] = []
        self.closed = asyncio.Event()
        self._ws: ClientConnection | None = None
        self._queue: list[tuple[bytes, Utterance | None]] = []
        self._tasks: list[asyncio.Task] = []
        self._playhead = 0.0  # when the caller's earpiece finishes what it was sent
        self._pending_marks: list[tuple[float, str]] = []
        self._encoder = Rate2Converter(up=False)

    async def __aenter__(self) -> PhoneCaller:
        if self.reading:
            self._ws = await connect(self.url, max_size=1 << 20, additional_headers=self.headers)
        else:
            parts = urlsplit(self.url)
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect((parts.hostname, parts.port))
            self._ws = await connect(self.url, sock=sock, max_queue=1, max_size=1 << 20,
                                     additional_headers=self.headers)  # fmt: skip
        await self.send({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        start = {
            "streamSid": self.stream_sid,
            "callSid": "CA" + secrets.token_hex(16),
            "accountSid": "AC" + secrets.token_hex(16),
            "tracks": ["inbound"],
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": PHONE_RATE, "channels": 1},
            "customParameters": self.parameters,
        }
        await self.send({"event": "start", "sequenceNumber": "1", "start": start,
                         "streamSid": self.stream_sid})  # fmt: skip
        self._tasks = [asyncio.create_task(self._send_media())]
        if self.reading:
            self._tasks.append(asyncio.create_task(self._receive()))
        return self

    async def __aexit__(self, *exc: Any) -> None:
        for task in self._tasks:
            task.cancel()
        if self._ws is not None:
            await self._ws.close()

    async def send(self, message: dict[str, Any] | str | bytes) -> None:
        """Send one raw message (a dict goes as JSON text)."""
        assert self._ws is not None
        await self._ws.send(json.dumps(message) if isinstance(message, dict) else message)

    def speak(self, samples_16k: np.ndarray) -> Utterance:
        """Queue a clip (16 kHz int16) to be spoken after what is already queued."""
        utterance = Utterance(samples_16k)
        pcm8 = self._encoder(samples_16k)
        ulaw = mulaw_encode(pcm8)
        ulaw += b"\xff" * (-len(ulaw) % FRAME_BYTES)
        for start in range(0, len(ulaw), FRAME_BYTES):
            self._queue.append((ulaw[start : start + FRAME_BYTES], utterance))
        self._queue.append((b"", utterance))  # marks the end
        return utterance

    async def hang_up(self, timeout: float = 30.0) -> bool:
        """Send ``stop`` and wait for the server to close the socket (its files are written)."""
        await self.send({"event": "stop", "streamSid": self.stream_sid,
                         "stop": {"callSid": "CA", "accountSid": "AC"}})  # fmt: skip
        try:
            await asyncio.wait_for(self.closed.wait(), timeout)
            return True
        except TimeoutError:
            return False

    # -- what came back ---------------------------------------------------------------------

    def media_after(self, t: float) -> list[Reply]:
        return [r for r in self.replies if r.event == "media" and r.at >= t]

    def events(self, name: str, after: float = 0.0) -> list[Reply]:
        return [r for r in self.replies if r.event == name and r.at >= after]

    def bot_audio(self, after: float = 0.0) -> np.ndarray:
        """The bot's audio received after ``after``, decoded to 8 kHz int16."""
        return mulaw_decode(b"".join(r.audio for r in self.media_after(after)))

    async def wait_for(self, name: str, after: float, timeout: float) -> Reply | None:
        """The first ``name`` message that arrived at or after ``after``, waiting if need be."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.closed.is_set():
            found = self.events(name, after)
            if found:
                return found[0]
            await asyncio.sleep(0.01)
        found = self.events(name, after)
        return found[0] if found else None

    async def wait_quiet(self, quiet_secs: float, timeout: float) -> bool:
        """Wait until no bot audio has arrived for ``quiet_secs``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            media = self.events("media")
            last = media[-1].at if media else 0.0
            if time.monotonic() - last >= quiet_secs:
                return True
            await asyncio.sleep(0.05)
        return False

    # -- tasks ------------------------------------------------------------------------------

    async def _send_media(self) -> None:
        """20 ms of audio every 20 ms, on a fixed schedule, like a phone line."""
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        chunk = 0
        while True:
            utterance = None
            payload = SILENCE
            while self._queue:
                data, utterance = self._queue.pop(0)
                if data:
                    payload = data
                    break
                assert utterance is not None
                utterance.done.set()
                utterance = None
            now = time.monotonic()
            if utterance is not None:
                utterance.sent_at.append(now)
            chunk += 1
            media = {"track": "inbound", "chunk": str(chunk), "timestamp": str(chunk * 20),
                     "payload": base64.b64encode(payload).decode("ascii")}  # fmt: skip
            try:
                await self.send({"event": "media", "streamSid": self.stream_sid, "media": media})
            except ConnectionClosed:
                return
            self._echo_marks(now)
            next_at += FRAME_SECS
            await asyncio.sleep(max(0.0, next_at - loop.time()))

    def _echo_marks(self, now: float) -> None:
        while self._pending_marks and self._pending_marks[0][0] <= now:
            _, name = self._pending_marks.pop(0)
            asyncio.ensure_future(self._echo(name))

    async def _echo(self, name: str) -> None:
        try:
            await self.send({"event": "mark", "streamSid": self.stream_sid, "mark": {"name": name}})
        except ConnectionClosed:
            pass

    async def _receive(self) -> None:
        assert self._ws is not None
        try:
            async for raw in self._ws:
                now = time.monotonic()
                message = json.loads(raw)
                event = message.get("event", "")
                if event == "media":
                    audio = base64.b64decode(message["media"]["payload"])
                    self.replies.append(Reply(now, event, audio=audio))
                    self._playhead = max(self._playhead, now) + len(audio) / PHONE_RATE
                elif event == "mark":
                    name = message["mark"]["name"]
                    self.replies.append(Reply(now, event, name=name))
                    self._pending_marks.append((max(self._playhead, now), name))
                elif event == "clear":
                    self.replies.append(Reply(now, event))
                    self._playhead = now
                    self._pending_marks = [(now, name) for _, name in self._pending_marks]
                else:
                    self.replies.append(Reply(now, event))
        except ConnectionClosed:
            pass
        finally:
            self.closed.set()
