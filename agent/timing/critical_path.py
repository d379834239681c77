"""A turn's critical path, from the caller's last word to the first audio: per stage, the
work that ran while it lasted and the time nothing of the profile ran (waited).

Built from a CPU profile's jobs (``agent.timing.cpu``), stamped on the call clock; at
compute pace work takes no call time, so every job is an instant and a stage's length is all
wait, while each job's CPU time still says what the stage's work cost.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from agent.timing.cpu import Job
from agent.timing.timeline import GAP, PART_STAGES


class RanJob(BaseModel):
    """A job of the profile that ran during a stage (times clipped to the stage)."""

    model_config = ConfigDict(extra="forbid")

    kind: str
    start_ms: float
    end_ms: float
    cpu_ms: float


class PathStep(BaseModel):
    """One stage of the path: when it lasted, what ran, and how long nothing did."""

    model_config = ConfigDict(extra="forbid")

    stage: str
    start_ms: float
    end_ms: float
    ran: list[RanJob]
    waited_ms: float


def _covered(spans: list[tuple[float, float]]) -> float:
    """Length of the union of ``spans``."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def _by_kind(ran: list[RanJob]) -> list[RanJob]:
    """One entry per kind (the VAD runs every 32 ms): first start to last end, CPU summed."""
    kinds: dict[str, RanJob] = {}
    for r in ran:
        if (k := kinds.get(r.kind)) is None:
            kinds[r.kind] = r.model_copy()
            continue
        k.start_ms, k.end_ms = min(k.start_ms, r.start_ms), max(k.end_ms, r.end_ms)
        k.cpu_ms += r.cpu_ms
    return list(kinds.values())


def critical_path(intervals: dict[str, tuple[float, float]], jobs: list[Job]) -> list[PathStep]:
    """The path's steps in time order, from a record's stage intervals (``stage_intervals``)
    and the profile's jobs; a job's CPU time is shared by the steps it overlaps, by time, and
    a step lists each kind once."""
    names = [n for n in (*PART_STAGES, GAP) if n in intervals]
    steps = []
    for name in sorted(names, key=lambda n: intervals[n]):
        start, end = intervals[name]
        ran = []
        for job in jobs:
            job_end = job.end_ms if job.end_ms is not None else end
            inside = job.start_ms < end and job_end > start
            instant = job.start_ms == job_end and start <= job.start_ms < end
            if not (inside or instant):
                continue
            lo, hi = max(start, job.start_ms), min(end, job_end)
            share = 1.0 if job_end == job.start_ms else (hi - lo) / (job_end - job.start_ms)
            ran.append(RanJob(kind=job.kind, start_ms=lo, end_ms=hi, cpu_ms=job.cpu_ms * share))
        waited = (end - start) - _covered([(r.start_ms, r.end_ms) for r in ran])
        steps.append(
            PathStep(stage=name, start_ms=start, end_ms=end, ran=_by_kind(ran), waited_ms=waited)
        )
    return steps
