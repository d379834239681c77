"""The latency budget: validated on load, checked per turn and per run.

The default budget ships inside the package (``agent/timing/latency_budget.yaml``), so an
installed ``voice-agent`` has one; a file of your own (``--budget FILE``, ``budget_file`` in a
config file or ``VOICE_AGENT_BUDGET_FILE``) replaces it.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agent.errors import UserError
from agent.timing.timeline import STAGE_NAMES
from agent.yaml_file import read_yaml

Percentile = Literal["p50", "p95"]


class StageBudget(BaseModel):
    """Limits in ms for one stage, at the percentiles QA checks."""

    model_config = ConfigDict(extra="forbid")

    p50: float | None = Field(None, gt=0)
    p95: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _some_limit(self) -> StageBudget:
        if self.p50 is None and self.p95 is None:
            raise ValueError("give p50 and/or p95")
        return self

    @property
    def ceiling(self) -> float:
        """The per-turn limit: the p95 budget (or p50 when only that is given)."""
        return self.p95 if self.p95 is not None else self.p50  # type: ignore[return-value]


class Budget(BaseModel):
    """One profile: a StageBudget per stage name."""

    model_config = ConfigDict(extra="forbid")

    name: str
    stages: dict[str, StageBudget]

    @model_validator(mode="after")
    def _known_stages(self) -> Budget:
        unknown = sorted(set(self.stages) - set(STAGE_NAMES))
        if unknown:
            raise ValueError(
                f"unknown stage(s) {', '.join(unknown)}; known: {', '.join(STAGE_NAMES)}"
            )
        if "voice_to_voice" not in self.stages:
            raise ValueError("voice_to_voice must have a budget")
        return self

    def turn_verdicts(self, stages: dict[str, float | None]) -> dict[str, str | None]:
        """'pass'/'fail' per budgeted stage of one turn (None when the stage did not happen)."""
        out: dict[str, str | None] = {}
        for name, limit in self.stages.items():
            value = stages.get(name)
            out[name] = None if value is None else ("pass" if value <= limit.ceiling else "fail")
        return out

    def check(self, values: dict[str, list[float]]) -> list[str]:
        """One line per stage over budget in a run's turns, saying by how much (empty when
        within budget), so a reader sees what to work on without doing the sums."""
        problems = []
        for name, limit in self.stages.items():
            xs = values.get(name) or []
            overs = [
                (pct, got, bound)
                for pct, bound in (("p50", limit.p50), ("p95", limit.p95))
                if xs and bound is not None and (got := percentile(xs, int(pct[1:]))) > bound
            ]
            if not overs:
                continue
            (pct, got, bound), *more = overs
            line = f"{name} {pct} {got:.0f} ms, budget {bound:.0f} ms: {got - bound:.0f} ms over"
            for pct, got, bound in more:
                line += f" ({pct} {got:.0f} ms: {got - bound:.0f} ms over)"
            problems.append(line)
        return problems


class EvalLimits(BaseModel):
    """The eval gate (the budget file's ``eval:`` section): each limit unset is not checked."""

    model_config = ConfigDict(extra="forbid")

    max_wer_gap: float | None = Field(
        None, description="streaming WER minus offline WER on the same clips (0.005 = 0.5 points)"
    )
    max_cutoff_rate: float | None = Field(
        None, ge=0, le=1, description="share of clips with a bot onset inside the caller's speech"
    )
    max_split_rate: float | None = Field(
        None, ge=0, le=1, description="share of clips heard as more turns than they hold"
    )
    max_duplicated_phrases: int | None = Field(
        None, ge=0, description="phrases of 3+ words heard more often than the clip says them"
    )
    max_stray_words: int | None = Field(
        None, ge=0, description="words heard before or after a clip's reference words"
    )

    def check(self, figures: dict) -> list[str]:
        """One line per broken limit, from ``voice-agent eval``'s overall figures."""
        problems = []
        for limit, key in (
            (self.max_wer_gap, "wer_gap"),
            (self.max_cutoff_rate, "cutoff_rate"),
            (self.max_split_rate, "split_rate"),
            (self.max_duplicated_phrases, "duplicated_phrases"),
            (self.max_stray_words, "stray_words"),
        ):
            got = figures.get(key)
            if limit is not None and got is not None and got > limit:
                problems.append(f"{key} {got:.4g} > limit {limit:.4g} ({figures['clips']} clips)")
        return problems


def load_eval_limits(path: Path) -> EvalLimits:
    """The ``eval:`` section of a budget file (no section: nothing is checked)."""
    data = read_yaml(path, "budget file") if path.is_file() else {}
    section = (data or {}).get("eval") or {}
    try:
        return EvalLimits.model_validate(section)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise UserError(f"budget file {path}, eval: {loc}: {err['msg']}") from None


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q, method="linear"))


def rounded_percentile(values: list[float], q: float) -> float | None:
    """The percentile to 0.1 ms, as reports and benchmarks print it; None with no values."""
    return round(percentile(values, q), 1) if values else None


def default_budget_file() -> Path:
    """The budget file shipped in this package: in a checkout, a link to the repo's
    latency_budget.yaml (one file to edit), in a wheel a copy of it."""
    return Path(str(resources.files(__package__).joinpath("latency_budget.yaml")))


def load_budget(path: Path, profile: str | None = None) -> Budget:
    """Read one profile of a budget file; every problem becomes one clear UserError line."""
    where = f"budget file {path}"
    if not path.is_file():
        raise UserError(f"{where} not found: pass --budget FILE, or leave it unset for the default")
    data = read_yaml(path, "budget file")
    if not isinstance(data, dict) or not isinstance(data.get("profiles"), dict):
        raise UserError(f"{where} must have a `profiles:` mapping of profile -> stage budgets")
    name = profile or data.get("default") or next(iter(data["profiles"]), None)
    if name not in data["profiles"]:
        known = ", ".join(map(str, data["profiles"])) or "none"
        raise UserError(f"{where} has no profile '{name}' (profiles: {known})")
    stages = data["profiles"][name]
    if not isinstance(stages, dict):
        raise UserError(f"{where}: profile '{name}' must map stage names to {{p50, p95}}")
    try:
        return Budget(name=str(name), stages=stages)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise UserError(f"{where}, profile '{name}': {loc}: {err['msg']}") from None
