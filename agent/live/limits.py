"""What one client may cost the server: log lines, and caller audio faster than real time."""

from __future__ import annotations

import time
from collections.abc import Callable

from loguru import logger

# A caller's audio may arrive this much faster than real time (network jitter bunches
# frames up) plus a burst of BURST_SECS; more is dropped, so a client pushing minutes of
# audio in seconds costs what a real caller costs.
MAX_INPUT_SPEED = 1.5
BURST_SECS = 1.0


class WarningLimiter:
    """Warning lines of one source (a call, the server's refusals), rate-limited.

    ``burst`` lines pass at once, then one per ``every_secs``; a line that follows
    suppressed ones says how many there were. A client that sends junk in a loop cannot
    fill the log.
    """

    def __init__(
        self, burst: int = 5, every_secs: float = 10.0, now: Callable[[], float] = time.monotonic
    ) -> None:
        self._now = now
        self._every = every_secs
        self._burst = burst
        self._credit = float(burst)
        self._last = now()
        self.suppressed = 0

    def __call__(self, message: str, *args: object) -> None:
        now = self._now()
        self._credit = min(self._burst, self._credit + (now - self._last) / self._every)
        self._last = now
        if self._credit < 1:
            self.suppressed += 1
            return
        self._credit -= 1
        if self.suppressed:
            message += f" ({self.suppressed} similar line(s) suppressed)"
            self.suppressed = 0
        logger.opt(depth=1).warning(message, *args)


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
