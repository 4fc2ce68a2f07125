"""The fidelity points of benchmarks/fidelity.py: Graphcore's published fit claims and throughputs,
each run as the CLI command a user would type (docs/emulator.md, "Fidelity").

They are predictions, not targets: nothing here asserts that a prediction matches its published
figure (a miss is reported by the benchmark, not failed). What is asserted is that each point runs,
that its answer is consistent with its own range, and that the benchmark reports its error as it is.
"""

from __future__ import annotations

import importlib.util
import json
import shlex
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from popvision_py.cli import main

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("fidelity", ROOT / "benchmarks" / "fidelity.py")
fidelity = importlib.util.module_from_spec(_spec)
sys.modules["fidelity"] = fidelity  # its dataclasses look their module up
_spec.loader.exec_module(fidelity)  # type: ignore[union-attr]

VERDICTS = [p for p in fidelity.POINTS if isinstance(p.public, bool)]
THROUGHPUTS = [p for p in fidelity.POINTS if not isinstance(p.public, bool)]


def _summary(point) -> dict:
    result = CliRunner().invoke(main, ["run", *shlex.split(point.args), "-q", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("point", VERDICTS, ids=[p.name for p in VERDICTS])
def test_a_fit_claim_gets_a_verdict_consistent_with_its_worst_tile(point) -> None:
    summary = _summary(point)
    worst = 100 * summary["worst_tile_bytes"] / summary["bytes_per_tile"]
    low, high = summary["worst_tile_pct_range"]
    # fits exactly when the worst tile holds no more than a tile's memory, and the verdict follows the range
    assert summary["fits"] == (summary["worst_tile_bytes"] <= summary["bytes_per_tile"])
    assert low <= worst <= high
    assert summary["fit_verdict"] == ("fits" if high <= 100 else "does not fit" if low > 100 else "borderline")
    row = fidelity.row(point, summary)
    assert row["error"] == ("borderline" if summary["fit_verdict"] == "borderline"
                            else "right" if (summary["fit_verdict"] == "fits") == point.public else "WRONG")


@pytest.mark.parametrize("point", THROUGHPUTS, ids=[p.name for p in THROUGHPUTS])
def test_a_throughput_prediction_reports_its_error_and_range(point) -> None:
    summary = _summary(point)
    low, high = summary["throughput_range"]
    assert low <= summary["samples_per_second"] <= high
    row = fidelity.row(point, summary)
    assert row["error"] == f"{summary['samples_per_second'] / point.public - 1:+.1%}"
    assert row["inside"] == (low <= point.public <= high)


def test_the_tutorial_run_is_host_bound_and_resnet_is_not() -> None:
    mnist = _summary(next(p for p in THROUGHPUTS if "MNIST" in p.name))
    pod16 = _summary(next(p for p in THROUGHPUTS if "POD16" in p.name))
    assert mnist["host_bound"] and not pod16["host_bound"]
