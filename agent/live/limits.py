"""What clients may cost the server in log lines: per connection, per address, per server."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

from loguru import logger

Clock = Callable[[], float]


class TokenBucket:
    """``burst`` lines at once, then one per ``every_secs``."""

    def __init__(self, burst: int, every_secs: float, now: Clock = time.monotonic) -> None:
        self._now = now
        self._every = every_secs
        self._burst = burst
        self._credit = float(burst)
        self._last = now()

    def ready(self) -> bool:
        """Whether a line may pass now (``take`` spends it)."""
        now = self._now()
        self._credit = min(self._burst, self._credit + (now - self._last) / self._every)
        self._last = now
        return self._credit >= 1

    def take(self) -> None:
        self._credit -= 1


class LogBudget:
    """The buckets every warning line of the server's clients also spends from: one per client
    address (so one address cannot use up the server's lines) and one for the server (so a
    thousand connections, each within its own limit, cannot fill the log together)."""

    def __init__(
        self,
        *,
        server: tuple[int, float] = (20, 1.0),
        per_address: tuple[int, float] = (10, 10.0),
        max_addresses: int = 4096,
        now: Clock = time.monotonic,
    ) -> None:
        self._now = now
        self.server = TokenBucket(*server, now=now)
        self._per_address = per_address
        self._max_addresses = max_addresses
        self._addresses: OrderedDict[str, TokenBucket] = OrderedDict()

    def buckets(self, address: str) -> tuple[TokenBucket, ...]:
        """The buckets a line from ``address`` spends from (the least recently seen address
        is forgotten past ``max_addresses``: the server's bucket still bounds it)."""
        bucket = self._addresses.pop(address, None) or TokenBucket(
            *self._per_address, now=self._now
        )
        self._addresses[address] = bucket
        while len(self._addresses) > self._max_addresses:
            self._addresses.popitem(last=False)
        return bucket, self.server


class WarningLimiter:
    """Warning lines of one source (a call, the server's refusals), rate-limited.

    ``burst`` lines pass at once, then one per ``every_secs``, and only while each of the
    ``shared`` buckets (its address's, the server's) has room too; a line that follows
    suppressed ones says how many there were. A client that sends junk in a loop, or many
    clients at once, cannot fill the log.
    """

    def __init__(
        self,
        burst: int = 5,
        every_secs: float = 10.0,
        now: Clock = time.monotonic,
        shared: Sequence[TokenBucket] = (),
    ) -> None:
        self._buckets = (TokenBucket(burst, every_secs, now), *shared)
        self.suppressed = 0

    def __call__(self, message: str, *args: object) -> None:
        if not all([bucket.ready() for bucket in self._buckets]):  # refill every one
            self.suppressed += 1
            return
        for bucket in self._buckets:
            bucket.take()
        if self.suppressed:
            message += f" ({self.suppressed} similar line(s) suppressed)"
            self.suppressed = 0
        logger.opt(depth=1).warning(message, *args)
