"""`popvision report --scheduler`: the GPU's figures (``gpu_ranks.figures``) made on a Dask cluster's workers.

A GPU report's one pass over every rank's kernels (nearly all of its time on a large import: each rank's kernels read
from the ``kernels`` table's row groups and every figure made of them) is cut into parts (``parts``): a run of whole
ranks and the row groups that hold their rows, as the footer's statistics of the ``ipu`` column state them (the
table is written rank by rank; a group shared with the next part is read by both), each about an equal share of the
kernels, a few parts a worker (``PARTS_A_WORKER``). A part is one Dask task (``part_task``): the worker opens the
profile at its path, reads the part's row groups in order and makes every figure of its ranks as a report here makes
them (``gpu_ranks.part_figures``). What comes back is each figure's rows of those ranks and their
``gpu.type_times``, joined here in rank order: the report is the same, byte for byte, and this process reads none of
the kernels.

The profile must lie on storage every worker sees, at the same path; a worker that does not see it, sees another
file there, or runs another popvision is one sentence. A table whose footer's statistics are not verified, or not
sorted by ipu, is one part (read by one worker as a report here reads it). A task runs with glibc's allocator as a
plain process has it (``workers.plain_allocator``), whatever the worker's environment fixed.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from typing import Any

import numpy as np

from popvision_py.analysis.common.answer import Table
from popvision_py.analysis.imported.bound import TraceSpans
from popvision_py.analysis.imported.gpu_ranks import CHUNK_KERNELS, RankRange, each_chunk, part_figures
from popvision_py.analysis.imported.ranks import rank_numbers
from popvision_py.errors import ClusterError
from popvision_py.format.reader import open_profile
from popvision_py.format.values import statistics
from popvision_py.workers import check_worker, gathered, plain_allocator
from popvision_py.version import __version__

PARTS_A_WORKER = 4  # parts of about equal kernels a worker thread, where the row groups allow: the last ones short


def figures(client: Any, profile: Any, window: tuple[np.ndarray, np.ndarray], last_step_starts: np.ndarray | None,
            spans: TraceSpans, wanted: dict[str, tuple[Any, ...]],
            every: bool) -> list[tuple[dict[str, Table], np.ndarray]]:
    """``gpu_ranks.part_figures``' answers of each part (``parts``) in IPU order, each made by a task on ``client``'s
    workers; the first part that fails raised as one sentence."""
    num_ipus = int(profile.target.get("num_ipus", 1))
    path = os.path.abspath(profile.path)
    order = np.argsort(spans.ipu, kind="stable")  # each part's spans a slice of them, as a chunk's are
    span_ipu = spans.ipu[order]
    made = fingerprint(profile.manifest)
    futures, doing = [], []
    for part in parts(profile, num_ipus, PARTS_A_WORKER * (sum(client.nthreads().values()) or 1)):
        a, b = np.searchsorted(span_ipu, [part.first, part.stop])
        futures.append(client.submit(part_task, path, made, part, window, last_step_starts,
                                     spans.take(order[a:b]), wanted, every, __version__, pure=False))
        doing.append(f"making the GPU figures of ranks {part.first} to {part.stop - 1}")
    return gathered(client, futures, doing, ClusterError)


def parts(profile: Any, num_ipus: int, most: int) -> list[RankRange]:
    """The IPUs cut into at most ``most`` runs of whole ranks (``RankRange``), each of about an equal share of the
    ``kernels`` table's rows, with the row groups that may hold their rows by the footer's statistics of ``ipu`` (a
    group that holds the last rank of one part and the first of the next is read by both, each taking its own
    rows). A part's rows are counted as those of the groups wholly before its end; IPUs without kernels go with the
    part before. One part where the statistics are not verified, missing, or not in ipu order."""
    metadata = profile.metadata("kernels")
    groups = metadata.num_row_groups
    whole = [RankRange(0, num_ipus, range(groups))]
    if groups < 2 or most < 2 or not profile.footer_verified("kernels"):
        return whole
    stated = [statistics(metadata, g, "ipu") for g in range(groups)]
    if any(s is None for s in stated):
        return whole
    low, high = np.array(stated, np.int64).T
    if (low > high).any() or (low[1:] < high[:-1]).any() or low[0] < 0 or high[-1] >= num_ipus:
        return whole
    ends = np.cumsum([metadata.row_group(g).num_rows for g in range(groups)])
    cuts = np.unique(high[:-1] + 1)  # where the rows wholly before an IPU grow: past each group's last IPU
    cuts = cuts[cuts < num_ipus]
    before = ends[np.searchsorted(high, cuts) - 1]  # the rows of the groups whose IPUs all come before each cut
    at = np.searchsorted(before, ends[-1] * np.arange(1, most) / most)  # the first cut past each share's end
    firsts = [0, *np.unique(cuts[at[at < len(cuts)]]).tolist(), num_ipus]
    return [RankRange(a, b, range(int(np.searchsorted(high, a)), int(np.searchsorted(low, b))))
            for a, b in zip(firsts, firsts[1:])]


def part_task(path: str, made: str, part: RankRange, window: tuple[np.ndarray, np.ndarray],
              last_step_starts: np.ndarray | None, spans: TraceSpans, wanted: dict[str, tuple[Any, ...]], every: bool,
              version: str) -> tuple[dict[str, Table], np.ndarray]:
    """The Dask task: ``part_figures`` of ``part``'s IPUs, read from the profile at ``path`` (the one whose manifest's
    ``fingerprint`` is ``made``)."""
    check_worker(version, ClusterError)
    host = socket.gethostname()
    if not os.path.exists(path):
        raise ClusterError(f"The Dask worker on {host} does not see {path}: the profile must lie on storage every "
                           f"worker sees, at the same path.")
    with open_profile(path) as profile, plain_allocator():
        if fingerprint(profile.manifest) != made:
            raise ClusterError(f"The Dask worker on {host} sees another profile at {path} than this machine (written "
                               f"{profile.manifest.get('created')}): the profile must lie on storage every worker "
                               f"sees, at the same path.")
        ranks = rank_numbers(profile.run, int(profile.target.get("num_ipus", 1)))
        return part_figures(each_chunk(profile, ranks, CHUNK_KERNELS, part), window, last_step_starts, spans, wanted,
                            every)


def fingerprint(manifest: dict) -> str:
    """A digest of a profile's manifest (its tables' sizes and footers' checksums, its creation time...): what a task
    is handed to know it reads the profile this process opened, not the manifest itself (at thousands of ranks, a
    few MB that Dask would walk for each task)."""
    return hashlib.sha256(json.dumps(manifest, sort_keys=True, default=str).encode()).hexdigest()
