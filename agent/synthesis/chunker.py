"""Phrase chunker: the LLM's token stream -> speakable phrases, the first as early as it can be.

The first phrase of an answer is released at the first clause boundary or once it has
``first_min_words`` complete words, whichever comes first. Later phrases wait for a
sentence end, or a clause boundary after ``min_words`` words, so prosody stays natural.
A word counts as complete only once the next token has begun (it may still grow).

A speculative answer's held text (``HeldAnswerTextFrame``) is split the same way, token by
token, so its first phrase is known before the turn ends: it goes ahead to synthesis as a
``FirstPhraseAheadFrame``, once per answer.
"""

from __future__ import annotations

import re

from pipecat.frames.frames import (
    Frame,
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from agent.frames import FirstPhraseAheadFrame, HeldAnswerTextFrame, PhraseFrame
from agent.sentences import sentence_end
from agent.synthesis.speakable import speakable

CLAUSE_END = re.compile(r"[,;:\u2014]+(?=\s)|\s[-\u2013]\s")


def split_phrase(buffer: str, first: bool, first_min_words: int, min_words: int) -> int | None:
    """Where the next phrase ends in ``buffer`` (an index), or None to wait for more text."""
    if (end := sentence_end(buffer)) is not None:
        return end
    words_needed = first_min_words if first else min_words
    for m in CLAUSE_END.finditer(buffer):
        if first or len(buffer[: m.start()].split()) >= words_needed:
            return m.end()
    if first:
        complete = list(re.finditer(r"\S+(?=\s)", buffer))
        if len(complete) >= words_needed:
            return complete[words_needed - 1].end()
    return None


def spoken_phrase(text: str) -> str | None:
    """``text`` as it will be said, or None when nothing in it can be said."""
    spoken = speakable(text)
    return spoken if any(ch.isalnum() for ch in spoken) else None


class PhraseChunker(FrameProcessor):
    """Turns LLMTextFrames into PhraseFrames; everything else passes through."""

    def __init__(self, *, first_min_words: int, min_words: int) -> None:
        super().__init__()
        self._first_min_words = first_min_words
        self._min_words = min_words
        self._buffer = ""
        self._first = True
        self._held = ""  # the held answer's text as last seen
        self._held_phrase_sent = False

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, HeldAnswerTextFrame):
            await self._phrase_ahead(frame.text)
        elif isinstance(frame, LLMTextFrame):
            self._buffer += frame.text
            await self._release()
        elif isinstance(frame, LLMFullResponseStartFrame):
            self._buffer, self._first = "", True
            await self.push_frame(frame, direction)
        elif isinstance(frame, LLMFullResponseEndFrame):
            await self._emit(self._buffer)
            self._buffer = ""
            await self.push_frame(frame, direction)
        elif isinstance(frame, InterruptionFrame):
            self._buffer, self._first = "", True
            await self.push_frame(frame, direction)
        else:
            await self.push_frame(frame, direction)

    async def _phrase_ahead(self, held: str) -> None:
        """The first phrase of a held answer, as ``_release`` will cut it token by token."""
        if not held.startswith(self._held):  # another answer
            self._held_phrase_sent = False
        self._held = held
        if self._held_phrase_sent:
            return
        end = split_phrase(held, True, self._first_min_words, self._min_words)
        if end is not None:
            self._held_phrase_sent = True
            if spoken := spoken_phrase(held[:end]):
                await self.push_frame(FirstPhraseAheadFrame(text=spoken))

    async def _release(self) -> None:
        while (end := split_phrase(
            self._buffer, self._first, self._first_min_words, self._min_words
        )) is not None:  # fmt: skip
            phrase, self._buffer = self._buffer[:end], self._buffer[end:]
            await self._emit(phrase)

    async def _emit(self, text: str) -> None:
        if spoken := spoken_phrase(text):
            self._first = False
            await self.push_frame(PhraseFrame(text=spoken))
