"""Each rank's CPU timeline beside the imported profile: ``<DIR>/system/rank-<r>.pvti.parquet``, or, past
``ONE_FILE_PAST`` ranks, every rank's in one file, ``<DIR>/system/ranks.pvti.parquet``.

The spans ``read`` keeps of the rank's training thread (``RankTrace``'s columns), in the system
timeline format (``format.system``), channel ``pytorch``: ``ProfilerStep#N``, the passes
(``Forward {i}``, ``PP:{stage}{action}{micro-batch}``, ``forward_one_chunk``...), the backward
pass's autograd nodes merged (``autograd``), ``Optimizer.step#...`` and the communication calls
(``c10d::...``). Transfers in flight on gloo's or NCCL's own threads (``comm_flight``) are not the
training thread's, and the operators are not kept by the import at all. The training loop's DataLoader
fetches (``enumerate(DataLoader)#...__next__``) are on channel ``dataloader``, the trace's other annotations
on channel ``annotation``: the training thread's, and those of the GPU's track (``gpu_user_annotation``) on
threads of their own, ``GPU stream <s>``. Times are the traces' own clock in ns, which is the wall clock
(``baseTimeNanoseconds``), so the ranks align.
"""

from __future__ import annotations

import collections
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np

from popvision_py.format import system as S
from popvision_py.format.atomic import synced_folder
from popvision_py.importer.parts import any_of, columns_bytes, release_memory
from popvision_py.importer.read import KIND, RankTrace
from popvision_py.importer.spill_files import release

KEPT = np.array([KIND[k] for k in KIND if k != "comm_flight"], np.int8)
CHANNELS = np.array([S.DATALOADER if k == "input" else S.ANNOTATION if k.endswith("annotation") else S.PYTORCH
                     for k in KIND], dtype=object)  # each span kind's channel


SLICE_SPANS = 1 << 18  # spans made into rows at a time


def rank_columns(trace: RankTrace, spans: slice = slice(None)) -> dict[str, np.ndarray]:
    """A rank's training-thread spans (those of ``spans``, all by default) as the system timeline's columns."""
    keep = np.flatnonzero(any_of(trace.kind[spans], KEPT)) + (spans.start or 0)
    n = len(keep)
    names = np.asarray(trace.names, dtype=object) if trace.names else np.zeros(0, object)
    thread = "training thread" if trace.main_thread is None else f"thread {trace.main_thread}"
    kind = trace.kind[keep].astype(np.int64)
    return {
        "process": np.full(n, process_name(trace.rank), object), "pid": np.full(n, _pid(trace), np.int64),
        "thread": _threads(kind, trace.peer[keep], thread),
        "channel": CHANNELS[kind],
        "name": names[trace.name[keep]] if n else np.zeros(0, object), "kind": np.full(n, "span", object),
        "start_ns": trace.start[keep].astype(np.int64), "end_ns": trace.end[keep].astype(np.int64),
        "value": np.full(n, np.nan),
    }


def _threads(kind: np.ndarray, peer: np.ndarray, thread: str) -> np.ndarray:
    """Each span's thread: the training thread's, or a GPU annotation's stream (its ``peer`` column)."""
    out = np.full(len(kind), thread, dtype=object)
    gpu = np.flatnonzero(kind == KIND["gpu_annotation"])
    streams, which = np.unique(peer[gpu], return_inverse=True)
    out[gpu] = np.array([f"{S.GPU_STREAM}{s}" for s in streams.tolist()], dtype=object)[which] if len(gpu) else []
    return out


def process_name(rank: int) -> str:
    return f"rank-{rank}"


def _pid(trace: RankTrace) -> int:
    return trace.pid if trace.pid is not None else -1


WRITERS = 4  # small ranks' files written at once: each waits for its fsync and its rename, not for the CPU
ONE_FILE_PAST = 64  # ranks past which their timelines are one file (``ALL_RANKS``), not a file a rank
ALL_RANKS = "ranks"  # that file's name (ranks.pvti.parquet), and the process its metadata names


def write_timelines(traces: list[RankTrace], folder: Path, one_file_past: int = ONE_FILE_PAST) -> list[Path]:
    """Write the ranks' timelines into ``folder``, each file atomically: a file a rank (``rank-<r>.pvti.parquet``),
    or, past ``one_file_past`` ranks, one file of them all (``ranks.pvti.parquet``, each row naming its rank as its
    process, as a rank's own file does). A file costs a few milliseconds of CPU whatever it holds (12 s for 4,096
    small ranks' files), and the reports and the dashboard read each one apart. The timeline files of an earlier
    import into ``folder`` that this one has not replaced are removed, so the folder holds this import's ranks
    only. Returns the files written."""
    if len(traces) > one_file_past:
        written = [folder / f"{ALL_RANKS}{S.SUFFIX}"]
        _write_all(traces, written[0])
    else:
        written = _write_each(traces, folder)
    release_memory()  # the last slices', whatever their bytes
    synced_folder(folder)
    ours = {p.name for p in written}
    for stale in S.files_in(folder):
        if (stale.name.startswith("rank-") or stale.name == f"{ALL_RANKS}{S.SUFFIX}") and stale.name not in ours:
            stale.unlink(missing_ok=True)
    return written


def _write_each(traces: list[RankTrace], folder: Path) -> list[Path]:
    """A file a rank. The folder is tidied once, with the first file, and its renames made durable once, after the
    last (by the caller): not once a rank. Small ranks spend most of a file's time waiting for the disk (its fsync,
    its name), so ranks of at most ``SLICE_SPANS`` spans are written ``WRITERS`` at a time, by threads; a larger rank
    alone, so that what is held stays a slice of one rank's rows."""
    written = [folder / f"{process_name(trace.rank)}{S.SUFFIX}" for trace in traces]
    waiting: collections.deque[Future] = collections.deque()
    with ThreadPoolExecutor(WRITERS) as pool:
        try:
            for k, (trace, path) in enumerate(zip(traces, written)):
                if k == 0 or len(trace.kind) > SLICE_SPANS:
                    while waiting:
                        waiting.popleft().result()
                    _write_rank(trace, path, tidy=k == 0)
                    continue
                if len(waiting) >= 2 * WRITERS:
                    waiting.popleft().result()
                waiting.append(pool.submit(_write_rank, trace, path, tidy=False))
            while waiting:
                waiting.popleft().result()
        except BaseException:
            pool.shutdown(cancel_futures=True)  # the files not begun are not written
            raise
    return written


def _write_all(traces: list[RankTrace], path: Path) -> None:
    """Every rank's rows in one file, in rank order; the ranks' rows joined until they fill a row group, so that
    what is held is a row group's rows (or one slice of a large rank's) whatever the ranks."""
    with S.SystemWriter(path, ALL_RANKS, -1, sync_folder=False) as writer:
        held: list[dict[str, np.ndarray]] = []
        rows = 0
        for trace in traces:
            for at in range(0, max(len(trace.kind), 1), SLICE_SPANS):
                held.append(rank_columns(trace, slice(at, at + SLICE_SPANS)))
                release(trace)  # the slice's pages: its rows are held as columns
                rows += len(held[-1]["pid"])
                if rows >= S.ROW_GROUP_ROWS:
                    writer.write(_joined(held))
                    held, rows = [], 0
                    release_memory()
        if held:
            writer.write(_joined(held))


def _joined(held: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Slices' columns (``rank_columns``'s) as one batch."""
    return {name: np.concatenate([h[name] for h in held]) for name in S.SCHEMA.names}


def _write_rank(trace: RankTrace, path: Path, tidy: bool) -> None:
    """One rank's file, a slice of its spans at a time (``tidy``: the folder's killed writers' files removed)."""
    with S.SystemWriter(path, process_name(trace.rank), _pid(trace), tidy=tidy, sync_folder=False) as writer:
        for at in range(0, max(len(trace.kind), 1), SLICE_SPANS):  # a slice at a time: rows of a few spans
            columns = rank_columns(trace, slice(at, at + SLICE_SPANS))
            writer.write(columns)
            release(trace)
            release_memory(columns_bytes(columns))
