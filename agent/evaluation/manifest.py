"""Eval manifests: one JSON object per line, a recorded clip and what was said in it."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent.errors import UserError


class Clip(BaseModel):
    """One manifest row; unknown keys (speaker, licence...) are kept for the report."""

    model_config = ConfigDict(extra="allow")

    file: str
    text: str
    expect_turns: int = Field(1, ge=1)
    pauses: list[tuple[float, float]] = Field(default_factory=list)
    digits: str | None = Field(None, pattern=r"^[0-9]+$")  # a number read out, as digits

    path: Path = Path()  # the file, resolved against the manifest's folder

    @property
    def name(self) -> str:
        return self.path.name


def load_manifest(path: Path) -> list[Clip]:
    """All rows of a manifest, each checked; a bad one is one clear UserError line."""
    if not path.is_file():
        raise UserError(f"manifest {path} not found: give a JSON-lines file of clips")
    clips: list[Clip] = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        where = f"manifest {path} line {number}"
        try:
            row = json.loads(line)
            clip = Clip.model_validate(row)
        except json.JSONDecodeError as exc:
            raise UserError(f"{where} is not JSON ({exc.msg}): one object per line") from None
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            raise UserError(f"{where}: {loc}: {err['msg']} (needs file and text)") from None
        clip.path = (path.parent / clip.file).resolve()
        if not clip.path.is_file():
            raise UserError(f"{where}: audio file {clip.path} not found")
        clips.append(clip)
    if not clips:
        raise UserError(f"manifest {path} has no clips")
    return clips
