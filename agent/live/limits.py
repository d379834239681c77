"""What one client may cost the server in log lines."""

from __future__ import annotations

import time
from collections.abc import Callable

from loguru import logger


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
