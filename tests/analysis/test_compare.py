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
    # every quantity both sides hold differs by 0 (0 %); identifiers (which tile, IPU, stage, step; fits) by nothing
    field = frame["figure"].str.rsplit(" ", n=1).str[-1]
    identifier = field.isin(["worst_ipu", "worst_tile", "fits", "bottleneck_stage", "peak_step"]).to_numpy()
    held = (frame["a"].notna() & frame["b"].notna()).to_numpy()
    assert identifier.sum() >= 4
    assert (frame.loc[~identifier & held, ["difference", "difference_pct"]] == 0).all().all()
    assert frame.loc[identifier, ["difference", "difference_pct"]].isna().all().all()
    assert (frame["a"].isna() == frame["b"].isna()).all()


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


def _open_on(path) -> int:
    """File descriptors this process holds on ``path``."""
    import os
    from pathlib import Path

    target = str(Path(path).resolve())
    fds = Path("/proc/self/fd")
    return sum(1 for fd in fds.iterdir() if os.path.realpath(fd) == target)


def test_a_comparison_closes_the_profiles_it_opened_and_only_those(profiles, tmp_path):
    from popvision_py.analysis.compare import Comparison
    from popvision_py.errors import PopvisionError

    a, b = profiles["balanced"], profiles["unbalanced"]
    # GIVEN a Report the caller opened, and a path the comparison opens itself
    with pv.open(a) as given:
        before = _open_on(b)
        with Comparison(given, b) as c:
            c.summary()
            assert _open_on(b) == before + 1
        # THEN leaving the block closes b's file and leaves the caller's report open and readable
        assert _open_on(b) == before
        assert given.summary.figures().step_cycles == 1510
    # AND when b cannot be opened, a (opened from its path) is closed again before the error
    missing = tmp_path / "missing.pop"
    before = _open_on(a)
    with pytest.raises(PopvisionError):
        Comparison(a, missing)
    assert _open_on(a) == before


def test_imported_traces_compare_without_a_split_of_blocks_they_do_not_have():
    from pathlib import Path

    sample = Path(__file__).resolve().parents[2] / "sample_profiles" / "pytorch_gpipe" / "profile.pop"
    # WHEN an imported pipeline (its ranks the stages, no blocks) is compared with itself
    stages = pv.compare(sample, sample).all().query("section == 'stages'")
    # THEN its stages' figures are there, the best split of blocks (which its report calls meaningless) is not
    assert len(stages) and not stages["figure"].str.startswith("best split").any()
    assert stages["figure"].str.startswith("stage 0 ").any()
    # AND an IPU pipeline keeps it
    ipu = Path(__file__).resolve().parents[2] / "sample_profiles" / "mnist_pipelined" / "profile.pop"
    assert pv.compare(ipu, ipu).all()["figure"].str.startswith("best split").sum() == 2
