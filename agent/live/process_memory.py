"""Resident memory of a server process and its children, read from /proc (Linux), and what
keeps a serving process from growing: heap settings (``settle_heap``) and a full garbage
collection at each call's end (``collect_call_garbage``).

Why: the soak and capacity benchmarks measure ``voice-agent serve`` from outside, as an
operator would, including an engine server it started as a child process. ``VmHWM`` is the
kernel's exact peak of a process's resident memory; writing ``5`` to its ``clear_refs``
resets that peak to the current RSS, so the peak of one phase of a run can be read exactly
instead of sampled.
"""

from __future__ import annotations

import ctypes
import gc
from pathlib import Path

M_MMAP_THRESHOLD = -3  # mallopt parameters, from glibc's malloc.h
M_ARENA_MAX = -8


def children(pid: int) -> list[int]:
    """The direct child processes of ``pid``."""
    try:
        found = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    return [int(c) for c in found]


def _status_kib(pid: int, key: str) -> int:
    """One ``/proc/PID/status`` field in KiB (0 once the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_rss_kib(pid: int) -> int:
    """Resident memory of a process and its children (an embedded engine server)."""
    return sum(_status_kib(p, "VmRSS") for p in [pid, *children(pid)])


def tree_peak_rss_kib(pid: int) -> int:
    """Sum of the peak RSS (VmHWM) of a process and its children since their last reset.

    Exact for one process; with children it is an upper bound (their peaks may not coincide).
    """
    return sum(_status_kib(p, "VmHWM") for p in [pid, *children(pid)])


def reset_peak_rss(pid: int) -> bool:
    """Reset VmHWM of a process and its children to their current RSS; False if not allowed."""
    try:
        for p in [pid, *children(pid)]:
            Path(f"/proc/{p}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def settle_heap() -> None:
    """glibc malloc settings for a long-running server (nothing where libc is not glibc).

    Why: each call's threads would get heap arenas of their own, and glibc's rising mmap
    threshold would put later audio buffers in them and fragment them; with two arenas and a
    fixed threshold big buffers are mmapped and go back to the system at once
    (docs/decisions.md, "Memory"). Call it before any thread starts.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    libc.mallopt(M_ARENA_MAX, 2)
    libc.mallopt(M_MMAP_THRESHOLD, 128 * 1024)


def freeze_startup_objects() -> None:
    """Keep what is alive now (libraries, loaded models) out of every later collection.

    Why: ``collect_call_garbage`` runs a full collection at each call's end; frozen, the
    objects that live as long as the server are not scanned again each time.
    """
    gc.collect()
    gc.freeze()


def collect_call_garbage() -> None:
    """A full garbage collection once a call has ended.

    Why: a call's pipeline is a web of reference cycles (each processor links to its
    neighbours), so the audio buffers it held are freed only by a full collection, which
    CPython runs rarely (docs/decisions.md, "Memory").
    """
    gc.collect()
