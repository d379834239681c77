"""The call clock and the two-channel call recording that share one timeline.

Two paces share one interface. ``CallClock`` is the wall clock: what latency is measured
with. ``ComputeClock`` is the audio's own clock: it moves only when the replayed input
pushes its next frame, and only once every piece of work the audio so far started has
finished, as if the machine were infinitely fast, so what the agent hears, when a turn
ends and what it answers do not depend on the CPU.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import os
import shutil
import struct
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from loguru import logger

WAV_HEADER_BYTES = 44
# At compute pace the audio clock stands still while work runs, so a wait for it lasts as long
# as the work takes on this CPU: its limit only keeps a lost frame or a dead engine from
# hanging a replay, and must not cut work a slow or busy machine is still doing.
COMPUTE_PACE_WAIT_SECS = 30.0
CHANNELS = 2
FRAME_BYTES = 2 * CHANNELS  # one int16 sample per channel


class CallClock:
    """Monotonic milliseconds since the call started (real-time pace)."""

    compute_paced = False

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.wall_t0_ns = time.time_ns()  # the same instant on the wall clock, for exports

    def now_ms(self) -> float:
        return round((time.monotonic() - self.t0) * 1000.0, 1)

    def start(self) -> None:
        """The call's pipeline starts, on its event loop."""

    async def sleep(self, secs: float) -> None:
        """Wait ``secs`` on this clock."""
        await asyncio.sleep(max(0.0, secs))

    async def wait_until(self, at_ms: float) -> None:
        """The input's pace: return once the call time reaches ``at_ms``."""
        await self.sleep((at_ms - self.now_ms()) / 1000.0)

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        """Work the compute pace waits for (an LLM stream on a socket, a decision)."""
        yield

    def limit(self, live_secs: float) -> float:
        """How long (wall-clock seconds) to wait for work that ``live_secs`` bounds live."""
        return live_secs


class ComputeClock(CallClock):
    """The audio clock of a compute-paced replay: it advances only when the input asks it to
    (``wait_until``), after the pipeline has settled.

    Settled means no tracked work is running (every ``run_in_executor`` job of the call's
    event loop, and any ``busy()`` block) and the event loop has nothing else ready to run,
    so every frame the audio so far caused has gone through. Sleepers (``sleep``) wake in
    time order as the clock passes their deadline.
    """

    compute_paced = True

    def __init__(self) -> None:
        super().__init__()
        self._ms = 0.0
        self._busy = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._sleepers: list[tuple[float, int, asyncio.Future]] = []
        self._order = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None

    def now_ms(self) -> float:
        return round(self._ms, 1)

    def limit(self, live_secs: float) -> float:
        return max(live_secs, COMPUTE_PACE_WAIT_SECS)

    def start(self) -> None:
        self._attach()

    def _attach(self) -> None:
        """Track the executor jobs of the running loop (the recogniser, the VAD, Smart Turn,
        the in-process LLM, Piper all run there)."""
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return
        self._loop = loop
        run_in_executor: Callable[..., Awaitable[Any]] = loop.run_in_executor

        def tracked(executor: Any, func: Callable[..., Any], *args: Any) -> asyncio.Future:
            future = asyncio.ensure_future(run_in_executor(executor, func, *args))
            self._enter()
            future.add_done_callback(lambda _: self._leave())
            return future

        loop.run_in_executor = tracked  # type: ignore[method-assign]

    def _enter(self) -> None:
        self._busy += 1
        self._idle.clear()

    def _leave(self) -> None:
        self._busy -= 1
        if self._busy == 0:
            self._idle.set()

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        self._enter()
        try:
            yield
        finally:
            self._leave()

    async def settle(self) -> None:
        """Return once no tracked work runs and nothing else is ready on the loop."""
        self._attach()
        loop = asyncio.get_running_loop()
        quiet = 0
        while quiet < 3:  # three rounds in a row: a frame hop is one round
            if self._busy:
                await self._idle.wait()
            await asyncio.sleep(0)
            ready = len(loop._ready)  # type: ignore[attr-defined]  # asyncio's run queue
            quiet = quiet + 1 if self._busy == 0 and ready == 0 else 0

    async def sleep(self, secs: float) -> None:
        if secs <= 0:
            await asyncio.sleep(0)
            return
        future = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._ms + secs * 1000.0, next(self._order), future))
        await future

    async def wait_until(self, at_ms: float) -> None:
        await self.settle()
        while self._sleepers and self._sleepers[0][0] <= at_ms:
            due, _, future = heapq.heappop(self._sleepers)
            if future.done():  # its sleeper was cancelled
                continue
            self._ms = max(self._ms, due)
            future.set_result(None)
            await self.settle()
        self._ms = max(self._ms, at_ms)


def clock_for(pace: str) -> CallClock:
    """The clock of a replay paced ``realtime`` or ``compute``."""
    if pace == "compute":
        return ComputeClock()
    if pace == "realtime":
        return CallClock()
    raise ValueError(f"unknown pace {pace!r}: use realtime or compute")


def wav_header(rate: int, frames: int) -> bytes:
    """The canonical 44-byte header of a 16-bit stereo PCM WAV holding ``frames`` frames."""
    data = frames * FRAME_BYTES
    return struct.pack(
        "<4sI4s4sIHHIIHH4sI", b"RIFF", 36 + data, b"WAVE", b"fmt ", 16, 1, CHANNELS, rate,
        rate * FRAME_BYTES, FRAME_BYTES, 16, b"data", data,
    )  # fmt: skip


class CallRecorder:
    """call.wav: channel 0 the user audio as pushed, channel 1 the bot audio as written.

    Each channel is placed by sample position on the call clock, so anyone can read
    voice-to-voice off the file. Samples go straight to disk (to ``path``, else to an
    anonymous temporary file) at their place in the file, so a call of any length holds
    no audio in memory; ``save`` writes the header and puts the file where it belongs.
    """

    def __init__(self, rate: int, path: Path | None = None) -> None:
        self.rate = rate
        self._path = path
        self._file: BinaryIO | None = None
        self._ends = [0, 0]  # per channel: one past the last sample written (bot: after cuts)
        self._broken: str | None = None  # why recording stopped (a full disk), if it did
        if path is not None:
            self._open()

    def position(self, at_ms: float) -> int:
        return int(round(at_ms * self.rate / 1000.0))

    def _open(self) -> BinaryIO:
        if self._file is None:
            if self._path is None:
                self._file = tempfile.TemporaryFile(buffering=0)
            else:  # exclusive: never writes through a file or link someone else put there
                self._file = open(self._path, "x+b", buffering=0)  # noqa: SIM115 - kept open
            self._file.write(wav_header(self.rate, 0))
        return self._file

    def _place(self, channel: int, pos: int, samples: np.ndarray) -> None:
        """Write one channel's samples at ``pos``, keeping the other channel's there."""
        if self._broken is not None or not len(samples):
            return
        try:
            fd = self._open().fileno()
            offset = WAV_HEADER_BYTES + pos * FRAME_BYTES
            frames = np.zeros((len(samples), CHANNELS), dtype=np.int16)
            old = os.pread(fd, frames.nbytes, offset)
            frames.reshape(-1)[: len(old) // 2] = np.frombuffer(old, np.int16, len(old) // 2)
            frames[:, channel] = samples
            os.pwrite(fd, frames.tobytes(), offset)
        except OSError as exc:  # a full disk costs the recording, never the call
            self._broken = f"{type(exc).__name__}: {exc.strerror or exc}"
            logger.warning("call recording stopped: {}", self._broken)

    def _write(self, channel: int, pos: int, pcm: bytes) -> None:
        samples = np.frombuffer(pcm, dtype=np.int16)
        self._place(channel, pos, samples)
        self._ends[channel] = max(self._ends[channel], pos + len(samples))

    def write_user(self, pos: int, pcm: bytes) -> None:
        self._write(0, pos, pcm)

    def write_bot(self, pos: int, pcm: bytes) -> None:
        self._write(1, pos, pcm)

    def cut_bot(self, pos: int) -> None:
        """Drop bot audio from ``pos`` on (a barge-in flushed the speaker)."""
        end = self._ends[1]
        if pos < end:
            self._place(1, pos, np.zeros(end - pos, dtype=np.int16))
            self._ends[1] = pos

    def save(self, path: Path) -> None:
        """Finish the file and put it at ``path`` (nothing is written after this)."""
        file = self._open()
        frames = max(self._ends)
        try:
            if self._broken is not None:
                raise OSError(self._broken)
            os.ftruncate(file.fileno(), WAV_HEADER_BYTES + frames * FRAME_BYTES)
            os.pwrite(file.fileno(), wav_header(self.rate, frames), 0)
            if self._path is None:
                file.seek(0)
                with open(path, "wb") as out:
                    shutil.copyfileobj(file, out)
            elif self._path != path:
                os.replace(self._path, path)
        except OSError as exc:
            logger.warning("call.wav not written: {}", exc.strerror or exc)
            if self._path is not None:
                self._path.unlink(missing_ok=True)
        finally:
            file.close()
            self._broken = self._broken or "saved"


class NullRecorder(CallRecorder):
    """A recorder that keeps nothing: for calls that write no call.wav (``--no-wav``, or a
    disk under its free-space floor)."""

    def write_user(self, pos: int, pcm: bytes) -> None:
        pass

    def write_bot(self, pos: int, pcm: bytes) -> None:
        pass

    def cut_bot(self, pos: int) -> None:
        pass

    def save(self, path: Path) -> None:
        pass
