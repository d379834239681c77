"""A word alone ends the turn: Smart Turn hears too little in one word."""

from __future__ import annotations

from dataclasses import dataclass

from agent.turns.words import one_word_sentence


@dataclass(frozen=True)
class OneWordEnd:
    """A single word closed as a sentence ("Stop.", "Go."; not an opener, not a number) ends
    the turn after ``secs`` of silence, whatever Smart Turn says (None: never)."""

    secs: float | None
    reason = "one_word"

    def ends(self, silence_secs: float, text: str) -> bool:
        return self.secs is not None and silence_secs >= self.secs and one_word_sentence(text)
