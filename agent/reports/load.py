"""Reading replay runs (the record contract of docs/design.md) for reports.

Several runs pool their turns; each turn keeps the run it came from, so that its audio can
be cut from the right ``call.wav`` and its label says where it was measured.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.errors import UserError
from agent.timing.timeline import STAGE_NAMES

REQUIRED_KEYS = ("turn", "events", "stages", "voice_to_voice_ms")


@dataclass(frozen=True)
class Turn:
    """One turn record and the run folder it was read from."""

    run: Path
    label: str
    record: dict[str, Any]

    @property
    def v2v(self) -> float | None:
        """voice_to_voice in ms (None when the bot never answered)."""
        return self.record["stages"].get("voice_to_voice")


@dataclass(frozen=True)
class Pool:
    """The pooled turns of one or more runs."""

    runs: tuple[Path, ...]
    turns: tuple[Turn, ...]

    @property
    def records(self) -> list[dict[str, Any]]:
        """The raw turn records, as agent.timing.summary expects them."""
        return [t.record for t in self.turns]


def _number_or_null(value: Any) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def _check_record(record: Any, where: str) -> dict[str, Any]:
    if not isinstance(record, dict):
        raise UserError(
            f"{where}: a turn record must be a JSON object, got {type(record).__name__}"
        )
    missing = [k for k in REQUIRED_KEYS if k not in record]
    if missing:
        raise UserError(f"{where}: turn record lacks {', '.join(missing)} (not a replay run?)")
    for key in ("events", "stages"):
        if not isinstance(record[key], dict):
            raise UserError(f"{where}: `{key}` must be an object of name -> ms")
    for name in STAGE_NAMES:
        if not _number_or_null(record["stages"].get(name)):
            raise UserError(f"{where}: stage {name} must be a number of ms or null")
    for name, value in record["events"].items():
        if not _number_or_null(value):
            raise UserError(f"{where}: event {name} must be a number of ms or null")
    record["stages"] = {name: record["stages"].get(name) for name in STAGE_NAMES}
    return record


def load_run(run_dir: Path) -> list[dict[str, Any]]:
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
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"{where} is not valid JSON ({exc.msg})") from None
        records.append(_check_record(record, where))
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
            label = f"{name}:#{record['turn']}" if several else f"#{record['turn']}"
            turns.append(Turn(run=run_dir, label=label, record=record))
    return Pool(runs=tuple(run_dirs), turns=tuple(turns))


def _short_names(run_dirs: list[Path]) -> list[str]:
    """Folder names, made unique with their parents when two runs share a name."""
    names = [d.resolve().name or str(d) for d in run_dirs]
    if len(set(names)) == len(names):
        return names
    return [str(d) for d in run_dirs]
