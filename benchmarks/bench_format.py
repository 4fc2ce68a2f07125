"""Format figures: bytes per trace row, and opening a profile + reading one column vs plain Parquet.

    .venv/bin/python benchmarks/bench_format.py [--rows 10000000] [--repeat 7]

Builds a trace of ``--rows`` rows shaped like the emulator's (4 IPUs, consecutive program steps,
cycles that grow along each IPU's time line), writes it with ProfileWriter and, for reference, as
a plain Parquet file with the same writer options. Then times, as medians of ``--repeat`` runs:
opening the profile and reading ``end_cycle``, against ``pyarrow.parquet.read_table`` of the same
column from the plain file.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from popvision_py.format import ProfileWriter, open_profile
from popvision_py.format import schema as S
from popvision_py.format.writer import PARQUET_OPTIONS, ROW_GROUP_ROWS, conform

TARGET = {"arch": "mk2", "num_ipus": 4, "tiles_per_ipu": 1472, "bytes_per_tile": 638976, "clock_hz": 1.33e9}
RUN = {
    "model": "synthetic", "strategy": "pipelined", "mode": "training", "stages": [],
    "micro_batch_size": 1, "gradient_accumulation": 1, "device_iterations": 1, "replication_factor": 1,
}
PHASES = np.array(["compute", "sync", "exchange", "compute", "exchange", "stream"])


def trace_batch(first: int, rows: int, ipus: int = 4) -> pa.Table:
    """Rows ``first .. first+rows`` of a synthetic emulator-like trace, IPU-major per step."""
    index = np.arange(first, first + rows)
    ipu = (index % ipus).astype(np.int16)
    per_ipu = index // ipus
    rng = np.random.default_rng(first)
    durations = rng.integers(20, 4000, rows)
    # each IPU's rows follow each other: start = previous end (per IPU), approximated by an even pace
    start = per_ipu * 2000 + (durations % 7)
    steps_per_micro_batch = 600
    return conform({
        "run": np.zeros(rows, np.int32),
        "iteration": (per_ipu // (steps_per_micro_batch * 16)).astype(np.int32),
        "micro_batch": ((per_ipu // steps_per_micro_batch) % 16).astype(np.int32),
        "ipu": ipu,
        "stage": ipu,
        "pass": np.where((per_ipu // 300) % 2 == 0, "forward", "backward"),
        "step": (per_ipu % steps_per_micro_batch).astype(np.int32),
        "phase": PHASES[per_ipu % len(PHASES)],
        "start_cycle": start,
        "end_cycle": start + durations,
    }, S.TABLES["trace"])


def median_time(action, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        action()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        profile_path = Path(folder) / "profile.pop"
        plain_path = Path(folder) / "trace.parquet"
        batch = 1_000_000
        began = time.perf_counter()
        plain = pq.ParquetWriter(plain_path, S.TABLES["trace"].schema, **PARQUET_OPTIONS)
        with ProfileWriter(profile_path, target=TARGET, run=RUN) as writer, writer.table("trace") as trace:
            for first in range(0, args.rows, batch):
                rows = trace_batch(first, min(batch, args.rows - first))
                trace.write(rows)
                plain.write_table(rows, row_group_size=ROW_GROUP_ROWS)
        plain.close()
        built = time.perf_counter() - began

        with open_profile(profile_path) as profile:
            trace_bytes = profile.member_bytes("trace")
        open_and_read = median_time(
            lambda: open_profile(profile_path).read_table("trace", ["end_cycle"]), args.repeat
        )
        plain_read = median_time(lambda: pq.read_table(plain_path, columns=["end_cycle"]), args.repeat)
        open_only = median_time(lambda: open_profile(profile_path), args.repeat)

    print(f"rows in trace                       {args.rows:,}")
    print(f"written (profile + plain) in        {built:.1f} s")
    print(f"trace member size                   {trace_bytes:,} bytes")
    print(f"bytes per trace row                 {trace_bytes / args.rows:.2f}")
    print(f"open profile (manifest + footers)   {open_only * 1000:.1f} ms (median of {args.repeat})")
    print(f"open + read end_cycle               {open_and_read * 1000:.1f} ms")
    print(f"plain Parquet read of end_cycle     {plain_read * 1000:.1f} ms")
    print(f"ratio profile / plain               {open_and_read / plain_read:.2f}")


if __name__ == "__main__":
    main()
