"""Where a call's CPU goes: the CPU time of the process's threads, by kind of work.

Each model's threads form a pool: the Python worker that calls it and the native threads its
runtime starts at load (CTranslate2's workers, onnxruntime's intra-op pool, llama.cpp's). A
stage marks a ``job`` of a kind while it runs work on its pool; the CPU the pool's threads
spend while jobs run is theirs (split evenly when two run at once), read from Linux's
per-thread CPU clocks at each job's start and end, so the figures are CPU time, not wall
time, and hold on a machine other work is loading. The event loop's thread is a pool of its
own whose time outside its jobs (the VAD) is the event loop's. What no job accounts for (a
pool between jobs, threads of no pool, threads that ended) is ``other``: the process's own CPU
time minus the kinds, never dropped. Off unless a profile runs (``profiling``): the marks
then cost nothing.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

# The kinds of work, in the order reports list them, with the words they use.
KINDS: dict[str, str] = {
    "stt_interim": "interim passes",
    "stt_pause": "pause passes",
    "stt_final": "final passes",
    "stt_overlap": "overlap passes",
    "vad": "VAD",
    "smart_turn": "Smart Turn",
    "llm_prefill": "LLM prefill",
    "llm_verdict": "LLM words verdict",
    "llm_decode": "LLM decode",
    "tts": "Piper",
    "event_loop": "event loop",
    "other": "everything else",
}
OTHER = "other"
LOOP = "loop"  # the pool of the event loop's thread
LOOP_KIND = "event_loop"

T = TypeVar("T")


def thread_cpu_ns(tid: int) -> int | None:
    """CPU time of thread ``tid`` of this process (ns; None once it has ended).

    Linux's per-thread CPU clock (``MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)``) is read
    exactly, even while the thread runs, unlike /proc's tick-counted times.
    """
    try:
        return time.clock_gettime_ns(((~tid) << 3) | 6)
    except OSError:
        return None


def thread_ids() -> set[int]:
    return {int(t) for t in os.listdir("/proc/self/task")}


@dataclass
class Job:
    """One piece of work of one kind; times on the call clock, CPU in ms."""

    kind: str
    pool: str
    start_ms: float
    end_ms: float | None = None
    cpu_ms: float = 0.0


@dataclass
class _Pool:
    tids: set[int] = field(default_factory=set)
    seen: dict[int, int] = field(default_factory=dict)  # tid -> CPU ns at the last reading
    active: list[Job] = field(default_factory=list)


class CpuLedger:
    """CPU time by kind of work since ``start`` (see the module's docstring)."""

    def __init__(self, now_ms: Callable[[], float] | None = None) -> None:
        self._lock = threading.Lock()
        self._pools: dict[str, _Pool] = {}
        self.totals_ns: dict[str, float] = dict.fromkeys(KINDS, 0.0)
        self.jobs: list[Job] = []
        self._now_ms = now_ms or (lambda: time.monotonic() * 1000.0)
        self._process_t0 = time.process_time_ns()

    def use_clock(self, now_ms: Callable[[], float]) -> None:
        """Stamp jobs on a call's clock (its times are what turn records hold)."""
        self._now_ms = now_ms

    def adopt(self, pool: str, tids: set[int]) -> None:
        with self._lock:
            p = self._pools.setdefault(pool, _Pool())
            for tid in tids - p.tids:
                p.tids.add(tid)
                p.seen[tid] = thread_cpu_ns(tid) or 0

    def _settle(self, p: _Pool, idle: str | None) -> None:
        """Give the CPU the pool's threads spent since the last reading to its running jobs
        (or ``idle``; None: left to ``other``)."""
        spent = 0
        for tid in list(p.tids):
            now = thread_cpu_ns(tid)
            if now is None:  # ended: what it spent since the last reading is ``other``'s
                p.tids.discard(tid)
                p.seen.pop(tid, None)
                continue
            spent += now - p.seen[tid]
            p.seen[tid] = now
        if p.active:
            share = spent / len(p.active)
            for job in p.active:
                job.cpu_ms += share / 1e6
                self.totals_ns[job.kind] += share
        elif idle is not None:
            self.totals_ns[idle] += spent

    def _idle_kind(self, pool: str) -> str | None:
        return LOOP_KIND if pool == LOOP else None

    @contextlib.contextmanager
    def job(self, kind: str, pool: str) -> Iterator[Job]:
        """Work of ``kind`` on ``pool``, run by the calling thread (which joins the pool)."""
        if kind not in KINDS:
            raise ValueError(f"unknown kind of work {kind!r} (known: {', '.join(KINDS)})")
        tid = threading.get_native_id()
        if tid not in self._pools.get(pool, _Pool()).tids:
            self.adopt(pool, {tid})
        job = Job(kind, pool, self._now_ms())
        with self._lock:
            p = self._pools[pool]
            self._settle(p, self._idle_kind(pool))
            p.active.append(job)
            self.jobs.append(job)
        try:
            yield job
        finally:
            with self._lock:
                self._settle(p, None)
                p.active.remove(job)
                job.end_ms = self._now_ms()

    def switch(self, job: Job, kind: str) -> None:
        """The job goes on as work of another kind (a stream's prefill turns into decoding):
        what it spent so far is the first kind's, kept as a job of its own."""
        with self._lock:
            self._settle(self._pools[job.pool], None)
            now = self._now_ms()
            past = Job(job.kind, job.pool, job.start_ms, now, job.cpu_ms)
            for i in range(len(self.jobs) - 1, -1, -1):
                if self.jobs[i] is job:
                    self.jobs[i] = past
                    break
            job.kind, job.start_ms, job.cpu_ms = kind, now, 0.0
            self.jobs.append(job)

    def restart(self) -> None:
        """Count from now (after the models' load and warm-up)."""
        with self._lock:
            for name, p in self._pools.items():
                self._settle(p, self._idle_kind(name))
            self.totals_ns = dict.fromkeys(KINDS, 0.0)
            self.jobs = []
            self._process_t0 = time.process_time_ns()

    def seconds(self) -> dict[str, float]:
        """CPU seconds by kind since the ledger started, ``other`` included, and ``total``
        (the process's own CPU time)."""
        with self._lock:
            for name, p in self._pools.items():
                self._settle(p, self._idle_kind(name))
            total = (time.process_time_ns() - self._process_t0) / 1e9
            kinds = {k: v / 1e9 for k, v in self.totals_ns.items() if k != OTHER}
        kinds[OTHER] = total - sum(kinds.values())
        return {**kinds, "total": total}


_active: CpuLedger | None = None


@contextlib.contextmanager
def profiling(now_ms: Callable[[], float] | None = None) -> Iterator[CpuLedger]:
    """Count the process's CPU by kind of work while the block runs; the calling thread is
    the event loop's (the loop a replay runs on)."""
    global _active
    if _active is not None:
        raise RuntimeError("a CPU profile is already running in this process")
    ledger = CpuLedger(now_ms)
    ledger.adopt(LOOP, {threading.get_native_id()})
    _active = ledger
    try:
        yield ledger
    finally:
        _active = None


def active() -> CpuLedger | None:
    return _active


@contextlib.contextmanager
def job(kind: str, pool: str) -> Iterator[Job | None]:
    """Mark work of ``kind`` on ``pool`` run by this thread (nothing when no profile runs)."""
    ledger = _active
    if ledger is None:
        yield None
        return
    with ledger.job(kind, pool) as j:
        yield j


def switch(work: Job | None, kind: str) -> None:
    """``work`` (a ``job``'s) goes on as work of ``kind`` (nothing when no profile runs)."""
    if work is not None and _active is not None:
        _active.switch(work, kind)


def marked(kind: str, pool: str, work: Callable[..., T]) -> Callable[..., T]:
    """``work`` as a job of ``kind`` on ``pool``, for an executor to run on its thread."""

    def run(*args: Any, **kwargs: Any) -> T:
        with job(kind, pool):
            return work(*args, **kwargs)

    return run


@contextlib.contextmanager
def owning(pool: str) -> Iterator[None]:
    """The threads started while the block runs (a model's runtime at load) join ``pool``."""
    ledger = _active
    if ledger is None:
        yield
        return
    before = thread_ids()
    try:
        yield
    finally:
        ledger.adopt(pool, thread_ids() - before)
