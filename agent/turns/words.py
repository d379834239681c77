"""What the caller's words so far say about the turn: closed as a sentence, a word alone, or
unfinished (the hold every other signal but the silence bows to)."""

from __future__ import annotations

from dataclasses import dataclass

from agent.recognition.utterance import has_words
from agent.turns.backchannel import words_of
from agent.turns.openers import only_opens


def ends_sentence(text: str) -> bool:
    """Whether recognition's words so far end with a sentence's closing punctuation (before
    any closing quote or bracket)."""
    return text.rstrip().rstrip("\"'\u201d\u2019)]").endswith((".", "?", "!"))


NUMBER_WORDS = frozenset(
    "zero oh one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty "
    "ninety hundred thousand million point".split()
)


def one_word_sentence(text: str) -> bool:
    """A single word closed as a sentence ("Stop.", "Go.", "Yes."): a reply or a command.
    Openers ("Okay.", "Right.") promise more, and a number may be the first of several
    ("one [pause] zero zero one"), so neither is one."""
    words = [w for w in words_of(text) if has_words(w)]
    if len(words) != 1 or not ends_sentence(text) or only_opens(text):
        return False
    word = words[0]
    return word not in NUMBER_WORDS and not any(c.isdigit() for c in word)


@dataclass(frozen=True)
class UnfinishedWords:
    """The words say the caller goes on: openers alone ("Hi,", agent.turns.openers), or two
    words or more after which the LLM sees the message going on (its probability of an end
    there under ``unfinished_below``), that recognition closed with a full stop it nearly wrote
    as a comma (``goes_on_above``), or that it did not close at all (``unclosed_go_on``).
    Recognition's punctuation holds the words only until ``patience``. A single word is
    exempt from the LLM's judgement: asked without the question it answers ("Three."), the
    model sees it as unfinished."""

    patience: float
    unfinished_below: float | None = None
    goes_on_above: float | None = None
    unclosed_go_on: bool = False

    def holds(
        self, text: str, words_end: float | None, goes_on: float | None, silence_secs: float
    ) -> bool:
        """Whether the words so far say the caller goes on after ``silence_secs``;
        ``words_end``: the LLM's probability that the message ends after them, ``goes_on``:
        recognition's that a comma (not its full stop) follows them (None: not known)."""
        if only_opens(text):
            return True
        if len(words_of(text)) < 2:
            return False
        below = self.unfinished_below
        if below is not None and words_end is not None and words_end < below:
            return True
        return silence_secs < self.patience and self._punctuation_goes_on(text, goes_on)

    def _punctuation_goes_on(self, text: str, goes_on: float | None) -> bool:
        """Recognition's punctuation says the words go on: it left them unclosed, or nearly
        wrote a comma where it closed them."""
        if self.unclosed_go_on and not ends_sentence(text):
            return True
        above = self.goes_on_above
        return above is not None and goes_on is not None and goes_on >= above
