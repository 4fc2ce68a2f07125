"""How close the insights' estimates are: run every suggested fix of a profile and compare.

    .venv/bin/python benchmarks/fix_estimates.py PROFILE [PROFILE ...] [--tmp DIR]

For each insight with a command, runs the command (its profile into --tmp) and prints the worst
tile the fix's effect estimates against the one the emulator measures, and the throughput before
and after. The figures are written down in docs/reports.md ("Insights"); nothing here is asserted.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import popvision_py as pv

ROOT = Path(__file__).resolve().parents[1]
POPVISION = [sys.executable, "-m", "popvision_py.cli"]


def measure(profile: Path, scratch: Path) -> list[dict]:
    with pv.open(profile) as report:
        insights = report.summary.insights()
        before = report.summary.figures()
    rows = []
    found = zip(insights["suggestion"], insights["effect"], insights["command"])
    for k, (suggestion, effect, command) in enumerate(found):
        if not command:
            continue
        words = shlex.split(command)
        at = words.index("--profile-dir")
        words[at + 1] = str(scratch / f"{profile.parent.name}-{k}")
        done = subprocess.run([*POPVISION, *words[1:], "-q", "--json"], capture_output=True, text=True, cwd=ROOT)
        estimate = re.search(r"-> about ([\d,]+) bytes", effect)
        row = {"profile": profile.parent.name, "fix": suggestion[:60], "exit": done.returncode,
               "worst_before": before.worst_tile_bytes,
               "worst_estimate": int(estimate.group(1).replace(",", "")) if estimate else None,
               "throughput_before": before.throughput_samples_per_s}
        if done.returncode == 0:
            out = json.loads(done.stdout)
            row.update(worst_measured=out["worst_tile_bytes"], fits=out["fits"],
                       throughput_after=out["samples_per_second"])
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profiles", nargs="+", type=Path)
    parser.add_argument("--tmp", type=Path, help="where the fixes' profiles go (a temporary folder by default)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.tmp or Path(scratch)
        rows = [row for p in args.profiles for row in measure(p, folder)]
    print(f"{'profile':26} {'fix':60} {'exit':>4} {'worst before':>12} {'estimate':>10} {'measured':>10} "
          f"{'error':>7} {'samples/s before -> after':>26}")
    for r in rows:
        est, got = r["worst_estimate"], r.get("worst_measured")
        error = f"{100 * (est - got) / got:+.1f}%" if est and got else "-"
        step = f"{r['throughput_before']:,.1f} -> {r.get('throughput_after', float('nan')):,.1f}"
        print(f"{r['profile']:26} {r['fix']:60} {r['exit']:>4} {r['worst_before']:>12,} "
              f"{est if est is not None else '-':>10} {got if got is not None else '-':>10} {error:>7} {step:>26}")


if __name__ == "__main__":
    main()
