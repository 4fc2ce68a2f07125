"""Memory of a trace of PyTorch before 1.10: its ``[memory]`` events carry each allocation's change (``Bytes``: +
allocated, - freed), not what is allocated (``Total Allocated``). The changes of a device, in time order (stably:
ties in the order read), add up to its level; the trace does not say what was allocated before its first change,
so the levels start from the least that never goes below 0 (0 unless the trace frees memory allocated before it).

``parts.assemble`` sums a rank's changes at once, ``spill.change_runs`` a stretch of time at a time
(``running_memory`` carries the level from one stretch to the next): both make the same levels.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from popvision_py.importer.checks import TraceError


def running_memory(change: Any, offset: int = 0) -> np.ndarray:
    """The level after each change, in the order given, from ``offset``; one sentence if a level runs out of
    range. Each |change| < 2^62, so the first level out of range is exact (the int64 sum wraps only after it)."""
    level = np.cumsum(np.asarray(change, np.int64)) + offset
    if len(level) and bool((np.abs(level) >= 1 << 62).any()):
        raise TraceError("has [memory] events whose Bytes add up to more than a memory holds")
    return level


def changed_levels(ts: Any, change: Any) -> tuple[np.ndarray, np.ndarray]:
    """A device's changes as (times, levels): sorted by time, stably, and summed from the least level that never
    goes below 0."""
    order = np.argsort(np.asarray(ts, np.int64), kind="stable")
    level = running_memory(np.asarray(change, np.int64)[order])
    return np.asarray(ts, np.int64)[order], level - min(int(level.min(initial=0)), 0)


def check_memory_kinds(path: str, levels: Any, changes: Any) -> None:
    """One sentence where the ``[memory]`` events of a device (``levels``, ``changes``: the devices of each) give
    both levels (``Total Allocated``) and only changes (``Bytes``): PyTorch writes one or the other."""
    both = sorted(set(levels) & set(changes))
    if both:
        raise TraceError(f"{path} has [memory] events of device type {both[0]} that give Total Allocated and others "
                         f"that give only Bytes: a trace records one or the other.")
