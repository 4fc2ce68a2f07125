"""The written profile: reads back, keeps the format's conventions, and is deterministic."""

from __future__ import annotations

import pytest

from popvision_py.format import open_profile
from tests.engine.conventions import check_profile
from tests.engine.helpers import run_cli

CASES = {
    "pipelined": [],
    "sharded": ["--strategy", "sharded"],
    "phased": ["--strategy", "phased"],
    "inference": ["--mode", "inference"],
    "replicated": ["--replicas", "4", "--offload-optimiser", "--replicated-tensor-sharding"],
    "regrouped": ["--stages", "B1,B2@0 B3@1 B4@2", "--gradient-accumulation", "5", "--recompute"],
}


@pytest.mark.parametrize("case", list(CASES))
def test_profile_reads_back_and_keeps_the_conventions(tmp_path, case):
    result = run_cli("run", "mnist", "--profile", "--profile-dir", str(tmp_path), "-q", *CASES[case])
    assert result.exit_code == 0, result.output
    tables = check_profile(tmp_path / "profile.pop")
    with open_profile(tmp_path / "profile.pop") as profile:
        run, target = profile.run, profile.target
        for name in profile.tables:
            assert profile.manifest["tables"][name]["rows"] == len(tables[name])
    assert run["model"] == "mnist"
    assert target["tiles_per_ipu"] == 1472 and target["flops_per_cycle_per_tile"]["fp16"] == 128
    # every table holds rows but the GPU kernels of an imported trace, which an emulated run has none of
    assert all(len(tables[name]) > 0 for name in tables if name != "kernels") and len(tables["kernels"]) == 0


def test_the_same_command_gives_identical_tables(tmp_path):
    for name in ("a", "b"):
        assert run_cli("run", "mnist", "--profile", "--profile-dir", str(tmp_path / name), "-q").exit_code == 0
    with open_profile(tmp_path / "a" / "profile.pop") as a, open_profile(tmp_path / "b" / "profile.pop") as b:
        for table in a.tables:
            assert a.read_table(table).equals(b.read_table(table)), table
        assert {k: v for k, v in a.manifest.items() if k != "created"} == \
               {k: v for k, v in b.manifest.items() if k != "created"}


def test_without_profile_a_run_prints_its_summary_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run_cli("run", "mnist", "-q")
    assert result.exit_code == 0
    for words in ("time per step", "samples/s", "fits", "worst tile"):
        assert words in result.output
    assert list(tmp_path.iterdir()) == []


def test_models_lists_the_zoo_with_default_partitions():
    result = run_cli("models")
    assert result.exit_code == 0
    for name in ("mnist", "resnet50", "bert-base", "bert-large", "gpt", "vit-base", "gpt3-175b"):
        assert name in result.output
    assert "B1@0 B2@1 B3@2 B4@3" in result.output
