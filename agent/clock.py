"""The call clock: the one timeline every stage and the call recording share.

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
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

# At compute pace the audio clock stands still while work runs, so a wait for it lasts as long
# as the work takes on this CPU: its limit only keeps a lost frame or a dead engine from
# hanging a replay, and must not cut work a slow or busy machine is still doing.
COMPUTE_PACE_WAIT_SECS = 30.0


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

    @contextlib.contextmanager
    def elsewhere(self) -> Iterator[None]:
        """Inside ``busy()``: a wait on work done off this machine (a tool's server), which
        the call's time passes during, as it would live."""
        yield


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

    @contextlib.contextmanager
    def elsewhere(self) -> Iterator[None]:
        self._leave()
        try:
            yield
        finally:
            self._enter()

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
