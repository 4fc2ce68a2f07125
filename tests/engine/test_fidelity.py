"""The fidelity points of benchmarks/fidelity.py: Graphcore's published fit verdicts, and the
calibration throughputs, each run as the CLI command a user would type (docs/emulator.md, "Fidelity").

The emulator is deterministic, so a verdict is a fact about the code: a change that flips one is a
change in what the tool tells a user about a configuration Graphcore ran.
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
def test_the_emulator_gives_graphcores_fit_verdict(point) -> None:
    summary = _summary(point)
    worst = summary["worst_tile_bytes"] / summary["bytes_per_tile"]
    # fits exactly when the worst tile holds no more than a tile's memory
    assert summary["fits"] == (summary["worst_tile_bytes"] <= summary["bytes_per_tile"])
    assert summary["fits"] is point.public, f"{point.command}: worst tile at {worst:.1%}"


@pytest.mark.parametrize("point", THROUGHPUTS, ids=[p.name for p in THROUGHPUTS])
def test_a_calibration_point_stays_within_ten_percent_of_the_published_figure(point) -> None:
    summary = _summary(point)
    assert summary["samples_per_second"] == pytest.approx(point.public, rel=0.10), point.command
    assert summary["fits"], point.command  # Graphcore ran it


def test_the_tutorial_run_is_host_bound_and_resnet_is_not() -> None:
    mnist = _summary(next(p for p in THROUGHPUTS if "MNIST" in p.name))
    pod16 = _summary(next(p for p in THROUGHPUTS if "POD16" in p.name))
    assert mnist["host_bound"] and not pod16["host_bound"]
