"""Answer sanity: what a caller hears as broken, whatever the question was.

An empty answer, an answer that repeats an earlier one of the call (whole, or one of its
sentences), a sentence said twice inside one answer (a loop), and an answer that echoes
the caller's words. An answer said again because the caller asked to hear it
again is not a repeat.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from agent.evaluation.text import words
from agent.llm.answer import is_echo
from agent.llm.say_again import asks_to_hear_again

MIN_SENTENCE_WORDS = 3  # shorter sentences ("Okay.", "Thank you.") may well come back


def sentences(text: str) -> list[str]:
    """The sentences of an answer, normalised (lower case, no punctuation)."""
    parts = re.split(r"(?<=[.!?])\s+", text.strip())
    return [" ".join(words(p)) for p in parts if words(p)]


def loops(answer: str) -> bool:
    """A sentence said twice inside one answer."""
    said = [s for s in sentences(answer) if len(s.split()) >= MIN_SENTENCE_WORDS]
    return len(said) != len(set(said))


def echoes(caller: str, answer: str) -> bool:
    """The answer reads the caller back, by the answer editor's own rule (``is_echo``): the
    eval counts what the editor is meant to keep from being said."""
    return is_echo(answer, caller)


@dataclass
class AnswerCheck:
    """The problems of one answer, judged against the caller's words and the call so far."""

    empty: bool = False
    repeated: bool = False  # the same answer as an earlier one of the call
    repeated_sentence: bool = False  # one of its sentences was said in an earlier answer
    loop: bool = False
    echo: bool = False

    @property
    def problems(self) -> list[str]:
        return [name for name, bad in vars(self).items() if bad]


@dataclass
class CallAnswers:
    """Checks each answer of one call against the answers before it."""

    _answers: list[str] = field(default_factory=list)
    _sentences: set[str] = field(default_factory=set)

    def check(self, caller: str, answer: str) -> AnswerCheck:
        said = sentences(answer)
        key = " ".join(said)
        asked = asks_to_hear_again(caller)  # then the same answer again is the right one
        result = AnswerCheck(
            empty=bool(words(caller)) and not key,
            repeated=bool(key) and key in self._answers and not asked,
            repeated_sentence=not asked
            and any(s in self._sentences for s in said if len(s.split()) >= MIN_SENTENCE_WORDS),
            loop=loops(answer),
            echo=echoes(caller, answer),
        )
        if key:
            self._answers.append(key)
            self._sentences.update(said)
        return result
