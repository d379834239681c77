"""What keeps a serving process from growing: heap settings (``settle_heap``) and a full
garbage collection at each call's end (``collect_call_garbage``); ``tests.support.memory``
measures the result."""

from __future__ import annotations

import ctypes
import gc

M_MMAP_THRESHOLD = -3  # mallopt parameters, from glibc's malloc.h
M_ARENA_MAX = -8


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
