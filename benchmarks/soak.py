"""Soak test: N simulated phone callers against one ``voice-agent serve`` for M minutes.

Why: a leak or a slow pile-up shows only over time and under concurrent calls. Each caller
dials ``/phone`` on loopback (the Twilio Media Streams protocol, ``tests.support.caller``),
asks ``--turns-per-call`` questions from the real speech clips in ``agent/samples``, waiting
for each answer, hangs up and dials again, until the time is up. Per minute it reports
completed turns, errors (a question without an answer, a call that could not be made),
voice-to-voice p50/p95 as the caller hears it (clip speech end as sent -> first bot audio
received) and the server's RSS (with its child processes). At the end: RSS growth from
minute 2 to the last minute, server crashes and lost calls (a call whose socket closed
before the caller hung up). Writes a JSON result; exit 1 when a target is missed.

    .venv/bin/python -m benchmarks.soak --callers 4 --minutes 10 [--url ws://HOST:PORT/phone]

Without ``--url`` it starts ``voice-agent serve`` on a free loopback port itself (calls
written to a temporary folder) and stops it at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from agent.audio import speech_bounds
from agent.net import free_port
from agent.timing.budget import rounded_percentile
from benchmarks.results import write_json
from tests.support.caller import PhoneCaller
from tests.support.clips import CLIPS, load_clip
from tests.support.memory import tree_rss_kib

ROOT = Path(__file__).resolve().parents[1]
MAX_CALLERS = 16
MAX_MINUTES = 60
ANSWER_TIMEOUT_SECS = 30.0
RSS_GROWTH_TARGET_PCT = 5.0
STARTUP_SECS = 300


@dataclass
class Clip:
    name: str
    samples: np.ndarray
    speech_end: int  # last speech sample (16 kHz index)


@dataclass
class Minute:
    """What happened in one minute of the soak."""

    turns: int = 0
    errors: int = 0
    v2v_ms: list[float] = field(default_factory=list)
    rss_kib: list[int] = field(default_factory=list)


class Soak:
    def __init__(self, url: str, callers: int, minutes: float, turns_per_call: int) -> None:
        self.url = url
        self.callers = callers
        self.minutes = minutes
        self.turns_per_call = turns_per_call
        self.clips = [self._clip(name) for name in sorted(CLIPS)]
        self.started = 0.0
        self.per_minute: list[Minute] = []
        self.calls = 0
        self.lost_calls = 0
        self.failed_dials = 0
        self.log: list[str] = []

    @staticmethod
    def _clip(name: str) -> Clip:
        samples = load_clip(name, 16000)
        bounds = speech_bounds(samples, 16000)
        return Clip(name, samples, bounds[1] if bounds else len(samples) - 1)

    def minute(self) -> Minute:
        index = int((time.monotonic() - self.started) // 60)
        index = min(index, max(0, int(np.ceil(self.minutes)) - 1))  # a turn ending after time
        while len(self.per_minute) <= index:
            self.per_minute.append(Minute())
        return self.per_minute[index]

    def time_left(self) -> float:
        return self.minutes * 60 - (time.monotonic() - self.started)

    async def caller(self, number: int) -> None:
        turn = number  # callers start on different clips
        while self.time_left() > 0:
            try:
                await self.call(turn)
            except (OSError, InvalidHandshake) as exc:  # refused, busy or reset while dialling
                self.failed_dials += 1
                self.minute().errors += 1
                self.log.append(f"caller {number}: could not call: {exc}")
                await asyncio.sleep(1.0)
            except ConnectionClosed:
                self.lost_calls += 1
                self.log.append(f"caller {number}: the server closed a call in progress")
            turn += self.turns_per_call

    async def call(self, first_turn: int) -> None:
        self.calls += 1
        async with PhoneCaller(self.url) as phone:
            await asyncio.sleep(0.5)
            for k in range(self.turns_per_call):
                if self.time_left() <= 0 or phone.closed.is_set():
                    break
                clip = self.clips[(first_turn + k) % len(self.clips)]
                asked = phone.speak(clip.samples)
                await asked.done.wait()
                spoke_end = asked.sent_time(clip.speech_end)
                reply = await phone.wait_for("media", spoke_end, ANSWER_TIMEOUT_SECS)
                if reply is None:
                    self.minute().errors += 1
                    self.log.append(f"no answer to {clip.name} within {ANSWER_TIMEOUT_SECS:g} s")
                    continue
                minute = self.minute()
                minute.turns += 1
                minute.v2v_ms.append(round(1000 * (reply.at - spoke_end), 1))
                await phone.wait_quiet(1.0, 60)
            if phone.closed.is_set() or not await phone.hang_up(30):
                self.lost_calls += 1
                self.log.append("a call was closed by the server before the caller hung up")

    async def sample_rss(self, pid: int | None) -> None:
        while self.time_left() > 0:
            if pid is not None:
                self.minute().rss_kib.append(tree_rss_kib(pid))
            await asyncio.sleep(5.0)

    async def run(self, pid: int | None) -> None:
        self.started = time.monotonic()
        await asyncio.gather(self.sample_rss(pid), *(self.caller(i) for i in range(self.callers)))


def start_server(calls_dir: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent.cli", "serve", "--port", str(port),
         "--calls-dir", str(calls_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
    )  # fmt: skip
    deadline = time.monotonic() + STARTUP_SECS
    assert proc.stdout is not None
    for line in proc.stdout:
        if "serving on" in line:  # then keep draining its output, or it blocks on a full pipe
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return proc, f"ws://127.0.0.1:{port}/phone"
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise SystemExit("soak: the server did not start (run `voice-agent serve` to see why)")


def stop_server(proc: subprocess.Popen) -> bool:
    """Stop a server started by ``start_server`` (SIGINT, then kill); True if it had crashed."""
    if proc.poll() is not None:
        return True
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
    return False


def report(soak: Soak, crashed: bool) -> dict[str, Any]:
    minutes = []
    for i, m in enumerate(soak.per_minute, start=1):
        minutes.append({
            "minute": i, "turns": m.turns, "errors": m.errors,
            "v2v_p50_ms": rounded_percentile(m.v2v_ms, 50),
            "v2v_p95_ms": rounded_percentile(m.v2v_ms, 95),
            "rss_mib": round(float(np.median(m.rss_kib)) / 1024, 1) if m.rss_kib else None,
        })  # fmt: skip
    rss = [m["rss_mib"] for m in minutes if m["rss_mib"] is not None]
    growth = None
    if len(rss) >= 2:
        base = rss[1]  # minute 2: models and caches are warm by then
        growth = round(100 * (rss[-1] - base) / base, 2)
    all_v2v = [x for m in soak.per_minute for x in m.v2v_ms]
    result = {
        "callers": soak.callers, "minutes": soak.minutes, "url": soak.url,
        "per_minute": minutes,
        "turns": sum(m["turns"] for m in minutes), "errors": sum(m["errors"] for m in minutes),
        "v2v_p50_ms": rounded_percentile(all_v2v, 50),
        "v2v_p95_ms": rounded_percentile(all_v2v, 95),
        "calls": soak.calls, "lost_calls": soak.lost_calls, "failed_dials": soak.failed_dials,
        "server_crashes": int(crashed),
        "rss_growth_pct_minute2_to_last": growth,
        "problems": soak.log[:50],
    }  # fmt: skip
    misses = []
    if growth is not None and growth >= RSS_GROWTH_TARGET_PCT:
        misses.append(f"RSS grew {growth}% (target < {RSS_GROWTH_TARGET_PCT:g}%)")
    if crashed:
        misses.append("the server crashed")
    if soak.lost_calls:
        misses.append(f"{soak.lost_calls} lost call(s)")
    result["targets_missed"] = misses
    return result


def print_table(result: dict[str, Any]) -> None:
    print("| minute | turns | errors | v2v p50 ms | v2v p95 ms | server RSS MiB |")
    print("| --- | --- | --- | --- | --- | --- |")
    for m in result["per_minute"]:
        print(f"| {m['minute']} | {m['turns']} | {m['errors']} | {m['v2v_p50_ms']} | "
              f"{m['v2v_p95_ms']} | {m['rss_mib']} |")  # fmt: skip
    print(
        f"{result['turns']} turns, {result['errors']} errors, {result['calls']} calls "
        f"({result['lost_calls']} lost), {result['server_crashes']} server crashes, "
        f"RSS growth minute 2 -> last: {result['rss_growth_pct_minute2_to_last']}%"
    )
    for miss in result["targets_missed"]:
        print(f"target missed: {miss}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--callers", type=int, default=4)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--turns-per-call", type=int, default=3)
    parser.add_argument("--url", help="an already running server's ws://HOST:PORT/phone")
    parser.add_argument("--out", type=Path, default=Path("soak.json"))
    args = parser.parse_args()
    if not 1 <= args.callers <= MAX_CALLERS:
        raise SystemExit(f"soak: --callers must be 1..{MAX_CALLERS}")
    if not 0 < args.minutes <= MAX_MINUTES:
        raise SystemExit(f"soak: --minutes must be in (0, {MAX_MINUTES}]")
    if args.url and not args.url.startswith(("ws://127.", "ws://localhost", "ws://[::1]")):
        raise SystemExit("soak: --url must be a loopback ws:// address (this is a load test)")

    with tempfile.TemporaryDirectory(prefix="soak-calls-") as calls_dir:
        proc, url = (None, args.url) if args.url else start_server(Path(calls_dir))
        soak = Soak(url, args.callers, args.minutes, args.turns_per_call)
        try:
            asyncio.run(soak.run(proc.pid if proc else None))
        finally:
            crashed = proc is not None and stop_server(proc)
    result = report(soak, crashed)
    write_json(args.out, result)
    print_table(result)
    print(f"result: {args.out}")
    return 1 if result["targets_missed"] else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
