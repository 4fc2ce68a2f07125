"""What bound each step of real GPU traces, and what else `report --section gpu` finds beyond HTA's figures.

    .venv/bin/python benchmarks/gpu_verdicts.py DIR [DIR ...]

Each DIR (a folder of one job's traces: HolisticTraceAnalysis's tests/data/..., never kept in this
repository) is imported into a scratch folder with `popvision import`, then `popvision report --section gpu
--format json` is read, and one Markdown row printed per trace: the steps' verdicts, the GPU's busy share and
its waits for launches and for input over the steps, the short kernel launched most often (with the operator
it ran in), and the phase that ran most beside another phase.
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADER = ("| trace | steps: verdict | GPU busy % | waits for launches % | waits for input % | short kernel launched "
          "most (launches, operator) | phase most beside another (% of its GPU time, beside) |\n"
          "| --- | --- | --- | --- | --- | --- | --- |")


def popvision(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "popvision_py.cli", *args], capture_output=True, text=True,
                          cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"popvision {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def spread(values: list[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:.0f}" if round(low) == round(high) else f"{low:.0f} to {high:.0f}"


def row(folder: Path, scratch: Path) -> str:
    out = scratch / folder.name
    popvision("import", str(folder), "-o", str(out), "-q")
    gpu = json.loads(popvision("report", str(out / "profile.pop"), "--section", "gpu", "--format", "json"))
    gpu = gpu["sections"]["gpu"]
    bounds = gpu["bounds"]
    verdicts = ", ".join(f"{n} {v}" for v, n in collections.Counter(b["verdict"] for b in bounds).most_common())
    short = [w for w in gpu["worth_a_look"] if "short" in w["reason"]]
    short_text = (f"`{short[0]['name'][:48]}` ({short[0]['kernels']:,}, {short[0]['op'] or 'none'})" if short
                  else "none")
    phases = [p for p in gpu["phases"] if p["overlap_ns"] > 0]
    top = max(phases, key=lambda p: p["overlap_ns"]) if phases else None
    phase_text = f"`{top['phase']}` ({top['overlap_pct']:.0f}%, `{top['overlapped_with']}`)" if top else "none"
    return (f"| {folder.parent.name + '/' if folder.parent.name != 'data' else ''}{folder.name} | {verdicts} | "
            f"{spread([b['gpu_busy_pct'] for b in bounds])} | {spread([b['launch_wait_pct'] for b in bounds])} | "
            f"{spread([b['input_wait_pct'] for b in bounds])} | {short_text} | {phase_text} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path, help="folders of GPU traces, one job each")
    args = ap.parse_args(argv)
    print(HEADER)
    with tempfile.TemporaryDirectory() as scratch:
        for folder in args.folders:
            print(row(folder, Path(scratch)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
