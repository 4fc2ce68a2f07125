"""How long `popvision report --section all` takes against pyarrow reading the columns it uses.

Usage::

    .venv/bin/python benchmarks/bench_report.py [PROFILE ...] [--repeat N] [--no-cli]

Without PROFILE it makes the bert-large profile with the engine (`popvision run bert-large
--profile`) in a temporary folder; if the engine is missing it writes a large synthetic pipeline
profile with tests/synthetic.py instead (and says so).

For each profile it prints the medians of:

- **baseline**: pyarrow (`pq.read_table`) decoding, from the same memory-mapped file, exactly the
  tables and columns the analysis read. They are not listed by hand: one analysis run is traced
  (every `Profile.read_table` call recorded) and the baseline replays those reads, so it reads the
  same columns, not fewer and not more; the list is printed. The run also checks that no table
  was read twice;
- **analysis**: in process, `popvision_py.open(path)` + building every section + rendering text
  (imports already done: what a warm process such as the dashboard pays);
- **CLI**: `popvision report PROFILE --section all` as a subprocess (includes Python start-up and
  imports);

and the ratios analysis / baseline and CLI / baseline. The target (issue 4) is analysis /
baseline <= 2.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import popvision_py as pv  # noqa: E402
from popvision_py.format import Profile, open_profile  # noqa: E402
from popvision_py.format import schema as S  # noqa: E402
from popvision_py.render import text  # noqa: E402
from popvision_py.render.document import build_report  # noqa: E402

def median_time(func, repeat: int) -> float:
    func()  # warm up: imports, page cache
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        func()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def traced_reads(path: Path) -> list[tuple[str, list[str] | None]]:
    """The (table, columns) an analysis run reads, in order, recorded from ``Profile.read_table``."""
    reads: list[tuple[str, list[str] | None]] = []
    original = Profile.read_table

    def record(self, table, columns=None, **kwargs):
        reads.append((table, list(columns) if columns is not None else None))
        return original(self, table, columns, **kwargs)

    Profile.read_table = record
    try:
        analysis(path)
    finally:
        Profile.read_table = original
    tables = [t for t, _ in reads]
    twice = sorted({t for t in tables if tables.count(t) > 1})
    if twice:
        raise SystemExit(f"the analysis read {', '.join(twice)} more than once")
    return reads


def baseline(path: Path, reads: list[tuple[str, list[str] | None]]) -> None:
    mapped = pa.memory_map(str(path), "r")
    buffer = mapped.read_buffer()
    profile = open_profile(path)  # only to find where each member lies in the file
    members = {name: profile._members[name + ".parquet"] for name, _ in reads}
    profile.close()
    for name, columns in reads:
        m = members[name]
        pq.read_table(pa.BufferReader(buffer.slice(m.offset, m.size)), columns=columns)
    mapped.close()


def analysis(path: Path) -> None:
    with pv.open(path) as report:
        text.render(build_report(report, "all"))


def cli(path: Path) -> None:
    subprocess.run([str(ROOT / ".venv" / "bin" / "popvision"), "report", str(path), "--section", "all"],
                   check=True, stdout=subprocess.DEVNULL)


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
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        profiles = [(p, str(p)) for p in args.profiles] or [make_profile(Path(tmp))]
        for path, label in profiles:
            with open_profile(path) as p:
                rows = p.num_rows("trace")
                reads = traced_reads(path)
                decoded = sum(p.read_table(t, c).nbytes for t, c in reads)
                largest = max(p.num_rows(t) for t, _ in reads)
            base = median_time(lambda: baseline(path, reads), args.repeat)
            ana = median_time(lambda: analysis(path), args.repeat)
            n_columns = sum(len(c) if c is not None else len(S.TABLES[t].columns) for t, c in reads)
            print(f"profile   {label}: {os.path.getsize(path):,} bytes, {rows:,} trace rows, largest table read "
                  f"{largest:,} rows")
            print(f"read      {len(reads)} tables, {n_columns} columns, {decoded / 1e6:.1f} MB decoded (the analysis' "
                  f"reads, replayed by the baseline):")
            for table, columns in reads:
                print(f"            {table}: {', '.join(columns) if columns is not None else 'all columns'}")
            print(f"baseline  pyarrow reads those columns           {base * 1e3:9.1f} ms (median of {args.repeat})")
            print(f"analysis  open + all sections + text render     {ana * 1e3:9.1f} ms")
            print(f"ratio     analysis / baseline                   {ana / base:9.2f}   (target <= 2)")
            if not args.no_cli:
                run = median_time(lambda: cli(path), max(3, args.repeat // 2))
                print(f"CLI       popvision report --section all        {run * 1e3:9.1f} ms   "
                      f"CLI / baseline {run / base:.1f} (includes Python start-up and imports)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
