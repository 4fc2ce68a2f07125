"""The trace's summary in one pass (the next batch decoded ahead) against its row groups folded on every core.

Usage::

    .venv/bin/python benchmarks/bench_fold.py PROFILE [REPEAT]

Checks first that both give the same aggregates (every array, the runs of rows in order), then
prints the medians of ``REPEAT`` (default 5) in-process runs of each, alternating (issue 35, item 2).
"""
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import popvision_py as pv  # noqa: E402
from popvision_py.analysis import tracegroups, tracescan  # noqa: E402
from popvision_py.format import open_profile  # noqa: E402
path = sys.argv[1]
profile = open_profile(path)
bounds = tracescan.column_bounds(profile.metadata("trace"), tracescan.BOUND_COLUMNS)
groups = profile.metadata("trace").num_row_groups
def seq():
    r = pv.open(path)
    return tracescan.summarise(r.trace_batches(tracescan.SUMMARY_COLUMNS), bounds)
def par():
    def read(g):
        return profile.iter_batches("trace", tracescan.SUMMARY_COLUMNS, batch_size=tracescan.BATCH_ROWS,
                                    row_groups=[g])

    return tracegroups.summarise_groups(read, groups, bounds)
a, b = seq(), par()
assert all(np.array_equal(getattr(a, f), getattr(b, f)) for f in ("cube", "executions", "micro_batches", "ipu_rows"))
assert all(np.array_equal(a.slots[c], b.slots[c]) for c in a.slots)
assert (a.iterations, a.rows, a.start_cycle, a.end_cycle) == (b.iterations, b.rows, b.start_cycle, b.end_cycle)
ts = {"sequential (prefetch)": [], f"{tracegroups.workers_for(groups)} threads": []}
for _ in range(int(sys.argv[2]) if len(sys.argv) > 2 else 5):
    for name, f in zip(ts, (seq, par)):
        t = time.perf_counter()
        f()
        ts[name].append(time.perf_counter() - t)
print(path, groups, "row groups;", {k: round(statistics.median(v), 3) for k, v in ts.items()})
