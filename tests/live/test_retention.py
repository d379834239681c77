"""calls/ retention: oldest call folders go first, past a count, a size or an age; nothing
but call folders is touched; calls are not recorded on a nearly full disk."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from agent.live import retention
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


def make_browser_calls(root: Path, n: int) -> None:
    """``n`` call folders of three small files each, as short browser calls leave them."""
    for i in range(n):
        folder = root / f"20261130-{i:06d}-browser-{i:016x}"
        folder.mkdir()
        for name in ("call.wav", "call.json", "turns.jsonl"):
            (folder / name).write_bytes(bytes(100))


def prune_together(calls_dir: Path, limits: Retention, parties: int, kind: str) -> list[str]:
    """``parties`` prunes of ``calls_dir`` let go at the same moment, on threads or in
    processes (as the calls of one server, or of a pool's workers, end together); the
    errors they raised."""
    context = multiprocessing.get_context("fork")
    barrier = threading.Barrier(parties) if kind == "threads" else context.Barrier(parties)
    errors = context.Queue()

    def prune() -> None:
        barrier.wait()
        try:
            prune_calls(calls_dir, limits)
        except Exception as exc:  # noqa: BLE001 - what the call would have died of
            errors.put(f"{type(exc).__name__}: {exc}")

    make = threading.Thread if kind == "threads" else context.Process
    workers = [make(target=prune) for _ in range(parties)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    found = []
    while not errors.empty():
        found.append(errors.get())
    return found


@pytest.mark.parametrize("kind", ["threads", "processes"])
def test_calls_that_end_together_prune_one_at_a_time(tmp_path: Path, kind: str):
    """Concurrent prunes deleted each other's candidates, and the next stat raised
    FileNotFoundError out of the call that had ended (1011 to the page): 33 of 48 calls
    ending four at a time, with 8 folders left against a limit of 6."""
    for _ in range(3):
        make_browser_calls(tmp_path, 120)
        assert prune_together(tmp_path, Retention(max_count=6), 8, kind) == []
        assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 6
        for folder in tmp_path.glob("2026*"):
            shutil.rmtree(folder)


def test_folders_that_vanish_meanwhile_are_skipped(tmp_path: Path, monkeypatch):
    """Another pruner that takes no lock (an older server on the same folder, a hand with
    rm): what vanishes while a prune looks at it is skipped, not an error."""
    nothing = lambda _: contextlib.nullcontext()  # noqa: E731
    monkeypatch.setattr(retention, "_pruning", nothing, raising=False)
    for _ in range(3):
        make_browser_calls(tmp_path, 120)
        assert prune_together(tmp_path, Retention(max_count=6), 8, "threads") == []
        for folder in tmp_path.glob("2026*"):
            shutil.rmtree(folder)
