"""Comparing profiles: a profile with itself shows no difference; two runs show theirs."""

from __future__ import annotations

import pytest

import popvision_py as pv
from popvision_py.analysis.compare import COLUMNS


@pytest.mark.parametrize("name", ["balanced", "oom", "exchange", "sharded", "inference"])
def test_profile_compared_with_itself_has_zero_differences(profiles, name):
    c = pv.compare(profiles[name], profiles[name])
    frame = c.all()
    assert list(frame.columns) == COLUMNS
    assert set(frame["section"]) == {"summary", "memory", "liveness", "stages", "exchange"}
    assert (frame["difference"] == 0).all() and (frame["difference_pct"] == 0).all()


def test_differences_between_two_runs(profiles):
    c = pv.compare(profiles["balanced"], profiles["unbalanced"])
    s = c.summary().set_index("figure")
    assert (s.loc["step_cycles", "a"], s.loc["step_cycles", "b"]) == (1510, 630)
    assert s.loc["step_cycles", "difference"] == -880
    assert s.loc["step_cycles", "difference_pct"] == pytest.approx(-100 * 880 / 1510)
    st = c.stages().set_index("figure")
    assert st.loc["imbalance", "difference"] == pytest.approx(150 / 90 - 1)
    m = c.memory().set_index("figure")
    assert m.loc["ipu 1 total_bytes", "b"] == 2200
