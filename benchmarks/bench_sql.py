"""Peak memory and time of `popvision sql` against DuckDB reading the same Parquet files unzipped.

Usage::

    .venv/bin/python benchmarks/bench_sql.py [PROFILE] [--repeat N] [--json OUT.json] [--quick]

PROFILE is any profile.pop; without it, benchmarks/make_large_profile.py writes one with 50
million trace rows (80,000 with ``--quick``) in a temporary folder. Its members are unzipped
beside it, and each query below runs as two whole commands, each in a fresh process, alternately
``--repeat`` times:

- **popvision**: ``popvision sql PROFILE QUERY --format csv``;
- **duckdb**: ``python -c`` importing duckdb, making a view per table over the unzipped
  ``<table>.parquet`` (``read_parquet``), running the same query and writing the same CSV from
  DuckDB's own NumPy result (``fetchnumpy``, each column's ``astype(str)``, Python's csv module),
  as `popvision sql` does: neither side imports pandas (before issue 35 both wrote through
  ``fetch_df().to_csv``, and pandas' import was most of a small query's time).

Peak memory is each process's peak resident set (``ru_maxrss`` of the child, measured by a
wrapper process per run), interpreter and libraries included on both sides; time is wall time
of the whole command. Both outputs must be the same bytes. The target (issue 11, item 15): the
peak of `popvision sql` at most 2x DuckDB's on the bare files, for every query. Exits 1 when a
query misses it (its figures are still written). Issue 26's target, printed and written, not in
the exit code: the wall time of its query (``ISSUE26_QUERY``) at most 1.3x DuckDB's. ``--before
DIR`` runs another checkout's `popvision sql` as a third side, alternating with the other two.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compiled import compile_tree  # noqa: E402
from popvision_py.format import schema as S  # noqa: E402

TARGET_RATIO = 2.0
# Issue 26: this query's wall time at most 1.3x DuckDB's on the unzipped files (medians of paired runs);
# ordered, as the outputs are compared
ISSUE26_QUERY = "SELECT ipu, sum(end_cycle-start_cycle) FROM trace GROUP BY ipu ORDER BY ipu"
TARGET_WALL_RATIO = 1.3
QUERIES = {
    "issue 26: ipu grouped": ISSUE26_QUERY,
    "one column, filtered": "SELECT count(*) AS steps, sum(start_cycle) AS start_sum FROM trace WHERE ipu = 1",
    "whole trace grouped": "SELECT ipu, phase, sum(end_cycle - start_cycle) AS cycles FROM trace GROUP BY ALL "
                           "ORDER BY ALL",
    "trace joined to programs": "SELECT p.type, count(*) AS executions, sum(t.end_cycle - t.start_cycle) AS cycles "
                                "FROM trace t JOIN programs p USING (ipu, step) GROUP BY ALL ORDER BY ALL",
    "first rows": "SELECT * FROM trace LIMIT 20",
    "SHOW TABLES": "SHOW TABLES",
}

# Runs a command and writes its peak RSS (KiB): a fresh wrapper per run, so the figure is that run's alone.
_MEASURED = (
    "import resource, subprocess, sys\n"
    "with open(sys.argv[2], 'wb') as out:\n"
    "    code = subprocess.call(sys.argv[3:], stdout=out)\n"
    "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n"
    "sys.exit(code)\n"
)
_DUCKDB = (
    "import csv, sys, duckdb\n"
    "folder, query = sys.argv[1], sys.argv[2]\n"
    "con = duckdb.connect()\n"
    "con.execute('SET enable_progress_bar = false')\n"
    "for name in sys.argv[3:]:\n"
    "    con.execute(f\"CREATE VIEW {name} AS SELECT * FROM read_parquet('{folder}/{name}.parquet')\")\n"
    "result = con.execute(query).fetchnumpy()\n"
    "out = csv.writer(sys.stdout, lineterminator='\\n')\n"
    "out.writerow(result)\n"
    "out.writerows(zip(*(c.astype(str) if c.dtype.kind in 'iufb' else c for c in result.values())))\n"
)


def measured(command: list[str], scratch: Path, tree: Path = ROOT) -> tuple[float, float, bytes]:
    """(peak RSS in MB, wall seconds, stdout) of one fresh run of ``command``, in checkout ``tree``."""
    rss, out = scratch / "rss", scratch / "out"
    began = time.perf_counter()
    subprocess.run([sys.executable, "-c", _MEASURED, str(rss), str(out), *command], check=True, cwd=tree,
                   env={**os.environ, "PYTHONPATH": str(tree)})
    seconds = time.perf_counter() - began
    return int(rss.read_text()) / 1024, seconds, out.read_bytes()


def bench(profile: Path, folder: Path, repeat: int, scratch: Path, before: Path | None = None,
          queries: dict[str, str] | None = None) -> list[dict]:
    """Each query's medians on both sides (and ``before``'s: another checkout's `popvision sql`),
    and whether their outputs agree."""
    results = []
    for tree in (ROOT, before) if before else (ROOT,):
        compile_tree(tree)
    print(f"{'query':<26} {'popvision':>20} {'duckdb on files':>20} {'memory ratio':>13} {'wall ratio':>10}")
    for name, query in (QUERIES if queries is None else queries).items():
        ours = [sys.executable, "-m", "popvision_py.cli", "sql", str(profile), query, "--format", "csv"]
        theirs = [sys.executable, "-c", _DUCKDB, str(folder), query, *S.TABLES]
        sides = {"popvision": (ours, ROOT), "duckdb": (theirs, ROOT), **({"before": (ours, before)} if before else {})}
        runs: dict[str, list[tuple[float, float, bytes]]] = {side: [] for side in sides}
        for _ in range(repeat):  # alternately, so all see the same load
            for side, (command, tree) in sides.items():
                runs[side].append(measured(command, scratch, tree))
        figures = {side: {"peak_mb": statistics.median(r[0] for r in rs), "wall_s": statistics.median(r[1] for r in rs)}
                   for side, rs in runs.items()}
        same = runs["popvision"][0][2] == runs["duckdb"][0][2]
        ratio = figures["popvision"]["peak_mb"] / figures["duckdb"]["peak_mb"]
        wall = figures["popvision"]["wall_s"] / figures["duckdb"]["wall_s"]
        results.append({"name": name, "query": query, **{f"{side}_{k}": v for side, f in figures.items()
                                                          for k, v in f.items()},
                        "memory_ratio": ratio, "wall_ratio": wall, "same_output": same})
        shown = (f" before {figures['before']['wall_s']:.2f} s" if before else "")
        print(f"{name:<26} {figures['popvision']['peak_mb']:7.0f} MB {figures['popvision']['wall_s']:6.2f} s "
              f"{figures['duckdb']['peak_mb']:7.0f} MB {figures['duckdb']['wall_s']:6.2f} s {ratio:12.2f} {wall:10.2f}"
              f"{shown}{'' if same else '  OUTPUTS DIFFER'}", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", nargs="?", type=Path, help="profile to query (default: make a 50M-row one)")
    parser.add_argument("--repeat", type=int, default=3, help="fresh runs per query and side (medians)")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--quick", action="store_true", help="80,000 trace rows and one run: checks the bench runs")
    parser.add_argument("--only", action="append", metavar="NAME",
                        help="run only the queries whose name holds NAME (repeatable; e.g. at 1B rows)")
    parser.add_argument("--before", type=Path, help="another checkout (e.g. a git worktree of an earlier commit) whose "
                        "`popvision sql` alternates with this one's")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeat = 1
    with tempfile.TemporaryDirectory(prefix="bench-sql-") as tmp:
        scratch = Path(tmp)
        profile = args.profile
        if profile is None:
            profile = scratch / "large.pop"
            subprocess.run([sys.executable, str(ROOT / "benchmarks" / "make_large_profile.py"), str(profile),
                            "--rows", "80000" if args.quick else "50000000"], check=True, cwd=ROOT)
        folder = scratch / "unzipped"
        with zipfile.ZipFile(profile) as archive:
            archive.extractall(folder, members=[spec.member for spec in S.TABLES.values()])
            trace_rows = json.loads(archive.read(S.MANIFEST_MEMBER))["tables"]["trace"]["rows"]
        print(f"== {profile}: {profile.stat().st_size / 1e6:,.1f} MB, {trace_rows:,} trace rows; "
              f"{args.repeat} fresh run(s) per query and side")
        queries = {n: q for n, q in QUERIES.items() if not args.only or any(o in n for o in args.only)}
        results = bench(profile, folder, args.repeat, scratch, args.before.resolve() if args.before else None, queries)
    worst = max(results, key=lambda r: r["memory_ratio"])
    issue26 = next((r for r in results if r["query"] == ISSUE26_QUERY), None)
    ok = worst["memory_ratio"] <= TARGET_RATIO and all(r["same_output"] for r in results)
    if issue26 is not None:
        print(f"issue 26 (and 35) query: wall {issue26['wall_ratio']:.2f}x DuckDB's (target <= {TARGET_WALL_RATIO}): "
              + ("met" if issue26["wall_ratio"] <= TARGET_WALL_RATIO else "NOT MET"))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"profile": str(profile), "trace_rows": trace_rows, "queries": results,
                                         "target_ratio": TARGET_RATIO, "target_wall_ratio": TARGET_WALL_RATIO,
                                         "issue26_query": ISSUE26_QUERY}, indent=2))
    print(f"\nworst memory ratio {worst['memory_ratio']:.2f} ({worst['name']}): "
          + ("within the target" if ok else "TARGET MISSED (or outputs differ)"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
