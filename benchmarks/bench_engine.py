"""Benchmark the emulator: `python benchmarks/bench_engine.py [--repeat N] [--json PATH] [--quick]`.

Cases (issue 6): A, bert-large pipelined over 4 IPUs x 4 replicas (IPU-POD16) at gradient
accumulation 64 and 4 device iterations; B, gpt3-175b phased over an IPU-POD256; and growth, the
same bert-large run at 4, 40 and 250 device iterations (about 0.8, 8 and 50 million trace rows).

Each run of a case is a fresh process that runs `popvision run ... --profile` through the CLI's
`main` and reports its own figures: the engine time (the command, in process, after importing the
CLI and the engine; any import the command itself triggers is counted), the
process's wall time and its peak RSS (``ru_maxrss``). Then the profile's tables are read back into
memory as Arrow tables and ``ProfileWriter`` alone writes them again, timed: the writer-only time.
The ratio engine / writer-only is what the emulation costs beyond writing its output (target <= 3).
Figures are medians over ``--repeat`` runs (the growth sizes beyond the first run once). Profiles
go to a temporary folder (``--tmp``), never the repository.

``--quick`` runs tiny sizes (mnist) in seconds: a smoke test of the harness, not figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

BERT_POD16 = ["bert-large", "--gradient-accumulation", "64", "--replicas", "4"]
CASES = {
    "A": [*BERT_POD16, "--device-iterations", "4"],
    "B": ["gpt", "--preset", "gpt3-175b"],
}
GROWTH = {f"growth DI {di}": [*BERT_POD16, "--device-iterations", str(di)] for di in (4, 40, 250)}
QUICK_CASES = {"A": ["mnist", "--device-iterations", "2"], "B": ["mnist", "--strategy", "phased"]}
QUICK_GROWTH = {f"growth DI {di}": ["mnist", "--device-iterations", str(di)] for di in (1, 4, 16)}

# Runs in the fresh process: the CLI command, timed after its imports, and the process's peak RSS.
CHILD = """
import json, resource, sys, time
start = time.perf_counter()
from popvision_py.cli import main
import popvision_py.cli.run  # the command's module and the engine: imported before the clock starts
import popvision_py.analysis.report  # and the analysis that reads the run's idle and FLOP figures back
imported = time.perf_counter()
try:
    main(sys.argv[1:], standalone_mode=False)
finally:
    done = time.perf_counter()
print(json.dumps({"engine_s": done - imported, "import_s": imported - start,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


@dataclass
class Result:
    case: str
    command: str
    engine_s: float  # median, in process
    wall_s: float  # median, the whole process (interpreter start, imports, command)
    writer_s: float  # median, ProfileWriter alone writing the same tables
    ratio: float  # engine_s / writer_s
    peak_rss_mb: float  # largest over the runs
    profile_bytes: int
    rows: dict[str, int]
    total_rows: int
    rows_per_s: float  # rows of every table / engine_s
    engine_runs_s: list[float] = field(default_factory=list)
    writer_runs_s: list[float] = field(default_factory=list)


def run_engine(args: list[str], out: Path) -> dict:
    cmd = [sys.executable, "-c", CHILD, "run", *args, "--profile", "--profile-dir", str(out), "-q"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - start
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    figures["wall_s"] = wall
    return figures


def writer_only(tables: dict, manifest: dict, target: Path, repeat: int) -> list[float]:
    """Time ProfileWriter writing ``tables`` (already in memory) to ``target``, ``repeat`` times."""
    from popvision_py.format import ProfileWriter

    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        with ProfileWriter(target, target=manifest["target"], run=manifest["run"]) as writer:
            for name, table in tables.items():
                writer.write_table(name, table)
        times.append(time.perf_counter() - start)
        target.unlink()
    return times


def measure(case: str, args: list[str], repeat: int, tmp: Path) -> Result:
    out = tmp / case.replace(" ", "_")
    runs = [run_engine(args, out) for _ in range(repeat)]
    path = out / "profile.pop"
    from popvision_py.format import open_profile

    with open_profile(path) as profile:  # opened once: the row counts, and the tables the writer-only run writes
        manifest = profile.manifest
        tables = {name: profile.read_table(name) for name in profile.tables}
    rows = {name: int(t["rows"]) for name, t in manifest["tables"].items()}
    writer = writer_only(tables, manifest, path.parent / "writer_only.pop", repeat)
    engine = statistics.median(r["engine_s"] for r in runs)
    writer_s = statistics.median(writer)
    total = sum(rows.values())
    result = Result(
        case=case, command="popvision run " + " ".join(args) + " --profile",
        engine_s=engine, wall_s=statistics.median(r["wall_s"] for r in runs),
        writer_s=writer_s, ratio=engine / writer_s,
        peak_rss_mb=max(r["peak_rss_mb"] for r in runs), profile_bytes=path.stat().st_size,
        rows=rows, total_rows=total, rows_per_s=total / engine,
        engine_runs_s=[round(r["engine_s"], 3) for r in runs], writer_runs_s=[round(t, 3) for t in writer],
    )
    path.unlink()
    return result


def machine() -> dict:
    import numpy
    import pyarrow

    return {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "numpy": numpy.__version__, "pyarrow": pyarrow.__version__}


def render(results: list[Result]) -> str:
    head = ("case", "engine s", "wall s", "writer-only s", "ratio", "peak RSS MB", "profile MB", "rows", "Mrows/s")
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" + " ---: |" * (len(head) - 1)]
    for r in results:
        lines.append(f"| {r.case} | {r.engine_s:.2f} | {r.wall_s:.2f} | {r.writer_s:.2f} | {r.ratio:.2f} | "
                     f"{r.peak_rss_mb:.0f} | {r.profile_bytes / 1e6:.1f} | {r.total_rows:,} | {r.rows_per_s / 1e6:.2f} |")
    lines.append("")
    for r in results:
        lines.append(f"{r.case}: {r.command}")
        lines.append("  rows: " + ", ".join(f"{k} {v:,}" for k, v in r.rows.items()))
        lines.append(f"  engine runs {r.engine_runs_s} s, writer-only runs {r.writer_runs_s} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (medians); default 3")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one run each: a smoke test")
    parser.add_argument("--no-growth", action="store_true", help="cases A and B only")
    parser.add_argument("--tmp", type=Path, help="folder for the profiles (default: a temporary folder)")
    args = parser.parse_args(argv)
    cases, growth = (QUICK_CASES, QUICK_GROWTH) if args.quick else (CASES, GROWTH)
    repeat = 1 if args.quick else args.repeat
    results = []
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        for name, cmd in cases.items():
            results.append(measure(name, cmd, repeat, Path(tmp)))
            print(f"{name}: {results[-1].engine_s:.2f} s", file=sys.stderr)
        if not args.no_growth:
            for k, (name, cmd) in enumerate(growth.items()):
                results.append(measure(name, cmd, repeat if k == 0 else 1, Path(tmp)))
                print(f"{name}: {results[-1].engine_s:.2f} s", file=sys.stderr)
    print(render(results))
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "results": [asdict(r) for r in results]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
