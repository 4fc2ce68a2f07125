"""Format figures: bytes per row of each table, the profile against Chrome trace-event JSON, and
opening a profile + reading one column against reading the same column from a plain Parquet file.

    .venv/bin/python benchmarks/bench_format.py [--profile PATH] [--rows 10000000] [--repeat 7]
                                               [--json OUT.json] [--quick]

- With ``--profile`` (a profile the engine wrote): bytes per row of each of its tables, and its size
  against the same execution trace exported as Chrome trace-event JSON (`popvision export-trace`).
- Always: a trace of ``--rows`` rows shaped like the emulator's is written with ProfileWriter and,
  for reference, as a plain Parquet file with the same options; then, as medians of ``--repeat``
  runs, opening the profile and reading ``end_cycle`` against ``pyarrow.parquet.read_table`` of
  the same column from the plain file.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from popvision_py.export_trace import export
from popvision_py.format import ProfileWriter, open_profile
from popvision_py.format import schema as S
from popvision_py.format.writer import PARQUET_OPTIONS, ROW_GROUP_ROWS, conform

TARGET = {"arch": "mk2", "num_ipus": 4, "tiles_per_ipu": 1472, "bytes_per_tile": 638976, "clock_hz": 1.33e9}
STEPS_PER_MICRO_BATCH = 600
MICRO_BATCHES = 16
RUN = {
    "model": "synthetic", "strategy": "pipelined", "mode": "training",
    "stages": [{"stage": i, "ipu": i, "blocks": [f"B{i}"]} for i in range(TARGET["num_ipus"])],
    "micro_batch_size": 1, "gradient_accumulation": MICRO_BATCHES, "device_iterations": 1, "replication_factor": 1,
}


def run_of(rows: int, ipus: int = TARGET["num_ipus"]) -> dict:
    """The manifest's run for a ``rows``-row ``trace_batch`` trace: as many device iterations as it spans
    (the reader bounds every id by what the manifest declares)."""
    return {**RUN, "device_iterations": max(1, -(-rows // (ipus * STEPS_PER_MICRO_BATCH * MICRO_BATCHES)))}
PHASES = np.array(["compute", "sync", "exchange", "compute", "exchange", "stream"])


def trace_batch(first: int, rows: int, ipus: int = 4) -> pa.Table:
    """Rows ``first .. first+rows`` of a synthetic emulator-like trace, IPU-major per step."""
    index = np.arange(first, first + rows)
    ipu = (index % ipus).astype(np.int16)
    per_ipu = index // ipus
    rng = np.random.default_rng(first)
    durations = rng.integers(20, 4000, rows)
    start = per_ipu * 2000 + (durations % 7)
    steps_per_micro_batch = STEPS_PER_MICRO_BATCH
    return conform({
        "run": np.zeros(rows, np.int32),
        "iteration": (per_ipu // (steps_per_micro_batch * MICRO_BATCHES)).astype(np.int32),
        "micro_batch": ((per_ipu // steps_per_micro_batch) % MICRO_BATCHES).astype(np.int32),
        "ipu": ipu,
        "stage": ipu,
        "pass": np.where((per_ipu // 300) % 2 == 0, "forward", "backward"),
        "step": (per_ipu % steps_per_micro_batch).astype(np.int32),
        "phase": PHASES[per_ipu % len(PHASES)],
        "start_cycle": start,
        "end_cycle": start + durations,
    }, S.TABLES["trace"])


def program_steps(ipus: int = TARGET["num_ipus"]) -> pa.Table:
    """The programs table ``trace_batch``'s rows point into: ``STEPS_PER_MICRO_BATCH`` compute steps per IPU."""
    ipu = np.repeat(np.arange(ipus), STEPS_PER_MICRO_BATCH)
    steps = len(ipu)
    return conform({
        "ipu": ipu.astype(np.int16), "step": np.tile(np.arange(STEPS_PER_MICRO_BATCH), ipus).astype(np.int32),
        "type": np.full(steps, "compute_set"), "name": np.char.add("step ", np.arange(steps).astype(str)),
        "op_id": np.full(steps, -1, np.int32), "stage": ipu.astype(np.int16), "pass": np.full(steps, "forward"),
        "tiles": np.full(steps, 1472, np.int32), "bytes": np.zeros(steps, np.int64), "cycles": np.full(steps, 100),
    }, S.TABLES["programs"])


def median_time(action, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        action()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def profile_figures(path: Path, folder: Path) -> dict:
    """Bytes per row of each table of ``path``, and its size against its trace as trace-event JSON."""
    with open_profile(path) as profile:
        tables = {
            name: {"rows": profile.num_rows(name), "bytes": profile.member_bytes(name)} for name in profile.tables
        }
    for table in tables.values():
        table["bytes_per_row"] = table["bytes"] / table["rows"] if table["rows"] else None
    chrome = folder / "trace.json"
    events = export(path, chrome)
    size = path.stat().st_size
    return {
        "profile": str(path),
        "profile_bytes": size,
        "tables": tables,
        "chrome_trace_events": events,
        "chrome_trace_bytes": chrome.stat().st_size,
        "chrome_over_profile": chrome.stat().st_size / size,
    }


def column_read_figures(rows: int, repeat: int, folder: Path) -> dict:
    """Open + read one column of a ``rows``-row trace, against plain Parquet."""
    profile_path = folder / "profile.pop"
    plain_path = folder / "trace.parquet"
    batch = 1_000_000
    plain = pq.ParquetWriter(plain_path, S.TABLES["trace"].schema, **PARQUET_OPTIONS)
    with ProfileWriter(profile_path, target=TARGET, run=run_of(rows)) as writer:
        with writer.table("programs") as programs:  # the program steps the trace's rows run
            programs.write(program_steps())
        with writer.table("trace") as trace:
            for first in range(0, rows, batch):
                part = trace_batch(first, min(batch, rows - first))
                trace.write(part)
                plain.write_table(part, row_group_size=ROW_GROUP_ROWS)
    plain.close()
    with open_profile(profile_path) as profile:
        trace_bytes = profile.member_bytes("trace")
    open_and_read = median_time(lambda: open_profile(profile_path).read_table("trace", ["end_cycle"]), repeat)
    plain_read = median_time(lambda: pq.read_table(plain_path, columns=["end_cycle"]), repeat)
    return {
        "rows": rows,
        "trace_bytes_per_row": trace_bytes / rows,
        "open_s": median_time(lambda: open_profile(profile_path), repeat),
        "open_and_read_column_s": open_and_read,
        "plain_parquet_read_column_s": plain_read,
        "open_and_read_over_plain": open_and_read / plain_read,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", type=Path, help="a profile the engine wrote, for per-table figures")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, to check the benchmark runs")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.repeat = 100_000, 2

    figures: dict = {}
    with tempfile.TemporaryDirectory() as folder:
        if args.profile:
            figures["profile"] = profile_figures(args.profile, Path(folder))
        figures["column_read"] = column_read_figures(args.rows, args.repeat, Path(folder))

    if "profile" in figures:
        p = figures["profile"]
        print(f"profile {p['profile']}: {p['profile_bytes']:,} bytes")
        print(f"  {'table':<12} {'rows':>12} {'bytes':>12} {'bytes/row':>10}")
        for name, t in p["tables"].items():
            per_row = f"{t['bytes_per_row']:.2f}" if t["bytes_per_row"] is not None else "-"
            print(f"  {name:<12} {t['rows']:>12,} {t['bytes']:>12,} {per_row:>10}")
        print(f"  as Chrome trace-event JSON: {p['chrome_trace_bytes']:,} bytes for {p['chrome_trace_events']:,} "
              f"events, {p['chrome_over_profile']:.1f}x the profile")
    c = figures["column_read"]
    print(f"synthetic trace of {c['rows']:,} rows: {c['trace_bytes_per_row']:.2f} bytes per row")
    print(f"  open profile (manifest + footers)   {c['open_s'] * 1000:.1f} ms (median of {args.repeat})")
    print(f"  open + read end_cycle               {c['open_and_read_column_s'] * 1000:.1f} ms")
    print(f"  plain Parquet read of end_cycle     {c['plain_parquet_read_column_s'] * 1000:.1f} ms")
    print(f"  ratio profile / plain               {c['open_and_read_over_plain']:.2f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
