"""Files only their owner may read: a call's recording and transcript are a caller's words.

Created with the mode they keep (not chmod-ed after): no moment where another local user
could open them. The umask can only take bits away, so these modes hold whatever it is.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

FILE_MODE = 0o600
FOLDER_MODE = 0o700


def make_private_folder(path: Path, *, exist_ok: bool = False) -> None:
    """``path`` as a folder only its owner can list or enter (its parents as usual)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.mkdir(mode=FOLDER_MODE, exist_ok=exist_ok)


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (created 0600, or truncated)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)


def create_private(path: Path) -> BinaryIO:
    """A new file at ``path``, 0600, read-write and unbuffered; fails if anything is there
    already (a file or a link someone else put there is never written through)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
    return os.fdopen(fd, "r+b", buffering=0)
