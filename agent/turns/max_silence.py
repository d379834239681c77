"""The fallback: a silence this long ends the turn whatever else is known."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MaxSilenceEnd:
    """The turn ends ``secs`` after the caller's silence began (on the call's clock)."""

    secs: float
    reason = "max_silence"

    def deadline_ms(self, silence_started_ms: float) -> float:
        return silence_started_ms + self.secs * 1000

    def ends(self, now_ms: float, deadline_ms: float | None) -> bool:
        return deadline_ms is not None and now_ms >= deadline_ms
