"""The pooled summary of one or more runs: what the JSON report holds and the others show.

The percentiles and the budget verdict come from agent.timing (summarize, Budget.check), so
a report and the replay that produced the run can never disagree about a number.
"""

from __future__ import annotations

from typing import Any

from agent.reports.load import Pool, Turn
from agent.timing.budget import Budget
from agent.timing.record import TurnRecord
from agent.timing.summary import stage_stats, stage_values, summarize
from agent.timing.timeline import GAP, STAGE_NAMES

GAP_NAMES = (GAP,)


def stage_verdicts(values: dict[str, list[float]], budget: Budget) -> dict[str, str]:
    """pass / fail / no budget / no data per stage, from Budget.check on that stage alone."""
    verdicts = {}
    for name in STAGE_NAMES:
        if not values.get(name):
            verdicts[name] = "no data"
        elif name not in budget.stages:
            verdicts[name] = "no budget"
        else:
            verdicts[name] = "fail" if budget.check({name: values[name]}) else "pass"
    return verdicts


def gap_values(pool: Pool) -> dict[str, list[float]]:
    """Each orchestration gap's values over the turns (missing ones skipped)."""
    values: dict[str, list[float]] = {name: [] for name in GAP_NAMES}
    for record in pool.records:
        for name in GAP_NAMES:
            value = record.gaps[name]
            if value is not None:
                values[name].append(float(value))
    return values


def llm_cache(pool: Pool) -> dict[str, Any]:
    """Prompt-cache use: cached_tokens / prompt_tokens over the turns that report both."""
    prompt = cached = reported = 0
    for record in pool.records:
        if record.llm is None:
            continue
        p, c = record.llm.prompt_tokens, record.llm.cached_tokens
        if p is not None and c is not None and p > 0:
            prompt += p
            cached += c
            reported += 1
    return {
        "turns_reported": reported,
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "ratio": round(cached / prompt, 3) if prompt else None,
    }


def slowest_stage(record: TurnRecord) -> str | None:
    """The stage (or gap) that took the most of this turn's voice-to-voice time."""
    parts = {n: v for n, v in record.stages.items() if n != "voice_to_voice" and v is not None}
    parts.update({n: v for n, v in record.gaps.items() if v is not None})
    return max(parts, key=lambda n: parts[n]) if parts else None


def worst_turns(pool: Pool, count: int) -> list[Turn]:
    """The answered turns with the longest voice-to-voice, worst first."""
    answered = [t for t in pool.turns if t.v2v is not None]
    return sorted(answered, key=lambda t: t.v2v or 0.0, reverse=True)[:count]


def pooled_summary(pool: Pool, budget: Budget, worst: int = 5) -> dict[str, Any]:
    """summarize() over all pooled turns, plus what QA reads next to it."""
    records = pool.records
    summary = summarize(records, budget)
    values = stage_values(records)
    summary["runs"] = [str(run) for run in pool.runs]
    summary["stage_verdicts"] = stage_verdicts(values, budget)
    summary["gaps"] = {name: stage_stats(xs) for name, xs in gap_values(pool).items()}
    summary["llm_cache"] = llm_cache(pool)
    summary["interruptions"] = sum(1 for r in records if r.interrupted)
    summary["unanswered"] = [t.label for t in pool.turns if t.v2v is None]
    summary["errors"] = [{"turn": t.label, "error": e} for t in pool.turns for e in t.record.errors]
    summary["worst_turns"] = [
        {
            "turn": t.label,
            "voice_to_voice_ms": t.v2v,
            "slowest_stage": slowest_stage(t.record),
            "user_text": t.record.user_text,
            "bot_text": t.record.bot_text,
        }
        for t in worst_turns(pool, worst)
    ]
    return summary
