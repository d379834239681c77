"""LLM stage benchmark: TTFT and cached-token ratio per engine, pre-warm on/off, concurrency.

Runs a 10-turn conversation (the same user texts for every configuration, alternating
configurations turn by turn so drift hits all of them alike) against:
  - llama-inprocess (llama.cpp inside this process), with and without prefill while the
    caller speaks (as the agent does on interim transcripts: here the turn without its last
    two words, which the last interim usually lacks, is prefilled before the request),
  - llama-server (llama.cpp's OpenAI server on loopback, through the OpenAI client), with
    and without pre-warming the static system prompt.
Between turns each arm does what the agent does while the bot speaks: when the next turn
will drop old history, its new prefix is prefilled. Then a concurrency sweep
(1, 2, 4 simultaneous conversations against one llama.cpp server): per-call TTFT and total
tokens/s. Then barge-in: a long answer is stopped by the client after a few tokens, and
the time from that decision until the engine stops decoding is measured per engine.

With VOICE_AGENT_TEST_VLLM=1, vLLM (the CPU build from .venv-vllm, scripts/setup_vllm.sh)
gets the same conversation and barge-ins, on its own after the llama.cpp arms (so its
worker does not share the two cores with them); its barge-in stop is read off its
/metrics counter of generated tokens. Prints tables and writes JSON.

    .venv/bin/python -m benchmarks.llm [--turns 10] [--barge-ins 5] [--out runs/bench_llm.json]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from agent import model_store
from agent.llm.engines.chat import ChatEngine, InProcessLlama, OpenAIChatEngine, Sampling, Usage
from agent.llm.prompt import prefix_after_trim, prompt_messages
from agent.llm.servers.llama import LlamaServer
from agent.llm.servers.vllm import VllmServer
from agent.settings import Settings
from agent.timing.budget import rounded_percentile
from agent.timing.summary import stage_stats
from benchmarks.results import write_json

USER_TURNS = [
    "Hi there, who am I speaking with?",
    "And so my fellow Americans,",
    "ask not what your country can do for you, ask what you can do for your country.",
    "We must find a new home in the stars.",
    "She had your dark suit in greasy wash water all year.",
    "What time do you open tomorrow?",
    "Can I book a table for two?",
    "Tell me something about the moon.",
    "How far away is it?",
    "Thanks, that is all for today.",
]

STREAMING = "llama-inprocess (pre-warm, prefill while speaking)"


async def one_turn(engine: ChatEngine, messages: list[dict], max_tokens: int) -> dict:
    start = time.perf_counter()
    first, text, usage, chunks = None, "", Usage(), 0
    sampling = Sampling(temperature=0.2)
    async for item in engine.stream(messages, max_tokens=max_tokens, sampling=sampling):
        if isinstance(item, Usage):
            usage = item
            continue
        first = first or time.perf_counter()
        text += item
        chunks += 1
    end = time.perf_counter()
    return {
        "ttft_ms": round(((first or end) - start) * 1000, 1),
        "total_ms": round((end - start) * 1000, 1),
        "text": text,
        "prompt_tokens": usage.prompt_tokens,
        "cached_tokens": usage.cached_tokens,
        "completion_tokens": usage.completion_tokens or chunks,  # llama.cpp server: no usage
    }


def so_far(text: str, words_left: int = 2) -> str:
    """The turn as its last interim transcript has it: without its last words."""
    return " ".join(text.split()[:-words_left])


async def conversation(
    engines: dict[str, ChatEngine],
    settings: Settings,
    turns: int,
    prewarm: set[str],
    prefill_while_speaking: set[str] = frozenset(),
) -> dict[str, list[dict]]:
    """The same conversation on every engine, turn by turn, alternating engines."""
    s = settings.llm
    for name in prewarm:
        warm = [*s.opening, {"role": "user", "content": "Hi"}]
        await one_turn(engines[name], warm, 1)
    history: dict[str, list[dict]] = {name: [] for name in engines}
    results: dict[str, list[dict]] = {name: [] for name in engines}
    for i in range(turns):
        for name, engine in engines.items():
            said = USER_TURNS[i % len(USER_TURNS)]
            if name in prefill_while_speaking:
                partial = [*history[name], {"role": "user", "content": so_far(said)}]
                await engine.prefill(prompt_messages(s.opening, partial, s.history_turns))
            history[name].append({"role": "user", "content": said})
            messages = prompt_messages(s.opening, history[name], s.history_turns)
            result = await one_turn(engine, messages, s.max_tokens)
            after_trim = prefix_after_trim(
                s.opening, history[name], result["text"], s.history_turns
            )
            if after_trim is not None:
                await one_turn(engine, after_trim, 1)
            history[name].append({"role": "assistant", "content": result["text"]})
            results[name].append(result)
    return results


def summary(rows: list[dict]) -> dict:
    ttft = [r["ttft_ms"] for r in rows]
    later = [r for r in rows[1:] if r["prompt_tokens"] and r["cached_tokens"] is not None]
    ratio = None
    if later:
        cached = sum(r["cached_tokens"] for r in later)
        ratio = round(cached / sum(r["prompt_tokens"] for r in later), 2)
    return {
        "first_turn_ttft_ms": ttft[0],
        "ttft_p50_ms": rounded_percentile(ttft, 50),
        "ttft_p95_ms": rounded_percentile(ttft, 95),
        "cached_ratio_turn2_on": ratio,
    }


async def concurrency(server: LlamaServer, gguf: Path, settings: Settings, n: int) -> dict:
    s = settings.llm.model_copy(update={"timeout_secs": 120.0})
    engine = OpenAIChatEngine(server.base_url, gguf.stem, s, api_key=server.api_key)

    async def caller(k: int) -> list[dict]:
        history: list[dict] = []
        rows = []
        for i in range(3):
            history.append({"role": "user", "content": USER_TURNS[(i + k) % len(USER_TURNS)]})
            messages = prompt_messages(s.opening, history, s.history_turns)
            rows.append(await one_turn(engine, messages, s.max_tokens))
            history.append({"role": "assistant", "content": rows[-1]["text"]})
        return rows

    start = time.perf_counter()
    calls = await asyncio.gather(*(caller(k) for k in range(n)))
    wall = time.perf_counter() - start
    rows = [r for call in calls for r in call]
    tokens = sum(r["completion_tokens"] or 0 for r in rows)
    return {
        "calls": n,
        "ttft_p50_ms": rounded_percentile([r["ttft_ms"] for r in rows], 50),
        "ttft_p95_ms": rounded_percentile([r["ttft_ms"] for r in rows], 95),
        "tokens_per_s": round(tokens / wall, 1),
    }


BARGE_IN_ASK = "Tell me a very long story about a dragon and a knight, in detail."
BARGE_IN_AFTER_TOKENS = 8
BARGE_IN_MAX_TOKENS = 400
GENERATED = re.compile(r"^vllm:generation_tokens_total\{[^}]*\} ([0-9.e+]+)$", re.M)


def vllm_generated(server: VllmServer) -> float:
    """vLLM's own count of tokens it has decoded (all requests)."""
    text = httpx.get(server.metrics_url, timeout=5).text
    return sum(float(v) for v in GENERATED.findall(text))


async def vllm_stopped(server: VllmServer, quiet_s: float = 1.0) -> float:
    """When vLLM's generated-token counter last moved (perf_counter), once it has been
    still for ``quiet_s``: the moment decoding stopped, to the 20 ms polling step."""
    last, moved = vllm_generated(server), time.perf_counter()
    while time.perf_counter() - moved < quiet_s:
        await asyncio.sleep(0.02)
        now = vllm_generated(server)
        if now != last:
            last, moved = now, time.perf_counter()
    return moved


async def barge_in(
    engine: ChatEngine, settings: Settings, engine_stopped: Callable[[], Awaitable[float]]
) -> dict:
    """A long answer, stopped by the client after a few tokens the way the pipeline stops
    it on a barge-in (the stream is closed). ``last_token_ms``: the decision to the moment
    the client is done with the stream (closed; no token can reach it after that);
    ``engine_stop_ms``: the decision to the engine no longer decoding, as
    ``engine_stopped`` observes it: what a barge-in leaves burning on the machine."""
    s = settings.llm
    messages = prompt_messages(s.opening, [{"role": "user", "content": BARGE_IN_ASK}], 4)
    sampling = Sampling(temperature=0.7)
    stream = engine.stream(messages, max_tokens=BARGE_IN_MAX_TOKENS, sampling=sampling)
    received = 0
    last_token = decided = None
    async for item in stream:
        if isinstance(item, str) and item:
            received += 1
            last_token = time.perf_counter()
            if received >= BARGE_IN_AFTER_TOKENS:
                decided = time.perf_counter()
                break
    await stream.aclose()  # type: ignore[attr-defined]
    closed = time.perf_counter()
    if decided is None:  # the answer ended before the barge-in: nothing to stop
        return {"received": received, "last_token_ms": None, "engine_stop_ms": None}
    stopped = await engine_stopped()
    return {
        "received": received,
        "last_token_ms": round((max(last_token or decided, closed) - decided) * 1000, 1),
        "engine_stop_ms": round((max(stopped, decided) - decided) * 1000, 1),
    }


async def barge_ins(
    engine: ChatEngine, settings: Settings, n: int, stopped: Callable[[], Awaitable[float]]
) -> dict:
    rows = [await barge_in(engine, settings, stopped) for _ in range(n)]
    done = [r for r in rows if r["engine_stop_ms"] is not None]
    return {
        "tries": n,
        "last_token_ms": stage_stats([r["last_token_ms"] for r in done]),
        "engine_stop_ms": stage_stats([r["engine_stop_ms"] for r in done]),
        "rows": rows,
    }


def inprocess_stopped(engine: InProcessLlama) -> Callable[[], Awaitable[float]]:
    """Its one worker thread is free again: the decoding loop has returned."""

    async def stopped() -> float:
        await asyncio.get_running_loop().run_in_executor(engine._executor, lambda: None)
        return time.perf_counter()

    return stopped


def server_stopped(
    server: LlamaServer, model: str, settings: Settings
) -> Callable[[], Awaitable[float]]:
    """llama.cpp's server exposes no counter, and serves one request at a time: a 1-token
    probe completes only once it stopped decoding (an upper bound: it includes the probe)."""
    probe = OpenAIChatEngine(server.base_url, model, settings.llm, api_key=server.api_key)
    ask = [{"role": "user", "content": "Hi"}]

    async def stopped() -> float:
        await one_turn(probe, ask, 1)
        return time.perf_counter()

    return stopped


async def vllm_arm(settings: Settings, turns: int, n_barge_ins: int) -> dict:
    """vLLM's CPU build, alone: the same conversation, then the barge-ins."""
    with VllmServer(settings.llm, settings.models_dir) as server:
        engine: ChatEngine = OpenAIChatEngine(
            server.base_url, server.served_name, settings.llm, api_key=server.api_key
        )
        name = "vllm (pre-warm)"
        rows = (await conversation({name: engine}, settings, turns, prewarm={name}))[name]

        async def stopped() -> float:
            return await vllm_stopped(server)

        return {
            "name": name,
            "summary": summary(rows),
            "turns": rows,
            "barge_in": await barge_ins(engine, settings, n_barge_ins, stopped),
        }


def print_barge_ins(rows: dict[str, dict]) -> None:
    print(
        f"{'barge-in (ms from the decision)':<30} {'last token p50/p95':>19} {'stop p50/p95':>15}"
    )
    for name, row in rows.items():
        last, stop = row["last_token_ms"], row["engine_stop_ms"]
        print(
            f"{name:<30} {last['p50']!s:>9}/{last['p95']!s:<9} "
            f"{stop['p50']!s:>7}/{stop['p95']!s:<7} ({stop['n']} of {row['tries']})"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--barge-ins", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("runs/bench_llm.json"))
    args = parser.parse_args()
    settings = Settings()
    settings.llm.keepalive_secs = 0
    settings.llm.timeout_secs = 60.0  # measure a slow turn on a busy machine, do not abort on it
    gguf = model_store.resolve(settings.llm.model, "llm", settings.models_dir)
    report: dict = {"model": gguf.name, "threads": settings.llm.threads}
    with LlamaServer(gguf, settings.llm) as server, LlamaServer(gguf, settings.llm) as cold_srv:
        inproc = InProcessLlama(gguf, settings.llm)  # pre-warms itself on load
        engines: dict[str, ChatEngine] = {
            STREAMING: InProcessLlama(gguf, settings.llm),
            "llama-inprocess (pre-warm)": inproc,
            "llama-server (pre-warm)": OpenAIChatEngine(
                server.base_url, gguf.stem, settings.llm, api_key=server.api_key
            ),
            "llama-server (no pre-warm)": OpenAIChatEngine(
                cold_srv.base_url, gguf.stem, settings.llm, api_key=cold_srv.api_key
            ),
        }
        results = await conversation(
            engines, settings, args.turns, {"llama-server (pre-warm)"}, {STREAMING}
        )
        report["engines"] = {name: summary(rows) for name, rows in results.items()}
        report["turns"] = results
        report["concurrency"] = [await concurrency(server, gguf, settings, n) for n in (1, 2, 4)]
        report["barge_in"] = {
            "llama-inprocess": await barge_ins(
                inproc, settings, args.barge_ins, inprocess_stopped(inproc)
            ),
            "llama-server": await barge_ins(
                engines["llama-server (pre-warm)"], settings, args.barge_ins,
                server_stopped(server, gguf.stem, settings),
            ),
        }  # fmt: skip
    if os.environ.get("VOICE_AGENT_TEST_VLLM") == "1":
        vllm = await vllm_arm(settings, args.turns, args.barge_ins)
        report["engines"][vllm["name"]] = vllm["summary"]
        results[vllm["name"]] = report["turns"][vllm["name"]] = vllm["turns"]
        report["barge_in"]["vllm"] = vllm["barge_in"]
    print(f"{'engine':<48} {'turn1':>7} {'p50':>7} {'p95':>7} {'cached':>7}")
    for name, row in report["engines"].items():
        print(
            f"{name:<48} {row['first_turn_ttft_ms']:>7} {row['ttft_p50_ms']:>7} "
            f"{row['ttft_p95_ms']:>7} {row['cached_ratio_turn2_on']!s:>7}"
        )
    base = report["engines"]["llama-server (pre-warm)"]["ttft_p50_ms"]
    fast = report["engines"]["llama-inprocess (pre-warm)"]["ttft_p50_ms"]
    report["inprocess_vs_server_p50_ratio"] = round(fast / base, 2)
    print(f"in-process / server TTFT p50 ratio: {report['inprocess_vs_server_p50_ratio']}")
    streamed = report["engines"][STREAMING]["ttft_p50_ms"]
    report["prefill_while_speaking_p50_ratio"] = round(streamed / fast, 2)
    print(f"prefill while speaking / not, TTFT p50 ratio: {streamed / fast:.2f}")
    print(f"{'calls':>5} {'ttft p50':>9} {'ttft p95':>9} {'tok/s':>7}")
    for row in report["concurrency"]:
        print(
            f"{row['calls']:>5} {row['ttft_p50_ms']:>9} {row['ttft_p95_ms']:>9} "
            f"{row['tokens_per_s']:>7}"
        )
    print_barge_ins(report["barge_in"])
    write_json(args.out, report)
    print(f"saved {args.out} ({statistics.mean(len(r) for r in results.values()):.0f} turns each)")


if __name__ == "__main__":
    asyncio.run(main())
