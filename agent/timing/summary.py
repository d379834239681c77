"""Per-stage percentiles over a run's turns, and the budget verdict."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.timing.budget import Budget, rounded_percentile
from agent.timing.record import TurnRecord
from agent.timing.timeline import STAGE_NAMES


def ms(value: float | None, digits: int = 0) -> str:
    """A duration in ms (whole by default), or a dash when it did not happen."""
    return "–" if value is None else f"{value:.{digits}f}"


def stage_values(records: list[TurnRecord]) -> dict[str, list[float]]:
    """Each stage's measured values over the turns (stages that did not happen are skipped)."""
    values: dict[str, list[float]] = {name: [] for name in STAGE_NAMES}
    for record in records:
        for name in STAGE_NAMES:
            value = record.stages[name]
            if value is not None:
                values[name].append(value)
    return values


def stage_stats(xs: list[float]) -> dict[str, Any]:
    """Count, p50, p95 and max of one stage's values (None where there are none)."""
    return {
        "n": len(xs),
        "p50": rounded_percentile(xs, 50),
        "p95": rounded_percentile(xs, 95),
        "max": round(max(xs), 1) if xs else None,
    }


def summarize(records: list[TurnRecord], budget: Budget) -> dict[str, Any]:
    """summary.json: p50/p95/max per stage, the budget used and the verdict."""
    values = stage_values(records)
    stages = {name: stage_stats(xs) for name, xs in values.items()}
    violations = budget.check(values)
    return {
        "turns": len(records),
        "answered_turns": sum(1 for r in records if r.stages["voice_to_voice"] is not None),
        "stages": stages,
        "budget": {
            "profile": budget.name,
            "stages": {k: v.model_dump(exclude_none=True) for k, v in budget.stages.items()},
        },
        "violations": violations,
        "verdict": "pass" if not violations else "fail",
    }


def verdict_lines(summary: dict[str, Any], run_dir: Path | None = None) -> list[str]:
    """What a run's summary says to a person: voice-to-voice and the budget verdict, one
    ``over budget:`` line per stage over its limits, and, given the run's folder, where the
    turn-by-turn report comes from (the verdict alone does not say which turns to look at)."""
    v2v = summary["stages"]["voice_to_voice"]
    lines = [
        f"voice-to-voice p50 {ms(v2v['p50'])} ms, p95 {ms(v2v['p95'])} ms over "
        f"{summary['answered_turns']}/{summary['turns']} answered turns; "
        f"budget '{summary['budget']['profile']}': {summary['verdict']}",
        *(f"over budget: {line}" for line in summary["violations"]),
    ]
    if run_dir is not None:
        lines.append(f"each turn, charted: `voice-agent report {run_dir}` writes report.html there")
    return lines
