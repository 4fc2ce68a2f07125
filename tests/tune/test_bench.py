"""benchmarks/bench_tune.py runs end to end at tiny size (a smoke test: its figures are not checked)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_tune_benchmark_runs_and_writes_its_figures(tmp_path: Path) -> None:
    out = tmp_path / "tune.json"
    result = subprocess.run([sys.executable, "benchmarks/bench_tune.py", "--quick", "--json", str(out)],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    figures = json.loads(out.read_text())["results"]
    # every case is there, the worker counts 1 and 2 among them, each with candidates emulated
    assert {f["case"] for f in figures} == {"workers", "blocks", "IPUs"}
    assert sorted(f["workers"] for f in figures if f["case"] == "workers") == [1, 2]
    assert all(f["emulated"] > 0 and f["candidates"] >= f["emulated"] for f in figures)
