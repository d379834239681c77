"""Where a benchmark's result goes: one JSON file, its folder made first, since ``runs/``
does not exist in a fresh clone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_json(path: Path, result: dict[str, Any]) -> None:
    """Write a benchmark's result as indented JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
