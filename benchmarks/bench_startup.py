"""Whole-command times of the commands that should start fast (issue 35, item 3), against another checkout.

Usage::

    .venv/bin/python benchmarks/bench_startup.py PROFILE [--before DIR] [--repeat N]

Runs `popvision --help`, `popvision info PROFILE` and `popvision sql PROFILE "SELECT ipu, sum(...) ...
GROUP BY ipu" --format csv`, each as `python -m popvision_py.cli ...` in a fresh process, ``--repeat``
times (alternating with ``--before``'s checkout, run from its own tree with this interpreter and
libraries, when given), and prints the medians of wall time and of CPU time (user + system of the
process, steadier than wall time on a shared machine). Targets: --help < 0.1 s, info < 0.15 s.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUERY = "SELECT ipu, sum(end_cycle-start_cycle) FROM trace GROUP BY ipu ORDER BY ipu"
TARGETS = {"--help": 0.1, "info": 0.15}


def run(args: list[str], tree: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of one fresh `python -m popvision_py.cli ARGS` in checkout ``tree``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    subprocess.run([sys.executable, "-m", "popvision_py.cli", *args], cwd=tree, check=True, capture_output=True)
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--before", type=Path, help="another checkout to alternate with")
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args(argv)
    profile = str(args.profile.resolve())
    trees = {"after": ROOT, **({"before": args.before.resolve()} if args.before else {})}
    cases = {"--help": ["--help"], "info": ["info", profile], "sql": ["sql", profile, QUERY, "--format", "csv"]}
    for name, command in cases.items():
        runs: dict[str, list[tuple[float, float]]] = {side: [] for side in trees}
        for _ in range(args.repeat):
            for side, tree in trees.items():
                runs[side].append(run(command, tree))
        shown = "  ".join(f"{side}: {statistics.median(w for w, _ in r):.3f} s wall, "
                          f"{statistics.median(c for _, c in r):.3f} s CPU" for side, r in runs.items())
        target = f"  (target < {TARGETS[name]} s)" if name in TARGETS else ""
        print(f"{name:<8} {shown}{target}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
