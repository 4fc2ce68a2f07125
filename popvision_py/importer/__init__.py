"""``popvision import``: PyTorch profiler traces (one Chrome-trace JSON per rank) into a profile.pop.

``read`` reads each rank's file into the few columns the import needs (``ranges``: byte ranges of
events decoded at once, in parallel across ``jobs`` processes, within a rank and across ranks), which
``spill`` appends to anonymous files beside the output as they come and maps back;
``timeline`` cuts each rank's time into what it was doing (a pass of a stage over a micro-batch,
communication exposed or hidden, the optimiser, idle); ``profile`` maps the result onto the open
format's tables. Once the profile is written, ``system`` writes
each rank's CPU timeline beside it (``<DIR>/system/rank-<r>.pvti.parquet``) for the System page.
``cluster`` reads and reduces the ranks on a Dask cluster's workers instead (``popvision import
--scheduler``), then writes as ``write_import`` writes.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import glob
import json
import multiprocessing
import os
import zlib
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from popvision_py.importer.profile import write_profile
from popvision_py.importer import forked, ranges
from popvision_py.importer.parts import release_memory
from popvision_py.importer.read import RankTrace, TraceError, read_rank, read_stream
from popvision_py.importer.spill import spilled
from popvision_py.importer.spill_files import release, spill_folder
from popvision_py.importer.system import write_timelines

TRACE_SUFFIXES = (".json", ".json.gz")
IN_PROCESS_BYTES = 32 << 20  # traces smaller than this (all together, gzipped ones as inflated ~20x) are read here
SPARE_FILES = 256  # files open beside each rank's spilled columns' (the traces being read, the profile's spools)

__all__ = ["TraceError", "checked_ranks", "find_traces", "import_traces", "read_traces", "write_import"]


def find_traces(given: Iterable[str]) -> list[Path]:
    """The trace files ``given`` names: files, folders (their ``*.json`` / ``*.json.gz``) or glob patterns."""
    found: list[Path] = []
    for item in given:
        path = Path(item)
        if path.is_dir():
            # a folder's other JSON files (a run's settings, say) are not traces: only files that open
            # like one (a "traceEvents" key near their start) are taken
            inside = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES)
                            and looks_like_trace(p))
            if not inside:
                raise TraceError(f"{item} holds no PyTorch profiler trace (.json or .json.gz).")
            found += inside
        elif path.is_file():
            found.append(path)
        elif any(ch in item for ch in "*?["):
            matches = sorted(Path(p) for p in glob.glob(item) if Path(p).is_file())
            if not matches:
                raise TraceError(f"No file matches {item}.")
            found += matches
        else:
            raise TraceError(f"{item} does not exist.")
    named: dict[Path, Path] = {}
    for p in found:
        named.setdefault(p.resolve(), p)  # each file once, as it was first named
    unique = list(named.values())
    if not unique:
        raise TraceError("No trace given.")
    return unique


def looks_like_trace(path: Path, peek: int = 1 << 16) -> bool:
    """Whether a file in a folder is taken as a trace: any but a whole JSON document of at most ``peek`` bytes
    (gzipped or not) without a ``"traceEvents"`` key, such as a run's settings beside its traces. A damaged
    trace is taken, so that the reader says what is wrong with it rather than a rank going missing. A ``.json``
    file of more than ``peek`` bytes is taken by its size, unread (what a peek would find: it is not whole), so
    that a folder of thousands of ranks is read once, by the import; a ``.json.gz`` file is peeked at."""
    try:
        if not path.name.endswith(".gz") and path.stat().st_size > peek:
            return True
        with open(path, "rb") as raw:
            head = raw.read(peek + 1)
        if head[:2] == b"\x1f\x8b":
            stream = zlib.decompressobj(16 + zlib.MAX_WBITS)
            text = stream.decompress(head, peek + 1)
            whole = stream.eof and len(text) <= peek
        else:
            text, whole = head, len(head) <= peek
    except (OSError, zlib.error):
        return True
    if b'"traceEvents"' in text or not whole:
        return True
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return True
    return False


def read_traces(paths: list[Path], jobs: int | None = None, progress: Callable[[], None] = lambda: None,
                spill: Path | None = None) -> list[RankTrace]:
    """Each file read (byte ranges of events decoded in parallel processes, across ranks and within one),
    in rank order; one sentence if two claim one rank. With ``spill`` (a folder), each rank's columns are
    appended to an anonymous file there as its ranges are read, and its ``RankTrace`` maps that file."""
    jobs = max(1, jobs or os.cpu_count() or 1)
    traces = []
    total = _size(paths)
    if jobs == 1 or total < IN_PROCESS_BYTES:  # a few MB: starting processes would take longer
        for p in paths:
            traces.append(_read(p, spill=spill))
            progress()
    else:
        context = multiprocessing.get_context()  # the platform's default
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
            try:
                forked.started(pool, context)
                for trace in _read_parallel(pool, paths, jobs, spill, total):
                    traces.append(trace)
                    progress()
            except BaseException:
                pool.shutdown(cancel_futures=True)  # one bad trace stops the import: the ranges not begun are not read
                raise
    release_memory()  # the parts' churn, before the tables are written
    return checked_ranks(traces)


def checked_ranks(traces: list[RankTrace]) -> list[RankTrace]:
    """The ranks read (in the files' order), in rank order, once each is known to be of one run: every rank
    or none recording its rank, one world size, one trace a rank, their times overlapping; else one sentence."""
    ranked = [t for t in traces if t.rank >= 0]
    if ranked and len(ranked) < len(traces):
        lacking = next(t for t in traces if t.rank < 0)
        raise TraceError(f"{ranked[0].path} records its rank (distributedInfo) and {lacking.path} does not: they "
                         f"are not traces of one run; give the traces of one run.")
    worlds = sorted({t.world_size for t in traces if t.world_size is not None})
    if len(worlds) > 1:
        a = next(t for t in traces if t.world_size == worlds[0])
        b = next(t for t in traces if t.world_size == worlds[-1])
        raise TraceError(f"{a.path} is of a run of {worlds[0]:,} ranks and {b.path} of {worlds[-1]:,}: they are not "
                         f"traces of one run; give the traces of one run.")
    for k, t in enumerate(traces):
        if t.rank < 0:
            t.rank = k  # no distributedInfo: the files' order
    ranks = [t.rank for t in traces]
    if len(set(ranks)) != len(ranks):
        twice = sorted({r for r in ranks if ranks.count(r) > 1})
        both = ", ".join(t.path for t in traces if t.rank == twice[0])
        raise TraceError(f"Two traces are of rank {twice[0]} ({both}); give one trace per rank.")
    _check_one_run(traces)
    return sorted(traces, key=lambda t: t.rank)


def _size(paths: list[Path]) -> int:
    """The traces' JSON bytes, about: a gzipped file counts 20 times its size."""
    total = 0
    for p in paths:
        with contextlib.suppress(OSError):
            total += p.stat().st_size * (20 if p.name.endswith(".gz") else 1)
    return total


def _read_parallel(pool: ProcessPoolExecutor, paths: list[Path], jobs: int, spill: Path | None = None,
                   total: int = 0) -> Iterator[RankTrace]:
    """Each rank's trace in order: its byte ranges handed to ``pool`` (at most two tasks per process waiting, across
    the ranks), their parts merged in order as they come; small traces handed over a few at a time
    (``_small_batch``); a rank the fast path does not take is read by the streaming parser, in the pool too. A
    rank's first error is raised in the order of the ranks. ``total``: the traces' bytes, about (``_size``)."""
    waiting: collections.deque[list[tuple[_Rank, Any]]] = collections.deque()  # each task: its ranks' results
    ranks = collections.deque(_Rank(p, spill) for p in paths)
    unplanned = collections.deque(ranks)
    share = batch_share(total, jobs)
    while ranks:
        while len(waiting) < 2 * jobs and unplanned:
            batch = _small_batch(unplanned, share)
            if batch:
                task = pool.submit(ranges.read_smalls, [str(r.path) for r in batch])
                _wait_for(waiting, [(rank, _Slot(task, k)) for k, rank in enumerate(batch)])
                continue
            task = unplanned[0].next_task(pool)
            if task is None:
                unplanned.popleft()
            else:
                _wait_for(waiting, [(unplanned[0], task)])
        if waiting:
            for rank, result in waiting.popleft():
                rank.pending -= 1
                rank.take(pool, result, waiting)
        while ranks and ranks[0].done():
            yield ranks.popleft().result()


BATCH_BYTES = 4 << 20  # small traces handed to a worker in one task up to this many bytes together ...
BATCH_RANKS = 64  # ... and this many traces


def batch_share(total: int, processes: int) -> int:
    """The bytes of small traces handed over in one task: ``BATCH_BYTES``, less where ``total`` bytes would not
    give the ``processes`` four tasks each."""
    return min(BATCH_BYTES, max(total // (4 * processes), 1))


def _small_batch(unplanned: collections.deque[_Rank], share: int) -> list[_Rank]:
    """The next small traces not begun (``ranges.small_plain``), read in one task (``ranges.read_smalls``): up to
    ``share`` bytes together (one at least) and ``BATCH_RANKS``; none if the next is not small."""
    batch: list[_Rank] = []
    held = 0
    while unplanned and len(batch) < BATCH_RANKS:
        rank = unplanned[0]
        if rank.sources is not None or rank.fallen or rank.small is None or batch and held + rank.small > share:
            break
        unplanned.popleft()
        rank.sources, rank.planned, rank.whole = iter(()), True, True
        batch.append(rank)
        held += rank.small
    return batch


def _wait_for(waiting: collections.deque[list[tuple[_Rank, Any]]], task: list[tuple[_Rank, Any]]) -> None:
    """A task waited for: each of its ranks with the future of its result (a ``_Slot`` of a task of several)."""
    for rank, _ in task:
        rank.pending += 1
    waiting.append(task)


class _Slot:
    """One trace's result in a task of several (``ranges.read_smalls``), as a future of its own."""

    def __init__(self, future: Future, index: int) -> None:
        self.future, self.index = future, index

    def result(self) -> Any:
        value = self.future.result()[self.index]
        if isinstance(value, BaseException):
            raise value
        return value


class _Rank:
    """One rank's read by byte ranges: its plan, its parts merged so far, or the streaming read it fell to."""

    def __init__(self, path: Path, spill: Path | None = None) -> None:
        self.path = path
        self.spill = spill
        self.plan: ranges.TracePlan | None = None
        self.sources: Iterator[tuple[Any, bool]] | None = None
        self.merger = ranges.merger(spill)
        self.fallen = False  # read by the streaming parser
        self.planned = False  # every range handed out
        self.whole = False  # one range, read and assembled by a worker (``ranges.read_whole``, ``read_small``)
        self.pending = 0  # its tasks waited for
        self.trace: RankTrace | None = None
        self.error: BaseException | None = None

    @functools.cached_property
    def small(self) -> int | None:
        """Its size, where it is a small plain trace (``ranges.small_plain``)."""
        return ranges.small_plain(self.path)

    def next_task(self, pool: ProcessPoolExecutor) -> Future | None:
        """The next range handed to ``pool`` (None when there is none left)."""
        if self.fallen or self.error is not None:
            return None
        try:
            if self.sources is None:
                self.plan, self.sources = ranges.rank_ranges(self.path)
                if ranges.one_range(self.plan):  # read and assembled by a worker, its columns spilled here
                    source, _ = next(self.sources)
                    self.planned = self.whole = True
                    return pool.submit(ranges.read_whole, source, self.plan, str(self.path))
            source, last = next(self.sources)
        except StopIteration:
            self.planned = True
            return None
        except ranges.Fallback:
            return self._fall(pool)
        return pool.submit(ranges.read_range, source, self.plan.base_ns, last)

    def _fall(self, pool: ProcessPoolExecutor) -> Future:
        self.fallen = True
        if self.sources is not None and hasattr(self.sources, "close"):
            self.sources.close()  # type: ignore[union-attr]
        self.merger = ranges.merger(None)  # what was spilled goes with its file
        return pool.submit(read_stream, self.path)

    def take(self, pool: ProcessPoolExecutor, future: Future, waiting: collections.deque) -> None:
        """A finished task's result: a part to merge, the streaming read's trace, or the reason to fall back."""
        try:
            result = _read(self.path, future, self.spill)
        except ranges.Fallback:
            if not self.fallen:
                _wait_for(waiting, [(self, self._fall(pool))])
            return
        except BaseException as exc:  # raised when this rank's turn comes, so that ranks fail in order
            self.error = self.error or exc
            return
        if isinstance(result, RankTrace):
            whole = self.whole and not self.fallen and self.spill is not None
            self.trace = spilled(result, self.spill) if whole else result
        elif not self.fallen:
            self.merger.add(result)

    def done(self) -> bool:
        if self.pending:
            return False
        return self.error is not None or self.trace is not None or (
            not self.fallen and self.planned)

    def result(self) -> RankTrace:
        if self.error is not None:
            raise self.error
        if self.trace is not None:
            return self.trace
        try:
            return ranges.finish(self.path, self.plan, self.merger)
        except ranges.Fallback:
            return _read(self.path, spill=self.spill)  # here: the ranks after it wait for it in any case


def _read(path: Path, future: Future | None = None, spill: Path | None = None) -> Any:
    """``read_rank(path, spill)``, here or by ``future``; running out of memory, or a reading process that died,
    is one sentence."""
    try:
        return future.result() if future is not None else read_rank(path, spill)
    except MemoryError:
        raise TraceError(f"{path} needs more memory to read than this process may use.") from None
    except BrokenProcessPool:
        raise TraceError(f"A process reading the traces died (killed, or out of memory) before {path} was "
                         f"read.") from None


def _check_one_run(traces: list[RankTrace]) -> None:
    """The ranks of one run ran at the same time: each rank's time overlaps every other's. Traces whose
    times do not overlap are of different runs (or their clocks disagree), and their figures would mix them."""
    spans = []
    for t in traces:
        times = [x for x in (t.start, t.end, t.busy.ravel()) if len(x)]
        if times:
            spans.append((int(min(x.min() for x in times)), int(max(x.max() for x in times)), t))
        release(t)
    if len(spans) < 2:
        return
    first = min(spans, key=lambda s: s[1])  # the rank that ends first
    last = max(spans, key=lambda s: s[0])  # the rank that begins last
    if first[1] < last[0]:
        raise TraceError(f"{first[2].path} ends {(last[0] - first[1]) / 1e9:,.3f} s before {last[2].path} begins: the "
                         f"ranks of one run overlap in time, so they are not traces of one run (or their clocks "
                         f"disagree); give the traces of one run.")


def open_files(ranks: int) -> None:
    """Each rank's spilled columns hold a file open (their memory map) until the profile is written: the limit on
    open files (``ulimit -n``, often 1,024) raised as far as the system lets for ``ranks`` of them, and one
    sentence, before anything is read, where it cannot be."""
    try:
        import resource
    except ImportError:  # not a POSIX system: no such limit to raise
        return
    need = ranks + SPARE_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    if hard != resource.RLIM_INFINITY and hard < need:
        raise TraceError(f"{ranks:,} ranks need {need:,} open files and this system lets the import open {hard:,} "
                         f"(ulimit -Hn): raise the limit (ulimit -n {need}) to import them.")
    resource.setrlimit(resource.RLIMIT_NOFILE, (need if hard == resource.RLIM_INFINITY else hard, hard))


def import_traces(paths: list[Path], output: Path, *, device_memory: int | None = None, jobs: int | None = None,
                  name: str | None = None, progress: Callable[[], None] = lambda: None,
                  written: Callable[[], None] = lambda: None) -> dict:
    """Read ``paths`` and write ``output`` (a profile.pop), then each rank's CPU timeline in ``system/`` beside
    it; returns the manifest's ``run``. Each rank's columns are spilled to anonymous files in the output's
    folder as they are read (``spill``), and read back a window at a time: memory stays flat. ``progress``
    after each rank read, ``written`` after each rank's rows are written."""
    open_files(len(paths))
    traces = read_traces(paths, jobs, progress, spill_folder(output))
    return write_import(traces, output, device_memory, name, written, jobs)


def write_import(traces: list[RankTrace], output: Path, device_memory: int | None = None,
                 name: str | None = None, written: Callable[[], None] = lambda: None,
                 jobs: int | None = None) -> dict:
    """The profile of the ranks read (``read_traces``'s, or ``cluster``'s) at ``output``, then each rank's CPU
    timeline in ``system/`` beside it; returns the manifest's ``run``. ``written`` after each rank's rows; ``jobs``:
    the processes that cut many small ranks' rows (``profile.write_profile``)."""
    if not any(len(t.start) or len(t.busy) for t in traces):
        raise TraceError("The traces hold no events on any rank's time line (no operators, annotations or "
                         "communication): record them with torch.profiler's CPU (and CUDA) activities.")
    # each rank's rows as they are cut
    run = write_profile(output, traces, device_memory, name, progress=written, jobs=jobs)
    write_timelines(traces, Path(output).parent / "system")  # only now: a bad trace writes nothing
    return run


