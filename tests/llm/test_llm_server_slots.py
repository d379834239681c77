"""The shared LLM server's slots: with one, llama-cpp-python's server answers one request at a
time; with more, llama.cpp's own llama-server decodes that many answers at once, so a second
call's answer does not wait for the first to end.

Real servers on loopback. Verdicts come from the order tokens arrive in, not from how long
anything took, so they hold on any CPU.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from agent import model_store
from agent.errors import UserError
from agent.live import pool
from agent.live.pool import Pool
from agent.llm.engines.chat import OpenAIChatEngine, Usage
from agent.llm.servers import llama as llama_server
from agent.llm.servers.llama import LlamaServer, native_server
from agent.settings import LLMSettings, Settings

LONG = [{"role": "user", "content": "Count from one to forty in words, separated by commas."}]


def test_more_than_one_slot_without_llamas_own_server_is_one_clear_line(monkeypatch, tmp_path):
    monkeypatch.setattr(llama_server, "native_server", lambda: None)
    gguf = tmp_path / "model.gguf"  # not read: the command line is all this needs
    with pytest.raises(UserError, match=r"scripts/setup.sh --pool.*server_slots to 1"):
        LlamaServer(gguf, LLMSettings(server_slots=2)).command()
    one_slot = LlamaServer(gguf, LLMSettings()).command()
    assert "agent.llm.servers.llama_cpp_python" in one_slot


async def test_the_one_slot_server_runs_every_request_and_token_on_one_thread():
    """llama-cpp-python's app hands each streamed token to Starlette's thread pool; the
    launcher hands them all to one thread instead (a second OpenMP team slows llama.cpp)."""
    from agent.llm.servers import llama_cpp_python as python_server

    threads: list[int] = []

    def tokens():
        for token in ("one", "two", "three"):
            threads.append(threading.get_ident())
            yield token

    def request():
        threads.append(threading.get_ident())
        return tokens()

    for _ in range(2):  # two requests, one after the other
        stream = await python_server.run_on_llama_thread(request)
        assert [t async for t in python_server.iterate_on_llama_thread(stream)] == [
            "one", "two", "three"
        ]  # fmt: skip
    assert len(threads) == 8 and len(set(threads)) == 1
    assert threading.get_ident() not in threads


def test_a_pool_gives_its_server_one_slot_per_call_it_admits(monkeypatch, tmp_path):
    """One worker with two calls needs two slots as much as two workers with one each."""
    monkeypatch.setattr(pool, "native_server", lambda: tmp_path / "llama-server")
    notes: list[str] = []
    settings = Settings(serve={"max_calls": 3})
    assert Pool.llm_settings(settings, 2, notes.append).server_slots == 6
    assert Pool.llm_settings(settings, 1, notes.append).server_slots == 3
    chosen = Settings(serve={"max_calls": 3}, llm={"server_slots": 2})
    assert Pool.llm_settings(chosen, 2, notes.append).server_slots == 2
    assert not notes
    monkeypatch.setattr(pool, "native_server", lambda: None)  # answers queue at one slot
    assert Pool.llm_settings(settings, 1, notes.append).server_slots == 1
    assert len(notes) == 1 and "scripts/setup.sh --pool" in notes[0]


async def arrivals(engine: OpenAIChatEngine, name: str, log: list[str], first: asyncio.Event):
    """Stream one answer, noting each token's arrival in the shared ``log``."""
    async for item in engine.stream(LONG, max_tokens=40):
        if not isinstance(item, Usage):
            log.append(name)
            first.set()


@pytest.mark.slow
@pytest.mark.parametrize("slots", [1, 2])
async def test_a_second_answer_starts_before_the_first_ends_only_with_two_slots(settings, slots):
    if slots > 1 and native_server() is None:
        pytest.skip("llama.cpp's own llama-server is not installed: bash scripts/setup.sh --pool")
    s = settings.llm.model_copy(update={"server_slots": slots, "timeout_secs": 120})
    gguf = model_store.resolve(s.model, "llm", settings.models_dir)
    with LlamaServer(gguf, s) as server:
        engine = OpenAIChatEngine(server.base_url, gguf.stem, s, api_key=server.api_key,
                                  server="llama-server")  # fmt: skip
        log: list[str] = []
        a_started, b_started = asyncio.Event(), asyncio.Event()
        a = asyncio.create_task(arrivals(engine, "a", log, a_started))
        await a_started.wait()  # the first answer is being decoded
        b = asyncio.create_task(arrivals(engine, "b", log, b_started))
        await asyncio.gather(a, b)
    assert log.count("a") > 10 and log.count("b") > 10, log
    last_a, first_b = len(log) - 1 - log[::-1].index("a"), log.index("b")
    assert (first_b < last_a) == (slots > 1), "".join(log)
