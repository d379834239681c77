"""Memory and concurrency of one ``voice-agent serve``: how many calls it holds within budget.

Why: to know how many calls one 2-core machine holds. One server is started with the default
settings (all default models loaded, one shared LLM engine) and measured from outside:

- RSS with the models loaded and no call (median of a few samples after it settles);
- then, for N = 1, 2, 3, 4 simultaneous callers (``benchmarks/soak.py``'s simulated Twilio
  callers on loopback, asking the real speech clips of ``agent/samples``), M minutes each:
  the server's exact peak RSS during that step (the process tree's ``VmHWM``, reset before
  each step; a 5 s sampled maximum is reported beside it), the extra peak RSS over the step
  with one call fewer, voice-to-voice p50/p95 as the caller hears it (clip speech end as
  sent -> first bot audio received), turns completed, errors and lost calls;
- "calls held within budget": the largest N such that every step up to N had its
  voice-to-voice p95 within the budget (the default budget file, profile cpu) and no
  unanswered turn, failed dial or lost call (a timed-out turn would otherwise vanish from p95).

Steps run in increasing N on the same server, so each step starts with what the allocator
kept from the ones before; the extra RSS per call is a difference of peaks.

    .venv/bin/python -m benchmarks.capacity [--callers 1,2,3,4] [--minutes 2]
        [--profile cpu] [--out runs/bench_capacity.json]

Full run: about 4 x 2 minutes of calls plus startup (about 10 minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from agent.settings import load_settings
from agent.timing.budget import load_budget
from benchmarks.results import write_json
from benchmarks.soak import MAX_CALLERS, Soak, report, start_server, stop_server
from tests.support.memory import (
    reset_peak_rss,
    tree_peak_rss_kib,
    tree_rss_kib,
)

ROOT = Path(__file__).resolve().parents[1]

SETTLE_SECS = 10.0  # after "serving on": let start-up work (first allocations, threads) finish
BETWEEN_STEPS_SECS = 5.0  # the last calls' files are written after the caller hangs up


def mib(kib: float) -> float:
    return round(kib / 1024, 1)


def idle_rss_kib(pid: int, samples: int = 5) -> float:
    """Median RSS over a few seconds with no call."""
    found = []
    for _ in range(samples):
        found.append(tree_rss_kib(pid))
        time.sleep(1.0)
    return statistics.median(found)


def run_step(url: str, pid: int, callers: int, minutes: float, turns_per_call: int) -> dict:
    """N simultaneous callers for M minutes; latency from the callers, peak RSS of the server."""
    exact = reset_peak_rss(pid)
    soak = Soak(url, callers, minutes, turns_per_call)
    asyncio.run(soak.run(pid))
    peak = tree_peak_rss_kib(pid) if exact else None
    sampled = [x for m in soak.per_minute for x in m.rss_kib]
    result = report(soak, crashed=False)
    return {
        "callers": callers,
        "turns": result["turns"],
        "errors": result["errors"],  # unanswered turns and failed dials
        "failed_dials": result["failed_dials"],
        "lost_calls": result["lost_calls"],
        "calls": result["calls"],
        "v2v_p50_ms": result["v2v_p50_ms"],
        "v2v_p95_ms": result["v2v_p95_ms"],
        "peak_rss_mib": mib(peak) if peak is not None else None,
        "sampled_max_rss_mib": mib(max(sampled)) if sampled else None,
        "problems": result["problems"],
    }


def summarise(steps: list[dict], idle_kib: float, limit_ms: float) -> int:
    """Mark each step within budget or not, add the extra RSS per call; return calls held."""
    held = 0
    previous = mib(idle_kib)
    for step in steps:
        peak = step["peak_rss_mib"] or step["sampled_max_rss_mib"]
        step["extra_rss_mib"] = round(peak - previous, 1) if peak and previous else None
        previous = peak
        p95 = step["v2v_p95_ms"]
        step["within_budget"] = (
            p95 is not None and p95 <= limit_ms and step["errors"] == 0 and step["lost_calls"] == 0
        )
        if step["within_budget"] and held == step["callers"] - 1:
            held = step["callers"]
    return held


def print_table(result: dict[str, Any]) -> None:
    table = Table(
        title=f"one `voice-agent serve`, {result['minutes_per_step']:g} min per step "
        f"(voice-to-voice budget p95 {result['budget_p95_ms']:g} ms, profile "
        f"{result['budget_profile']})"
    )
    for name in ("calls", "turns", "errors", "lost", "v2v p50 ms", "v2v p95 ms",
                 "within budget", "peak RSS MiB", "extra MiB", "sampled max MiB"):  # fmt: skip
        table.add_column(name, justify="right")
    for s in result["steps"]:
        table.add_row(
            *map(str, (s["callers"], s["turns"], s["errors"], s["lost_calls"], s["v2v_p50_ms"],
                       s["v2v_p95_ms"], "yes" if s["within_budget"] else "no",
                       s["peak_rss_mib"], s["extra_rss_mib"], s["sampled_max_rss_mib"]))
        )  # fmt: skip
    console = Console(width=None if sys.stdout.isatty() else 140)
    console.print(table)
    console.print(
        f"RSS, models loaded, no call: {result['idle_rss_mib']} MiB (start-up peak "
        f"{result['startup_peak_rss_mib']} MiB); peak RSS is "
        f"{'VmHWM (exact)' if result['peak_rss_exact'] else 'sampled every 5 s'}"
    )
    console.print(f"calls held within budget: {result['calls_held_within_budget']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--callers", default="1,2,3,4", help="comma-separated N, increasing")
    parser.add_argument("--minutes", type=float, default=2.0, help="per step")
    parser.add_argument("--turns-per-call", type=int, default=3)
    parser.add_argument("--profile", default="cpu", help="budget profile")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_capacity.json")
    args = parser.parse_args()
    callers = [int(x) for x in args.callers.split(",")]
    if callers != sorted(set(callers)) or not all(1 <= n <= MAX_CALLERS for n in callers):
        raise SystemExit(f"bench_capacity: --callers must increase, each 1..{MAX_CALLERS}")
    if not 0 < args.minutes <= 30:
        raise SystemExit("bench_capacity: --minutes must be in (0, 30]")
    settings = load_settings()
    budget = load_budget(settings.budget_file, args.profile)
    limit = budget.stages["voice_to_voice"].ceiling

    steps: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="capacity-calls-") as calls_dir:
        proc, url = start_server(Path(calls_dir))
        crashed = False
        try:
            time.sleep(SETTLE_SECS)
            startup_peak = tree_peak_rss_kib(proc.pid)
            idle = idle_rss_kib(proc.pid)
            exact = reset_peak_rss(proc.pid)
            for n in callers:
                t0 = time.monotonic()
                steps.append(run_step(url, proc.pid, n, args.minutes, args.turns_per_call))
                s = steps[-1]
                took = time.monotonic() - t0
                line = f"p95 {s['v2v_p95_ms']} ms, peak RSS {s['peak_rss_mib']} MiB"
                print(f"{n} caller(s): {took:.0f} s, {s['turns']} turns, {line}", flush=True)
                if proc.poll() is not None:
                    break
                time.sleep(BETWEEN_STEPS_SECS)
        finally:
            crashed = stop_server(proc)

    held = summarise(steps, idle, limit)
    result = {
        "settings": {"asr": settings.asr.model, "llm_engine": settings.llm.engine,
                     "llm": settings.llm.model, "tts": settings.tts.voice,
                     "asr_threads": settings.asr.threads,
                     "llm_threads": settings.llm.threads, "tts_threads": settings.tts.threads},
        "minutes_per_step": args.minutes,
        "turns_per_call": args.turns_per_call,
        "budget_profile": budget.name,
        "budget_p95_ms": limit,
        "idle_rss_mib": mib(idle),
        "startup_peak_rss_mib": mib(startup_peak),
        "peak_rss_exact": exact,
        "steps": steps,
        "calls_held_within_budget": held,
        "server_crashed": crashed,
    }  # fmt: skip
    write_json(args.out, result)
    print_table(result)
    print(f"wrote {args.out}")
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
