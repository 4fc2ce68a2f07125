"""Where `popvision import`'s time goes: its phases timed apart, in one process, on traces already written.

    PYTHONPATH=. .venv/bin/python benchmarks/import_phases.py TRACES [--jobs N] [--runs 3] [--work DIR] [--root DIR]

Each run imports TRACES (a folder or files, as `popvision import` takes them) into a fresh profile in ``--work``,
timing, by the wall clock and by this process's CPU: the read (``read_traces``: the reading processes' CPU is not
this process's), the plan (``profile.plan_profile``), the tables cut and written (the rest of ``write_profile``:
with many small ranks, the forked processes' CPU is not this process's either) and the ranks' timelines
(``system.write_timelines``). Prints each run and the median of each phase; ``--json`` writes them. ``--root``: the
checkout whose ``popvision_py`` is timed (this one by default), to time an earlier commit the same way.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

import inspect
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
importer: ModuleType
profile: ModuleType

PHASES = ("read", "plan", "tables", "timelines")


class Clock:
    """Each phase's wall and CPU seconds of one run."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self.cpu: dict[str, float] = dict.fromkeys(PHASES, 0.0)

    def timed(self, phase: str, call):
        def run(*args, **kwargs):
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return call(*args, **kwargs)
            finally:
                self.wall[phase] += time.perf_counter() - wall
                self.cpu[phase] += time.process_time() - cpu
        return run


def one_run(paths: list[Path], out: Path, jobs: int | None) -> Clock:
    """One import of ``paths`` into ``out``, its phases timed."""
    shutil.rmtree(out.parent, ignore_errors=True)
    clock = Clock()
    plan, timelines = profile.plan_profile, importer.write_timelines
    profile.plan_profile = clock.timed("plan", plan)
    importer.write_timelines = clock.timed("timelines", timelines)
    try:
        importer.open_files(len(paths))
        traces = clock.timed("read", importer.read_traces)(paths, jobs, lambda: None, importer.spill_folder(out))
        wall, cpu = time.perf_counter(), time.process_time()
        given = {"jobs": jobs} if "jobs" in inspect.signature(importer.write_import).parameters else {}
        importer.write_import(traces, out, **given)  # an earlier commit's write takes no jobs
        # the tables: the write less the plan and the timelines timed inside it
        clock.wall["tables"] = time.perf_counter() - wall - clock.wall["plan"] - clock.wall["timelines"]
        clock.cpu["tables"] = time.process_time() - cpu - clock.cpu["plan"] - clock.cpu["timelines"]
    finally:
        profile.plan_profile, importer.write_timelines = plan, timelines
    return clock


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+", help="trace files or folders, as popvision import takes them")
    parser.add_argument("--jobs", type=int, help="as popvision import --jobs (the CPUs by default)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path("/tmp/popvision-import-phases"))
    parser.add_argument("--json", type=Path, help="each run's phases as JSON")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose popvision_py is timed")
    args = parser.parse_args(argv)
    global importer, profile
    sys.path.insert(0, str(args.root.resolve()))
    import popvision_py.importer as importer
    from popvision_py.importer import profile
    print(f"timing {importer.__file__}", flush=True)
    paths = importer.find_traces(args.traces)
    runs = []
    for k in range(args.runs):
        clock = one_run(paths, args.work / "out" / "profile.pop", args.jobs)
        runs.append({"wall": clock.wall, "cpu": clock.cpu})
        print(f"run {k + 1}: " + ", ".join(f"{p} {clock.wall[p]:.2f} s ({clock.cpu[p]:.2f} s CPU here)"
                                          for p in PHASES), flush=True)
    print(f"median of {len(runs)} ({len(paths):,} traces): " + ", ".join(
        f"{p} {statistics.median(r['wall'][p] for r in runs):.2f} s" for p in PHASES))
    if args.json:
        args.json.write_text(json.dumps({"traces": len(paths), "runs": runs}, indent=1) + "\n")
    shutil.rmtree(args.work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
