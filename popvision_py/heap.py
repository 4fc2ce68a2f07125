"""glibc's heap as a plain process has it, where the environment fixed it: what a Dask task runs under.

Dask's nanny starts its workers with ``MALLOC_TRIM_THRESHOLD_`` set to 64 KiB (its
``distributed.nanny.pre-spawn-environ``). Setting any of glibc's thresholds stops glibc raising its mmap threshold
from 128 KiB as a plain process's grows: every array over that is mapped fresh and its pages faulted in, and the
heap is trimmed at each free. ``plain_allocator`` puts both thresholds where a plain process's grow to while a task
runs, and back after (docs/performance.md, "The report's GPU figures on a Dask cluster").
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator
from typing import Any

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
FIXING = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")
GLIBC_THRESHOLDS = {M_MMAP_THRESHOLD: 128 << 10, M_TRIM_THRESHOLD: 128 << 10}  # glibc's first (and fixed) ones
TASK_THRESHOLDS = {M_MMAP_THRESHOLD: 32 << 20, M_TRIM_THRESHOLD: 64 << 20}  # the most a plain process's grow to
GIVEN = {M_MMAP_THRESHOLD: "MALLOC_MMAP_THRESHOLD_", M_TRIM_THRESHOLD: "MALLOC_TRIM_THRESHOLD_"}


@contextlib.contextmanager
def plain_allocator() -> Iterator[None]:
    """glibc's mmap and trim thresholds where a plain process's grow to, while a task runs in a process whose
    environment fixed them (Dask's nanny starts its workers with ``MALLOC_TRIM_THRESHOLD_`` set to 64 KiB, which
    also stops glibc raising the mmap threshold from 128 KiB: each array over that is mapped fresh and its pages
    faulted in, and the heap is trimmed at each free: the report's figures of a rank of 1.6 M kernels took 9.1 s, 5.8
    of them in the kernel, against 2.9 s, and a 138 MB trace's reduction 1.5 to 2.2 s against 1.3 to 1.4); put back
    once it ends (to the
    environment's values, else glibc's first), the heap's free pages handed back. Nothing elsewhere, or where the
    environment leaves glibc to itself."""
    mallopt = _libc("mallopt") if any(name in os.environ for name in FIXING) else None
    if mallopt is None:
        yield
        return
    for parameter, value in TASK_THRESHOLDS.items():
        mallopt(parameter, value)
    try:
        yield
    finally:
        for parameter, first in GLIBC_THRESHOLDS.items():
            given = os.environ.get(GIVEN[parameter], "")
            mallopt(parameter, int(given) if given.isdigit() else first)
        trim = _libc("malloc_trim")
        if trim is not None:
            trim(0)


def _libc(name: str) -> Any:
    """glibc's function ``name``; None elsewhere."""
    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None
