"""Which signal ends the turn after a given silence: the end-of-turn knobs, and the order in
which the strategies that read them are asked."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from agent.settings import TurnSettings
from agent.turns.finished_words import FinishedWordsEnd
from agent.turns.one_word import OneWordEnd
from agent.turns.smart_turn import SmartTurnBar
from agent.turns.words import UnfinishedWords, ends_sentence


@dataclass(frozen=True)
class EndOfTurnPolicy:
    """The end-of-turn knobs (the option group of ``TurnSettings`` they come from), and the
    strategies they make: Smart Turn's falling bar (``SmartTurnBar``: ``sure`` to ``lean`` by
    ``patience``, ``text_credit`` off for a sentence), the hold of unfinished words
    (``UnfinishedWords``: openers, ``unfinished_below``, ``goes_on_above``,
    ``unclosed_go_on``), a word alone (``OneWordEnd``: ``one_word_secs``) and a sentence the
    LLM takes as finished (``FinishedWordsEnd``: ``finished_above``, ``finished_secs``).
    Smart Turn is asked first, then with the sentence's credit, then the words alone.
    """

    stop_secs: float
    sure: float
    lean: float
    patience: float
    text_credit: float
    unfinished_below: float | None = None
    goes_on_above: float | None = None
    unclosed_go_on: bool = False
    one_word_secs: float | None = None
    finished_above: float | None = None
    finished_secs: float | None = None

    @classmethod
    def from_settings(cls, turn: TurnSettings) -> EndOfTurnPolicy:
        return cls(stop_secs=turn.vad_stop_secs, sure=turn.smart_turn_sure,
                   lean=turn.smart_turn_lean, patience=turn.patience_secs,
                   text_credit=turn.text_credit,
                   unfinished_below=turn.words_unfinished_below,
                   goes_on_above=turn.punctuation_goes_on_above,
                   unclosed_go_on=turn.unclosed_words_go_on,
                   one_word_secs=turn.one_word_secs,
                   finished_above=turn.words_finished_above,
                   finished_secs=turn.words_finished_secs)  # fmt: skip

    @functools.cached_property
    def smart_turn(self) -> SmartTurnBar:
        return SmartTurnBar(self.stop_secs, self.sure, self.lean, self.patience, self.text_credit)

    @functools.cached_property
    def unfinished_words(self) -> UnfinishedWords:
        return UnfinishedWords(
            self.patience, self.unfinished_below, self.goes_on_above, self.unclosed_go_on
        )

    @functools.cached_property
    def one_word(self) -> OneWordEnd:
        return OneWordEnd(self.one_word_secs)

    @functools.cached_property
    def finished_words(self) -> FinishedWordsEnd:
        return FinishedWordsEnd(self.finished_above, self.finished_secs, self.unfinished_words)

    def unfinished(
        self,
        text: str,
        words_end: float | None,
        goes_on: float | None = None,
        silence_secs: float = 0.0,
    ) -> bool:
        """Whether the words so far say the caller goes on after ``silence_secs``."""
        return self.unfinished_words.holds(text, words_end, goes_on, silence_secs)

    def bar(self, silence_secs: float, sentence: bool, unfinished: bool = False) -> float:
        return self.smart_turn.bar(silence_secs, sentence, unfinished)

    def ends(
        self, probability: float, silence_secs: float, sentence: bool, unfinished: bool = False
    ) -> bool:
        return self.smart_turn.ends(probability, silence_secs, sentence, unfinished)

    def verdict(
        self,
        probability: float,
        silence_secs: float,
        text: str,
        words_end: float | None,
        goes_on: float | None = None,
    ) -> str | None:
        """Which signal ends the turn after this silence, given Smart Turn's probability and
        the words so far (``text``, "" when not known yet): "smart_turn",
        "smart_turn_and_text" (only with the sentence's credit), or what ends it without
        Smart Turn (``words_end_it``), or None."""
        unfinished = self.unfinished(text, words_end, goes_on, silence_secs)
        bar = self.smart_turn
        if bar.ends(probability, silence_secs, sentence=False, unfinished=unfinished):
            return bar.reason
        sentence = not unfinished and ends_sentence(text)
        if sentence and bar.ends(probability, silence_secs, sentence=True):
            return bar.reason_with_text
        return self.words_end_it(silence_secs, text, words_end, goes_on)

    def words_end_it(
        self, silence_secs: float, text: str, words_end: float | None, goes_on: float | None = None
    ) -> str | None:
        """What ends the turn after this silence on the words alone, no verdict needed:
        "one_word", "words", or None."""
        if self.one_word.ends(silence_secs, text):
            return self.one_word.reason
        if self.finished_words.ends(silence_secs, text, words_end, goes_on):
            return self.finished_words.reason
        return None
