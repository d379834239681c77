"""The work a turn's end waits for at the VAD's pause, timed alone and side by side: the
pause's Whisper pass over the turn and Smart Turn's verdict on it.

Why: at real time a turn ends only once both are done (docs/lab/eval-log.md, "Where the time after
the VAD's pause goes"), so what they take on this machine, alone and sharing its cores as they
do at the pause, is the floor under real-time endpointing whatever the turn-taking policy.
Each clip is one turn: its pass (greedy, with recognition's comma probability, as at a pause)
and its verdict are timed alone, then together, the verdict on a second thread as the turn
detector runs it.

    .venv/bin/python -m benchmarks.pause_work ../shared/corpus/main/manifest.jsonl \
        [--out runs/bench_pause_work.json]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from agent.audio import load_audio
from agent.evaluation.manifest import load_manifest
from agent.recognition.whisper_decoder import RATE, WhisperDecoder
from agent.settings import Settings
from agent.timing.budget import rounded_percentile
from agent.turns.pipecat_compat import smart_turn_probability
from agent.turns.vad import TurnModels
from benchmarks.pool import cpu_model
from benchmarks.results import write_json


def _ms(work: Callable[[], object]) -> float:
    began = time.perf_counter()
    work()
    return (time.perf_counter() - began) * 1000


def measure(turns: list[np.ndarray]) -> dict[str, list[float]]:
    """Per turn, in ms: the pass and the verdict alone, then side by side, and both done."""
    settings = Settings()
    decoder = WhisperDecoder.from_settings(settings.asr, settings.models_dir)
    smart_turn = TurnModels.load().smart_turn

    def pass_(audio: np.ndarray) -> float:
        return _ms(lambda: decoder.transcribe(audio, goes_on=True))

    def verdict(audio: np.ndarray) -> float:
        return _ms(lambda: smart_turn_probability(smart_turn, audio))

    times: dict[str, list[float]] = {
        k: [] for k in ("pass alone", "verdict alone", "pass beside", "verdict beside", "both")
    }
    pass_(turns[0]), verdict(turns[0])  # first calls allocate
    with ThreadPoolExecutor(1) as judge:
        for audio in turns:
            times["pass alone"].append(pass_(audio))
            times["verdict alone"].append(verdict(audio))
            began = time.perf_counter()
            beside = judge.submit(verdict, audio)
            times["pass beside"].append(pass_(audio))
            times["verdict beside"].append(beside.result())
            times["both"].append((time.perf_counter() - began) * 1000)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("manifests", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=Path("runs/bench_pause_work.json"))
    args = parser.parse_args(argv)
    clips = [clip for manifest in args.manifests for clip in load_manifest(manifest)]
    turns = [(load_audio(c.path, RATE) / 32768).astype(np.float32) for c in clips]
    times = measure(turns)
    table = Table(title=f"the pause's work, {len(turns)} turns, ms ({cpu_model()})")
    for column in ("", "p50", "p95"):
        table.add_column(column)
    rows = {}
    for name, values in times.items():
        rows[name] = {q: rounded_percentile(values, q) for q in (50, 95)}
        table.add_row(name, f"{rows[name][50]:.0f}", f"{rows[name][95]:.0f}")
    Console().print(table)
    write_json(args.out, {"cpu_model": cpu_model(), "turns": len(turns), "ms": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
