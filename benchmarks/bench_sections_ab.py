"""`popvision report --section S` by two checkouts, taking turns on the same profiles: wall time and peak memory.

    .venv/bin/python benchmarks/bench_sections_ab.py PROFILE [PROFILE...] --a /work/base --b . \
        [--sections operations system all] [--repeat 3]

Each round runs, for each section and profile, checkout A's ``popvision report PROFILE --section S`` and then
checkout B's (their own ``popvision_py``), in fresh processes, so that both see the same load on a shared machine.
The peak is the process's largest resident size (``getrusage``'s ``ru_maxrss``, what ``/usr/bin/time %M`` prints),
under the system allocator the CLI runs with. Prints each (profile, section, checkout)'s range over the rounds and,
where a profile is given with ``--against``, each figure over that profile's for the same section and checkout
(issue 50: the commands after a 10 GB import within 1.3x of theirs at 100 MB).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path


def run_once(root: Path, profile: Path, section: str) -> tuple[float, float]:
    """Checkout ``root``'s report of ``section``: (wall seconds, peak MiB)."""
    env = {**os.environ, "PYTHONPATH": str(root), "ARROW_DEFAULT_MEMORY_POOL": "system"}
    command = [sys.executable, "-m", "popvision_py.cli", "report", str(profile), "--section", section]
    began = time.perf_counter()
    process = subprocess.Popen(command, env=env, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - began
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{root}: report {profile} --section {section} failed: "
                         f"{process.stderr.read().decode(errors='replace').strip()[-500:]}")
    process.stderr.close()
    return wall, usage.ru_maxrss / 1024  # KiB on Linux


def span(values: list[float], digits: int) -> str:
    low, high = min(values), max(values)
    return f"{low:.{digits}f}" if round(low, digits) == round(high, digits) else f"{low:.{digits}f}-{high:.{digits}f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profiles", type=Path, nargs="+")
    parser.add_argument("--a", type=Path, required=True, help="the first checkout (its popvision_py is run)")
    parser.add_argument("--b", type=Path, required=True, help="the second checkout")
    parser.add_argument("--sections", nargs="+", default=["operations", "system", "all"])
    parser.add_argument("--repeat", type=int, default=3, help="rounds of every run")
    parser.add_argument("--against", type=Path, help="the profile every other's peak is divided by")
    args = parser.parse_args(argv)
    roots = {"a": args.a.resolve(), "b": args.b.resolve()}
    found: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
    for round_ in range(args.repeat):
        for section in args.sections:
            for profile in args.profiles:
                for name, root in roots.items():
                    figures = run_once(root, profile, section)
                    found.setdefault((str(profile), section, name), []).append(figures)
                    print(f"round {round_ + 1} {name} {section} {profile}: {figures[0]:.2f} s, {figures[1]:.1f} MiB "
                          f"(load {os.getloadavg()[0]:.1f})", file=sys.stderr)
    print("| profile | section | checkout | wall s | peak MiB | peak against --against |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    for (profile, section, name), runs in found.items():
        base = found.get((str(args.against), section, name)) if args.against else None
        ratio = "" if not base or profile == str(args.against) else \
            span([peak / max(b for _, b in base) for _, peak in runs] + [peak / min(b for _, b in base)
                                                                          for _, peak in runs], 2) + "x"
        print(f"| {profile} | {section} | {name} | {span([w for w, _ in runs], 2)} | "
              f"{span([p for _, p in runs], 1)} | {ratio} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
