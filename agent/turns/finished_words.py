"""A sentence the LLM takes as a whole message ends the turn, whatever Smart Turn says."""

from __future__ import annotations

from dataclasses import dataclass

from agent.turns.words import UnfinishedWords, ends_sentence


@dataclass(frozen=True)
class FinishedWordsEnd:
    """Words that end a sentence, that the LLM takes as a whole message (its probability of
    an end there at least ``above``) and that nothing holds, end the turn after ``secs`` of
    silence: Smart Turn's verdict on one silence can swing from yes to no as the silence
    grows, and a finished sentence should not wait for the silence fallback."""

    above: float | None
    secs: float | None
    unfinished: UnfinishedWords
    reason = "words"

    def ends(
        self, silence_secs: float, text: str, words_end: float | None, goes_on: float | None
    ) -> bool:
        above, after = self.above, self.secs
        return (
            above is not None
            and after is not None
            and silence_secs >= after
            and words_end is not None
            and words_end >= above
            and ends_sentence(text)
            and not self.unfinished.holds(text, words_end, goes_on, silence_secs)
        )
