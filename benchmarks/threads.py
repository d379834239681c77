"""Thread counts by measurement: replay the sample turns under several (asr, llm, tts) threads.

Why: on 2 cores the stages overlap on the critical path, so the fastest thread count for a
stage alone is not necessarily the fastest turn. Piper synthesises the first phrase while
llama.cpp decodes the rest of the answer, and the speculative answer's prefill runs beside
the recogniser's final pass and the turn detector; every one of those overlaps involves the
LLM, while recognition and synthesis hardly ever run at once. So the default grid is a 2 x 2
on (LLM threads) x (ASR and TTS threads together), written asr-llm-tts:

    2-2-2  every stage as fast as it runs alone (today's settings on 2 cores)
    2-1-2  llama.cpp on one core, so the other stays free for Piper and Whisper's final pass
    1-2-1  llama.cpp on both, Whisper and Piper on one
    1-1-1  no stage ever oversubscribes the cores when two overlap

``--configs all`` runs the whole {1,2}^3 grid (twice as long). Each configuration is one
``voice-agent replay`` of the four sample clips in its own process (``bench_turns.run_ours``,
settings through ``VOICE_AGENT_ASR__THREADS`` / ``LLM__THREADS`` / ``TTS__THREADS``), so
every one starts from freshly loaded models. Rounds alternate the order (forward, then
reversed), so drift on a shared machine hits every configuration alike. Voice-to-voice is
read off each call.wav (agent/timing/callwav.py); per-stage p50/p95 come from the turn records.

    .venv/bin/python -m benchmarks.threads [--rounds 2] [--configs 2-2-2,2-1-2,1-2-1,1-1-1]
        [--out runs/bench_threads.json]

Full run (4 configurations x 2 rounds): about 8-10 minutes on the 2-core machine.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from agent.audio import load_audio
from agent.settings import load_settings
from agent.timing.callwav import load_thresholds, measure_call
from agent.timing.record import TurnRecord
from agent.timing.summary import stage_stats, stage_values
from agent.timing.timeline import PART_STAGES
from benchmarks.results import write_json
from benchmarks.turns import mode_summary, run_ours
from tests.support.clips import CLIPS, SAMPLES

ROOT = Path(__file__).resolve().parents[1]

DEFAULT_CONFIGS = ["2-2-2", "2-1-2", "1-2-1", "1-1-1"]
THREAD_ENV = ("VOICE_AGENT_ASR__THREADS", "VOICE_AGENT_LLM__THREADS", "VOICE_AGENT_TTS__THREADS")


def parse_configs(text: str) -> list[str]:
    """'all' or comma-separated asr-llm-tts thread counts, e.g. '2-2-2,1-1-1'."""
    if text == "all":
        return ["-".join(map(str, c)) for c in itertools.product((2, 1), repeat=3)]
    configs = [c.strip() for c in text.split(",") if c.strip()]
    for c in configs:
        parts = c.split("-")
        if len(parts) != 3 or not all(p.isdigit() and int(p) >= 1 for p in parts):
            raise SystemExit(
                f"bench_threads: bad configuration {c!r}: want asr-llm-tts, e.g. 2-1-2"
            )
    if len(set(configs)) != len(configs):
        raise SystemExit("bench_threads: a configuration is given twice")
    return configs


def thread_env(config: str) -> dict[str, str]:
    """This process's environment with the configuration's thread counts."""
    return {**os.environ, **dict(zip(THREAD_ENV, config.split("-"), strict=True))}


def print_table(summary: dict[str, dict[str, Any]]) -> None:
    table = Table(
        title="voice-to-voice (from call.wav) and per-stage p50 ms, by asr-llm-tts threads"
    )
    for name in ("asr-llm-tts", "turns", "early", "v2v p50", "v2v p95", *PART_STAGES):
        table.add_column(name, justify="right")
    for config, s in summary.items():
        stage_p50 = [str(s["stages"][name]["p50"]) for name in PART_STAGES]
        table.add_row(
            config, str(s["turns"]), str(s["answered_early"]),
            str(s["voice_to_voice_p50_ms"]), str(s["voice_to_voice_p95_ms"]), *stage_p50,
        )  # fmt: skip
    Console(width=None if sys.stdout.isatty() else 160).print(table)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--configs", default=",".join(DEFAULT_CONFIGS), help="or 'all'")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_threads.json")
    args = parser.parse_args()
    configs = parse_configs(args.configs)
    if args.rounds < 1:
        raise SystemExit("bench_threads: --rounds must be at least 1")
    clips = [SAMPLES / c for c in CLIPS]
    thresholds = load_thresholds(SAMPLES / "manifest.jsonl")
    rate = load_settings().sample_rate
    loaded = [(c.name, load_audio(c, rate)) for c in clips]
    work = args.out.with_suffix("")
    turns: dict[str, list[dict[str, Any]]] = {c: [] for c in configs}
    records: dict[str, list[TurnRecord]] = {c: [] for c in configs}

    for r in range(1, args.rounds + 1):
        for config in configs if r % 2 else configs[::-1]:
            out = work / f"round{r}_{config}"
            t0 = time.monotonic()
            recs = run_ours(clips, out, env=thread_env(config))
            measured = [t.as_dict() for t in measure_call(out / "call.wav", loaded, thresholds)]
            for t, rec in zip(measured, recs, strict=False):
                t["reported_voice_to_voice_ms"] = rec.voice_to_voice_ms
                t["round"] = r
            turns[config] += measured
            records[config] += recs
            print(f"round {r} {config}: {time.monotonic() - t0:.0f} s, v2v ms "
                  f"{[t['voice_to_voice_ms'] for t in measured]}", flush=True)  # fmt: skip

    summary: dict[str, dict[str, Any]] = {}
    for config in configs:
        summary[config] = mode_summary(turns[config])
        values = stage_values(records[config])
        summary[config]["stages"] = {name: stage_stats(values[name]) for name in PART_STAGES}
    report = {
        "clips": [c.name for c in clips],
        "rounds": args.rounds,
        "configs": {c: dict(zip(("asr", "llm", "tts"), map(int, c.split("-")), strict=True))
                    for c in configs},
        "cpu_count": os.cpu_count(),
        "summary": summary,
        "turns": turns,
    }  # fmt: skip
    write_json(args.out, report)
    print_table(summary)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
