"""The LLM stage on one request, with a scripted engine: what it would have spoken."""

from __future__ import annotations

from typing import Any

from pipecat.frames.frames import LLMContextFrame, LLMFullResponseEndFrame, LLMTextFrame
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.tests.utils import SleepFrame, run_test

from agent.clock import CallClock
from agent.llm.service import StreamingLLM
from agent.settings import LLMSettings
from tests.support.fakes import ScriptedAnswers

SETTINGS = LLMSettings(keepalive_secs=0)


def history(*pairs: str) -> list[dict]:
    """user, assistant, user, ... messages."""
    roles = ["user", "assistant"]
    return [{"role": roles[i % 2], "content": text} for i, text in enumerate(pairs)]


async def spoken(engine: ScriptedAnswers, messages: list[dict], **settings: Any) -> str:
    llm = StreamingLLM(engine, SETTINGS.model_copy(update=settings), CallClock())
    down, _ = await run_test(
        llm,
        frames_to_send=[LLMContextFrame(context=LLMContext(messages=messages)), SleepFrame(0.3)],
    )
    assert isinstance(down[-1], LLMFullResponseEndFrame)
    return "".join(f.text for f in down if isinstance(f, LLMTextFrame))
