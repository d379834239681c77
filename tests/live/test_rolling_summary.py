"""The live call's rolling summary, on the turn records of a real replay run.

The records are turned back into the timer's turns and handed to a real ``LiveCall`` one
finished answer at a time, through the method its observer calls.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from loguru import logger

from agent.live.call import LiveCall, rolling_summary
from agent.settings import Settings
from agent.timing.budget import Budget
from agent.timing.record import TurnRecord
from agent.timing.summary import summarize
from tests.support.live_turns import (
    default_budget,
    finish_turn,
    live_call,
    replay_records,
    turn_from,
)

pytestmark = pytest.mark.slow

LINE = re.compile(
    r"rolling summary: call (\w+), (\d+) turns \((\d+) answered\), voice_to_voice "
    r"p50 ([\d.]+) ms p95 ([\d.]+) ms, (\d+) over the (\d+) ms budget"
)


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> list[TurnRecord]:
    return replay_records(tmp_path_factory.mktemp("replay") / "run")


@pytest.fixture(scope="module")
def budget() -> Budget:
    return default_budget()


@pytest.fixture
def log_lines() -> Any:
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(m.record["message"]), level="INFO")
    yield lines
    logger.remove(sink)


def run_call(
    every: int, records: list[TurnRecord], budget: Budget, tmp_path: Path
) -> tuple[LiveCall, list[dict[str, Any]]]:
    events: list[dict[str, Any]] = []
    call = live_call(Settings(report_every_turns=every), budget, tmp_path, emit=events.append)
    for record in records:
        finish_turn(call, record)
    return call, [e for e in events if e["type"] == "summary"]


def test_line_numbers_equal_summarize(records, budget, log_lines, tmp_path) -> None:
    call, events = run_call(1, records, budget, tmp_path)
    lines = [m for m in log_lines if m.startswith("rolling summary:")]
    assert len(lines) == len(events) == 2
    for n, (line, event) in enumerate(zip(lines, events, strict=True), start=1):
        summary = summarize(records[:n], budget)["stages"]["voice_to_voice"]
        match = LINE.fullmatch(line)
        assert match, line
        call_id, turns, answered, p50, p95, over, limit = match.groups()
        assert (call_id, int(turns), int(answered)) == (call.id, n, n)
        assert (float(p50), float(p95)) == (summary["p50"], summary["p95"])
        fails = sum(r.budget["voice_to_voice"] == "fail" for r in records[:n])
        assert int(over) == event["over_budget"] == fails
        assert float(limit) == budget.stages["voice_to_voice"].ceiling
        assert event == rolling_summary(call.id, records[:n], budget)
    # Two different turns: the pooled p95 differs from the first turn's alone.
    assert events[0]["p95_ms"] != events[1]["p95_ms"]
    # The answers were also saved, as before, and the records round-trip through the turns.
    assert [turn_from(r).record(budget) for r in records] == records
    saved = (call.dir / "turns.jsonl").read_text().splitlines()
    assert [json.loads(s)["stages"] for s in saved] == [r.stages for r in records]


@pytest.mark.parametrize(("every", "reported_at"), [(0, []), (1, [1, 2]), (2, [2]), (3, [])])
def test_every_n_finished_turns(records, budget, log_lines, tmp_path, every, reported_at) -> None:
    _, events = run_call(every, records, budget, tmp_path)
    assert [e["turns"] for e in events] == reported_at
    assert sum(m.startswith("rolling summary:") for m in log_lines) == len(reported_at)


def test_same_answer_finishing_twice_reports_once(records, budget, log_lines, tmp_path) -> None:
    """A barge-in and the bot's stop both finish the same answer: one summary, not two."""
    call, _ = run_call(1, records[:1], budget, tmp_path)
    call.answer_finished()
    assert sum(m.startswith("rolling summary:") for m in log_lines) == 1


def test_default_is_every_five_turns() -> None:
    assert Settings().report_every_turns == 5
    with pytest.raises(ValueError):
        Settings(report_every_turns=-1)
