"""How much of ``calls/`` is kept: call folders past a size, count or age limit are deleted,
oldest first, and no call is recorded when the disk is nearly full.

Only folders named as the server names them (``<date>-<time>-<kind>-<hex id>``) are ever
touched, so whatever else lives in ``calls/`` is safe. Calls that end together prune at once:
one prune at a time per ``calls/`` (a lock on the folder, so across processes too), and a folder or
file that vanishes meanwhile (deleted by hand, or by an older server) is skipped, never an
error in the call that ended.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import stat
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
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
    """Bytes of the regular files in a call folder (links are not followed; what vanishes
    while it is counted counts 0)."""
    try:
        entries = list(folder.iterdir())
    except FileNotFoundError:
        return 0
    return sum(_regular_size(p) for p in entries)


def _regular_size(path: Path) -> int:
    try:
        info = path.lstat()
    except FileNotFoundError:
        return 0
    return info.st_size if stat.S_ISREG(info.st_mode) else 0


def call_folders(calls_dir: Path) -> list[tuple[Path, float]]:
    """The call folders in ``calls_dir`` and their mtimes, oldest first (the name starts with
    its start time); links and folders that vanish while listed are left out."""
    if not calls_dir.is_dir():
        return []
    found = []
    for path in calls_dir.iterdir():
        if not CALL_FOLDER.match(path.name):
            continue
        try:
            info = path.lstat()
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(info.st_mode):
            found.append((path, info.st_mtime))
    return sorted(found, key=lambda p: (p[0].name[:15], p[1]))


@contextmanager
def _pruning(calls_dir: Path) -> Iterator[None]:
    """One prune of ``calls_dir`` at a time, across threads and processes: two at once
    would delete each other's candidates and count them twice."""
    folder = os.open(calls_dir, os.O_RDONLY | os.O_DIRECTORY)  # the lock is the folder's
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        yield
    finally:
        os.close(folder)  # which lets the lock go


def prune_calls(
    calls_dir: Path, limits: Retention, *, keep: Iterable[Path] = (), now: float | None = None
) -> list[Path]:
    """Delete the oldest call folders until ``calls_dir`` is within ``limits``; return them.

    Folders in ``keep`` (calls in progress) are never deleted, nor counted against a limit.
    """
    if not calls_dir.is_dir():
        return []
    kept = {Path(p).resolve() for p in keep}
    with _pruning(calls_dir):
        folders = [(p, t) for p, t in call_folders(calls_dir) if p.resolve() not in kept]
        sizes = {p: folder_bytes(p) for p, _ in folders}
        total = sum(sizes.values())
        now = time.time() if now is None else now
        removed: list[Path] = []
        for folder, mtime in folders:
            over_count = (limits.max_count is not None
                          and len(folders) - len(removed) > limits.max_count)  # fmt: skip
            over_bytes = limits.max_bytes is not None and total > limits.max_bytes
            too_old = limits.max_age_secs is not None and now - mtime > limits.max_age_secs
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
