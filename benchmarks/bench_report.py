"""How long `popvision report --section all` takes against pyarrow reading the columns it uses.

Usage::

    .venv/bin/python benchmarks/bench_report.py [PROFILE ...] [--repeat N] [--no-cli] [--fresh N] [--dashboard]
    .venv/bin/python benchmarks/bench_report.py PROFILE ... --duckdb [--fresh N] [--unzipped DIR]

PROFILE is any profile.pop (the engine's, or benchmarks/make_large_profile.py's for 50M-row
traces). Without PROFILE it makes the bert-large profile with the engine (`popvision run bert-large
--profile`) in a temporary folder; if the engine is missing it writes a large synthetic pipeline
profile with tests/synthetic.py instead (and says so).

For each profile it prints the medians of:

- **baseline**: pyarrow (`pq.read_table`) decoding, from the same memory-mapped file, exactly the
  tables and columns the analysis read. They are not listed by hand: one analysis run is traced
  (every `Profile.read_table` call recorded) and the baseline replays those reads, so it reads the
  same columns, not fewer and not more; the list is printed. The run also checks that no table
  was read twice;
- **analysis**: in process, `popvision_py.open(path)` + building every section + rendering text
  (imports already done: what a warm process such as the dashboard pays), run alternately with
  the baseline so that both see the same load on a shared machine;
- **commands** (unless ``--no-cli``): whole processes, alternately, each with its Python start-up
  and imports: `popvision report PROFILE --section all`, and `python -c` importing pyarrow and
  reading the same columns;

and the ratios analysis / baseline and command / command. The targets: analysis / baseline <= 2
(issue 4, bert-large) and <= 1.5 (issue 6, a trace of >= 50M rows).

``--fresh N`` measures instead in N fresh subprocesses each (baseline and analysis alternating, so
the machine's noise hits both alike): wall time, and peak memory as the process's peak RSS
(``VmHWM``, its mark reset after the imports through ``/proc/self/clear_refs``) minus its RSS at
that reset: the interpreter and libraries do not count; the pages of the memory-mapped profile
that were read do count, for both. The memory ratio is the analysis' peak
over the decoded size of the columns it reads (``pa.Table.nbytes`` of the replayed reads); the
target (issue 6) is <= 2. ``--dashboard`` also times, in one fresh process after the analysis,
what the dashboard asks of the trace: the first timeline (it builds the index), a full-view and a
zoomed timeline, and the Gantt bars.

``--duckdb`` (issue 35, item 2) measures instead, side by side in fresh processes run alternately
(``--fresh N`` times each, default 3), two whole commands: `popvision report PROFILE --section all
--format json`, and DuckDB (``python -c``, ``SET threads`` to the cores `report` folds on) computing
the same aggregates from the profile's ``trace.parquet`` member, copied out of the ZIP once
beforehand (``--unzipped DIR``, default beside the profile; stored, so its bytes as they are):
``DUCKDB_AGGREGATES``, one scan in grouping sets, gives what the report's trace summary gives (the
cycles per IPU, stage, pass and phase; the executions per IPU and step; the (run, iteration, stage,
micro-batch) set from which the micro-batches and iterations are counted; the rows, first start and
last end); with ``--supersteps`` also ``DUCKDB_SUPERSTEPS``, the work per superstep, IPU, stage and
pass that the stages report re-times (a superstep ends where an idle row or a sync of no stage ends;
DuckDB assigns each row by its start, where the report assigns each run of rows by its first: the
same work, summed). That one is an ASOF join of every row: 9.5 s and 1.4 GB at 10M rows here, not
run at 1B.
Each side's figure: wall time and peak RSS (``ru_maxrss`` of the child of a small wrapper),
imports and start-up included; DuckDB's two queries' own seconds are printed too. The same
``--duckdb`` run also gives `report`'s peak beyond its imports, in process (``VmHWM``, as
``--fresh``). Nothing decodes the whole trace in this process: it works at 1B rows.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import popvision_py as pv  # noqa: E402
from compiled import compile_tree  # noqa: E402
from popvision_py.format import Profile, open_profile  # noqa: E402
from popvision_py.format import schema as S  # noqa: E402
from popvision_py.render import text  # noqa: E402
from popvision_py.render.document import build_report  # noqa: E402


# Issue 26: at 10M and 50M trace rows, the analysis at most 1.3x pyarrow reading the same columns
# (it was 1.36-1.48 before the read-side checks landed, 1.74-1.83 with them).
ISSUE26_TARGET = 1.3


DUCKDB_AGGREGATES = (
    "SELECT ipu, stage, pass, phase, step, run, iteration, micro_batch, sum(end_cycle - start_cycle) AS cycles, "
    "count(*) AS rows, min(start_cycle) AS first_start, max(end_cycle) AS last_end FROM trace "
    "GROUP BY GROUPING SETS ((ipu, stage, pass, phase), (ipu, step), (run, iteration, stage, micro_batch))"
)
DUCKDB_SUPERSTEPS = (
    "WITH cuts AS (SELECT DISTINCT end_cycle AS cut FROM trace WHERE phase = 'idle' OR (phase = 'sync' AND stage < 0)) "
    "SELECT cut, ipu, stage, pass, sum(end_cycle - start_cycle) AS cycles FROM trace "
    "ASOF LEFT JOIN cuts ON trace.start_cycle >= cuts.cut GROUP BY ALL"
)
# DuckDB's whole command: prints the rows of each answer and its seconds, as JSON on its last line.
_DUCKDB_SCRIPT = (
    "import json, sys, time\n"
    "import duckdb\n"
    "con = duckdb.connect()\n"
    "con.execute(f'SET threads = {int(sys.argv[2])}')\n"
    "con.execute('SET enable_progress_bar = false')\n"
    "con.execute(f\"CREATE VIEW trace AS SELECT * FROM read_parquet('{sys.argv[1]}')\")\n"
    "out = {}\n"
    "warm = int(sys.argv[3])\n"
    "for name, query in zip(('aggregates', 'supersteps'), sys.argv[4:]):\n"
    "    times = []\n"
    "    for _ in range(1 + warm):\n"
    "        began = time.perf_counter()\n"
    "        rows = con.execute(query).fetchnumpy()\n"
    "        times.append(time.perf_counter() - began)\n"
    "    out[name + '_s'] = times[0]\n"
    "    out[name + '_warm_s'] = sorted(times[1:])[len(times[1:]) // 2] if warm else times[0]\n"
    "    out[name + '_rows'] = len(next(iter(rows.values())))\n"
    "print(json.dumps(out))\n"
)
# Runs a command and prints its wall time and peak RSS (KiB): a fresh wrapper per run, its figures its own.
_MEASURED = (
    "import json, resource, subprocess, sys, time\n"
    "began = time.perf_counter()\n"
    "done = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, text=True, check=True)\n"
    "wall = time.perf_counter() - began\n"
    "last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else '{}'\n"
    "print(json.dumps({'wall_s': wall, 'peak_kib': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,\n"
    "                  'out': json.loads(last) if last.startswith('{') else {}}))\n"
)


def interleaved(first, second, repeat: int) -> tuple[list[float], list[float]]:
    """Times of ``first`` and ``second`` run alternately ``repeat`` times each, after a warm-up of both.

    On a shared machine the load changes from one second to the next; alternating makes both
    measurements see the same load, so their ratio is steadier than that of two separate series.
    """
    first(), second()
    a, b = [], []
    for _ in range(repeat):
        for func, times in ((first, a), (second, b)):
            started = time.perf_counter()
            func()
            times.append(time.perf_counter() - started)
    return a, b


def traced_reads(path: Path) -> list[tuple[str, list[str] | None]]:
    """The (table, columns) an analysis run reads, in order, recorded from ``Profile.read_table``."""
    reads: list[tuple[str, list[str] | None]] = []
    original, original_batches = Profile.read_table, Profile.iter_batches

    def record(self, table, columns=None, **kwargs):
        reads.append((table, list(columns) if columns is not None else None))
        return original(self, table, columns, **kwargs)

    def record_batches(self, table, columns=None, **kwargs):  # the trace is streamed, not read whole
        read = (table, list(columns) if columns is not None else None)
        if kwargs.get("row_groups") and read in reads:  # the next row group of one pass (analysis.tracegroups)
            return original_batches(self, table, columns, **kwargs)
        reads.append(read)
        return original_batches(self, table, columns, **kwargs)

    Profile.read_table, Profile.iter_batches = record, record_batches
    try:
        analysis(path)
    finally:
        Profile.read_table, Profile.iter_batches = original, original_batches
    tables = [t for t, _ in reads]
    twice = sorted({t for t in tables if tables.count(t) > 1})
    if twice:
        raise SystemExit(f"the analysis read {', '.join(twice)} more than once")
    return reads


def spans(path: Path, reads: list[tuple[str, list[str] | None]]) -> list[tuple[int, int, list[str] | None]]:
    """(offset, size, columns) of each read: where its table's member lies in the file."""
    with open_profile(path) as profile:
        members = {t: profile._members[S.TABLES[t].member] for t, _ in reads}
    return [(members[t].offset, members[t].size, columns) for t, columns in reads]


def baseline(path: Path, where: list[tuple[int, int, list[str] | None]]) -> None:
    """pyarrow reading ``where`` (``spans``, looked up beforehand: not part of the time)."""
    mapped = pa.memory_map(str(path), "r")
    buffer = mapped.read_buffer()
    for offset, size, columns in where:
        pq.read_table(pa.BufferReader(buffer.slice(offset, size)), columns=columns)
    mapped.close()


def analysis(path: Path) -> None:
    with pv.open(path) as report:
        text.render(build_report(report, "all"))


def cli(path: Path) -> None:
    subprocess.run([str(ROOT / ".venv" / "bin" / "popvision"), "report", str(path), "--section", "all"],
                   check=True, stdout=subprocess.DEVNULL)


# The whole-command baseline: a fresh Python that imports pyarrow and reads the same columns.
_READ_SCRIPT = (
    "import json, sys\n"
    "import pyarrow as pa, pyarrow.parquet as pq\n"
    "buffer = pa.memory_map(sys.argv[1], 'r').read_buffer()\n"
    "for offset, size, columns in json.loads(sys.argv[2]):\n"
    "    pq.read_table(pa.BufferReader(buffer.slice(offset, size)), columns=columns)\n"
)


def cli_baseline(path: Path, reads: list[tuple[str, list[str] | None]]) -> Callable[[], None]:
    """A function running ``_READ_SCRIPT`` on ``reads`` (member offsets looked up once, here)."""
    command = [sys.executable, "-c", _READ_SCRIPT, str(path), json.dumps(spans(path, reads))]
    return lambda: subprocess.run(command, check=True)


def child(what: str, path: Path, reads: list, warm: int = 0) -> None:
    """One measurement in this fresh process: prints JSON with seconds and peak memory beyond the imports
    (the first run's); with ``warm``, the analysis is then run ``warm`` times more in the same process
    and ``warm_s`` is their median."""
    where = spans(path, [tuple(r) for r in reads])
    base = reset_peak()
    began = time.perf_counter()
    out: dict = {}
    if what == "baseline":
        baseline(path, where)
    elif what == "analysis":
        analysis(path)
        out["seconds"], out["peak_bytes"] = time.perf_counter() - began, peak_rss() - base
        times = []
        for _ in range(warm):
            started = time.perf_counter()
            analysis(path)
            times.append(time.perf_counter() - started)
        out["warm_s"] = statistics.median(times) if times else out["seconds"]
    else:  # dashboard: the analysis, then what the trace pages ask
        with pv.open(path) as report:
            text.render(build_report(report, "all"))
            out["analysis_s"] = time.perf_counter() - began
            for name, call in (("timeline_first_s", lambda: report.trace.timeline()),
                               ("timeline_full_s", lambda: report.trace.timeline()),
                               ("timeline_zoom_s", lambda: report.trace.timeline(*zoom(report))),
                               ("gantt_s", lambda: report.stages.gantt())):
                started = time.perf_counter()
                call()
                out[name] = time.perf_counter() - started
    out.setdefault("seconds", time.perf_counter() - began)  # the analysis' first run, if it timed its own
    out.setdefault("peak_bytes", peak_rss() - base)
    print(json.dumps(out))


def _status(key: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def reset_peak() -> int:
    """Reset the peak-RSS mark to the current RSS (Linux ``clear_refs``); returns the current RSS.

    ``ru_maxrss`` cannot serve: Linux carries it over from the parent across fork and exec.
    """
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        return _status("VmRSS")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def peak_rss() -> int:
    try:
        return _status("VmHWM")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def zoom(report) -> tuple[int, int]:
    """A window of 1/1000 of the run, a third of the way in."""
    a, b = report.trace.extent()
    lo = a + (b - a) // 3
    return lo, lo + max((b - a) // 1000, 1)


def fresh(what: str, path: Path, reads: list, warm: int = 0) -> dict:
    done = subprocess.run([sys.executable, __file__, "--child", what, str(path), "--reads", json.dumps(reads),
                           "--warm", str(warm)], check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def make_profile(folder: Path) -> tuple[Path, str]:
    exe = ROOT / ".venv" / "bin" / "popvision"
    done = subprocess.run([str(exe), "run", "bert-large", "--profile", "--profile-dir", str(folder)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode == 0 and (folder / "profile.pop").exists():
        return folder / "profile.pop", "bert-large (engine, `popvision run bert-large --profile`)"
    from tests import synthetic  # the engine is not there: a large synthetic pipeline instead

    path = synthetic.write_pipeline_profile(folder / "synthetic.pop", [100] * 24, stages=[6, 6, 6, 6],
                                            micro_batches=64, iterations=20)
    return path, "large synthetic pipeline (engine unavailable: " + done.stderr.strip()[:80] + ")"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profiles", nargs="*", type=Path)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--no-cli", action="store_true", help="skip the subprocess measurement")
    parser.add_argument("--fresh", type=int, default=0, metavar="N",
                        help="measure time and peak memory in N fresh processes each (see the docstring)")
    parser.add_argument("--dashboard", action="store_true", help="with --fresh: also time the trace pages' calls")
    parser.add_argument("--child", choices=["baseline", "analysis", "dashboard"], help=argparse.SUPPRESS)
    parser.add_argument("--reads", help=argparse.SUPPRESS)
    parser.add_argument("--warm", type=int, default=3, metavar="N",
                        help="with --duckdb: after each side's first run, N more in the same process (their median "
                             "is the warm figure; 0 at a billion rows, where one run is minutes)")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--duckdb", action="store_true",
                        help="`report --section all` against DuckDB's same aggregates, whole commands (docstring)")
    parser.add_argument("--unzipped", type=Path, help="with --duckdb: where to copy the trace.parquet member")
    parser.add_argument("--supersteps", action="store_true",
                        help="with --duckdb: DuckDB also sums the work per superstep (an ASOF join: slow, GBs at 1B)")
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.profiles[0], json.loads(args.reads), args.warm)
        return 0
    results: list[dict] = []
    if args.duckdb:
        repeat = args.fresh or 3
        results = [against_duckdb(path, repeat, args.unzipped, args.supersteps, args.warm) for path in args.profiles]
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"profiles": results}, indent=2))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        profiles = [(p, str(p)) for p in args.profiles] or [make_profile(Path(tmp))]
        for path, label in profiles:
            with open_profile(path) as p:
                rows = p.num_rows("trace")
                reads = traced_reads(path)
                decoded = sum(p.read_table(t, c).nbytes for t, c in reads)
                largest = max(p.num_rows(t) for t, _ in reads)
            n_columns = sum(len(c) if c is not None else len(S.TABLES[t].columns) for t, c in reads)
            print(f"profile   {label}: {os.path.getsize(path):,} bytes, {rows:,} trace rows, largest table read "
                  f"{largest:,} rows")
            print(f"read      {len(reads)} tables, {n_columns} columns, {decoded / 1e6:.1f} MB decoded (the analysis' "
                  f"reads, replayed by the baseline):")
            for table, columns in reads:
                print(f"            {table}: {', '.join(columns) if columns is not None else 'all columns'}")
            figures = {"profile": label, "bytes": os.path.getsize(path), "trace_rows": rows, "tables_read": len(reads),
                       "columns_read": n_columns, "decoded_mb": decoded / 1e6}
            results.append(figures)
            if args.fresh:
                figures.update(measure_fresh(path, reads, decoded, args))
                continue
            where = spans(path, reads)
            bases, anas = interleaved(lambda: baseline(path, where), lambda: analysis(path), args.repeat)
            base, ana = statistics.median(bases), statistics.median(anas)
            ratios = sorted(x / y for x, y in zip(anas, bases))
            lo, hi = ratios[len(ratios) // 4], ratios[(3 * len(ratios)) // 4]
            print(f"baseline  pyarrow reads those columns           {base * 1e3:9.1f} ms (median of {args.repeat}, "
                  f"alternating with the analysis)")
            print(f"analysis  open + all sections + text render     {ana * 1e3:9.1f} ms")
            print(f"ratio     analysis / baseline                   {ana / base:9.2f}   (target <= 2, issue 26 <= "
                  f"{ISSUE26_TARGET} at 10M and 50M rows; each pair's "
                  f"ratio: median {statistics.median(ratios):.2f}, quartiles {lo:.2f}-{hi:.2f})")
            figures.update({"baseline_s": base, "analysis_s": ana, "time_ratio": ana / base,
                            "pair_ratio_median": statistics.median(ratios), "pair_ratio_quartiles": [lo, hi]})
            if not args.no_cli:
                compile_tree(ROOT)
                reads_cli, runs = interleaved(cli_baseline(path, reads), lambda: cli(path), max(5, args.repeat // 3))
                read_cli, run = statistics.median(reads_cli), statistics.median(runs)
                print("commands  whole processes, alternating (each includes Python start-up and imports):")
                print(f"            python -c: import pyarrow, read those columns {read_cli * 1e3:7.0f} ms")
                print(f"            popvision report PROFILE --section all      {run * 1e3:7.0f} ms   "
                      f"ratio {run / read_cli:.2f}")
                figures.update({"cli_s": run, "cli_baseline_s": read_cli, "cli_ratio": run / read_cli})
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"profiles": results}, indent=2))
    return 0


def measure_fresh(path: Path, reads: list, decoded: int, args: argparse.Namespace) -> dict:
    runs: dict[str, list[dict]] = {"baseline": [], "analysis": []}
    compile_tree(ROOT)
    for _ in range(args.fresh):  # alternating, so that noise on the shared machine hits both
        for what in runs:
            runs[what].append(fresh(what, path, reads))
    med = {w: statistics.median(r["seconds"] for r in rs) for w, rs in runs.items()}
    mem = {w: statistics.median(r["peak_bytes"] for r in rs) for w, rs in runs.items()}
    spread = {w: (min(r["seconds"] for r in rs), max(r["seconds"] for r in rs)) for w, rs in runs.items()}
    print(f"fresh processes, {args.fresh} each, alternating; medians (min-max):")
    for w in runs:
        print(f"{w:9s} {med[w]:8.3f} s ({spread[w][0]:.3f}-{spread[w][1]:.3f})   peak memory beyond imports "
              f"{mem[w] / 1e6:8.0f} MB")
    print(f"ratio     analysis / baseline time              {med['analysis'] / med['baseline']:9.2f}   (target <= 1.5; "
          f"issue 26: <= {ISSUE26_TARGET})")
    print(f"ratio     analysis peak memory / decoded        {mem['analysis'] / decoded:9.2f}   (target <= 2; "
          f"decoded {decoded / 1e6:.0f} MB)")
    figures = {"baseline_s": med["baseline"], "analysis_s": med["analysis"],
               "time_ratio": med["analysis"] / med["baseline"], "peak_mb": mem["analysis"] / 1e6,
               "baseline_peak_mb": mem["baseline"] / 1e6, "memory_ratio": mem["analysis"] / decoded}
    if args.dashboard:
        d = fresh("dashboard", path, reads)
        print("dashboard " + "  ".join(f"{k} {v * 1e3:.0f} ms" for k, v in d.items() if k.endswith("_s"))
              + f"  peak memory beyond imports {d['peak_bytes'] / 1e6:.0f} MB")
        figures["dashboard"] = d
    return figures


def unzipped_trace(path: Path, folder: Path | None) -> Path:
    """The profile's trace.parquet member as a file of its own (copied once, kept while newer than the profile)."""
    out = (folder or path.parent) / f"{path.stem}.trace.parquet"
    if out.exists() and out.stat().st_mtime >= path.stat().st_mtime:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path) as z, z.open(S.TABLES["trace"].member) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 22)
    return out


def measured(command: list[str]) -> dict:
    done = subprocess.run([sys.executable, "-c", _MEASURED, *command], check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def against_duckdb(path: Path, repeat: int, folder: Path | None, supersteps: bool = False, warm: int = 0) -> dict:
    """`report --section all` and DuckDB's same aggregates, whole commands alternating ``repeat`` times each."""
    from popvision_py.analysis.trace.groups import workers_for

    trace = unzipped_trace(path, folder)
    with open_profile(path) as p:
        rows, groups = p.num_rows("trace"), p.metadata("trace").num_row_groups
    threads = workers_for(groups)
    compile_tree(ROOT)
    report = [str(ROOT / ".venv" / "bin" / "popvision"), "report", str(path), "--section", "all", "--format", "json"]
    def duck_command(runs: int) -> list[str]:
        return [sys.executable, "-c", _DUCKDB_SCRIPT, str(trace), str(threads), str(runs), DUCKDB_AGGREGATES,
                *([DUCKDB_SUPERSTEPS] if supersteps else [])]

    duck = duck_command(0)  # the whole command: one query, as `report` answers once
    print(f"profile   {path}: {os.path.getsize(path):,} bytes, {rows:,} trace rows in {groups} row groups; "
          f"{threads} threads each; load average {os.getloadavg()[0]:.1f}")
    sides: dict[str, list[dict]] = {"popvision": [], "duckdb": [], "in_process": [], "duckdb_warm": []}
    for _ in range(repeat):  # the three alternate, so that the machine's noise hits each alike
        sides["popvision"].append(measured(report))
        sides["duckdb"].append(measured(duck))
        sides["in_process"].append(fresh("analysis", path, [], warm))
        if warm:
            sides["duckdb_warm"].append(measured(duck_command(warm)))
    med = {w: statistics.median(r["wall_s"] for r in sides[w]) for w in ("popvision", "duckdb")}
    peak = {w: max(r["peak_kib"] for r in sides[w]) * 1024 for w in ("popvision", "duckdb")}
    agg = statistics.median(r["out"]["aggregates_s"] for r in sides["duckdb"])
    sup = statistics.median(r["out"].get("supersteps_s", float("nan")) for r in sides["duckdb"])
    pairs = sorted(a["wall_s"] / b["wall_s"] for a, b in zip(sides["popvision"], sides["duckdb"]))
    inner = statistics.median(r["seconds"] for r in sides["in_process"])
    inner_peak = max(r["peak_bytes"] for r in sides["in_process"])
    inner_pairs = sorted(a["seconds"] / b["out"]["aggregates_s"] for a, b in zip(sides["in_process"], sides["duckdb"]))
    warmed = sides["duckdb_warm"] or sides["duckdb"]
    warm_report = statistics.median(r["warm_s"] for r in sides["in_process"])
    warm_duck = statistics.median(r["out"]["aggregates_warm_s"] for r in warmed)
    warm_pairs = sorted(a["warm_s"] / b["out"]["aggregates_warm_s"] for a, b in zip(sides["in_process"], warmed))
    print(f"popvision report --section all --format json   {med['popvision']:8.2f} s   "
          f"peak RSS {peak['popvision'] / 1e6:6.0f} MB   (in process: {inner:.2f} s, "
          f"peak beyond imports {inner_peak / 1e6:.0f} MB)")
    what = "aggregates + supersteps" if supersteps else "aggregates             "
    print(f"duckdb (threads={threads}) {what}   {med['duckdb']:8.2f} s   "
          f"peak RSS {peak['duckdb'] / 1e6:6.0f} MB   (queries: aggregates {agg:.2f} s, supersteps {sup:.2f} s)")
    # Issue 35's figure: the report's work in a warm process (open, every section, rendered) against
    # DuckDB's query for the same aggregates, each without its process's start-up and imports.
    print(f"ratio     in process / duckdb's query            {inner / agg:8.2f}   (each run: "
          f"{', '.join(f'{x:.2f}' for x in inner_pairs)}; target <= 1): the first run in each process")
    if warm:
        print(f"ratio     warm: {warm_report:.2f} s / {warm_duck:.2f} s          {warm_report / warm_duck:8.2f}   "
              f"(each process: {', '.join(f'{x:.2f}' for x in warm_pairs)}; target <= 1): the median of {warm} "
              f"more runs in each")
    print(f"ratio     whole commands, popvision / duckdb     {med['popvision'] / med['duckdb']:8.2f}   (each pair: "
          f"{', '.join(f'{x:.2f}' for x in pairs)}; imports included)  load average {os.getloadavg()[0]:.1f}")
    return {"profile": str(path), "trace_rows": rows, "row_groups": groups, "threads": threads,
            "report_s": med["popvision"], "report_peak_mb": peak["popvision"] / 1e6,
            "report_in_process_s": inner, "report_in_process_peak_mb": inner_peak / 1e6,
            "duckdb_s": med["duckdb"], "duckdb_peak_mb": peak["duckdb"] / 1e6, "duckdb_aggregates_s": agg,
            "duckdb_supersteps_s": sup, "time_ratio": med["popvision"] / med["duckdb"], "pair_ratios": pairs,
            "in_process_ratio": inner / agg, "in_process_ratios": inner_pairs, "warm_runs": warm,
            "report_warm_s": warm_report, "duckdb_warm_s": warm_duck, "warm_ratio": warm_report / warm_duck,
            "warm_ratios": warm_pairs,
            "runs": sides, "load_average": os.getloadavg()[0]}


if __name__ == "__main__":
    sys.exit(main())
