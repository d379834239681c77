"""A turn that starts soon after the last one ended, with no answer heard between, goes on from
it: Smart Turn hears both, as it would have had the first pause not ended the turn."""

from __future__ import annotations


class Continuation:
    """Where the open turn's audio begins for Smart Turn, in input samples (``turn_from``)."""

    def __init__(self, gap_secs: float | None, rate: int) -> None:
        self._gap_secs, self._rate = gap_secs, rate
        self.turn_from = 0  # the input sample where the open turn's speech began
        self._last_turn: tuple[int, int] | None = None  # the last turn's first and end sample

    def open(self, speech_from: int) -> None:
        self.turn_from = speech_from
        gap = self._gap_secs
        if self._last_turn is not None and gap is not None:
            first, ended = self._last_turn
            if self.turn_from - ended <= gap * self._rate:
                self.turn_from = first  # it goes on from the last one: Smart Turn hears both

    def ended(self, heard: int) -> None:
        self._last_turn = (self.turn_from, heard)

    def answered(self) -> None:
        """The caller heard the answer out: the next turn is a new one."""
        self._last_turn = None
