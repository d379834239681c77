"""The optional output guard, alone and in front of the real LLM stage."""

from __future__ import annotations

import pytest
from pipecat.frames.frames import Frame, LLMContextFrame, LLMFullResponseEndFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.tests.utils import run_test

from agent import model_store
from agent.clock import ComputeClock
from agent.errors import UserError
from agent.frames import PhraseFrame, StopAnswerFrame
from agent.llm.engines.chat import ChatEngine, InProcessLlama
from agent.llm.service import StreamingLLM
from agent.settings import Settings, TTSSettings
from agent.synthesis.chunker import PhraseChunker
from agent.synthesis.guard import PhraseGuard, block_list_checker, load_checker
from tests.support.compute_pace import run_paced
from tests.support.fakes import ScriptedEngine


def said(frames) -> list[str]:
    return [f.text for f in frames if isinstance(f, PhraseFrame)]


async def test_a_blocked_phrase_stops_the_answer_and_speaks_the_replacement():
    settings = TTSSettings(guard=True, guard_block_list=["password"])
    phrases = ["Sure thing,", "the secret", "password is", "swordfish.", "Anything else?"]
    down, up = await run_test(
        PhraseGuard(settings), frames_to_send=[PhraseFrame(text=t) for t in phrases]
    )
    assert said(down) == ["Sure thing,", "the secret", settings.guard_replacement]
    assert any(isinstance(f, StopAnswerFrame) for f in up)


async def test_the_window_catches_words_split_across_phrases():
    settings = TTSSettings(guard=True, guard_block_list=["pass word"], guard_window_phrases=2)
    down, _ = await run_test(
        PhraseGuard(settings),
        frames_to_send=[PhraseFrame(text="my pass"), PhraseFrame(text="word")],
    )
    assert said(down) == ["my pass", settings.guard_replacement]


def test_checkers():
    check = block_list_checker(["kill", "credit card"])
    assert check("Give me your Credit  Card".replace("  ", " "))
    assert not check("skill and killer instinct")
    custom = load_checker(TTSSettings(guard_checker="os.path:isabs"))
    assert custom("/etc") and not custom("relative")
    with pytest.raises(UserError, match="cannot be loaded"):
        load_checker(TTSSettings(guard_checker="no_such_module:check"))


GUARD = TTSSettings(guard=True, guard_checker="tests.synthesis.test_guard:block_past_three_words")


async def guarded_story(engine: ChatEngine, settings: Settings) -> list[Frame]:
    """Frames out of LLM -> chunker -> guard when asked for a long story (at compute pace:
    once the answer is over)."""
    llm_settings = settings.llm.model_copy(update={"keepalive_secs": 0, "max_tokens": 120})
    clock = ComputeClock()
    pipeline = Pipeline(
        [
            StreamingLLM(engine, llm_settings, clock),
            PhraseChunker(first_min_words=2, min_words=3),
            PhraseGuard(GUARD),
        ]
    )
    ask = LLMContext(messages=[{"role": "user", "content": "Tell me a long story about a cat."}])
    down, _ = await run_paced(pipeline, frames_to_send=[LLMContextFrame(context=ask)], clock=clock)
    return down


@pytest.mark.slow
async def test_guard_stops_the_real_llm_and_closes_the_answer(settings):
    gguf = model_store.resolve(settings.llm.model, "llm", settings.models_dir)
    engine = InProcessLlama(gguf, settings.llm)
    down = await guarded_story(engine, settings)
    spoken = said(down)
    assert spoken[-1] == GUARD.guard_replacement and len(spoken) <= 2
    assert sum(isinstance(f, LLMFullResponseEndFrame) for f in down) == 1
    decoded = engine.llm.n_tokens
    assert decoded < 120 + 80  # stopped well before max_tokens (prompt is ~60 tokens)


def block_past_three_words(text: str) -> bool:
    """A custom checker for the test: the first (short) phrase passes, the window after not."""
    return len(text.split()) > 3


STORY = (
    "Once upon a time, there was a small cat. It lived in a big house by the sea, and every "
    "day it watched the boats come in. One day a boat came in with a dog on it."
)


async def test_guard_stops_a_scripted_llm_and_closes_the_answer(settings):
    engine = ScriptedEngine([f" {word}" for word in STORY.split()], token_secs=0.002)
    down = await guarded_story(engine, settings)
    assert said(down) == ["Once upon", GUARD.guard_replacement]
    assert sum(isinstance(f, LLMFullResponseEndFrame) for f in down) == 1
    assert engine.decoded < len(STORY.split()) // 2  # stopped soon after the blocked phrase
