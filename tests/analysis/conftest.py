"""Profiles the analysis tests share, built once per session through tests/synthetic.py."""

from __future__ import annotations

import pytest

import popvision_py as pv
from tests import synthetic


@pytest.fixture(scope="session")
def profiles(tmp_path_factory):
    folder = tmp_path_factory.mktemp("analysis")
    return {
        "balanced": synthetic.balanced_pipeline(folder / "balanced.pop"),
        "unbalanced": synthetic.unbalanced_pipeline(folder / "unbalanced.pop"),
        "oom": synthetic.oom_pipeline(folder / "oom.pop"),
        "exchange": synthetic.exchange_heavy_pipeline(folder / "exchange.pop"),
        "sharded": synthetic.write_pipeline_profile(folder / "sharded.pop", [10, 20], strategy="sharded",
                                                    micro_batches=3, sync_cycles=5),
        "inference": synthetic.write_pipeline_profile(folder / "inference.pop", [10, 20], mode="inference",
                                                      micro_batches=3),
    }


@pytest.fixture(scope="session")
def balanced(profiles):
    return pv.open(profiles["balanced"])


@pytest.fixture(scope="session")
def unbalanced(profiles):
    return pv.open(profiles["unbalanced"])


@pytest.fixture(scope="session")
def oom(profiles):
    return pv.open(profiles["oom"])


@pytest.fixture(scope="session")
def exchange_heavy(profiles):
    return pv.open(profiles["exchange"])


@pytest.fixture(scope="session")
def several_row_groups(tmp_path_factory):
    """A 2.5M-row profile whose trace spans several row groups (benchmarks/make_large_profile.py), its
    iterations alike: for the passes that fold row groups apart and merge them."""
    import subprocess
    import sys
    from pathlib import Path

    from popvision_py.format import Profile

    path = tmp_path_factory.mktemp("large") / "large.pop"
    subprocess.run([sys.executable, "benchmarks/make_large_profile.py", str(path), "--rows", "2500000"],
                   check=True, cwd=Path(__file__).resolve().parents[2], capture_output=True, timeout=300)
    with Profile(path) as profile:
        assert profile.metadata("trace").num_row_groups >= 3
    return path
