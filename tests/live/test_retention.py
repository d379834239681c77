"""calls/ retention: oldest call folders go first, past a count, a size or an age; nothing
but call folders is touched; calls are not recorded on a nearly full disk."""

from __future__ import annotations

import os
import time
from pathlib import Path

from agent.live.retention import Retention, prune_calls, room_to_record

DAY = 86400.0


def make_calls(root: Path, n: int, size: int = 1000) -> list[Path]:
    """``n`` call folders, a minute apart, oldest first, each holding ``size`` bytes."""
    folders = []
    now = time.time()
    for i in range(n):
        folder = root / f"20261130-1{i:02d}000-phone-{i:016x}"
        folder.mkdir(parents=True)
        (folder / "call.wav").write_bytes(bytes(size))
        stamp = now - (n - i) * 60
        os.utime(folder, (stamp, stamp))
        folders.append(folder)
    return folders


def left(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


def test_past_the_count_the_oldest_go_first(tmp_path: Path):
    folders = make_calls(tmp_path, 6)
    removed = prune_calls(tmp_path, Retention(max_count=4))
    assert removed == folders[:2]
    assert left(tmp_path) == [f.name for f in folders[2:]]


def test_past_the_size_the_oldest_go_first(tmp_path: Path):
    folders = make_calls(tmp_path, 5, size=1000)
    assert prune_calls(tmp_path, Retention(max_bytes=2500)) == folders[:3]
    assert left(tmp_path) == [f.name for f in folders[3:]]


def test_past_the_age_they_go(tmp_path: Path):
    folders = make_calls(tmp_path, 4)
    old = time.time() - 40 * DAY
    for folder in folders[:2]:
        os.utime(folder, (old, old))
    assert prune_calls(tmp_path, Retention(max_age_secs=30 * DAY)) == folders[:2]


def test_calls_in_progress_and_other_files_are_never_touched(tmp_path: Path):
    folders = make_calls(tmp_path, 4)
    (tmp_path / "notes").mkdir()
    (tmp_path / "README.txt").write_text("mine")
    elsewhere = tmp_path.parent / f"{tmp_path.name}-outside"
    elsewhere.mkdir()
    (tmp_path / "20261130-000000-phone-00000000000000aa").symlink_to(elsewhere)
    removed = prune_calls(tmp_path, Retention(max_count=1), keep=[folders[0]])
    assert removed == folders[1:3]
    assert folders[0].exists() and folders[3].exists()
    assert (tmp_path / "notes").is_dir() and (tmp_path / "README.txt").exists()
    assert elsewhere.is_dir()


def test_no_recording_under_the_free_space_floor(tmp_path: Path):
    assert room_to_record(tmp_path, Retention(min_free_bytes=0))
    assert not room_to_record(tmp_path, Retention(min_free_bytes=1 << 62))
