"""Reading replay runs (the record contract of docs/design.md) for reports.

Several runs pool their turns; each turn keeps the run it came from, so that its audio can
be cut from the right ``call.wav`` and its label says where it was measured.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agent.errors import UserError
from agent.timing.record import TurnRecord


@dataclass(frozen=True)
class Turn:
    """One turn record and the run folder it was read from."""

    run: Path
    label: str
    record: TurnRecord

    @property
    def v2v(self) -> float | None:
        """voice_to_voice in ms (None when the bot never answered)."""
        return self.record.stages["voice_to_voice"]


@dataclass(frozen=True)
class Pool:
    """The pooled turns of one or more runs."""

    runs: tuple[Path, ...]
    turns: tuple[Turn, ...]

    @property
    def records(self) -> list[TurnRecord]:
        """The turn records, as agent.timing.summary expects them."""
        return [t.record for t in self.turns]


def record_problem(exc: ValidationError) -> str:
    """What is wrong with a turn record, as ``<field>: <problem>`` (missing fields together)."""
    errors = exc.errors()
    missing = [".".join(map(str, e["loc"])) for e in errors if e["type"] == "missing"]
    if missing:
        them = "it" if len(missing) == 1 else "them"
        return f"{', '.join(missing)}: the turn record lacks {them} (not a replay run?)"
    first = errors[0]
    field = ".".join(map(str, first["loc"])) or "record"
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    return f"{field}: {first['msg']}{more}"


def parse_record(data: Any, where: str) -> TurnRecord:
    """A turn record from one parsed JSON line; every problem is one UserError line."""
    if not isinstance(data, dict):
        raise UserError(f"{where}: a turn record must be a JSON object, got {type(data).__name__}")
    try:
        return TurnRecord.model_validate(data)
    except ValidationError as exc:
        raise UserError(f"{where}: {record_problem(exc)}") from None


def load_run(run_dir: Path) -> list[TurnRecord]:
    """The turn records of one run folder; every problem is one UserError line."""
    if not run_dir.exists():
        hint = ""
        if str(run_dir) == "compare":
            hint = "; to compare two runs use `voice-agent compare BASE_DIR NEW_DIR`"
        raise UserError(f"run folder {run_dir} not found{hint}")
    if not run_dir.is_dir():
        raise UserError(f"{run_dir} is not a folder: give the --out folder of a replay run")
    turns_file = run_dir / "turns.jsonl"
    if not turns_file.is_file():
        raise UserError(f"{turns_file} not found: is {run_dir} the --out folder of a replay run?")
    records = []
    for number, line in enumerate(turns_file.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{turns_file} line {number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"{where} is not valid JSON ({exc.msg})") from None
        records.append(parse_record(data, where))
    if not records:
        raise UserError(f"{turns_file} has no turns: the run recorded nothing to report")
    return records


def load_runs(run_dirs: list[Path]) -> Pool:
    """Pool the turns of several runs, labelled ``#n`` (one run) or ``run:#n`` (several)."""
    if not run_dirs:
        raise UserError("give at least one run folder")
    several = len(run_dirs) > 1
    names = _short_names(run_dirs)
    turns = []
    for run_dir, name in zip(run_dirs, names, strict=True):
        for record in load_run(run_dir):
            label = f"{name}:#{record.turn}" if several else f"#{record.turn}"
            turns.append(Turn(run=run_dir, label=label, record=record))
    return Pool(runs=tuple(run_dirs), turns=tuple(turns))


def _short_names(run_dirs: list[Path]) -> list[str]:
    """Folder names, made unique with their parents when two runs share a name."""
    names = [d.resolve().name or str(d) for d in run_dirs]
    if len(set(names)) == len(names):
        return names
    return [str(d) for d in run_dirs]
