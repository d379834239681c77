"""Resident memory of a server process and its children, read from /proc (Linux).

Why: the soak and capacity benchmarks measure ``voice-agent serve`` from outside, as an
operator would, including an engine server it started as a child process. ``VmHWM`` is the
kernel's exact peak of a process's resident memory; writing ``5`` to its ``clear_refs``
resets that peak to the current RSS, so the peak of one phase of a run can be read exactly
instead of sampled.
"""

from __future__ import annotations

from pathlib import Path


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
