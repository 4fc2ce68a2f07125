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

``--writing`` measures issue 26's row 4 instead: `popvision run gpt --preset gpt3-175b
--device-iterations N --profile` at about 0.25, 0.5 and 1 billion trace rows (``--sizes``), each run
under ``/usr/bin/time -v`` (wall time, peak RSS) and, with ``--before TREE``, paired with the same
command on another checkout (the tree before the change), interleaved A, B, A, B; medians over
``--repeat``, the load average with each run. The target: 1 billion rows emulated, written and
summarised in under 120 s, the peak RSS at 1B about that at 0.5B. With ``--quick`` too, the same
command on gpt2-small (31,082 rows an iteration; 1.7 s against gpt3-175b's 17 s for one): a smoke test of
the harness, not the row's figures.
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
                     f"{r.peak_rss_mb:.0f} | {r.profile_bytes / 1e6:.1f} | {r.total_rows:,} | "
                     f"{r.rows_per_s / 1e6:.2f} |")
    lines.append("")
    for r in results:
        lines.append(f"{r.case}: {r.command}")
        lines.append("  rows: " + ", ".join(f"{k} {v:,}" for k, v in r.rows.items()))
        lines.append(f"  engine runs {r.engine_runs_s} s, writer-only runs {r.writer_runs_s} s")
    return "\n".join(lines)


# Trace rows each preset writes per device iteration (one host call of the default run): gpt3-175b is row 4's
# model, gpt2-small the quick run's.
ROWS_PER_ITERATION = {"gpt3-175b": 511_186, "gpt2-small": 31_082}
WRITING_TARGET_S = 120.0
WRITING_RSS_GROWTH = 1.2  # "flat": the peak RSS at 1B rows within 20% of that at 0.5B


def writing_command(rows: float, out: Path, preset: str = "gpt3-175b") -> list[str]:
    """The row-4 command for at least ``rows`` trace rows of ``preset``, writing into ``out``."""
    iterations = -(-int(rows) // ROWS_PER_ITERATION[preset])
    return ["-m", "popvision_py.cli", "run", "gpt", "--preset", preset, "--device-iterations", str(iterations),
            "--profile", "--profile-dir", str(out), "-q", "--max-trace-rows", str(2 * int(rows) + 10**6),
            "--max-memory-gb", "64"]


def timed_run(tree: Path, args: list[str]) -> dict:
    """One run of ``python ARGS`` with ``tree`` first on the path, under /usr/bin/time -v."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    load = os.getloadavg()[0]
    proc = subprocess.run(["/usr/bin/time", "-v", sys.executable, *args], cwd=tree, env=env, capture_output=True,
                          text=True, check=True)
    fields = dict(line.strip().rsplit(": ", 1) for line in proc.stderr.splitlines() if ": " in line)
    clock = fields["Elapsed (wall clock) time (h:mm:ss or m:ss)"].split(":")
    wall = sum(float(x) * 60 ** i for i, x in enumerate(reversed(clock)))
    return {"wall_s": wall, "peak_rss_mb": int(fields["Maximum resident set size (kbytes)"]) / 1024,
            "cpu_s": float(fields["User time (seconds)"]) + float(fields["System time (seconds)"]),
            "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2), "summary": proc.stdout}


def measure_writing(sizes: list[float], trees: dict[str, Path], repeat: int, tmp: Path,
                    preset: str = "gpt3-175b") -> list[dict]:
    """Each size, each tree, ``repeat`` times, interleaved; the figures of every run and their medians."""
    results = []
    for rows in sizes:
        runs: dict[str, list[dict]] = {name: [] for name in trees}
        for _ in range(repeat):
            for name, tree in trees.items():
                out = tmp / f"writing-{name}"
                run = timed_run(tree, writing_command(rows, out, preset))
                path = out / "profile.pop"
                from popvision_py.format import open_profile

                with open_profile(path) as profile:
                    run["trace_rows"] = int(profile.manifest["tables"]["trace"]["rows"])
                run["profile_bytes"] = path.stat().st_size
                path.unlink()
                runs[name].append(run)
                print(f"{rows / 1e9:g}B {name}: {run['wall_s']:.1f} s, CPU {run['cpu_s']:.1f} s, "
                      f"{run['peak_rss_mb']:.0f} MB, {run['trace_rows']:,} rows, load {run['load_before']} -> "
                      f"{run['load_after']}", file=sys.stderr, flush=True)
        command = "popvision run " + " ".join(writing_command(rows, Path("PROFILE_DIR"), preset)[3:])
        for name, done in runs.items():
            results.append({"rows": rows, "tree": name, "trace_rows": done[0]["trace_rows"], "command": command,
                            "wall_s": statistics.median(r["wall_s"] for r in done),
                            "cpu_s": statistics.median(r["cpu_s"] for r in done),
                            "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in done),
                            "profile_bytes": done[0]["profile_bytes"],
                            "loads": [r["load_before"] for r in done],
                            "runs": [{k: v for k, v in r.items() if k != "summary"} for r in done]})
    return results


def writing_verdict(results: list[dict], tree: str = "after") -> dict:
    """Row 4's target met or not: at least 1B rows in under 120 s at the largest size, and a flat peak
    RSS (at most WRITING_RSS_GROWTH x that at the size nearest half the largest)."""
    mine = sorted((r for r in results if r["tree"] == tree), key=lambda r: r["rows"])
    if not mine:
        return {"met": False, "why": "no run"}
    big = mine[-1]
    half = min(mine[:-1], key=lambda r: abs(r["rows"] - big["rows"] / 2), default=None)
    fast = big["wall_s"] < WRITING_TARGET_S
    flat = half is not None and big["peak_rss_mb"] <= WRITING_RSS_GROWTH * half["peak_rss_mb"]
    return {"met": fast and flat and big["trace_rows"] >= 1e9, "trace_rows": big["trace_rows"],
            "wall_s": big["wall_s"], "peak_rss_mb": big["peak_rss_mb"],
            "half_trace_rows": half["trace_rows"] if half else None,
            "half_peak_rss_mb": half["peak_rss_mb"] if half else None, "fast": fast, "flat": flat}


def render_writing(results: list[dict]) -> str:
    head = ("trace rows", "tree", "wall s (median)", "CPU s", "peak RSS MB", "profile MB", "load averages")
    lines = ["| " + " | ".join(head) + " |", "| ---: | --- |" + " ---: |" * (len(head) - 3) + " --- |"]
    for r in results:
        lines.append(f"| {r['trace_rows']:,} | {r['tree']} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | "
                     f"{r['peak_rss_mb']:.0f} | {r['profile_bytes'] / 1e6:,.0f} | {r['loads']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (medians); default 3")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one run each: a smoke test")
    parser.add_argument("--no-growth", action="store_true", help="cases A and B only")
    parser.add_argument("--tmp", type=Path, help="folder for the profiles (default: a temporary folder)")
    parser.add_argument("--writing", action="store_true", help="issue 26's row 4: gpt3-175b at --sizes trace rows")
    parser.add_argument("--sizes", default="0.25e9,0.5e9,1e9", help="--writing: trace rows, comma separated")
    parser.add_argument("--before", type=Path, help="--writing: a checkout to pair each run with (the tree before)")
    args = parser.parse_args(argv)
    if args.writing:
        trees = {"after": Path(__file__).resolve().parents[1]}
        if args.before:
            trees = {"before": args.before.resolve(), **trees}
        with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
            results = measure_writing([float(x) for x in args.sizes.split(",")], trees, args.repeat, Path(tmp),
                                      "gpt2-small" if args.quick else "gpt3-175b")
        verdict = writing_verdict(results)
        print(render_writing(results))
        print(f"target (1B rows < {WRITING_TARGET_S:.0f} s, flat RSS): "
              f"{'met' if verdict['met'] else 'not met'} {verdict}")
        if args.json:
            args.json.write_text(json.dumps({"machine": machine(), "writing": results, "verdict": verdict}, indent=2))
        return 0
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
