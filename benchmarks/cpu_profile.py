"""Where a call's CPU goes: CPU-seconds per call-minute by kind of work, and each turn's
critical path from the caller's last word to the first audio.

Why: on a 2-core machine the stages wait on each other for the cores, so what each kind of
work costs (interim passes, the pause's and final passes, the VAD, Smart Turn, the LLM's
prefill and decoding, Piper, the event loop) is what a scheduler has to share out. The clips
play as the turns of one call through the replay path ``voice-agent replay`` and the eval
use, with a CPU profile (``agent.timing.cpu``) running: CPU time per thread, not wall time,
so the figures hold on a machine other work is loading. What no kind accounts for is
``other``. The call's ``turns.jsonl`` carries each turn's ``critical_path`` for the HTML
report (``voice-agent report --html``). The in-process LLM engine only: a server's CPU is
another process's.

    .venv/bin/python -m benchmarks.cpu_profile ../shared/corpus/main/manifest.jsonl \
        [--pace compute|realtime] [--limit N] [--out runs/cpu_profile] [--label TEXT] \
        [--chart docs/lab/cpu_profile.png [--compare OTHER/profile.json ...]]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from agent.clock import clock_for
from agent.evaluation.manifest import load_manifest
from agent.pipeline import AgentModels, llm_engine
from agent.replay import load_turns, paced_settings, replay_call
from agent.settings import Settings
from agent.timing import cpu
from agent.timing.budget import load_budget
from benchmarks.pool import cpu_model
from benchmarks.results import write_json


def clip_paths(inputs: list[Path], limit: int | None) -> list[Path]:
    """Audio files as given, or a manifest's clips in its order."""
    paths: list[Path] = []
    for path in inputs:
        if path.suffix == ".jsonl":
            paths += [clip.path for clip in load_manifest(path)]
        else:
            paths.append(path)
    return paths[:limit]


def per_minute(seconds: dict[str, float], call_ms: float) -> dict[str, float]:
    """CPU-seconds per minute of call."""
    return {k: round(v * 60_000 / call_ms, 3) for k, v in seconds.items()}


def profile(paths: list[Path], out_dir: Path, pace: str) -> dict[str, Any]:
    """Replay ``paths`` as one call under a CPU profile; the models' load is not counted."""
    settings = paced_settings(Settings(), pace)
    if settings.llm.engine != "llama-inprocess":
        raise SystemExit("cpu_profile: llm.engine must be llama-inprocess (a server's CPU is "
                         "another process's); unset VOICE_AGENT_LLM__ENGINE")  # fmt: skip
    budget = load_budget(settings.budget_file, settings.budget_profile)
    turns = load_turns(paths, settings.sample_rate)
    with cpu.profiling() as ledger:
        models = AgentModels.load(settings)
        with llm_engine(settings) as engine:
            clock = clock_for(pace)
            ledger.use_clock(clock.now_ms)
            ledger.restart()
            result = asyncio.run(
                replay_call(turns, out_dir, settings=settings, models=models, engine=engine,
                            budget=budget, clock=clock)
            )  # fmt: skip
            seconds = ledger.seconds()
            call_ms = clock.now_ms()
            jobs = Counter(job.kind for job in ledger.jobs)
    return {
        "cpu_model": cpu_model(),
        "pace": pace,
        "clips": [str(p) for p in paths],
        "turns": len(result.records),
        "call_secs": round(call_ms / 1000, 1),
        "cpu_secs": {k: round(v, 3) for k, v in seconds.items()},
        "cpu_secs_per_call_minute": per_minute(seconds, call_ms),
        "jobs": {kind: jobs[kind] for kind in cpu.KINDS if jobs[kind]},
    }


def show(result: dict[str, Any]) -> None:
    rates, secs = result["cpu_secs_per_call_minute"], result["cpu_secs"]
    table = Table(title=f"CPU per call-minute ({result['turns']} turns, {result['call_secs']} s "
                        f"of call at {result['pace']} pace; {result['cpu_model']})")  # fmt: skip
    table.add_column("work")
    table.add_column("CPU-s / call-min", justify="right")
    table.add_column("share", justify="right")
    for kind, words in cpu.KINDS.items():
        share = secs[kind] / secs["total"] if secs["total"] else 0.0
        table.add_row(words, f"{rates[kind]:.2f}", f"{share:.0%}")
    table.add_row("total (the process)", f"{rates['total']:.2f}", "100%")
    Console().print(table)


def plot(results: list[dict[str, Any]], path: Path) -> None:
    """CPU-seconds per call-minute by kind, one bar per profile (e.g. two settings)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = list(cpu.KINDS)
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(kinds) * len(results) + 1.2))
    height = 0.8 / len(results)
    for i, result in enumerate(results):
        rates = result["cpu_secs_per_call_minute"]
        ys = [k + i * height for k in range(len(kinds))]
        label = f"{result.get('label') or result['pace']}: {rates['total']:.0f} CPU-s / call-min"
        ax.barh(ys, [rates[k] for k in kinds], height=height, label=label)
    ax.set_yticks([k + height * (len(results) - 1) / 2 for k in range(len(kinds))])
    ax.set_yticklabels([cpu.KINDS[k] for k in kinds])
    ax.invert_yaxis()
    ax.set_xlabel("CPU-seconds per call-minute")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="+", type=Path, help="audio files or a manifest.jsonl")
    parser.add_argument("--pace", choices=("compute", "realtime"), default="compute")
    parser.add_argument("--limit", type=int, default=None, help="the first N clips only")
    parser.add_argument("--out", type=Path, default=Path("runs/cpu_profile"))
    parser.add_argument("--label", default=None, help="what this run is, in the chart")
    parser.add_argument(
        "--chart", type=Path, default=None,
        help="write a bar chart (PNG) of this run and of --compare's profile.json files",
    )  # fmt: skip
    parser.add_argument("--compare", type=Path, nargs="*", default=[])
    args = parser.parse_args(argv)
    paths = clip_paths(args.inputs, args.limit)
    if not paths:
        print("cpu_profile: no clips: give audio files or a manifest with rows", file=sys.stderr)
        return 2
    result = profile(paths, args.out, args.pace) | {"label": args.label}
    write_json(args.out / "profile.json", result)
    show(result)
    if args.chart is not None:
        others = [json.loads(p.read_text()) for p in args.compare]
        plot([*others, result], args.chart)
    return 0


if __name__ == "__main__":
    sys.exit(main())
