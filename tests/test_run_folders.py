"""`report`, `compare` and `dashboard` take a run's folder: DIR/profile.pop, DIR/MODEL/profile.pop (a PopTorch
script) or DIR/instance-I/MODEL/profile.pop (poprun), with a poprun run's instances side by side where
they differ."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

import popvision_py

from popvision_py.cli import main
from dashboards.data import served_profiles
from popvision_py.format.runs import run_profiles

SAMPLES = Path(__file__).resolve().parent.parent / "sample_profiles"
PIPELINED = SAMPLES / "mnist_pipelined" / "profile.pop"
SHARDED = SAMPLES / "mnist_sharded" / "profile.pop"
INFERENCE = SAMPLES / "mnist_inference" / "profile.pop"


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def poprun_folder(root: Path, *profiles: Path) -> Path:
    """``root/instance-I/training/profile.pop`` from ``profiles``, as poprun's instances write them."""
    for index, profile in enumerate(profiles):
        (root / f"instance-{index}" / "training").mkdir(parents=True)
        shutil.copy(profile, root / f"instance-{index}" / "training" / "profile.pop")
    return root


def test_each_layout_names_its_profiles(tmp_path):
    assert run_profiles(PIPELINED) == [("profile", PIPELINED)]
    script = tmp_path / "script"
    for model, profile in (("inference", INFERENCE), ("training", PIPELINED)):
        (script / model).mkdir(parents=True)
        shutil.copy(profile, script / model / "profile.pop")
    assert run_profiles(script) == [("training", script / "training" / "profile.pop")]
    run = poprun_folder(tmp_path / "run", *[PIPELINED] * 11)
    labels = [label for label, _ in run_profiles(run)]
    assert labels == [f"instance-{i}" for i in range(11)]  # by index: instance-10 after instance-9


def test_a_run_of_identical_instances_says_so_in_one_line(tmp_path):
    run = poprun_folder(tmp_path / "run", PIPELINED, PIPELINED, PIPELINED)
    result = invoke("report", run, "--section", "summary")
    assert result.exit_code == 0, result.output
    assert "Instances of the run (instance-0, instance-1, instance-2)" in result.output
    assert "The 3 instances' profiles give the same figures" in result.output
    # instance-0's report follows, the same as the profile's own
    alone = invoke("report", PIPELINED, "--section", "summary").output
    assert result.output.split("Summary\n=======", 1)[1] == alone.split("Summary\n=======", 1)[1]


def test_instances_that_differ_are_shown_side_by_side(tmp_path):
    run = poprun_folder(tmp_path / "run", PIPELINED, SHARDED)
    doc = json.loads(invoke("report", run, "--section", "summary", "--format", "json").output)
    rows = {row["figure"]: row for row in doc["sections"]["summary"]["instances"]}
    with popvision_py.open(PIPELINED) as a, popvision_py.open(SHARDED) as b:
        fa, fb = a.summary.figures(), b.summary.figures()
    # exactly the figures that differ, each with both instances' values
    differing = {name for name in vars(fa) if getattr(fa, name) != getattr(fb, name)}
    assert set(rows) == differing and "strategy" in differing and "model" not in differing
    total = rows["total_cycles"]
    assert total["instance-0"] == fa.total_cycles and total["instance-1"] == fb.total_cycles
    text = invoke("report", run, "--section", "summary").output
    assert "strategy\n      instance-0: pipelined\n      instance-1: sharded" in text
    compared = invoke("compare", run, "--section", "summary")
    assert compared.exit_code == 0 and "instance-0/training/profile.pop  vs  " in compared.output
    assert served_profiles(str(run), None) == [str(run / "instance-0" / "training" / "profile.pop"),
                                      str(run / "instance-1" / "training" / "profile.pop")]


def test_the_dashboard_serves_one_instance_when_they_agree(tmp_path):
    run = poprun_folder(tmp_path / "run", PIPELINED, PIPELINED)
    assert served_profiles(str(run), None) == [str(run / "instance-0" / "training" / "profile.pop")]
    assert served_profiles(str(run), str(SHARDED)) == [str(run / "instance-0" / "training" / "profile.pop"),
                                                       str(SHARDED)]


def test_a_folder_without_a_profile_is_one_sentence(tmp_path):
    for args in (("report", tmp_path), ("compare", tmp_path, PIPELINED), ("compare", PIPELINED)):
        result = invoke(*args)
        assert result.exit_code == 2, result.output
        assert len(result.output.strip().splitlines()) == 1 and result.output.startswith("Error: ")
    assert "folder without a profile" in invoke("report", tmp_path).output
    assert "holds one profile" in invoke("compare", PIPELINED).output
