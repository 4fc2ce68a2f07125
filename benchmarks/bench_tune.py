"""Benchmark `popvision tune`: `python benchmarks/bench_tune.py [--repeat N] [--json PATH] [--quick] [--cases ...]`.

Cases (issue 15, item 7), each a search run through the library the CLI calls (``Space`` and
``Search`` on a local Dask cluster, the cluster started before the clock starts):

- **workers**: bert-large on an IPU-POD16, the mapping round alone (``--search
  stages,sharding,replicas``, no second round), with 1 and then 2 local worker processes:
  candidates emulated per second;
- **blocks**: the same search with 2 workers, bert at 6, 12 and 24 layers (8, 14 and 26 blocks) on
  an IPU-POD16: how the search's candidates and time grow with the model's blocks;
- **IPUs**: the same search with 2 workers, bert-large on an IPU-POD4, POD16 and POD64: how they
  grow with the system's IPUs;
- **default**: `popvision tune bert-large --system POD16`'s whole default search (both rounds),
  with 2 workers, once: the time the README and docs/tune.md quote.

Measured here (docs/tune.md "How long it takes" has the table): the default search of bert-large
on an IPU-POD16, 650 candidates (614 emulated), 50.7 s with 2 workers, 41 to 54 s as the whole
command; the mapping search 9.6 candidates/s with 1 worker and 16.6 with 2 on a quiet machine
(6.6 and 7.5 at load 5 to 7: two cores shared with other work).

Figures are medians over ``--repeat`` runs (the default search runs once). ``--quick`` runs bert-base
and small berts on an IPU-POD4 at one repeat: a smoke test of the harness, not figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MAPPING = ("stages", "sharding", "replicas")


@dataclass
class Figure:
    case: str
    label: str
    workers: int
    candidates: int
    emulated: int
    seconds: float  # median wall time of the search, cluster already up
    per_second: float  # candidates emulated per second


def search_once(model: str, params: dict, system: str, search: tuple[str, ...] | None, refine: int,
                client) -> tuple[int, int, float]:
    from engine.runner import RunRequest
    from popvision_py.tune.search import Search
    from popvision_py.tune.space import DIMENSIONS, SearchSettings, Space

    began = time.perf_counter()
    space = Space(RunRequest(model=model, params=params), SearchSettings(system=system, search=search or DIMENSIONS,
                                                                         refine=refine))
    # the candidates' search alone: ranging the rows shown is timed apart (docs/tune.md, "Ranges")
    outcome = Search(space, client, range_shown=False).run()
    return len(outcome.rows), outcome.emulated, time.perf_counter() - began


def measure(case: str, label: str, workers: int, repeat: int, model: str, params: dict, system: str,
            search: tuple[str, ...] | None = MAPPING, refine: int = 0) -> Figure:
    from popvision_py.tune.cluster import dask_client

    with dask_client(workers=workers) as client:
        search_once("mnist", {}, "IPU-POD4", MAPPING, 0, client)  # warm the workers' imports
        runs = [search_once(model, params, system, search, refine, client) for _ in range(repeat)]
    seconds = statistics.median(r[2] for r in runs)
    figure = Figure(case, label, workers, runs[0][0], runs[0][1], seconds, runs[0][1] / seconds)
    print(f"{case:8} {label:28} workers {workers}  {figure.candidates:5,} candidates  {figure.emulated:5,} emulated  "
          f"{seconds:7.2f} s  {figure.per_second:6.1f} candidates/s", flush=True)
    return figure


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (medians); default 3")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one run each: a smoke test")
    parser.add_argument("--cases", default="workers,blocks,IPUs,default",
                        help="which cases, a comma list (default all)")
    args = parser.parse_args(argv)
    cases = set(args.cases.split(","))
    from popvision_py.tune.cluster import quiet_dask

    quiet_dask()
    repeat = 1 if args.quick else args.repeat
    bert = "bert-large" if not args.quick else "bert-base"
    pod = "IPU-POD16" if not args.quick else "IPU-POD4"
    figures = []
    for workers in ((1, 2) if "workers" in cases else ()):
        figures.append(measure("workers", f"{bert} {pod}", workers, repeat, bert, {}, pod))
    for layers in ((2, 4) if args.quick else (6, 12, 24)) if "blocks" in cases else ():
        figures.append(measure("blocks", f"bert {layers + 2} blocks {pod}", 2, repeat, "bert-large",
                               {"layers": layers}, pod))
    for system in (("IPU-POD4",) if args.quick else ("IPU-POD4", "IPU-POD16", "IPU-POD64")) if "IPUs" in cases else ():
        figures.append(measure("IPUs", f"{bert} {system}", 2, repeat, bert, {}, system))
    if not args.quick and "default" in cases:
        figures.append(measure("default", "bert-large IPU-POD16 (all)", 2, 1, "bert-large", {}, "IPU-POD16",
                               search=None, refine=2))
    machine = {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()}
    if args.json:
        args.json.write_text(json.dumps({"machine": machine, "results": [asdict(f) for f in figures]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
