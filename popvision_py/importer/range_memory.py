"""A byte range's ``[memory]`` instants (``ranges.reduce_events``' ``memory_instants``): their args decoded together,
the largest ``Total Allocated`` per 10 µs per device type kept, or, in a trace of PyTorch before 1.10, each change
(``Bytes``) kept as read (``memory_changes`` sums them once the rank is read). Any value the streaming parser would
refuse, or read otherwise, raises ``Fallback``.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from popvision_py.importer.checks import Fallback
from popvision_py.importer.parts import MAX_US, RankPart, bucket_max


class MemoryArgs(msgspec.Struct, gc=False):
    """A ``[memory]`` instant's args."""

    total: int | float | msgspec.UnsetType = msgspec.field(name="Total Allocated", default=msgspec.UNSET)
    change: int | float | msgspec.UnsetType = msgspec.field(name="Bytes", default=msgspec.UNSET)  # before 1.10
    device: int = msgspec.field(name="Device Type", default=0)


MEMORY = msgspec.json.Decoder(list[MemoryArgs])


def memory_instants(part: RankPart, instants: list[Any], base_ns: int) -> None:
    """``[memory]`` instants: the largest Total Allocated per 10 µs, per device type (0 CPU, 1 CUDA)."""
    memory = [e for e in instants if e.name == "[memory]"]
    if any(e.name is None for e in instants):
        raise Fallback("an instant without a name")
    if not memory:
        return
    raws = [bytes(e.args) for e in memory]
    if not all(raws):
        raise Fallback("a [memory] event without args")
    args = MEMORY.decode(b"[" + b",".join(raws) + b"]")
    totals = [a.total for a in args]
    if msgspec.UNSET in totals:  # PyTorch before 1.10: changes (Bytes) alone, kept as read
        memory, args = _changes(part, memory, args, base_ns)
        totals = [a.total for a in args]
        if not memory:
            return
    device = np.array([a.device for a in args], np.int64)
    keep = np.flatnonzero((device == 0) | (device == 1))
    if not len(keep):
        return
    total = np.array([totals[k] for k in keep], np.float64)
    ts = np.array([memory[k].ts for k in keep], np.float64)
    if not (((total >= 0) & (total < 2.0**62)).all() and (np.abs(ts) < MAX_US).all()):
        raise Fallback("a [memory] event out of range")
    nbytes = np.array([totals[k] for k in keep], np.int64)  # a float: its whole part, as int() takes it
    at = np.rint(ts * 1000.0).astype(np.int64) + base_ns
    for d in (0, 1):
        mine = device[keep] == d
        if mine.any():
            part.memory[d] = bucket_max(at[mine], nbytes[mine])


def _changes(part: RankPart, memory: list[Any], args: list[MemoryArgs],
             base_ns: int) -> tuple[list[Any], list[MemoryArgs]]:
    """The ``[memory]`` instants without Total Allocated (PyTorch before 1.10): their changes (``Bytes``) kept in
    ``part.changes`` per device type (0 CPU, 1 CUDA), in the order read; the others returned."""
    alone = [a.total is msgspec.UNSET for a in args]
    changes = [a for a, only in zip(args, alone) if only]
    if any(a.change is msgspec.UNSET for a in changes):
        raise Fallback("a [memory] event without Total Allocated or Bytes")
    device = np.array([a.device for a in changes], np.int64)
    keep = np.flatnonzero((device == 0) | (device == 1))
    change = np.array([changes[k].change for k in keep], np.float64)
    events = [e for e, only in zip(memory, alone) if only]
    ts = np.array([events[k].ts for k in keep], np.float64)
    if not ((np.abs(change) < 2.0**62).all() and (np.abs(ts) < MAX_US).all()):
        raise Fallback("a [memory] event out of range")
    nbytes = np.array([changes[k].change for k in keep], np.int64)  # a float: its whole part, as int() takes it
    at = np.rint(ts * 1000.0).astype(np.int64) + base_ns
    for d in (0, 1):
        mine = device[keep] == d
        if mine.any():
            part.changes[d] = (at[mine], nbytes[mine])
    return ([e for e, only in zip(memory, alone) if not only], [a for a, only in zip(args, alone) if not only])
