"""Time per generated token, and to the first one, of each llama.cpp engine the agent runs.

Why: how llama.cpp is called (from which threads) changed its speed by 40 % on 2 cores
while the model and the thread count stayed the same; this reads the token speed itself,
without the pipeline around it. Each round asks every engine the same questions in turn
(in process, then llama-cpp-python's one-slot server on loopback), 30 greedy tokens each.

    .venv/bin/python -m benchmarks.llm_tokens [--rounds 4] [--out runs/bench_llm_tokens.json]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from agent import model_store
from agent.llm.engines.chat import ChatEngine, InProcessLlama, OpenAIChatEngine, Usage
from agent.llm.servers.llama import LlamaServer
from agent.settings import load_settings
from agent.timing.budget import rounded_percentile
from benchmarks.pool import cpu_model
from benchmarks.results import write_json

QUESTIONS = [
    "What can I cook tonight with rice and beans?",
    "How do I get to the train station from the park?",
    "Tell me something about the moon.",
    "What time do you open tomorrow?",
]


async def timed_answer(engine: ChatEngine, question: str, max_tokens: int) -> dict:
    """Milliseconds to the first token and between tokens, for one answer."""
    start = time.perf_counter()
    stamps = []
    async for item in engine.stream([{"role": "user", "content": question}], max_tokens=max_tokens):
        if not isinstance(item, Usage) and item:
            stamps.append(time.perf_counter())
    gaps = [(b - a) * 1000 for a, b in zip(stamps, stamps[1:], strict=False)]
    return {"ttft_ms": (stamps[0] - start) * 1000, "token_ms": gaps}


async def run(rounds: int, max_tokens: int) -> dict[str, dict]:
    settings = load_settings()
    gguf = model_store.resolve(settings.llm.model, "llm", settings.models_dir)
    one_slot = settings.llm.model_copy(update={"server_slots": 1})
    with LlamaServer(gguf, one_slot) as server:
        engines: dict[str, ChatEngine] = {
            "in process": InProcessLlama(gguf, settings.llm),
            "one-slot server": OpenAIChatEngine(
                server.base_url, gguf.stem, settings.llm, api_key=server.api_key
            ),
        }
        answers: dict[str, list[dict]] = {name: [] for name in engines}
        for _ in range(rounds):
            for question in QUESTIONS:
                for name, engine in engines.items():
                    answers[name].append(await timed_answer(engine, question, max_tokens))
    return {name: summary(rows[len(QUESTIONS) :]) for name, rows in answers.items()}  # warm


def summary(rows: list[dict]) -> dict:
    tokens = [gap for row in rows for gap in row["token_ms"]]
    return {
        "answers": len(rows),
        "token_p50_ms": rounded_percentile(tokens, 50),
        "token_p95_ms": rounded_percentile(tokens, 95),
        "ttft_p50_ms": rounded_percentile([row["ttft_ms"] for row in rows], 50),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4, help="the first round is a warm-up")
    parser.add_argument("--max-tokens", type=int, default=30)
    parser.add_argument("--out", type=Path, default=Path("runs/bench_llm_tokens.json"))
    args = parser.parse_args()
    rows = asyncio.run(run(args.rounds, args.max_tokens))
    write_json(args.out, {"cpu_model": cpu_model(), "rows": rows})
    print(cpu_model())
    print("| engine | answers | token p50 / p95 ms | time to first token p50 ms |")
    print("| --- | --- | --- | --- |")
    for name, r in rows.items():
        print(f"| {name} | {r['answers']} | {r['token_p50_ms']} / {r['token_p95_ms']} | "
              f"{r['ttft_p50_ms']} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
