"""A graceful stop (SIGTERM): take no new call, let the calls in progress finish, then go.

A balancer stops sending calls once ``/readyz`` says 503; a caller already talking is not
cut off for a restart unless the calls outlast ``limit_secs`` (then they are hung up, their
files written, as on SIGINT).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

POLL_SECS = 0.2


class Drain:
    """Whether the server is draining, and the wait for its calls to end."""

    def __init__(self, limit_secs: float) -> None:
        self.limit_secs = limit_secs
        self._begun = asyncio.Event()

    @property
    def draining(self) -> bool:
        return self._begun.is_set()

    def begin(self) -> None:
        self._begun.set()

    async def wait(
        self, stop: asyncio.Event, busy: Callable[[], int], say: Callable[[str], None]
    ) -> None:
        """Return once ``stop`` is set, or once a drain has begun and no call is left (or the
        limit has passed)."""
        begun = asyncio.ensure_future(self._begun.wait())
        stopped = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({begun, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if stop.is_set():
                return
            say(f"draining: no new calls; waiting up to {self.limit_secs:g} s for "
                f"{busy()} call(s) to finish")  # fmt: skip
            deadline = time.monotonic() + self.limit_secs
            while busy() and time.monotonic() < deadline and not stop.is_set():
                await asyncio.wait({stopped}, timeout=POLL_SECS)
            if busy():
                say(f"drain limit reached: hanging up {busy()} call(s)")
        finally:
            begun.cancel()
            stopped.cancel()
