"""What a Dask task of popvision (the import's ranks, the report's GPU figures) runs under, and how its results come
back: the worker's version checked (``check_worker``), glibc's heap as a plain process has it (``plain_allocator``),
the tasks' results in order and a failed task as one sentence (``gathered``, ``task_failure``).

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
import socket
from collections.abc import Callable, Iterator
from typing import Any

from popvision_py.errors import PopvisionError, first_line
from popvision_py.version import __version__


def task_failure(future: Any, client: Any, doing: str, error: type[PopvisionError]) -> BaseException:
    """What a failed Dask task means, as one ``error`` sentence: ``doing`` what it did ("reading rank0.json"); a
    project error raised on the worker as it was, and any other Python's own report (a bug, not bad input)."""
    from distributed import KilledWorker

    address = getattr(client.scheduler, "address", "the scheduler")
    if future.status == "cancelled":
        return error(f"The Dask cluster at {address} dropped its tasks before {doing} finished (its scheduler went "
                     f"away, or was restarted).")
    exc = future.exception()
    if isinstance(exc, PopvisionError):
        return exc
    if isinstance(exc, KilledWorker):
        return error(f"The Dask workers {doing} died, on every try (killed, or out of memory).")
    if isinstance(exc, ImportError):
        return error(f"A Dask worker of {address} cannot import popvision ({first_line(exc)}): install it on every "
                     f"worker, as on this machine.")
    return exc


def check_worker(version: str, error: type[PopvisionError]) -> None:
    """A Dask task's first check: the worker runs the popvision of the process that gave it (``version``), else one
    ``error`` sentence."""
    if version != __version__:
        raise error(f"The Dask worker on {socket.gethostname()} runs popvision {__version__} and this machine "
                    f"{version}: install the same version on every worker.")


def gathered(client: Any, futures: list[Any], doing: list[str], error: type[PopvisionError],
             each: Callable[[Any], None] = lambda result: None) -> list[Any]:
    """The tasks' results in order, ``each`` called on each as it comes; the first to fail, in order, raised as one
    ``error`` sentence (``task_failure``, ``doing`` what each did) once those before it are done; the tasks cancelled
    on leaving (none runs on once one failed, or Ctrl-C came)."""
    from distributed import as_completed, wait

    index = {f.key: i for i, f in enumerate(futures)}
    results: list[Any] = [None] * len(futures)
    try:
        for future in as_completed(futures):
            if future.status != "finished":
                wait(futures[:index[future.key]])
                first = next(i for i, f in enumerate(futures) if f.status != "finished")
                raise task_failure(futures[first], client, doing[first], error)
            results[index[future.key]] = future.result()
            each(results[index[future.key]])
        return results
    finally:
        client.cancel(futures)


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
