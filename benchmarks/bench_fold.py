"""The trace's summary in one pass (the next batch decoded ahead) against its row groups folded on every core.

Usage::

    .venv/bin/python benchmarks/bench_fold.py PROFILE [--repeat 5]

Checks first that both give the same aggregates (every array, the runs of rows in order), then
prints the medians of ``--repeat`` in-process runs of each, alternating (issue 35, item 2): the
wall time, and the CPU time of the process (every thread's, pyarrow's and NumPy's included), which
a busy neighbour on a shared machine disturbs far less than the wall time. Each run opens the
profile afresh, so that its checks (page checksums, values against the schema) are paid as a
report pays them. The parallel side is what ``popvision report`` runs: ``summarise_profile``.

To compare two checkouts, run the script from each (it imports the checkout it lies in) in turn.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from popvision_py.analysis.trace import groups as tracegroups  # noqa: E402
from popvision_py.analysis.trace import scan as tracescan  # noqa: E402
from popvision_py.format import open_profile  # noqa: E402


def sequential(path: str) -> tracescan.Aggregates:
    """One pass over the batches, the next decoded in a thread ahead (what a single core runs)."""
    profile = open_profile(path)
    bounds = tracescan.column_bounds(profile.metadata("trace"), tracescan.BOUND_COLUMNS)
    batches = profile.iter_batches("trace", tracescan.SUMMARY_COLUMNS, batch_size=tracescan.BATCH_ROWS)
    return tracescan.summarise(tracescan.prefetched(batches), bounds)


def parallel(path: str) -> tracescan.Aggregates:
    """The row groups folded on every core, as the report folds them."""
    profile = open_profile(path)
    bounds = tracescan.column_bounds(profile.metadata("trace"), tracescan.BOUND_COLUMNS)
    return tracegroups.summarise_profile(profile, bounds, lambda columns: [])


def same(a: tracescan.Aggregates, b: tracescan.Aggregates) -> None:
    """AssertionError unless ``a`` and ``b`` are the same summary (the supersteps settled as the runs
    were folded, when they were, are compared by their figures)."""
    for name in ("cube", "executions", "micro_batches", "ipu_rows"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert (a.iterations, a.rows, a.start_cycle, a.end_cycle) == (b.iterations, b.rows, b.start_cycle, b.end_cycle)
    if a.supersteps is None and b.supersteps is None:
        assert all(np.array_equal(a.slots[c], b.slots[c]) for c in a.slots)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    groups = open_profile(args.profile).metadata("trace").num_row_groups
    same(sequential(args.profile), parallel(args.profile))
    sides = {"one pass (decoded ahead)": sequential,
             f"{tracegroups.workers_for(groups)} threads (the report's)": parallel}
    wall: dict[str, list[float]] = {name: [] for name in sides}
    cpu: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(args.repeat):
        for name, fold in sides.items():
            began, used = time.perf_counter(), time.process_time()
            fold(args.profile)
            wall[name].append(time.perf_counter() - began)
            cpu[name].append(time.process_time() - used)
    print(f"{args.profile}: {groups} row groups, medians of {args.repeat}")
    for name in sides:
        print(f"  {name:32s} wall {statistics.median(wall[name]) * 1e3:8.1f} ms   "
              f"CPU {statistics.median(cpu[name]) * 1e3:8.1f} ms")


if __name__ == "__main__":
    main()
