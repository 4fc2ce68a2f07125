"""The system timeline a PopTorch script records under PVTI_OPTIONS (poptorch/_pvti.py), read back and
reported: the events a person can count from the script (tests/poptorch/small_training.py: 2 epochs of 3
calls of 32 samples, 2 optimizer updates a call), the channels filter, nothing when it is off, one sentence
when it is malformed, and `popvision report --section system` against the file's own rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from popvision_py.cli import main
from popvision_py.format import system as S
from tests.poptorch.conftest import HERE, subprocess_env

SCRIPT = HERE / "small_training.py"
EPOCHS, STEPS, SAMPLES = 2, 3, 32  # the script's defaults: 2 passes over 3 combined batches of 32 samples


def poprun_env(index: int, instances: int) -> dict[str, str]:
    """What PopRun gives instance ``index`` of ``instances`` of one replica of 2 IPUs (the script's model):
    PopDist's variables, from which the instance's index is read (popdist._env)."""
    return {"POPDIST_NUM_TOTAL_REPLICAS": str(instances), "POPDIST_NUM_LOCAL_REPLICAS": "1",
            "POPDIST_REPLICA_INDEX_OFFSET": str(index), "POPDIST_NUM_IPUS_PER_REPLICA": "2",
            "POPDIST_LOCAL_INSTANCE_INDEX": str(index)}


def events(path: Path) -> pd.DataFrame:
    return S.read_system(path).table.to_pandas().astype({c: str for c in S.STRING_COLUMNS})


def named(frame: pd.DataFrame, name: str) -> pd.DataFrame:
    return frame[frame["name"] == name].reset_index(drop=True)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[Path, int, int]:
    """`python small_training.py` as instance 3 of a poprun launch of 4 (PopRun's variables), under PVTI_OPTIONS
    and POPLAR_ENGINE_OPTIONS into one folder; the folder, and the wall clock before and after."""
    folder = tmp_path_factory.mktemp("pvti")
    env = subprocess_env(PVTI_OPTIONS=json.dumps({"enable": "true", "directory": str(folder)}),
                         POPLAR_ENGINE_OPTIONS=json.dumps({"autoReport.all": "true",
                                                           "autoReport.directory": str(folder)}),
                         **poprun_env(3, 4))
    before = time.time_ns()
    done = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=300)
    after = time.time_ns()
    assert done.returncode == 0, done.stderr[-2000:]
    return folder, before, after


def test_a_script_records_its_compile_calls_loading_and_updates(recorded):
    folder, before, after = recorded
    # THEN one file, named after the popdist instance, holds every event of the process on the wall clock
    assert sorted(p.name for p in folder.glob("*.pvti.parquet")) == ["instance-3.pvti.parquet"]
    timeline = S.read_system(folder / "instance-3.pvti.parquet")
    assert (timeline.process, timeline.instance) == ("instance-3", 3)
    frame = events(folder / "instance-3.pvti.parquet")
    assert (frame["start_ns"] >= before).all() and (frame["end_ns"] <= after).all()
    # AND the counts are the script's: one compile, a model call per batch, two updates per call, ...
    counts = frame.groupby(["channel", "name", "kind"]).size().to_dict()
    assert counts == {
        ("poptorch", "compile", "span"): 1,
        ("poptorch", "weights to device", "instant"): 1,  # after compiling
        ("poptorch", "model call", "span"): EPOCHS * STEPS,
        ("poptorch", "optimizer update", "span"): EPOCHS * STEPS * 2,  # deviceIterations(2)
        ("poptorch", "samples per second", "counter"): EPOCHS * STEPS,
        ("poptorch", "weights to host", "instant"): 1,  # copyWeightsToHost()
        ("dataloader", "epoch", "instant"): EPOCHS,
        ("dataloader", "data loading", "span"): EPOCHS * STEPS,
        ("dataloader", "wait for data", "span"): EPOCHS * STEPS,
    }
    # AND each counter is the samples of its call over the call's time, at the call's end
    calls, rates = named(frame, "model call"), named(frame, "samples per second")
    assert np.array_equal(rates["start_ns"], calls["end_ns"])
    assert np.allclose(rates["value"], SAMPLES * 1e9 / (calls["end_ns"] - calls["start_ns"]))
    # AND the spans nest as the script runs them: compile inside the first call, updates inside calls,
    # each batch's loading inside the wait for it, and each wait before the call it feeds
    compile_ = named(frame, "compile").iloc[0]
    assert calls["start_ns"][0] <= compile_["start_ns"] <= compile_["end_ns"] <= calls["end_ns"][0]
    updates = named(frame, "optimizer update")
    owner = np.searchsorted(calls["start_ns"].to_numpy(), updates["start_ns"].to_numpy(), "right") - 1
    assert (updates["end_ns"].to_numpy() <= calls["end_ns"].to_numpy()[owner]).all()
    assert np.array_equal(np.bincount(owner), [2] * EPOCHS * STEPS)
    loading, waits = named(frame, "data loading"), named(frame, "wait for data")
    assert (waits["start_ns"] <= loading["start_ns"]).all() and (loading["end_ns"] <= waits["end_ns"]).all()
    assert (waits["end_ns"] <= calls["start_ns"]).all()
    assert named(frame, "weights to host")["start_ns"][0] >= calls["end_ns"].iloc[-1]


def test_report_system_gives_the_files_figures(recorded):
    folder, _, _ = recorded
    frame = events(folder / "instance-3.pvti.parquet")
    # the instance's profile is DIR/instance-3/training/profile.pop; PVTI's directory, DIR, is the launch's folder
    profile = folder / "instance-3" / "training" / "profile.pop"
    assert profile.is_file()
    # WHEN the system section is asked for, of the profile as text and of the run's folder as JSON
    text = CliRunner().invoke(main, ["report", str(profile), "--section", "system"])
    doc = json.loads(CliRunner().invoke(main, ["report", str(folder), "--section", "system", "--format",
                                               "json"]).stdout)
    assert text.exit_code == 0, text.output
    # THEN the wall time is the first event to the last, the waits for data their sum, the samples/s the median
    wall = frame["end_ns"].max() - frame["start_ns"].min()
    waits = named(frame, "wait for data")
    waited = int((waits["end_ns"] - waits["start_ns"]).sum())
    process = doc["sections"]["system"]["processes"][0]
    assert process["process"] == "instance-3" and process["model_calls"] == EPOCHS * STEPS
    assert process["wall_ms"] == pytest.approx(wall / 1e6)
    assert process["wait_for_data_ms"] == pytest.approx(waited / 1e6)
    assert process["wait_for_data_pct"] == pytest.approx(100 * waited / wall)
    assert process["samples_per_second"] == pytest.approx(np.median(named(frame, "samples per second")["value"]))
    # AND each event's count and total are the file's, the largest total first
    rows = {r["name"]: r for r in doc["sections"]["system"]["by_name"]}
    for name in ("model call", "optimizer update", "data loading", "compile"):
        spans = named(frame, name)
        assert rows[name]["count"] == len(spans)
        assert rows[name]["total_ms"] == pytest.approx((spans["end_ns"] - spans["start_ns"]).sum() / 1e6)
        assert rows[name]["wall_pct"] == pytest.approx(100 * (spans["end_ns"] - spans["start_ns"]).sum() / wall)
    assert doc["sections"]["system"]["by_name"][0]["name"] == "model call"
    # AND the text shows the same figures (ms to 2 decimals, whole ms from 1,000 up)
    calls = named(frame, "model call")
    total_ms = (calls["end_ns"] - calls["start_ns"]).sum() / 1e6
    line = next(line for line in text.stdout.splitlines() if " model call " in line)
    assert line.split()[:5] == ["instance-3", "poptorch", "model", "call", "span"]
    assert line.split()[5:7] == [str(EPOCHS * STEPS), f"{total_ms:,.0f}" if total_ms >= 1000 else f"{total_ms:,.2f}"]


def run_in_process(tmp_path: Path, monkeypatch, pvti: str | None):
    """`popvision run small_training.py -- --epochs 1` in this process, under ``pvti``."""
    if pvti is None:
        monkeypatch.delenv("PVTI_OPTIONS", raising=False)
    else:
        monkeypatch.setenv("PVTI_OPTIONS", pvti)
    monkeypatch.chdir(tmp_path)
    return CliRunner().invoke(main, ["run", str(SCRIPT), "--", "--epochs", "1"])


def test_channels_choose_what_is_recorded(tmp_path, monkeypatch):
    result = run_in_process(tmp_path, monkeypatch, '{"enable":"true","directory":"pvti","channels":["dataloader"]}')
    assert result.exit_code == 0, result.output
    # popvision run publishes the file as the script ends; this process's name
    frame = events(tmp_path / "pvti" / f"process-{os.getpid()}.pvti.parquet")
    assert set(frame["channel"]) == {"dataloader"}
    assert frame.groupby("name").size().to_dict() == {"epoch": 1, "data loading": STEPS, "wait for data": STEPS}


@pytest.mark.parametrize("pvti", [None, '{"enable":"false","directory":"pvti"}'])
def test_nothing_is_recorded_when_it_is_off(tmp_path, monkeypatch, pvti):
    result = run_in_process(tmp_path, monkeypatch, pvti)
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "pvti").exists() and not list(tmp_path.rglob("*.pvti.parquet"))


@pytest.mark.parametrize("pvti, sentence", [
    ("enable", "PVTI_OPTIONS is not JSON: 'enable'; write it as "),
    ('{"enable":"yes"}', "PVTI_OPTIONS' enable must be \"true\" or \"false\", not \"yes\"."),
    ('{"enable":"true","channels":"poptorch"}', "PVTI_OPTIONS' channels must be a list of channel names"),
    ('{"enable":"true","dir":"x"}', "PVTI_OPTIONS has no option 'dir': it takes enable, directory and channels."),
])
def test_a_malformed_value_is_one_sentence_when_recording_starts(tmp_path, monkeypatch, pvti, sentence):
    result = run_in_process(tmp_path, monkeypatch, pvti)
    assert result.exit_code == 2
    assert result.output.startswith(f"Error: {sentence}") and len(result.output.splitlines()) == 1
