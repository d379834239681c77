"""The LLM stage on one request, with a scripted engine: what it would have spoken (at compute
pace: the answer is all there once the stage has settled)."""

from __future__ import annotations

from typing import Any

from pipecat.frames.frames import LLMContextFrame, LLMFullResponseEndFrame, LLMTextFrame
from pipecat.processors.aggregators.llm_context import LLMContext

from agent.clock import ComputeClock
from agent.llm.service import StreamingLLM
from agent.settings import LLMSettings
from tests.support.compute_pace import run_paced
from tests.support.fakes import ScriptedAnswers

SETTINGS = LLMSettings(keepalive_secs=0)


def history(*pairs: str) -> list[dict]:
    """user, assistant, user, ... messages."""
    roles = ["user", "assistant"]
    return [{"role": roles[i % 2], "content": text} for i, text in enumerate(pairs)]


async def spoken(engine: ScriptedAnswers, messages: list[dict], **settings: Any) -> str:
    clock = ComputeClock()
    llm = StreamingLLM(engine, SETTINGS.model_copy(update=settings), clock)
    down, _ = await run_paced(
        llm, frames_to_send=[LLMContextFrame(context=LLMContext(messages=messages))], clock=clock
    )
    assert isinstance(down[-1], LLMFullResponseEndFrame)
    return "".join(f.text for f in down if isinstance(f, LLMTextFrame))
