"""How much of ``calls/`` is kept: call folders past a size, count or age limit are deleted,
oldest first, and no call is recorded when the disk is nearly full.

Only folders named as the server names them (``<date>-<time>-<kind>-<hex id>``) are ever
touched, so whatever else lives in ``calls/`` is safe.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from loguru import logger

CALL_FOLDER = re.compile(r"^\d{8}-\d{6}-[a-z]+-[0-9a-f]+$")


@dataclass(frozen=True)
class Retention:
    """The limits on ``calls/``; None turns a limit off."""

    max_bytes: int | None = None
    max_count: int | None = None
    max_age_secs: float | None = None
    min_free_bytes: int = 0


def folder_bytes(folder: Path) -> int:
    """Bytes of the regular files in a call folder (links are not followed)."""
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file() and not p.is_symlink())


def call_folders(calls_dir: Path) -> list[Path]:
    """The call folders in ``calls_dir``, oldest first (the name starts with its start time)."""
    if not calls_dir.is_dir():
        return []
    found = [p for p in calls_dir.iterdir()
             if CALL_FOLDER.match(p.name) and p.is_dir() and not p.is_symlink()]  # fmt: skip
    return sorted(found, key=lambda p: (p.name[:15], p.stat().st_mtime))


def prune_calls(
    calls_dir: Path, limits: Retention, *, keep: Iterable[Path] = (), now: float | None = None
) -> list[Path]:
    """Delete the oldest call folders until ``calls_dir`` is within ``limits``; return them.

    Folders in ``keep`` (calls in progress) are never deleted, nor counted against a limit.
    """
    kept = {Path(p).resolve() for p in keep}
    folders = [p for p in call_folders(calls_dir) if p.resolve() not in kept]
    sizes = {p: folder_bytes(p) for p in folders}
    total = sum(sizes.values())
    now = time.time() if now is None else now
    removed: list[Path] = []
    for folder in folders:
        over_count = limits.max_count is not None and len(folders) - len(removed) > limits.max_count
        over_bytes = limits.max_bytes is not None and total > limits.max_bytes
        too_old = (limits.max_age_secs is not None
                   and now - folder.stat().st_mtime > limits.max_age_secs)  # fmt: skip
        if not (over_count or over_bytes or too_old):
            if limits.max_age_secs is None:
                break  # the rest is newer and the totals are within limits
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
        total -= sizes[folder]
    if removed:
        logger.info("calls retention: removed {} call folder(s), oldest {}", len(removed),
                    removed[0].name)  # fmt: skip
    return removed


def room_to_record(calls_dir: Path, limits: Retention) -> bool:
    """Whether the disk under ``calls_dir`` has more free space than the floor."""
    try:
        return shutil.disk_usage(calls_dir).free > limits.min_free_bytes
    except OSError:
        return False
