"""Comparing two runs stage by stage: did NEW get slower than BASE, beyond the noise we allow?

A run has few turns, so a p50 difference alone says little: next to it we give a bootstrap 95%
interval of the p50 difference and the turn counts. When both runs replayed the same inputs in the
same order (the usual A/B of a change), turns are paired by input and resampled together, so the
interval reflects the change and not how different the turns are from each other; otherwise
each run's turns are resampled on their own. The gate is the tolerance: a stage regresses
when its p50 or p95 grew by more than ``max(tolerance_ms, tolerance_pct % of BASE)``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from agent.reports.load import Pool
from agent.reports.markdown import ms
from agent.timing.budget import percentile
from agent.timing.summary import stage_values
from agent.timing.timeline import REPORT_ORDER

RESAMPLES = 4000


@dataclass
class StageChange:
    """One stage's p50/p95 in both runs, the change, its interval and the verdict."""

    stage: str
    n_base: int
    n_new: int
    base_p50: float | None = None
    new_p50: float | None = None
    base_p95: float | None = None
    new_p95: float | None = None
    ci_p50: tuple[float, float] | None = None
    paired: bool = False
    allowed_ms: dict[str, float] = field(default_factory=dict)
    regressions: list[str] = field(default_factory=list)
    note: str = ""

    @property
    def d50(self) -> float | None:
        """NEW p50 - BASE p50 in ms."""
        return _delta(self.base_p50, self.new_p50)

    @property
    def d95(self) -> float | None:
        """NEW p95 - BASE p95 in ms."""
        return _delta(self.base_p95, self.new_p95)


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(b - a, 1)


def bootstrap_p50_diff(
    base: list[float],
    new: list[float],
    *,
    paired: bool = False,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """95% percentile-bootstrap interval of median(NEW) - median(BASE), seeded (reproducible).

    ``paired``: base[i] and new[i] are the same input; pairs are resampled together.
    """
    rng = np.random.default_rng(seed)
    a, b = np.asarray(base, dtype=float), np.asarray(new, dtype=float)
    ia = rng.integers(0, len(a), size=(resamples, len(a)))
    ib = ia if paired else rng.integers(0, len(b), size=(resamples, len(b)))
    diffs = np.median(b[ib], axis=1) - np.median(a[ia], axis=1)
    lo, hi = np.percentile(diffs, [2.5, 97.5])
    return round(float(lo), 1), round(float(hi), 1)


def _keyed(pool: Pool, stage: str) -> dict[tuple[str | None, int], float]:
    """A stage's values keyed by (input, how many times that input came before)."""
    seen: dict[str | None, int] = {}
    out = {}
    for record in pool.records:
        source = record.input
        key = (source, seen.get(source, 0))
        seen[source] = key[1] + 1
        value = record.stages[stage]
        if value is not None:
            out[key] = float(value)
    return out


def paired_values(base: Pool, new: Pool, stage: str) -> tuple[list[float], list[float]] | None:
    """The stage's values of both runs in matching order when every turn pairs up, else None."""
    a, b = _keyed(base, stage), _keyed(new, stage)
    if not a or a.keys() != b.keys():
        return None
    return [a[k] for k in a], [b[k] for k in a]


def _note(change: StageChange) -> str:
    if change.ci_p50 is None:
        return ""
    lo, hi = change.ci_p50
    few = "; few turns: rough" if min(change.n_base, change.n_new) < 5 else ""
    few = f" ({'paired by input' if change.paired else 'unpaired'}{few})"
    if lo > 0:
        return "slower, beyond noise" + few
    if hi < 0:
        return "faster, beyond noise" + few
    return "within noise" + few


def compare_pools(
    base: Pool, new: Pool, tolerance_ms: float = 50.0, tolerance_pct: float = 10.0
) -> list[StageChange]:
    """One StageChange per timeline stage (percentiles from agent.timing, like the reports)."""
    base_values, new_values = stage_values(base.records), stage_values(new.records)
    changes = []
    for name in REPORT_ORDER:
        xs, ys = base_values[name], new_values[name]
        change = StageChange(stage=name, n_base=len(xs), n_new=len(ys))
        if xs:
            change.base_p50, change.base_p95 = percentile(xs, 50), percentile(xs, 95)
        if ys:
            change.new_p50, change.new_p95 = percentile(ys, 50), percentile(ys, 95)
        if xs and ys:
            pairs = paired_values(base, new, name)
            change.paired = pairs is not None
            change.ci_p50 = bootstrap_p50_diff(*(pairs or (xs, ys)), paired=change.paired)
            for pct, before, delta in (
                ("p50", change.base_p50, change.d50),
                ("p95", change.base_p95, change.d95),
            ):
                allowed = max(tolerance_ms, (before or 0.0) * tolerance_pct / 100.0)
                change.allowed_ms[pct] = round(allowed, 1)
                if delta is not None and delta > allowed:
                    change.regressions.append(
                        f"{name} {pct} +{delta:.0f} ms ({before:.0f} -> {before + delta:.0f} ms; "
                        f"allowed +{allowed:.0f} ms; {len(xs)} vs {len(ys)} turns)"
                    )
            change.note = _note(change)
        elif xs:
            change.regressions.append(f"{name}: measured in BASE ({len(xs)} turns), never in NEW")
            change.note = "missing in NEW"
        elif ys:
            change.note = "new in NEW"
        else:
            change.note = "no data"
        changes.append(change)
    return changes


def _signed(value: float | None) -> str:
    if value is None:
        return "–"
    return "+0" if round(value) == 0 else f"{value:+.0f}"


def render_comparison(
    changes: list[StageChange], base: str, new: str, tolerance_ms: float, tolerance_pct: float
) -> str:
    """A Markdown table of the changes and one line per regression."""
    lines = [
        f"Comparing BASE `{base}` -> NEW `{new}`; a stage regresses when its p50 or p95 grows "
        f"by more than {tolerance_ms:g} ms or {tolerance_pct:g}% of BASE, whichever is larger.",
        "",
        "| stage | turns base/new | base p50 | new p50 | Δ p50 | 95% CI of Δ p50 "
        "| base p95 | new p95 | Δ p95 | note |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for c in changes:
        ci = "–" if c.ci_p50 is None else f"[{_signed(c.ci_p50[0])}, {_signed(c.ci_p50[1])}]"
        flag = " ❌" if c.regressions else ""
        lines.append(
            f"| {c.stage}{flag} | {c.n_base}/{c.n_new} | {ms(c.base_p50)} | {ms(c.new_p50)} "
            f"| {_signed(c.d50)} | {ci} | {ms(c.base_p95)} | {ms(c.new_p95)} | {_signed(c.d95)} "
            f"| {c.note} |"
        )
    regressions = [r for c in changes for r in c.regressions]
    lines.append("")
    lines += [f"regression: {r}" for r in regressions] or ["no regression beyond the tolerance"]
    return "\n".join(lines) + "\n"


def comparison_json(changes: list[StageChange]) -> list[dict[str, Any]]:
    """The changes as plain data (for --json)."""
    return [{**asdict(c), "d50": c.d50, "d95": c.d95} for c in changes]
