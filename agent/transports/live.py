"""The two halves every live transport shares: caller audio in, paced bot audio out.

``LiveInput`` takes caller audio from whatever delivers it (a websocket handler, a sound
card thread), cuts it into 20 ms frames and pushes them into the pipeline from its own task,
recording each frame on the call's timeline. Audio faster than real time (a client pushing
minutes of it in seconds) is dropped at the door (``RealTimeGate``).

``LiveOutput`` is a ``PacedOutput`` (the replay's simulated speaker: same pacing, same timeline
events, same recording) with a listener attached: each chunk is also delivered to the caller, and a
barge-in flushes what the listener still has queued. Pacing writes at the listener's playback
speed keeps the bot's speaking state true to what the caller hears, so barge-in works and
a flush drops at most a chunk or two. ``WebSocketOutput`` is the ``LiveOutput`` of the
transports whose caller is on a websocket.

A listener that stops taking audio (a client that never reads) cannot grow the server's
memory: each send waits while the connection's bounded outbound buffer is full, and one that
waits longer than ``SEND_STALL_SECS`` gives up on the listener: ``on_stalled`` is told why
(the server hangs up that call), and nothing more is sent to it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from loguru import logger
from pipecat.frames.frames import (
    CancelFrame,
    CancelWorkerFrame,
    EndFrame,
    Frame,
    InputAudioRawFrame,
    InterruptionFrame,
    StartFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from websockets.asyncio.connection import Connection
from websockets.exceptions import ConnectionClosed

from agent.clock import CallClock
from agent.timing.call_recorder import CallRecorder
from agent.transports.pacing import FRAME_MS, PacedOutput

JITTER_MS = 120  # arrival jitter absorbed before the user track re-syncs to the clock
MAX_BACKLOG_SECS = 5.0  # caller audio the pipeline may fall behind before frames are dropped
# Bot audio is written at playback pace, so a send that waits this long on a full outbound
# buffer means the listener has stopped taking audio for about that long.
SEND_STALL_SECS = 5.0
# A caller's audio may arrive this much faster than real time (network jitter bunches
# frames up) plus a burst of BURST_SECS; more is dropped, so a client pushing minutes of
# audio in seconds costs what a real caller costs.
MAX_INPUT_SPEED = 1.5
BURST_SECS = 1.0


class RealTimeGate:
    """Admits caller audio up to ``speed`` x real time since the call's input was made;
    drops the rest.

    The clock starts with the gate, not with the first sample read: audio that queued up
    while the call's pipeline was being built arrives at once and is still on time. One
    warning per call when it first drops; ``admitted_secs`` and ``dropped_secs`` say how
    much went each way.
    """

    def __init__(
        self,
        rate: int,
        *,
        speed: float = MAX_INPUT_SPEED,
        burst_secs: float = BURST_SECS,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self._rate = rate
        self._speed = speed
        self._burst = burst_secs * rate
        self._now = now
        self._t0 = now()
        self._admitted = 0
        self._dropped = 0

    def admit(self, samples: int) -> bool:
        allowed = self._speed * self._rate * (self._now() - self._t0) + self._burst
        if self._admitted + samples <= allowed:
            self._admitted += samples
            return True
        if not self._dropped:
            logger.warning("caller audio arrives faster than {:g}x real time: dropping the excess",
                           self._speed)  # fmt: skip
        self._dropped += samples
        return False

    @property
    def admitted_secs(self) -> float:
        return round(self._admitted / self._rate, 2)

    @property
    def dropped_secs(self) -> float:
        return round(self._dropped / self._rate, 2)


class LiveInput(FrameProcessor):
    """Caller audio (16-bit mono at the pipeline rate, any chunk size) -> 20 ms input frames."""

    def __init__(self, clock: CallClock, recorder: CallRecorder, *, rate: int) -> None:
        super().__init__()
        self._clock = clock
        self._recorder = recorder
        self._rate = rate
        self._frame_bytes = rate * FRAME_MS // 1000 * 2
        self._pending = bytearray()
        self._frames: asyncio.Queue[bytes] = asyncio.Queue()
        self._gate = RealTimeGate(rate)
        self._max_frames = int(MAX_BACKLOG_SECS * 1000 / FRAME_MS)
        self._dropped = 0
        self._cursor: int | None = None  # next sample position on the user track
        self._task: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = False
        self._hang_up_reason: str | None = None

    def feed(self, pcm: bytes) -> None:
        """Take caller audio (on the event loop; never blocks)."""
        if self.admit(len(pcm) // 2):
            self.enqueue(pcm)

    def admit(self, samples: int) -> bool:
        """Whether this many samples may come now (a transport asks before decoding them)."""
        return self._gate.admit(samples)

    def enqueue(self, pcm: bytes) -> None:
        """Take admitted caller audio."""
        self._pending += pcm
        while len(self._pending) >= self._frame_bytes:
            frame = bytes(self._pending[: self._frame_bytes])
            del self._pending[: self._frame_bytes]
            if self._frames.qsize() >= self._max_frames:
                self._frames.get_nowait()  # the pipeline is stuck: keep the newest audio
                self._dropped += 1
                if self._dropped == 1:
                    logger.warning("caller audio backlog over {} s: dropping old frames",
                                   MAX_BACKLOG_SECS)  # fmt: skip
            self._frames.put_nowait(frame)

    def stats(self) -> dict[str, Any]:
        """How much caller audio was taken and dropped as too fast, for call.json."""
        return {"audio_in_secs": self._gate.admitted_secs,
                "audio_dropped_secs": self._gate.dropped_secs}  # fmt: skip

    def feed_threadsafe(self, pcm: bytes) -> None:
        """Take caller audio from another thread (a sound card callback)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.feed, pcm)

    async def hang_up(self, reason: str) -> None:
        """End the call now: the caller is gone, so nothing queued is worth playing."""
        self._hang_up_reason = reason
        if self._started:
            await self.push_frame(CancelWorkerFrame(reason=reason), FrameDirection.UPSTREAM)

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """The event loop ``feed_threadsafe`` hands audio to."""
        self._loop = loop

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, StartFrame):
            await self.push_frame(frame, direction)
            self._loop = asyncio.get_running_loop()
            self._task = self.create_task(self._pump())
            self._started = True
            if self._hang_up_reason is not None:  # hung up while the pipeline was starting
                await self.hang_up(self._hang_up_reason)
            return
        if isinstance(frame, EndFrame | CancelFrame):
            await self.on_stopped()
            if self._task is not None:
                await self.cancel_task(self._task)
                self._task = None
        await self.push_frame(frame, direction)

    async def on_stopped(self) -> None:
        """Hook: the call ends (a sound card closes its stream here)."""
        return None

    def _position(self, at_ms: float, samples: int) -> int:
        """Where a frame goes on the user track: right after the last one, unless that is
        more than the jitter allowance off the clock (a gap in arrival, or a burst of frames
        queued while the pipeline started), which re-syncs the track to the clock."""
        now = self._recorder.position(at_ms)
        if self._cursor is None or abs(now - self._cursor) > JITTER_MS * self._rate // 1000:
            self._cursor = now
        pos = self._cursor
        self._cursor += samples
        return pos

    async def _pump(self) -> None:
        while True:
            pcm = await self._frames.get()
            at_ms = self._clock.now_ms()
            self._recorder.write_user(self._position(at_ms, len(pcm) // 2), pcm)
            await self.push_frame(
                InputAudioRawFrame(audio=pcm, sample_rate=self._rate, num_channels=1)
            )


class LiveOutput(PacedOutput):
    """Bot audio to a live listener at playback pace; a barge-in flushes the listener."""

    on_stalled: Callable[[str], None] | None = None  # told once when the listener stalls
    stalled: str | None = None

    async def bounded_send(self, send: Callable[[], Awaitable[object]]) -> bool:
        """Wait for one send to the listener; False (and ``on_stalled``) when it stalls."""
        if self.stalled is not None:
            return False
        try:
            async with asyncio.timeout(SEND_STALL_SECS):
                await send()
            return True
        except TimeoutError:
            self.stalled = (
                f"the client stopped reading (outbound buffer full for {SEND_STALL_SECS:g} s)"
            )
            logger.warning("{}: dropping the call", self.stalled)
            if self.on_stalled is not None:
                self.on_stalled(self.stalled)
            return False

    async def deliver(self, pcm: bytes) -> bool:
        """Hand one chunk of bot audio (16-bit mono, pipeline rate) to the listener."""
        raise NotImplementedError

    async def flush_listener(self) -> None:
        """Make the listener drop the bot audio it has not played yet."""
        raise NotImplementedError

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        if isinstance(frame, InterruptionFrame):
            await self.flush_listener()
        await super().process_frame(frame, direction)


class WebSocketOutput(LiveOutput):
    """Bot audio to a caller on a websocket (the phone bridge, the browser page)."""

    def __init__(
        self, ws: Connection, clock: CallClock, recorder: CallRecorder, *, rate: int
    ) -> None:
        super().__init__(clock, recorder, rate=rate)
        self._ws = ws

    async def send_message(self, message: str | bytes) -> bool:
        """Send one message to the caller; False once they are gone or have stopped reading,
        since a caller who hung up is the call's end, not an error."""
        try:
            return await self.bounded_send(lambda: self._ws.send(message))
        except ConnectionClosed:
            return False
