"""`popvision import` alone by two checkouts, taking turns on the same traces: wall time, CPU time, peak memory.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_import_ab.py DIR [DIR...] --a /work/main --b . [--repeat 2] \
        [--work /tmp/popvision-bench-ab] [--json OUT.jsonl]

Each trace folder is imported by checkout A then checkout B (their own ``popvision_py``), ``--repeat`` times,
each in a fresh process tree measured as ``bench_import.py`` measures its steps (``bench_import.measure``: wall
time, CPU time of the process and its workers, the largest summed RSS of the tree sampled every 0.1 s), the
traces read once before each import (``bench_import.warm``). On a shared machine the two take turns, so that
both see the same load; the load average before each import is printed with it. MB/s is the folder's trace
bytes over the wall time. The last import of each checkout is kept (``--work``/a, ``--work``/b) to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_import  # noqa: E402


def import_once(folder: Path, root: Path, out: Path, log: Path, cap: int, timeout_s: float) -> dict:
    """One import of ``folder`` by the checkout at ``root`` into ``out``: its figures."""
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(root)}
    bench_import.warm(folder)
    load = os.getloadavg()[0]
    command = [sys.executable, "-m", "popvision_py.cli", "import", str(folder), "-o", str(out), "-q"]
    figures = bench_import.measure(command, log, env, cap, timeout_s, root)
    size = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
    return {"traces": str(folder), "bytes": size, "load": round(load, 1), "wall_s": round(figures["wall_s"], 1),
            "cpu_s": round(figures["cpu_s"], 1), "peak_mib": round(figures["peak_mb"]),
            "mb_s": round(size / 1e6 / figures["wall_s"], 1), "outcome": figures["outcome"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", type=Path, nargs="+", help="folders of one job's traces each")
    parser.add_argument("--a", type=Path, required=True, help="the first checkout (its popvision_py is run)")
    parser.add_argument("--b", type=Path, required=True, help="the second checkout")
    parser.add_argument("--repeat", type=int, default=1, help="turns of each checkout on each folder")
    parser.add_argument("--work", type=Path, default=Path("/tmp/popvision-bench-ab"))
    parser.add_argument("--json", type=Path, help="figures appended as JSON lines (default: WORK/results.jsonl)")
    parser.add_argument("--cap-gib", type=float, default=20, help="memory cap of an import (GiB)")
    parser.add_argument("--timeout-min", type=float, default=30, help="time cap of an import (minutes)")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    out_json = args.json or args.work / "results.jsonl"
    for folder in args.folders:
        for _ in range(args.repeat):
            for name, root in (("a", args.a.resolve()), ("b", args.b.resolve())):
                row = {"checkout": name, "root": str(root), **import_once(
                    folder, root, args.work / name, args.work / f"{name}.log", int(args.cap_gib * 2**30),
                    args.timeout_min * 60)}
                print(json.dumps(row), flush=True)
                with out_json.open("a") as out:
                    out.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
