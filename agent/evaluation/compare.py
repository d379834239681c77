"""Two eval runs side by side: the corpus figures that got worse fail the comparison."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.errors import UserError

# (name, key path in eval.json's overall figures, allowed growth before it is a regression)
FIGURES: tuple[tuple[str, tuple[str, ...], float], ...] = (
    ("WER streaming", ("wer_streaming",), 0.005),
    ("WER gap", ("wer_gap",), 0.005),
    ("duplicated phrases", ("duplicated_phrases",), 0.0),
    ("stray words", ("stray_words",), 0.0),
    ("split rate", ("split_rate",), 0.0),
    ("cut-off rate", ("cutoff_rate",), 0.0),
    ("empty turns", ("empty_turns",), 0.0),
    ("words lost", ("words_lost",), 0.0),
    ("talk-over > 200 ms (share of clips)", ("talk_over", "share_over_200ms"), 0.0),
    ("merges", ("merges",), 0.0),
    ("repeated answers", ("answers", "repeated"), 0.0),
    ("loops", ("answers", "loop"), 0.0),
    ("echoes", ("answers", "echo"), 0.0),
    ("endpointing p50 ms", ("endpointing", "p50"), 50.0),
    ("voice-to-voice p50 ms (call.wav)", ("voice_to_voice_callwav", "p50"), 50.0),
)


@dataclass
class FigureChange:
    name: str
    base: float | None
    new: float | None
    worse: bool


def load_eval(run_dir: Path) -> dict[str, Any] | None:
    """A run's eval.json, or None when the run is a plain replay."""
    path = run_dir / "eval.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        message = f"{path} is not valid JSON ({exc.msg}): run voice-agent eval again"
        raise UserError(message) from None


def _get(figures: dict[str, Any], path: tuple[str, ...]) -> float | None:
    value: Any = figures
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def compare_evals(base: dict[str, Any], new: dict[str, Any]) -> list[FigureChange]:
    """Each corpus figure before and after; worse beyond its allowance is a regression."""
    changes = []
    for name, path, allowed in FIGURES:
        a, b = _get(base["overall"], path), _get(new["overall"], path)
        worse = a is not None and b is not None and b - a > allowed
        changes.append(FigureChange(name, a, b, worse))
    return changes


def render_eval_comparison(changes: list[FigureChange]) -> str:
    lines = ["", "eval figures (base -> new):"]
    for c in changes:
        flag = "  WORSE" if c.worse else ""
        lines.append(f"  {c.name:<34} {c.base!s:>10} -> {c.new!s:<10}{flag}")
    return "\n".join(lines) + "\n"
