"""LLM stage benchmark: TTFT and cached-token ratio per engine, pre-warm on/off, concurrency.

Runs a 10-turn conversation (the same user texts for every configuration, alternating
configurations turn by turn so drift hits all of them alike) against:
  - llama-inprocess (llama.cpp inside this process),
  - llama-server (llama.cpp's OpenAI server on loopback, through the OpenAI client),
each with and without pre-warming the static system prompt, then a concurrency sweep
(1, 2, 4 simultaneous conversations against one llama.cpp server): per-call TTFT and total
tokens/s. Prints a table and writes JSON.

    .venv/bin/python scripts/bench_llm.py [--turns 10] [--out runs/bench_llm.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

from agent import model_store
from agent.llm.engines import ChatEngine, InProcessLlama, OpenAIChatEngine, Usage
from agent.llm.llama_server import LlamaServer
from agent.llm.prompt import prompt_messages
from agent.settings import Settings
from agent.timing.budget import rounded_percentile

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


async def one_turn(engine: ChatEngine, messages: list[dict], max_tokens: int) -> dict:
    start = time.perf_counter()
    first, text, usage, chunks = None, "", Usage(), 0
    async for item in engine.stream(messages, max_tokens=max_tokens, temperature=0.2):
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


async def conversation(
    engines: dict[str, ChatEngine], settings: Settings, turns: int, prewarm: set[str]
) -> dict[str, list[dict]]:
    """The same conversation on every engine, turn by turn, alternating engines."""
    s = settings.llm
    for name in prewarm:
        warm = [{"role": "system", "content": s.system_prompt}, {"role": "user", "content": "Hi"}]
        await one_turn(engines[name], warm, 1)
    history: dict[str, list[dict]] = {name: [] for name in engines}
    results: dict[str, list[dict]] = {name: [] for name in engines}
    for i in range(turns):
        for name, engine in engines.items():
            history[name].append({"role": "user", "content": USER_TURNS[i % len(USER_TURNS)]})
            messages = prompt_messages(s.system_prompt, history[name], s.history_turns)
            result = await one_turn(engine, messages, s.max_tokens)
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
    engine = OpenAIChatEngine(server.base_url, gguf.stem, s)

    async def caller(k: int) -> list[dict]:
        history: list[dict] = []
        rows = []
        for i in range(3):
            history.append({"role": "user", "content": USER_TURNS[(i + k) % len(USER_TURNS)]})
            messages = prompt_messages(s.system_prompt, history, s.history_turns)
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


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("runs/bench_llm.json"))
    args = parser.parse_args()
    settings = Settings()
    settings.llm.keepalive_secs = 0
    gguf = model_store.resolve(settings.llm.model, "llm", settings.models_dir)
    report: dict = {"model": gguf.name, "threads": settings.llm.threads}
    with LlamaServer(gguf, settings.llm) as server, LlamaServer(gguf, settings.llm) as cold_srv:
        inproc = InProcessLlama(gguf, settings.llm)  # pre-warms itself on load
        engines: dict[str, ChatEngine] = {
            "llama-inprocess (pre-warm)": inproc,
            "llama-server (pre-warm)": OpenAIChatEngine(server.base_url, gguf.stem, settings.llm),
            "llama-server (no pre-warm)": OpenAIChatEngine(
                cold_srv.base_url, gguf.stem, settings.llm
            ),
        }
        results = await conversation(
            engines, settings, args.turns, prewarm={"llama-server (pre-warm)"}
        )
        report["engines"] = {name: summary(rows) for name, rows in results.items()}
        report["turns"] = results
        report["concurrency"] = [await concurrency(server, gguf, settings, n) for n in (1, 2, 4)]
    print(f"{'engine':<30} {'turn1':>7} {'p50':>7} {'p95':>7} {'cached':>7}")
    for name, row in report["engines"].items():
        print(
            f"{name:<30} {row['first_turn_ttft_ms']:>7} {row['ttft_p50_ms']:>7} "
            f"{row['ttft_p95_ms']:>7} {row['cached_ratio_turn2_on']!s:>7}"
        )
    base = report["engines"]["llama-server (pre-warm)"]["ttft_p50_ms"]
    fast = report["engines"]["llama-inprocess (pre-warm)"]["ttft_p50_ms"]
    report["inprocess_vs_server_p50_ratio"] = round(fast / base, 2)
    print(f"in-process / server TTFT p50 ratio: {report['inprocess_vs_server_p50_ratio']}")
    print(f"{'calls':>5} {'ttft p50':>9} {'ttft p95':>9} {'tok/s':>7}")
    for row in report["concurrency"]:
        print(
            f"{row['calls']:>5} {row['ttft_p50_ms']:>9} {row['ttft_p95_ms']:>9} "
            f"{row['tokens_per_s']:>7}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"saved {args.out} ({statistics.mean(len(r) for r in results.values()):.0f} turns each)")


if __name__ == "__main__":
    asyncio.run(main())
