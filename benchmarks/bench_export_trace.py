"""`popvision export-trace`: peak memory and time as the trace grows, and what a narrow window costs.

    .venv/bin/python benchmarks/bench_export_trace.py [--rows 1000000 10000000] [--tmp DIR] [--json OUT.json]
                                                     [--quick]

For each size, ``make_large_profile.py`` writes a pipelined training profile with that many trace
rows (about 18,800 rows an iteration, 100 iterations a run), then the whole command runs in its own
process, twice: the whole trace, and its middle iteration (``--iterations N`` alone). The peak resident
memory is that process's own high-water mark (``VmHWM``, imports included; see ``CHILD``), the
time its wall time. The JSON written is deleted after each run (10M rows write
2.6 GB). Target: the peak at the largest size within 1.2x of the peak at the smallest (memory
flat as the trace grows); the bench exits 1 when it is missed, after writing its figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

import make_large_profile  # noqa: E402  (benchmarks/ is this script's folder)

from popvision_py.export_trace import Window, iterations_per_run  # noqa: E402
from popvision_py.format import open_profile  # noqa: E402

FLAT = 1.2  # largest size's peak / smallest size's peak


# The command in a fresh process that writes, as it exits, its peak RSS (VmHWM, KiB) to $PEAK_FILE.
# Not ru_maxrss: Linux carries the parent's high-water mark across fork/vfork + exec into the child's
# ru_maxrss, so a child of this (large) process would report this process's peak. VmHWM belongs to
# the address space exec made.
CHILD = """
import atexit, os, sys
from pathlib import Path
def peak():
    line = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("VmHWM:"))
    Path(os.environ["PEAK_FILE"]).write_text(line.split()[1])
atexit.register(peak)
from popvision_py.cli import main
main(sys.argv[1:], prog_name="popvision")
"""


def command(profile: Path, out: Path, *options: str) -> dict:
    """Run `popvision export-trace` in a fresh process: wall time, peak RSS, bytes written, its message."""
    peak_file = out.with_suffix(".peak")
    began = time.perf_counter()
    child = subprocess.run([sys.executable, "-c", CHILD, "export-trace", str(profile), "-o", str(out), "-q", *options],
                           cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PEAK_FILE": str(peak_file)})
    wall = time.perf_counter() - began
    if child.returncode != 0:
        raise SystemExit(f"export-trace failed: {child.stderr.strip()}")
    size = out.stat().st_size
    out.unlink()
    peak_mb = int(peak_file.read_text()) / 1024
    return {"wall_s": wall, "peak_rss_mb": peak_mb, "json_bytes": size, "message": child.stderr.strip()}


def measure(rows: int, folder: Path) -> dict:
    profile = folder / f"trace_{rows}.pop"
    if not profile.exists():
        make_large_profile.write(profile, rows)
    with open_profile(profile) as p:
        trace_rows = p.num_rows("trace")
        metadata = p.metadata("trace")
        per_run = iterations_per_run(p)
        ids = p.read_table("trace", ["run", "iteration"])
        last = int((ids["run"].to_numpy().astype(np.int64) * per_run + ids["iteration"].to_numpy()).max())
        middle = str(last // 2)
        groups = len(Window.parse(middle).row_groups(metadata, per_run))
    whole = command(profile, folder / "whole.json")
    window = command(profile, folder / "window.json", "--iterations", middle)
    window.update(iteration=int(middle), row_groups_read=groups, row_groups=metadata.num_row_groups)
    return {"rows": trace_rows, "profile_bytes": profile.stat().st_size, "whole": whole, "window": window}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000], help="trace sizes")
    parser.add_argument("--tmp", type=Path, help="folder for the profiles (default: a temporary folder)")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, to check the benchmark runs")
    args = parser.parse_args(argv)
    sizes = [150_000, 400_000] if args.quick else sorted(args.rows)  # quick: each above one 64 Ki batch

    with tempfile.TemporaryDirectory(prefix="popvision-export-") as scratch:
        folder = args.tmp or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        results = [measure(rows, folder) for rows in sizes]

    print(f"{'trace rows':>12} {'profile MB':>11} {'JSON MB':>9} {'peak MiB':>9} {'time s':>7}   "
          f"one iteration: {'peak MiB':>8} {'time s':>6} row groups")
    for r in results:
        w, n = r["whole"], r["window"]
        print(f"{r['rows']:>12,} {r['profile_bytes'] / 1e6:>11.1f} {w['json_bytes'] / 1e6:>9,.0f} "
              f"{w['peak_rss_mb']:>9.0f} {w['wall_s']:>7.1f}   {'':>14} {n['peak_rss_mb']:>8.0f} {n['wall_s']:>6.2f} "
              f"{n['row_groups_read']} of {n['row_groups']}")
    ratio = results[-1]["whole"]["peak_rss_mb"] / results[0]["whole"]["peak_rss_mb"]
    met = ratio <= FLAT
    print(f"peak at {results[-1]['rows']:,} rows / at {results[0]['rows']:,} rows: {ratio:.2f} "
          f"(target <= {FLAT}: {'met' if met else 'NOT MET'})")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"results": results, "peak_ratio": ratio, "target": FLAT, "met": met},
                                        indent=2))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
