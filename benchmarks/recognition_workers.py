"""Recognition workers by measurement: two streams of passes through 1 or 2 CTranslate2 workers.

Why: one process's recogniser serves a call's lull pass beside its stale interim, and two
calls side by side; with one worker those passes take turns, with two they share the cores.
This measures what a second worker costs and gives when two passes are always waiting:
each pass's duration, the passes done a second, and the resident memory the recogniser
holds once both workers have served many window lengths (glibc keeps each worker thread's
freed buffers, so it is higher than one worker's). Each configuration runs in a fresh
process, so its memory is the model's alone; windows are random lengths (1-10 s) of the
sample clips' speech, the same for every configuration.

    .venv/bin/python -m benchmarks.recognition_workers [--passes 120] [--workers 1,2]
        [--out runs/bench_recognition_workers.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from agent import model_store
from agent.audio import load_audio
from agent.recognition.whisper_decoder import RATE, WhisperDecoder
from agent.settings import Settings
from agent.timing.budget import rounded_percentile
from benchmarks.results import write_json
from tests.support.clips import SAMPLES
from tests.support.memory import tree_rss_kib

STREAMS = 2  # passes always waiting: a lull's beside an interim, or two calls


def child(workers: int, passes: int) -> dict:
    """One configuration, measured in this process."""
    settings = Settings()
    path = model_store.resolve(settings.asr.model, "asr", settings.models_dir)
    decoder = WhisperDecoder(
        path, compute_type="int8", threads=settings.asr.threads, language="en", workers=workers
    )
    speech = np.concatenate(
        [load_audio(p, RATE) / 32768 for p in sorted(SAMPLES.glob("*.wav"))]
    ).astype(np.float32)
    rng = np.random.default_rng(0)
    windows = [
        speech[start : start + n]
        for n in rng.integers(RATE, 10 * RATE, passes)
        for start in [int(rng.integers(0, len(speech) - n))]
    ]

    def timed(window: np.ndarray) -> float:
        began = time.perf_counter()
        decoder.transcribe(window)
        return time.perf_counter() - began

    timed(windows[0])
    began = time.perf_counter()
    with ThreadPoolExecutor(STREAMS) as streams:
        durations = list(streams.map(timed, windows))
    wall = time.perf_counter() - began
    return {
        "workers": workers,
        "passes": passes,
        "pass_ms_p50": rounded_percentile([d * 1000 for d in durations], 50),
        "pass_ms_p95": rounded_percentile([d * 1000 for d in durations], 95),
        "passes_per_sec": round(passes / wall, 2),
        "rss_mib": tree_rss_kib(os.getpid()) // 1024,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=120)
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    parser.add_argument("--out", type=Path, default=Path("runs/bench_recognition_workers.json"))
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.passes)))
        return 0
    rows = []
    for workers in [int(w) for w in args.workers.split(",")]:
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.recognition_workers", "--child", str(workers)]
            + ["--passes", str(args.passes)],
            capture_output=True,
            text=True,
            check=True,
        )
        rows.append(json.loads(done.stdout.splitlines()[-1]))
    table = Table(title=f"{STREAMS} streams of recognition passes")
    for column in ["workers", "pass p50 / p95", "passes / s", "RSS"]:
        table.add_column(column)
    for row in rows:
        table.add_row(
            str(row["workers"]),
            f"{row['pass_ms_p50']} / {row['pass_ms_p95']} ms",
            str(row["passes_per_sec"]),
            f"{row['rss_mib']} MiB",
        )
    Console().print(table)
    write_json(args.out, {"streams": STREAMS, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
