"""A folder written by ``torch.profiler.tensorboard_trace_handler(dir)``: one trace per worker per profiling cycle.

The handler names each trace ``<worker>.<milliseconds>.pt.trace.json`` (or ``.json.gz``): the worker (a host and
pid, or the ``worker_name`` given, such as ``rank0``), then the time it was written. A profiler whose
``schedule`` repeats writes one trace per worker each cycle, so such a folder holds several runs of one
set of workers. ``pick_cycle`` takes the traces of one cycle: the k-th of each worker, in the order of the
times in their names (the newest by default).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from popvision_py.errors import ConfigError
from popvision_py.importer.checks import TraceError

HANDLER_NAME = re.compile(r"(?P<worker>.+?)\.(?P<ms>\d+)\.pt\.trace\.json(?:\.gz)?")


@dataclass
class PickedCycle:
    """The traces of one profiling cycle, and which cycle of how many (``count`` 1 where the traces are not a
    handler's folder of several cycles)."""

    paths: list[Path]
    cycle: int
    count: int
    folder: str = ""
    newest_by_default: bool = True

    def note(self) -> str | None:
        """The line that says which cycle was taken (None where there was one)."""
        if self.count < 2:
            return None
        which = f"the newest, cycle {self.cycle}" if self.newest_by_default else f"cycle {self.cycle}"
        return (f"{self.count} profiling cycles in {self.folder} (tensorboard_trace_handler); imported {which}: "
                f"--cycle N picks another")


def pick_cycle(paths: list[Path], cycle: int | None = None) -> PickedCycle:
    """The traces of profiling cycle ``cycle`` (1 the oldest; None the newest) where every trace is named as
    ``tensorboard_trace_handler`` names them; else ``paths`` as they are (``cycle`` may then be 1 only).
    One sentence where the workers hold different numbers of cycles, or ``cycle`` is not one of them."""
    named = [(p, HANDLER_NAME.fullmatch(p.name)) for p in paths]
    workers: dict[str, list[tuple[int, str, Path]]] = {}
    if all(m is not None for _, m in named):
        for p, m in named:
            workers.setdefault(m["worker"], []).append((int(m["ms"]), p.name, p))  # type: ignore[index]
    counts = {w: len(traces) for w, traces in workers.items()}
    count = max(counts.values(), default=1)
    folder = os.path.commonpath([str(p.absolute().parent) for p in paths]) if paths else ""
    if len(set(counts.values())) > 1:
        most, least = max(counts, key=counts.__getitem__), min(counts, key=counts.__getitem__)
        raise TraceError(f"{folder} holds {counts[most]} profiling cycles of worker {most} and {counts[least]} of "
                         f"worker {least} (tensorboard_trace_handler writes one trace a worker each cycle): a "
                         f"cycle's traces are missing; give the traces of whole cycles.")
    if cycle is not None and not 1 <= cycle <= count:
        held = f"{count} profiling cycles (1 to {count})" if count > 1 else "one profiling cycle"
        raise ConfigError(f"--cycle {cycle} is not a profiling cycle of the traces: {folder} holds {held}; give "
                         f"--cycle from 1 (the oldest) to {count}, or latest.")
    if count < 2:
        return PickedCycle(list(paths), 1, 1, folder)
    k = count if cycle is None else cycle
    picked = [sorted(traces, key=lambda t: t[:2])[k - 1][2] for traces in workers.values()]
    return PickedCycle(sorted(picked, key=lambda p: p.name), k, count, folder, cycle is None)
