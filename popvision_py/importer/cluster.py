"""``popvision import --scheduler``: the ranks read and reduced on a Dask cluster's workers, the profile written here.

Each rank is one Dask task (``reduce_rank``; small ones a few dozen to a task, ``reduce_ranks``, as a local import
hands them to its processes): a worker reads the rank's trace by byte ranges, one after
the other (``ranges.read_fast``, its parts spilled to the worker's own local folder as the local import
spills them), and writes the rank's reduced columns (``RankTrace``'s arrays, a block at a time) into one
file of a scratch folder beside the output, ``.popvision-import-*/rank-<i>.columns``. The task's result is
small: where each array lies in that file, and the rank's other fields (its header, its names). The
client maps each rank's file (``ColumnFile``: ``RankTrace.spill``, so that the write hands its pages back
as it does a spilled rank's), checks the ranks as a local import does (``checked_ranks``) and writes the
profile a window at a time (``write_import``); then the scratch folder goes. What crosses the network is
each rank's columns, not its JSON; what the client holds is a window of the write and the ranks' small
fields, as a local import holds them.

The traces and the output's folder must lie on storage every worker sees, at the same paths: the
workers are given absolute paths. A rank is read by the same code as a local import reads it, so the
profile is the same, byte for byte but the manifest's creation time. A worker's threads read one rank at
a time (the reader's buffer is its process's): run workers of one thread each (``dask worker
--nworkers N --nthreads 1``). A rank is read with glibc's heap as a plain process has it
(``workers.plain_allocator``), whatever the worker's environment fixed.
"""

from __future__ import annotations

import mmap
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np

from popvision_py.workers import check_worker, gathered, plain_allocator
from popvision_py.importer import BATCH_RANKS, batch_share, checked_ranks, ranges, write_import
from popvision_py.importer.parts import release_memory
from popvision_py.importer.read import RankTrace, TraceError, read_rank
from popvision_py.importer.spill_files import blocks, release, spill_folder
from popvision_py.version import __version__

ALIGN = 64  # each array of a rank's file starts at a multiple of this
SCRATCH_PREFIX = ".popvision-import-"
_READING = threading.Lock()  # one rank at a time in a worker process: ``ranges`` reads into one buffer a process


def import_on_cluster(client: Any, paths: list[Path], output: Path, *, device_memory: int | None = None,
                      name: str | None = None, progress: Callable[[], None] = lambda: None,
                      written: Callable[[], None] = lambda: None) -> dict:
    """``import_traces`` with the ranks read and reduced on the workers of ``client``'s cluster: the same
    profile at ``output`` and CPU timelines beside it; returns the manifest's ``run``. A trace a worker does not
    see, a worker that died, or workers that run another popvision are one sentence."""
    scratch = scratch_folder(output)
    traces: list[RankTrace] = []
    try:
        traces = read_on_cluster(client, paths, scratch, spill_folder(output), progress)
        return write_import(traces, output, device_memory, name, written)
    finally:
        traces.clear()  # the maps of the ranks' files close with their arrays, before their folder goes
        shutil.rmtree(scratch, ignore_errors=True)


def scratch_folder(output: Path) -> Path:
    """A new folder beside ``output`` (or in the nearest folder above it that exists) for the ranks' files."""
    folder = spill_folder(output)
    try:
        return Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=folder))
    except OSError as exc:
        raise TraceError(f"Cannot make the import's scratch folder in {folder}: {exc.strerror or exc}.") from None


def read_on_cluster(client: Any, paths: list[Path], scratch: Path, folder: Path,
                    progress: Callable[[], None] = lambda: None) -> list[RankTrace]:
    """Each trace read and reduced by a worker into a file in ``scratch``, then mapped here, in rank order (the
    checks of ``checked_ranks``); ``folder``: where the write spills its own files. ``progress`` after each rank."""
    shown = [str(p) for p in paths]
    futures, named = [], []
    for batch in tasks(paths, sum(client.nthreads().values()) or 1):
        items = [(os.path.abspath(paths[i]), shown[i], i) for i in batch]
        if len(items) == 1:
            futures.append(client.submit(reduce_rank, *items[0][:2], str(scratch), batch[0], __version__, pure=False))
        else:
            futures.append(client.submit(reduce_ranks, items, str(scratch), __version__, pure=False))
        named.append(shown[batch[0]] if len(batch) == 1 else f"{shown[batch[0]]} to {shown[batch[-1]]}")
    results = [rank for task in gathered(client, futures, [f"reading {n}" for n in named], TraceError,
                                         lambda result: [progress() for _ in _ranks(result)])
               for rank in _ranks(task)]
    traces = [mapped(scratch / r["file"], r, folder) for r in results]
    del results, futures
    return checked_ranks(traces)


def tasks(paths: list[Path], workers: int) -> list[list[int]]:
    """The ranks (places in ``paths``) of each task: consecutive small traces (``ranges.small_plain``) a few dozen to
    a task (``reduce_ranks``), up to a share of ``BATCH_BYTES`` that leaves the ``workers`` four tasks each and
    ``BATCH_RANKS``, as a local import hands them to its processes; any other trace a task of its own. A task costs
    the scheduler, the worker and this client a few milliseconds whatever it reads: 4,096 ranks of 135 kB, a task
    each, took twice as long on two workers as the import here."""
    small = [ranges.small_plain(p) for p in paths]
    share = batch_share(sum(s or 0 for s in small), workers)
    out: list[list[int]] = []
    held = 0
    for i, size in enumerate(small):
        joins = size is not None and out and small[out[-1][-1]] is not None and len(out[-1]) < BATCH_RANKS
        if joins and held + size <= share:
            out[-1].append(i)
            held += size
        else:
            out.append([i])
            held = size or 0
    return out


def _ranks(result: dict | list[dict]) -> list[dict]:
    """A task's ranks' results: ``reduce_ranks``' list, or ``reduce_rank``'s one."""
    return result if isinstance(result, list) else [result]


def reduce_rank(path: str, shown: str, scratch: str, index: int, version: str, spill: bool = True) -> dict:
    """The Dask task: the trace at ``path`` (``shown`` as the user named it) read and reduced to its ``RankTrace``,
    whose arrays go to ``scratch``/rank-<index>.columns; returns that file's name, each array's place in it
    (offset, dtype, shape), its size and the trace's other fields. ``spill``: its columns spilled to the worker's
    local folder as they are read (a small trace's are held in memory, as a local import holds them)."""
    check_worker(version, TraceError)
    host = socket.gethostname()
    if not os.path.isdir(scratch):
        raise TraceError(f"The Dask worker on {host} does not see {scratch}: the output's folder must lie on "
                         f"storage every worker sees, at the same path.")
    if not os.path.exists(path):
        raise TraceError(f"The Dask worker on {host} does not see {shown} (as {path}): the traces must lie on "
                         f"storage every worker sees, at the same path.")
    name = f"rank-{index:06d}.columns"
    with _READING, plain_allocator():
        try:
            trace = read_rank(path, _local_folder() if spill else None)
        except TraceError as exc:
            raise TraceError(str(exc).replace(path, shown)) from None
        except MemoryError:
            raise TraceError(f"{shown} needs more memory to read than the Dask worker on {host} may use.") from None
        try:
            refs, size = write_columns(trace, Path(scratch) / name)
        except OSError as exc:
            raise TraceError(f"The Dask worker on {host} cannot write {Path(scratch) / name}: "
                             f"{exc.strerror or exc}.") from None
        meta = {f.name: getattr(trace, f.name) for f in fields(trace) if f.name not in refs and f.name != "spill"}
        meta["path"] = shown
        del trace
        release_memory()
    return {"file": name, "refs": refs, "bytes": size, "meta": meta}


def reduce_ranks(items: list[tuple[str, str, int]], scratch: str, version: str) -> list[dict]:
    """The Dask task of a few small ranks, each ``(path, shown, index)`` reduced in turn as ``reduce_rank`` reduces
    it: their results, in order; the first rank that fails raises, as its own task would."""
    return [reduce_rank(path, shown, scratch, index, version, spill=False) for path, shown, index in items]


def _local_folder() -> Path:
    """Where a worker spills a rank as it reads it: its own local folder (Dask's ``local_directory``)."""
    try:
        from distributed import get_worker

        return Path(get_worker().local_directory)
    except (ImportError, ValueError):
        return Path(tempfile.gettempdir())


def write_columns(trace: RankTrace, path: Path) -> tuple[dict[str, tuple[int, str, tuple[int, ...]]], int]:
    """Every array of ``trace`` into one file at ``path`` (written as ``path``.part, then renamed: a worker that
    dies leaves no file that looks whole), a block of rows at a time: each array's (offset, dtype, shape), and
    the file's size."""
    refs: dict[str, tuple[int, str, tuple[int, ...]]] = {}
    part = path.with_name(path.name + ".part")
    at = 0
    with open(part, "wb") as out:
        for f in fields(trace):
            values = getattr(trace, f.name)
            if not isinstance(values, np.ndarray):
                continue
            pad = -at % ALIGN
            out.write(b"\0" * pad)
            at += pad
            refs[f.name] = (at, values.dtype.str, tuple(values.shape))
            for block in blocks(values):
                block = np.ascontiguousarray(block)
                out.write(memoryview(block).cast("B"))
                at += block.nbytes
            release(trace)
    os.replace(part, path)
    return refs, at


class ColumnFile:
    """A rank's file as a worker wrote it, mapped: the ``RankTrace.spill`` of a rank read on the cluster (its
    ``folder`` is where the write spills its own files; ``release`` hands back the pages read so far)."""

    def __init__(self, path: Path, size: int, folder: Path) -> None:
        self.folder = folder
        self.map: mmap.mmap | None = None
        try:
            with open(path, "r+b") as f:
                found = os.fstat(f.fileno()).st_size
                if found != size:
                    raise TraceError(f"{path} holds {found:,} bytes where its worker wrote {size:,}: something else "
                                     f"writes in the import's scratch folder.")
                if size:
                    self.map = mmap.mmap(f.fileno(), size)
        except OSError as exc:
            raise TraceError(f"Cannot read {path}, a rank's columns a Dask worker wrote: {exc.strerror or exc}; the "
                             f"output's folder must lie on storage this machine and every worker see.") from None

    def array(self, offset: int, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
        count = int(np.prod(shape))
        if not count:
            return np.zeros(shape, dtype)
        assert self.map is not None
        return np.frombuffer(self.map, np.dtype(dtype), count, offset).reshape(shape)

    def release(self) -> None:
        if self.map is not None and hasattr(mmap, "MADV_DONTNEED"):
            self.map.madvise(mmap.MADV_DONTNEED)


def mapped(path: Path, result: dict, folder: Path) -> RankTrace:
    """The ``RankTrace`` of a task's ``result``, its arrays over the map of its file at ``path``."""
    columns = ColumnFile(path, result["bytes"], folder)
    arrays = {name: columns.array(*ref) for name, ref in result["refs"].items()}
    trace = RankTrace(**result["meta"], **arrays)
    trace.spill = columns
    return trace
