"""Optional output guard: every phrase is checked before it is spoken.

The check sees a sliding window of the answer's last few phrases, so words split across a
phrase boundary are still caught. A blocked phrase is not spoken: the answer stops (the LLM
is told to stop generating), a short replacement is spoken instead, and nothing else of
that answer reaches the synthesiser. The default check is a case-insensitive block list;
``tts.guard_checker`` names a custom ``module:function(text) -> bool`` (True = block).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable

from pipecat.frames.frames import (
    Frame,
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from agent.errors import UserError
from agent.frames import PhraseFrame, StopAnswerFrame
from agent.settings import TTSSettings

Checker = Callable[[str], bool]


def block_list_checker(block_list: list[str]) -> Checker:
    """True when the text contains any listed word or phrase (whole words, any case)."""
    patterns = [re.compile(rf"\b{re.escape(item)}\b", re.I) for item in block_list if item]
    return lambda text: any(p.search(text) for p in patterns)


def load_checker(settings: TTSSettings) -> Checker:
    if not settings.guard_checker:
        return block_list_checker(settings.guard_block_list)
    module_name, _, attr = settings.guard_checker.partition(":")
    try:
        checker = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise UserError(
            f"tts.guard_checker '{settings.guard_checker}' cannot be loaded ({exc}): "
            "give 'module:function' importable from the agent's environment"
        ) from None
    return checker


class PhraseGuard(FrameProcessor):
    """Sits between the phrase chunker and the synthesiser."""

    def __init__(self, settings: TTSSettings) -> None:
        super().__init__()
        self._check = load_checker(settings)
        self._window = settings.guard_window_phrases
        self._replacement = settings.guard_replacement
        self._recent: list[str] = []
        self._blocked = False

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(
            frame, LLMFullResponseStartFrame | LLMFullResponseEndFrame | InterruptionFrame
        ):
            self._recent, self._blocked = [], False
        elif isinstance(frame, PhraseFrame):
            if self._blocked:
                return
            self._recent = [*self._recent, frame.text][-self._window :]
            if self._check(" ".join(self._recent)):
                self._blocked = True
                await self.push_frame(StopAnswerFrame(), FrameDirection.UPSTREAM)
                await self.push_frame(PhraseFrame(text=self._replacement))
                return
        await self.push_frame(frame, direction)
