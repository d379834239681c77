"""Where the time after the VAD's pause goes: a real-time `voice-agent eval` with every
Whisper pass, Smart Turn verdict and llama.cpp call timed on the wall clock.

Why: at real time the turn's end waits for work that shares two cores (the pause's pass, a
stale interim, Smart Turn, the LLM's prefill and its verdict on the words), and the turn
records only say when the turn ended. This wraps those calls (private methods of the
agent: a measuring instrument, not an interface) and, for each turn end, measures from the
VAD's pause: the pause transcript, the words' verdict, the turn's end, the pause pass's own
time and how long each other kind of work ran beside it. Every event goes to
``OUT/trace.jsonl``; the eval's own output (records, report) to ``OUT``.

    .venv/bin/python -m benchmarks.pause_trace ../shared/corpus/main/manifest.jsonl \
        --out runs/trace-main            # as long as the eval at real time (13 min here)

Settings come from the environment as for the agent (``VOICE_AGENT_<SECTION>__<KEY>``).
"""

from __future__ import annotations

import argparse
import functools
import json
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from agent.timing.budget import rounded_percentile

PAUSE_LOOKBACK_MS = 800  # a pause pass began at most this long before the transcript came
KINDS = ("smart", "prefill", "pass")  # the work that may run beside the pause's pass


class Trace:
    """Wall-clock events from any thread (list.append is atomic under the GIL)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def note(self, kind: str, **info: Any) -> None:
        now = time.perf_counter() * 1000
        self.events.append({"t": now, "kind": kind, "thread": threading.get_ident(), **info})

    def timed(self, owner: type, name: str, label: str) -> None:
        """Note the start and end of every call of ``owner.name`` (on its own thread)."""
        original = getattr(owner, name)
        trace = self

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            trace.note(f"{label}_start")
            try:
                return original(*args, **kwargs)
            finally:
                trace.note(f"{label}_end")

        setattr(owner, name, wrapper)

    def frames(self, owner: type, name: str, kinds: tuple[type, ...]) -> None:
        """Note each frame of ``kinds`` that ``owner.name(frame, ...)`` handles."""
        original = getattr(owner, name)
        trace = self

        @functools.wraps(original)
        async def wrapper(self: Any, frame: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(frame, kinds):
                trace.note(type(frame).__name__)
            return await original(self, frame, *args, **kwargs)

        setattr(owner, name, wrapper)


def instrument(trace: Trace) -> None:
    """Wrap the agent's classes in this process, so every call anywhere in it is traced."""
    from agent import frames
    from agent.llm.engines.chat import InProcessLlama
    from agent.recognition.whisper_decoder import WhisperDecoder
    from agent.turns.detector import TurnDetector

    trace.timed(WhisperDecoder, "transcribe", "pass")
    trace.timed(TurnDetector, "_completion_probability", "smart")
    trace.timed(InProcessLlama, "_prefill", "prefill")
    trace.timed(InProcessLlama, "_end_of_message", "verdict")
    sent = (frames.SpeechPausedFrame, frames.SpeechLullFrame, frames.TurnEndReasonFrame)
    trace.frames(TurnDetector, "push_frame", sent)
    heard = (frames.PauseTranscriptFrame, frames.EndOfMessageFrame)
    trace.frames(TurnDetector, "process_frame", heard)


def _spans(events: list[dict[str, Any]], kind: str) -> list[tuple[float, float, int]]:
    """(start, end, thread) of each call of ``kind``."""
    open_at: dict[int, float] = {}
    spans = []
    for e in events:
        if e["kind"] == f"{kind}_start":
            open_at[e["thread"]] = e["t"]
        elif e["kind"] == f"{kind}_end" and e["thread"] in open_at:
            spans.append((open_at.pop(e["thread"]), e["t"], e["thread"]))
    return spans


def _overlap(spans: list[tuple[float, float, int]], start: float, end: float) -> float:
    return sum(max(0.0, min(b, end) - max(a, start)) for a, b, _ in spans)


def turn_ends(events: list[dict[str, Any]]) -> list[dict[str, float]]:
    """Per turn end, ms after its VAD pause (the last before it): when the pause transcript,
    the words' verdict and the end came, the pass's own time, the work beside it."""
    spans = {kind: _spans(events, kind) for kind in KINDS}
    rows: list[dict[str, float]] = []
    pause: float | None = None
    firsts: dict[str, float] = {}
    lull: float | None = None
    for e in events:
        kind, t = e["kind"], e["t"]
        if kind == "SpeechLullFrame":
            lull = t
        elif kind == "SpeechPausedFrame":
            pause, firsts = t, {}
        elif pause is not None and kind in ("PauseTranscriptFrame", "EndOfMessageFrame"):
            firsts.setdefault(kind, t)
        elif pause is not None and kind == "TurnEndReasonFrame":
            row = {"turn end": t - pause}
            if lull is not None and pause - PAUSE_LOOKBACK_MS < lull <= pause:
                row["lull before the pause"] = pause - lull
            if (eom := firsts.get("EndOfMessageFrame")) is not None:
                row["words' verdict"] = eom - pause
            if (text := firsts.get("PauseTranscriptFrame")) is not None:
                row["pause transcript"] = text - pause
                done = [s for s in spans["pass"] if pause - PAUSE_LOOKBACK_MS < s[1] <= text]
                if done:
                    start, end, thread = done[-1]
                    row["pause pass's own time"] = end - start
                    others = [s for s in spans["pass"] if s[2] != thread]
                    row["another pass beside it"] = _overlap(others, start, end)
                    row["Smart Turn beside it"] = _overlap(spans["smart"], start, end)
                    row["LLM prefill beside it"] = _overlap(spans["prefill"], start, end)
            rows.append(row)
            pause = None
    return rows


def summary_table(rows: list[dict[str, float]]) -> Table:
    table = Table(title=f"after the VAD's pause ({len(rows)} turn ends), ms")
    for column in ("", "n", "p50", "p90"):
        table.add_column(column)
    names: list[str] = []
    for row in rows:
        names += [n for n in row if n not in names]
    for name in names:
        values = [row[name] for row in rows if name in row]
        p50, p90 = rounded_percentile(values, 50), rounded_percentile(values, 90)
        table.add_row(name, str(len(values)), f"{p50:.0f}", f"{p90:.0f}")
    return table


def main(argv: list[str] | None = None) -> None:
    from agent.cli.main import app

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("manifests", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    trace = Trace()
    instrument(trace)
    try:  # the eval exits 1 when a corpus run breaks its limits: the trace still counts
        app(["eval", *map(str, args.manifests), "--out", str(args.out)], standalone_mode=False)
    finally:
        args.out.mkdir(parents=True, exist_ok=True)
        lines = (json.dumps(e) for e in trace.events)
        (args.out / "trace.jsonl").write_text("\n".join(lines) + "\n")
        Console().print(summary_table(turn_ends(trace.events)))


if __name__ == "__main__":
    main()
