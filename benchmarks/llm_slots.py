"""The shared LLM server with one slot against several: TTFT and throughput with N calls at once.

Why: calls that share one server (``voice-agent pool``) queue behind each other's answers when
it has one slot; llama.cpp's own server with parallel slots decodes their answers in one batch.
Each row is ``benchmarks.llm``'s concurrency run (N simulated conversations, three turns each,
the default prompt) against a server started with ``llm.server_slots`` slots.

    .venv/bin/python -m benchmarks.llm_slots [--slots 1 2] [--calls 1 2]
        [--out runs/bench_llm_slots.json]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from agent import model_store
from agent.llm.servers.llama import LlamaServer
from agent.settings import load_settings
from benchmarks.llm import concurrency
from benchmarks.pool import cpu_model
from benchmarks.results import write_json


async def run(slots: list[int], calls: list[int]) -> list[dict]:
    settings = load_settings()
    gguf = model_store.resolve(settings.llm.model, "llm", settings.models_dir)
    rows = []
    for n_slots in slots:
        llm = settings.llm.model_copy(update={"server_slots": n_slots})
        with LlamaServer(gguf, llm) as server:
            with_slots = settings.model_copy(update={"llm": llm})
            for n in calls:
                rows.append({"slots": n_slots, **await concurrency(server, gguf, with_slots, n)})
                print(rows[-1], file=sys.stderr)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--calls", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", type=Path, default=Path("runs/bench_llm_slots.json"))
    args = parser.parse_args()
    rows = asyncio.run(run(args.slots, args.calls))
    write_json(args.out, {"cpu_model": cpu_model(), "rows": rows})
    print(f"{cpu_model()}")
    print("| slots | calls at once | TTFT p50 ms | TTFT p95 ms | tokens/s (all calls) |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['slots']} | {r['calls']} | {r['ttft_p50_ms']} | {r['ttft_p95_ms']} | "
              f"{r['tokens_per_s']} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
