"""The import's spill files: anonymous files in the output's folder that hold a rank's raw parts and its laid-out
columns (``SpillFile``), shared by ranks where they are small (``Shared``), mapped back as arrays (``Ref``,
``SpillColumn``), and the helpers that cut runs of rows into batches. ``importer.spill`` lays a rank out in them."""

from __future__ import annotations

import math
import mmap
import tempfile
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from popvision_py.importer.checks import TraceError

BATCH_ROWS = 1 << 16  # rows handled at a time: intervals merged, samples reduced, spans copied
# Held in memory up to this (``SpillFile``): a scratch file (one rank's at a time), a rank's raw parts (a rank
# being read each: as many as the ranks whose byte ranges are being read at once)
HELD_BYTES = 4 << 20
HELD_RAW_BYTES = 1 << 20
ALIGN = 64


def spill_folder(output: str | Path) -> Path:
    """Where the spill files of an import writing ``output`` go: its folder, or the nearest one that exists
    (the output's folder is made only once the traces are known to be good)."""
    folder = Path(output).absolute().parent
    while not folder.is_dir() and folder != folder.parent:
        folder = folder.parent
    return folder


@dataclass(frozen=True)
class Ref:
    """An array in a ``SpillFile``: where it starts, its dtype and shape."""

    offset: int
    dtype: np.dtype
    shape: tuple[int, ...]


def _open(folder: Path) -> Any:
    """An anonymous file in ``folder``; one sentence where it cannot be made."""
    try:
        return tempfile.TemporaryFile(dir=folder)
    except OSError as exc:
        raise TraceError(f"Cannot write the import's spill files in {folder}: {exc.strerror or exc}.") from None


class Shared:
    """An anonymous file that the ranks' columns (``SpillFile(shared=True)``) are laid out in one after the other,
    each mapped on its own from a page boundary. Each anonymous file an import holds open makes the next one
    slower to make (ext4 keeps them on one list: 0.6 ms a file past a thousand of them), so a job of thousands of
    ranks shares a few files. It is closed when the last rank laid out in it is dropped (each map holds its own
    descriptor)."""

    def __init__(self, folder: Path) -> None:
        self.file = _open(folder)
        self.finalizer = weakref.finalize(self, self.file.close)

    def region(self) -> int:
        """Where the next rank's columns start: the end of the file, padded to a page."""
        end = self.file.seek(0, 2)
        pad = -end % mmap.ALLOCATIONGRANULARITY
        self.file.write(b"\0" * pad)
        return end + pad


SHARED_BYTES = 1 << 30  # a shared file takes no more ranks past this size
_SHARED: dict[Path, weakref.ReferenceType[Shared]] = {}  # each folder's shared file being filled


def _shared(folder: Path) -> Shared:
    """The folder's shared file being filled, or a new one."""
    found = _SHARED.get(folder)
    shared = found() if found is not None else None
    if shared is None or shared.file.closed or shared.file.tell() >= SHARED_BYTES:
        shared = Shared(folder)
        _SHARED[folder] = weakref.ref(shared)
    return shared


class SpillFile:
    """An anonymous file that arrays are appended to, then read as arrays over one memory map.

    A file used and dropped within one rank's read or write (``held``: a scratch file, a rank's raw parts) is
    held in memory while it is under ``held`` bytes, and becomes a file only past them: making a file costs
    about a millisecond whatever it holds, which a job of thousands of small ranks would pay several times a
    rank, while what is held stays under a few times ``held`` bytes whatever the ranks. A rank's columns, kept
    until the profile is written, are laid out in a file ``shared`` with the ranks before it (``Shared``)."""

    def __init__(self, folder: Path, held: int = 0, shared: bool = False) -> None:
        self.folder = folder
        self.size = 0
        self.map: mmap.mmap | bytearray | None = None
        self.held = held
        self.buffer: bytearray | None = bytearray() if held else None
        self.shared = _shared(folder) if shared and not held else None  # kept alive by each rank laid out in it
        self.base = self.shared.region() if self.shared is not None else 0  # where this one's bytes start
        self.file = None if held else self.shared.file if self.shared is not None else _open(folder)

    def _open(self) -> Any:
        return _open(self.folder)

    def _write(self, data: Any) -> None:
        if self.buffer is not None:
            if len(self.buffer) + len(data) <= self.held:
                self.buffer += data
                return
            self.file, held, self.buffer = self._open(), self.buffer, None
            self._write(held)
        try:
            self.file.write(data)
        except OSError as exc:
            raise TraceError(f"Cannot write the import's spill files: {exc.strerror or exc}.") from None

    def append(self, values: np.ndarray) -> Ref:
        """``values`` appended whole."""
        column = self.column(values.dtype, values.shape[1:])
        column.extend(values)
        return column.close()

    def append_all(self, arrays: list[np.ndarray]) -> list[Ref]:
        """Each of ``arrays`` appended whole, as ``append`` appends it, in one write: a small rank's dozen arrays of
        a few kilobytes each would be two dozen writes."""
        pieces: list[Any] = []
        refs = []
        for values in arrays:
            values = np.ascontiguousarray(values)
            refs.append(Ref(self.size, values.dtype, values.shape))
            pad = -(self.size + values.nbytes) % ALIGN
            pieces += [memoryview(values).cast("B") if values.size else b"", b"\0" * pad]
            self.size += values.nbytes + pad
        self._write(b"".join(pieces))
        return refs

    def column(self, dtype: Any, tail: tuple[int, ...] = ()) -> SpillColumn:
        """A column appended a piece at a time (nothing else may be appended until it is closed)."""
        return SpillColumn(self, self.size, np.dtype(dtype), tail)

    def freeze(self) -> None:
        """No more appends: the file is mapped (the mapping keeps it open; the file object is closed)."""
        if self.buffer is not None:
            self.map = self.buffer if self.size else None
            return
        if self.shared is not None:  # the file stays open for the ranks after this one
            self.file.flush()
            if self.size:
                self.map = mmap.mmap(self.file.fileno(), self.size, offset=self.base)
            self.file = None
            return
        with self.file:
            self.file.flush()
            if self.size:
                self.map = mmap.mmap(self.file.fileno(), self.size)

    def array(self, ref: Ref) -> np.ndarray:
        count = math.prod(ref.shape)
        if not count:
            return np.zeros(ref.shape, ref.dtype)
        assert self.map is not None
        return np.frombuffer(self.map, ref.dtype, count, ref.offset).reshape(ref.shape)

    def release(self) -> None:
        """Hand back the pages read or written so far (they stay in the file, to be read again)."""
        if isinstance(self.map, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
            self.map.madvise(mmap.MADV_DONTNEED)


class SpillColumn:
    """A column of a ``SpillFile`` being appended (``extend``), then closed into its ``Ref``."""

    def __init__(self, spill: SpillFile, offset: int, dtype: np.dtype, tail: tuple[int, ...]) -> None:
        self.spill, self.offset, self.dtype, self.tail, self.rows = spill, offset, dtype, tail, 0

    def extend(self, values: np.ndarray) -> None:
        values = np.ascontiguousarray(values, self.dtype).reshape((-1, *self.tail))
        if values.size:
            self.spill._write(memoryview(values).cast("B"))
            self.spill.size += values.nbytes
        self.rows += len(values)

    def close(self) -> Ref:
        pad = -self.spill.size % ALIGN
        self.spill._write(b"\0" * pad)
        self.spill.size += pad
        return Ref(self.offset, self.dtype, (self.rows, *self.tail))


class Growing:
    """An int64 column appended a piece at a time, then read whole (``result``): in memory, or in a spill file
    in ``folder`` where given."""

    def __init__(self, folder: Path | None) -> None:
        self.pieces: list[np.ndarray] = []
        self.spill = SpillFile(folder, HELD_BYTES) if folder is not None else None
        self.column = self.spill.column(np.int64) if self.spill is not None else None

    def extend(self, values: np.ndarray) -> None:
        if self.column is not None:
            self.column.extend(values)
        else:
            self.pieces.append(np.asarray(values, np.int64))

    def result(self) -> np.ndarray:
        if self.spill is None or self.column is None:
            return np.concatenate(self.pieces).astype(np.int64) if self.pieces else np.zeros(0, np.int64)
        ref = self.column.close()
        self.spill.freeze()
        return self.spill.array(ref)


def release(*holders: Any) -> None:
    """Hand back the pages of each spilled ``RankTrace``, ``SpillFile`` or array over one given (``filled``'s);
    nothing for others."""
    for holder in holders:
        if isinstance(holder, np.ndarray):
            base: Any = holder
            while isinstance(base, np.ndarray):
                base = base.base
            base = base.obj if isinstance(base, memoryview) else base
            if isinstance(base, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
                base.madvise(mmap.MADV_DONTNEED)
            continue
        spill = holder if isinstance(holder, SpillFile) else getattr(holder, "spill", None)
        if spill is not None:
            spill.release()


def blocks(values: np.ndarray, rows: int = BATCH_ROWS) -> Iterator[np.ndarray]:
    """``values`` ``rows`` rows at a time (each a copy), the pages of each handed back once it is copied: an array
    over a spill file (a rank's kernels, say) read through without holding it."""
    for at in range(0, len(values), rows):
        block = np.array(values[at:at + rows])
        release(values)
        yield block


def filled(folder: Path | None, lengths: list[int], value: int, batch: int = BATCH_ROWS) -> list[np.ndarray]:
    """Arrays of int64 ``value``, one of each length, to be written into: in memory, or over one spill file in
    ``folder`` (``release`` takes them)."""
    if folder is None:
        return [np.full(n, value, np.int64) for n in lengths]
    spill = SpillFile(folder)
    refs = []
    for n in lengths:
        column = spill.column(np.int64)
        for at in range(0, n, batch):
            column.extend(np.full(min(batch, n - at), value, np.int64))
        refs.append(column.close())
    spill.freeze()
    return [spill.array(ref) for ref in refs]


def _cuts(starts: list[np.ndarray], batch: int) -> list[int]:
    """Rising times that cut the runs' sorted starts into stretches of about ``batch`` rows together, from a
    sample of every run (each ``step``-th start)."""
    total = sum(len(s) for s in starts)
    if total <= batch:
        return []
    step = max(batch // 256, 1)
    sample = np.sort(np.concatenate([_read(s[::step]) for s in starts]))
    every = max(batch // step, 1)
    return [int(c) for c in np.unique(sample[every::every])]


def _read(values: np.ndarray) -> np.ndarray:
    """A copy of ``values`` (a view of a spill file, say), the pages read for it handed back at once: a pass over
    every run of a rank holds one run's pages at a time, not the rank's."""
    copy = np.array(values)
    release(values)
    return copy


def _stretches(keys: list[np.ndarray], cuts: list[int]) -> Iterator[list[slice]]:
    """For each stretch of time (before the first cut, between cuts, after the last), each run's rows
    whose key (sorted) lies in it: every run's bounds found at once, a run's pages handed back after its own."""
    bounds = [np.concatenate([[0], np.searchsorted(_read(key), cuts, side="left"), [len(key)]]) for key in keys]
    for j in range(len(cuts) + 1):
        yield [slice(int(b[j]), int(b[j + 1])) for b in bounds]
