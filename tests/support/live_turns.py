"""A real replay's turn records, handed back to a real ``LiveCall`` one finished answer at a
time (no models: only the call's bookkeeping runs)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from agent.live.call import Event, LiveCall, Runtime
from agent.reports.load import load_run
from agent.settings import PROJECT_ROOT, Settings
from agent.timing.budget import Budget, load_budget
from agent.timing.record import TurnRecord
from agent.timing.turn_timer import Turn, TurnTimer

SAMPLES = ["agent/samples/ldc93s1.wav", "agent/samples/new_home_in_the_stars.wav"]


def replay_records(
    out: Path, env: dict[str, str] | None = None, pace: str = "compute"
) -> list[TurnRecord]:
    """Replay the two sample turns in a real agent process; its turns.jsonl records."""
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli", "replay", *SAMPLES, "--out", str(out), "--pace", pace],
        cwd=PROJECT_ROOT, env={**os.environ, **(env or {})}, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    records = load_run(out)
    assert len(records) == 2 and all(r.voice_to_voice_ms is not None for r in records)
    return records


def live_call(
    settings: Settings, budget: Budget, calls_dir: Path, emit: Callable[[Event], None] | None = None
) -> LiveCall:
    """A LiveCall ready for turns (no models: only its bookkeeping runs)."""
    runtime = Runtime(settings, None, None, budget)  # type: ignore[arg-type]
    call = LiveCall(runtime, calls_dir, kind="test", emit=emit)
    call.timer = TurnTimer(call.clock, budget)
    return call


def turn_from(record: TurnRecord) -> Turn:
    """The timer's turn that produced a record."""
    return Turn(
        number=record.turn, input=record.input, user_text=record.user_text,
        bot_text=record.bot_text, spoken_text=record.spoken_text,
        events=dict(record.events), llm=record.llm,
        errors=list(record.errors), end_reason=record.turn_end_reason,
        end_value=record.turn_end_value, end_words=record.turn_end_words,
        end_goes_on=record.turn_end_goes_on, end_text=record.turn_end_text,
        last_interim=record.last_interim_text,
    )  # fmt: skip


def finish_turn(call: LiveCall, record: TurnRecord) -> None:
    """The recorded turn happens in the call, then its answer finishes."""
    assert call.timer is not None
    call.timer.turns.append(turn_from(record))
    call.answer_finished()


def default_budget() -> Budget:
    settings = Settings()
    return load_budget(settings.budget_file, settings.budget_profile)
