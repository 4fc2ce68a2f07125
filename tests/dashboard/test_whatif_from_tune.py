"""The What-if page on what `popvision tune` itself wrote (not a hand-made tune file): every emulated
candidate is a point at its figures, and the best candidate's "Emulate and compare" opens the profile
tune wrote for it, found through the result's metadata from another working directory."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import numpy as np
import pytest

from popvision_py.format.tunefile import read_tune
from tests.tune.conftest import UNEVEN_MODEL, tune


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("tuned")
    model = folder / "uneven.py"
    model.write_text(UNEVEN_MODEL)
    here = os.getcwd()
    os.chdir(folder)  # relative paths, as a user types them
    try:
        result = tune("uneven.py", "--system", "POD4", "--search", "stages", "--workers", "1", "-q",
                      "-o", "out/tune.parquet", "--profile-dir", "best")
    finally:
        os.chdir(here)
    assert result.exit_code == 0, result.output
    return {"tune": folder / "out" / "tune.parquet", "best": folder / "best" / "profile.pop",
            "start": folder / "best" / "start" / "profile.pop"}


def test_the_page_draws_what_tune_wrote_and_opens_its_best_profile(tuned, tmp_path, monkeypatch):
    from dashboards.app import create_app
    from popvision_py.emulation import run_fields

    rows, meta = read_tune(tuned["tune"])
    # GIVEN the dashboard on the start's profile with the tune result, started from another folder
    monkeypatch.chdir(tmp_path)
    create_app([str(tuned["start"])], tune=str(tuned["tune"]), runner=run_fields, emulated_dir=str(tmp_path / "em"))
    whatif = importlib.import_module("dashboards.pages.whatif")
    # WHEN the page draws
    _cards, scatter, _pareto = whatif.render("a")
    traces = {trace.name: trace for trace in scatter.data}
    # THEN each candidate that fits is a point at its throughput and worst tile
    fits = rows[rows["status"] == "ok"]
    assert len(traces["fits"].x) == len(fits) > 1
    assert np.allclose(sorted(traces["fits"].y), sorted(fits["samples_per_second"]))
    # AND the best candidate's profile is the one tune wrote (an absolute path in the metadata)
    best = int(np.flatnonzero(rows["rank"].fillna(0).to_numpy() == 1)[0])
    from dashboards import data

    assert os.path.isabs(meta["best_profile"])
    assert whatif.candidate_profile(data.current(), rows, meta, best) == tuned["best"]
    assert not (tmp_path / "em").exists()  # nothing emulated again for it
