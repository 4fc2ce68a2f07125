"""Benchmark the emulator: `python benchmarks/bench_engine.py [MODEL ...] [--repeat N]`.

For each command (by default `popvision run bert-large --profile`, the issue's target of < 20 s,
and `popvision run mnist --profile`), runs it N times in a fresh process and prints the median wall
time, the peak RSS, the profile's size and each table's rows. Not a test: figures for the notes.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS = {
    "bert-large": ["bert-large"],
    "mnist": ["mnist"],
    "resnet50-pod16": ["resnet50", "--replicas", "4"],
    "gpt3-175b-pod256": ["gpt", "--preset", "gpt3-175b"],
}


def measure(args: list[str], repeat: int) -> dict:
    times, rss = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeat):
            cmd = [sys.executable, "-m", "popvision_py.cli", "run", *args, "--profile", "--profile-dir", tmp, "-q"]
            before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
            start = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True)
            times.append(time.perf_counter() - start)
            rss.append(max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
        path = Path(tmp) / "profile.pop"
        manifest = json.loads(subprocess.run(
            [sys.executable, "-m", "popvision_py.cli", "info", str(path), "--json"],
            check=True, capture_output=True, text=True).stdout)
        return {
            "command": "popvision run " + " ".join(args) + " --profile",
            "median_s": statistics.median(times),
            "runs_s": [round(t, 3) for t in times],
            "peak_rss_mb": max(rss) / 1024,
            "profile_bytes": path.stat().st_size,
            "rows": {name: t["rows"] for name, t in manifest["tables"].items()},
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(COMMANDS), help=f"any of {', '.join(COMMANDS)}")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for name in args.models:
        r = measure(COMMANDS[name], args.repeat)
        print(r["command"])
        print(f"  wall time   median {r['median_s']:.2f} s over {args.repeat} runs {r['runs_s']}")
        print(f"  peak RSS    {r['peak_rss_mb']:.0f} MB")
        print(f"  profile     {r['profile_bytes']:,} bytes")
        print("  rows        " + ", ".join(f"{k} {v:,}" for k, v in r["rows"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
