"""What the words at a pause say, as the detector learns it: recognition's pause transcript
(and its comma), then the LLM's verdict on them, each waited for briefly."""

from __future__ import annotations

import asyncio

from agent.clock import CallClock
from agent.frames import EndOfMessageFrame, PauseTranscriptFrame

PAUSE_TEXT_WAIT_SECS = 0.3  # how long a likely end of turn waits for the pause transcript
WORDS_WAIT_SECS = 0.3  # and then for the LLM's verdict on its words


class PauseWords:
    """The pause transcript (``text``), recognition's probability of a comma where it closed
    it (``goes_on``) and the LLM's probability that the message ends there (``words_end``)."""

    def __init__(self, clock: CallClock) -> None:
        self._clock = clock
        self.text = ""
        self.goes_on: float | None = None
        self._text_ready = asyncio.Event()
        self.words_end: float | None = None
        self._words_ready = asyncio.Event()

    def heard(self, frame: PauseTranscriptFrame) -> None:
        self.forget()  # and the verdict on earlier words
        self.text, self.goes_on = frame.text, frame.goes_on
        self._text_ready.set()

    def judged(self, frame: EndOfMessageFrame) -> None:
        text = self.text.strip()
        if text and frame.text.strip().endswith(text):  # not a verdict on earlier words
            self.words_end = frame.probability
            self._words_ready.set()

    @property
    def so_far(self) -> str:
        """The pause transcript, "" until it has come."""
        return self.text if self._text_ready.is_set() else ""

    async def text_arrived(self) -> bool:
        try:
            await asyncio.wait_for(self._text_ready.wait(), self._clock.limit(PAUSE_TEXT_WAIT_SECS))
        except TimeoutError:
            return False
        return True

    async def verdict_arrived(self) -> None:
        """Wait (live, briefly: a busy engine must not hold the turn) for the LLM's verdict."""
        try:
            await asyncio.wait_for(self._words_ready.wait(), self._clock.limit(WORDS_WAIT_SECS))
        except TimeoutError:
            pass

    def forget(self) -> None:
        """The pause transcript and the LLM's verdict on it no longer hold."""
        self.text, self.goes_on = "", None
        self._text_ready.clear()
        self.words_end = None
        self._words_ready.clear()
