"""Per-stage percentiles over a run's turns, and the budget verdict."""

from __future__ import annotations

from typing import Any

from agent.timing.budget import Budget, percentile
from agent.timing.timeline import STAGE_NAMES


def stage_values(records: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Each stage's measured values over the turns (stages that did not happen are skipped)."""
    values: dict[str, list[float]] = {name: [] for name in STAGE_NAMES}
    for record in records:
        for name in STAGE_NAMES:
            value = record["stages"].get(name)
            if value is not None:
                values[name].append(value)
    return values


def summarize(records: list[dict[str, Any]], budget: Budget) -> dict[str, Any]:
    """summary.json: p50/p95/max per stage, the budget used and the verdict."""
    values = stage_values(records)
    stages = {
        name: {
            "n": len(xs),
            "p50": round(percentile(xs, 50), 1) if xs else None,
            "p95": round(percentile(xs, 95), 1) if xs else None,
            "max": round(max(xs), 1) if xs else None,
        }
        for name, xs in values.items()
    }
    violations = budget.check(values)
    return {
        "turns": len(records),
        "answered_turns": sum(1 for r in records if r["stages"]["voice_to_voice"] is not None),
        "stages": stages,
        "budget": {
            "profile": budget.name,
            "stages": {k: v.model_dump(exclude_none=True) for k, v in budget.stages.items()},
        },
        "violations": violations,
        "verdict": "pass" if not violations else "fail",
    }
