"""The conversation benchmark counts the tokens an answer's first phrase waited for."""

from __future__ import annotations

import asyncio

from agent.settings import LLMSettings
from benchmarks.conversation_set import Conversation, Turn, talk
from tests.support.fakes import ScriptedAnswers


def test_first_phrase_tokens_count_the_chunkers_words_and_the_editors_hold() -> None:
    engine = ScriptedAnswers(
        "The capital of France is Paris.",
        "The capital of Spain is Madrid, a city in the middle of the country.",
    )
    call = Conversation(
        "fake", [Turn("What's the capital of France?"), Turn("And the capital of Spain?")]
    )
    first, second = asyncio.run(talk(call, engine, LLMSettings()))
    # two whole words: the third token has begun
    assert first.first_phrase_tokens == 3
    # "The capital of ..." could still become the sentence said before: held until it cannot
    assert second.first_phrase_tokens is not None and second.first_phrase_tokens > 3
