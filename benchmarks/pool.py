"""Worker pool layouts on one machine, and what HAProxy costs a call.

Why: to know whether the same cores hold calls better as one worker or as several pinned
ones, and whether the balancer's hop shows in the caller's latency. Both layouts are
``voice-agent pool`` (``agent.live.pool``): HAProxy, one shared llama.cpp server (unpinned),
and workers pinned with taskset, with as many recognition and synthesis threads as their
CPUs:

- ``1 worker``: one worker on every CPU given (``--cpus 0-1``);
- ``N workers``: one worker per CPU (``--cpus 0``, ``--cpus 1``).

Each layout takes ``--callers`` simultaneous simulated Twilio callers through HAProxy for
``--minutes`` (``benchmarks.soak``'s callers: real speech clips, voice-to-voice as the
caller hears it). Then, on the 1-worker pool, one caller alternates between HAProxy and the
worker's own port, ``--rounds`` times each, ``--round-minutes`` a round (interleaved: the
machine's speed drifts).

    .venv/bin/python -m benchmarks.pool [--cpus 0,1] [--callers 2] [--minutes 2]
        [--rounds 2] [--round-minutes 1] [--out runs/bench_pool.json]
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import secrets
import sys
import tempfile
from pathlib import Path
from typing import Any

from agent.live.pool import Pool, parse_cpus
from agent.net import free_port
from agent.settings import load_settings
from agent.timing.budget import rounded_percentile
from benchmarks.results import write_json
from benchmarks.soak import Soak, report

ROOT = Path(__file__).resolve().parents[1]

TURNS_PER_CALL = 3


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def soak(url: str, callers: int, minutes: float) -> dict[str, Any]:
    run = Soak(url, callers, minutes, TURNS_PER_CALL)
    asyncio.run(run.run(None))
    result = report(run, crashed=False)
    result["v2v_ms"] = [x for m in run.per_minute for x in m.v2v_ms]
    return {k: result[k] for k in ("callers", "turns", "errors", "lost_calls", "failed_dials",
                                   "v2v_p50_ms", "v2v_p95_ms", "v2v_ms", "problems")}  # fmt: skip


def layout(cpus: list[str], args: argparse.Namespace, token: str, probe: bool) -> dict[str, Any]:
    """One pool: its callers through HAProxy, and with ``probe`` HAProxy against direct."""
    # Every simulated caller dials from 127.0.0.1: one address, which HAProxy caps.
    limits = {"max_calls_per_address": max(args.callers, 4)}
    settings = load_settings(serve={"token": token, **limits})
    with tempfile.TemporaryDirectory(prefix="bench-pool-") as calls:
        pool = Pool(settings, workers=len(cpus), host="127.0.0.1", port=free_port(),
                    calls_dir=Path(calls), cpus=cpus,
                    say=lambda line: print(line, file=sys.stderr))  # fmt: skip
        with pool:
            front = f"ws://127.0.0.1:{pool.port}/phone/{token}"
            result: dict[str, Any] = {"cpus": cpus, "workers": len(cpus)}
            result["load"] = soak(front, args.callers, args.minutes)
            print(f"{len(cpus)} worker(s): p50 {result['load']['v2v_p50_ms']} ms, p95 "
                  f"{result['load']['v2v_p95_ms']} ms", file=sys.stderr)  # fmt: skip
            if probe:
                direct = pool.workers[0].url(f"/phone/{token}", "ws")
                hops: dict[str, list[float]] = {"haproxy": [], "direct": []}
                for _ in range(args.rounds):
                    for name, url in (("haproxy", front), ("direct", direct)):
                        hops[name] += soak(url, 1, args.round_minutes)["v2v_ms"]
                result["hop"] = {name: {"turns": len(v), "v2v_p50_ms": rounded_percentile(v, 50)}
                                 for name, v in hops.items()}  # fmt: skip
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", default="0,1", help="the CPUs both layouts use, comma-separated")
    parser.add_argument("--callers", type=int, default=2)
    parser.add_argument("--minutes", type=float, default=2.0, help="per layout")
    parser.add_argument("--rounds", type=int, default=2, help="HAProxy/direct rounds")
    parser.add_argument("--round-minutes", type=float, default=1.0)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_pool.json")
    args = parser.parse_args()
    cpus = sorted(parse_cpus(args.cpus))
    if len(cpus) < 2 or not 1 <= args.callers <= 16 or not 0 < args.minutes <= 30:
        raise SystemExit("bench_pool: --cpus needs 2 or more CPUs, --callers 1..16, "
                         "--minutes in (0, 30]")  # fmt: skip
    token = secrets.token_urlsafe()
    one = layout([",".join(map(str, cpus))], args, token, probe=True)
    many = layout([str(c) for c in cpus], args, token, probe=False)
    result = {"cpu_model": cpu_model(), "cpus": cpus, "callers": args.callers,
              "minutes": args.minutes, "turns_per_call": TURNS_PER_CALL,
              "layouts": [one, many]}  # fmt: skip
    write_json(args.out, result)
    print(f"{result['cpu_model']}, CPUs {args.cpus}, {args.callers} callers through HAProxy, "
          f"{args.minutes:g} min per layout")  # fmt: skip
    print("| layout | turns | errors | lost calls | v2v p50 ms | v2v p95 ms |")
    print("| --- | --- | --- | --- | --- | --- |")
    for lay in result["layouts"]:
        load = lay["load"]
        name = f"{lay['workers']} worker(s), taskset {' / '.join(lay['cpus'])}"
        print(f"| {name} | {load['turns']} | {load['errors']} | {load['lost_calls']} | "
              f"{load['v2v_p50_ms']} | {load['v2v_p95_ms']} |")  # fmt: skip
    hop = one["hop"]
    print(f"1 caller, 1 worker: HAProxy p50 {hop['haproxy']['v2v_p50_ms']} ms "
          f"({hop['haproxy']['turns']} turns), direct p50 {hop['direct']['v2v_p50_ms']} ms "
          f"({hop['direct']['turns']} turns)")  # fmt: skip
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
