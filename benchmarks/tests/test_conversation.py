"""The conversation set through the LLM stage with the real default model: what a caller would
hear never repeats an earlier answer unasked, never loops, never echoes the caller, and stays
within two sentences. How many checks the answers meet is a benchmark figure
(benchmarks.conversation, docs/conversation.md): it measures the model, not the stage."""

from __future__ import annotations

import asyncio
from argparse import Namespace

import pytest

from agent import model_store
from agent.llm.engines.chat import InProcessLlama, OpenAIChatEngine
from agent.llm.servers.llama import LlamaServer
from benchmarks.conversation_set import CONVERSATIONS as CONVERSATIONS_FILE
from benchmarks.conversation_set import TurnResult, load_conversations, talk
from benchmarks.conversation_spoken import run as spoken_run

CONVERSATIONS = load_conversations()
pytestmark = [pytest.mark.conversation, pytest.mark.slow]


@pytest.fixture(scope="module")
def engine(settings) -> InProcessLlama:
    gguf = model_store.resolve(settings.llm.model, "llm", settings.models_dir)
    return InProcessLlama(gguf, settings.llm)


@pytest.fixture(scope="module")
def heard(engine, settings) -> dict[str, list]:
    """Every scripted call, once, in process: what the caller heard, turn by turn."""

    async def all_calls() -> dict[str, list]:
        return {c.name: await talk(c, engine, settings.llm) for c in CONVERSATIONS}

    return asyncio.run(all_calls())


def assert_well_behaved(results, repeats: bool = True) -> None:
    for r in results:
        where = f"{r.conversation} turn {r.turn}: {r.user!r} -> {r.answer!r}"
        assert r.answer.strip(), where
        assert not r.error, where
        assert not r.loop, f"loops: {where}"
        assert not r.echo, f"echoes the caller: {where}"
        assert r.sentences <= 2, f"over two sentences: {where}"
        assert not (repeats and r.repeated), f"repeats an earlier answer: {where}"


def test_the_set_is_big_enough():
    assert len(CONVERSATIONS) >= 8 and sum(len(c.turns) for c in CONVERSATIONS) >= 40


@pytest.mark.parametrize("name", [c.name for c in CONVERSATIONS])
def test_no_loop_no_echo_and_at_most_two_sentences(heard, name: str):
    assert_well_behaved(heard[name], repeats=False)


def test_no_answer_repeats_an_earlier_one(heard):
    for turns in heard.values():
        assert_well_behaved(turns)


async def test_two_calls_through_the_llama_cpp_server(settings):
    # A fresh server's first request can take over the 8 s stall limit on a busy machine.
    s = settings.llm.model_copy(update={"timeout_secs": 60})
    gguf = model_store.resolve(s.model, "llm", settings.models_dir)
    with LlamaServer(gguf, s) as server:
        engine = OpenAIChatEngine(
            server.base_url, gguf.stem, s, api_key=server.api_key, server="llama-server"
        )
        for name in ("say_again", "demo_call"):
            conversation = next(c for c in CONVERSATIONS if c.name == name)
            assert_well_behaved(await talk(conversation, engine, s), repeats=False)


async def test_a_spoken_call_asking_to_hear_answers_again(tmp_path):
    # The say_again call synthesised with Piper's voice and replayed through the whole
    # pipeline at compute pace: the requests are heard as such, and nothing repeats unasked.
    args = Namespace(
        out=tmp_path / "out", speech=tmp_path / "speech", set=CONVERSATIONS_FILE,
        pace="compute", conversations=["say_again"], llm_model=None,
    )  # fmt: skip
    args.out.mkdir()
    turns = [TurnResult(**{k: v for k, v in t.items() if k != "passed"})
             for t in (await spoken_run(args))["turns"]]  # fmt: skip
    assert_well_behaved(turns)
    assert turns[1].answer == turns[0].answer and turns[3].answer == turns[2].answer
