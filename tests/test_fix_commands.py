"""Every fix the insights suggest is a command that runs, and does what its effect says.

GIVEN profiles with findings (a pipeline bubble, host-bound inference, a phased run, an out-of-memory
BERT-Large), WHEN each suggested command is run through the real CLI, THEN the planner accepts it,
the option it changes is in the new profile's manifest, and the worst tile it predicts is close to
the one the emulator then measures.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

import popvision_py as pv
from popvision_py.analysis.findings.fixes import FLAGS
from popvision_py.format import open_profile
from tests.engine.helpers import run_cli

ROOT = Path(__file__).resolve().parents[1]
OOM_SAMPLE = ROOT / "sample_profiles" / "bert_large_out_of_memory" / "profile.pop"


def _run(command: str, out: Path) -> dict:
    """Run a suggested command (its --profile-dir pointed into ``out``); the new profile's manifest and summary."""
    words = shlex.split(command)
    assert words[:2] == ["popvision", "run"], command
    k = words.index("--profile-dir")
    words[k + 1] = str(out / words[k + 1])
    result = run_cli(*words[1:], "-q", "--json")
    assert result.exit_code == 0, f"{command}\n{result.output}"
    with open_profile(Path(words[k + 1]) / "profile.pop") as p:
        return {"run": p.run, "summary": json.loads(result.output)}


def _estimate(effect: str) -> int | None:
    match = re.search(r"-> about ([\d,]+) bytes", effect)
    return int(match.group(1).replace(",", "")) if match else None


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fixes")
    paths = {}
    runs = {"pipelined": [], "inference": ["--mode", "inference"], "phased": ["--strategy", "phased"]}
    for name, args in runs.items():
        # a data loader that keeps up: these are the IPUs' findings (mnist's default is host-bound,
        # whose fix tests/analysis/test_host_bound.py runs)
        result = run_cli("run", "mnist", "--profile", "--profile-dir", str(folder / name), "-q",
                         "--input", "synthetic", *args)
        assert result.exit_code == 0, result.output
        paths[name] = folder / name / "profile.pop"
    return folder, paths


def test_a_recorded_run_gets_short_commands_that_run(made):
    folder, paths = made
    for name, path in paths.items():
        with pv.open(path) as r:
            insights = r.summary.insights()
            run = r.run
        commands = [c for c in insights["command"] if c]
        assert commands, f"{name}: no fix with a command"
        for command in commands:
            # THEN the command repeats the run's own options (the mode, the strategy) and no more than it changes
            assert command.startswith("popvision run mnist "), command
            for option in run["request"]["options"]:
                assert f"--{FLAGS.get(option, option.replace('_', '-'))}" in command
            done = _run(command, folder / name)
            # AND the planner accepts it and the profile holds the change
            changed = re.findall(r"--(gradient-accumulation|device-iterations) (\d+)", command)
            for option, value in changed:
                assert done["run"][option.replace("-", "_")] == int(value)


def test_no_replica_sharding_is_suggested_for_a_single_replica(made):
    _, paths = made
    for path in paths.values():
        with pv.open(path) as r:
            assert r.run["replication_factor"] == 1
            assert not any("replicated-tensor-sharding" in c for c in r.summary.insights()["command"])


def test_inference_bubble_advice_changes_device_iterations_never_accumulation(made):
    _, paths = made
    with pv.open(paths["inference"]) as r:
        insights = r.summary.insights()
    text = " ".join(insights["suggestion"]) + " ".join(insights["command"])
    assert "gradient accumulation" not in text.lower() and "--gradient-accumulation" not in text
    bubble = insights[insights["finding"].str.contains("fill and flush")]
    assert len(bubble) == 1 and "--device-iterations 200" in bubble["command"].iloc[0]


def test_out_of_memory_fixes_run_and_their_worst_tile_estimates_hold(tmp_path):
    # GIVEN the out-of-memory BERT-Large sample (`popvision run bert-large --no-offload-optimiser`)
    with pv.open(OOM_SAMPLE) as r:
        insights = r.summary.insights()
        before = r.summary.figures().worst_tile_bytes
        capacity = r.summary.figures().bytes_per_tile
    memory = insights[(insights["topic"] == "memory") & (insights["command"] != "")]
    assert {s.split()[0] for s in memory["suggestion"]} >= {"Offload", "Halve", "Split"}
    for suggestion, effect, command in zip(memory["suggestion"], memory["effect"], memory["command"]):
        estimate = _estimate(effect)
        done = _run(command, tmp_path)
        measured = done["summary"]["worst_tile_bytes"]
        # THEN each fix lowers the worst tile, and the estimate is within 10% of what the emulator measures
        assert measured < before, suggestion
        assert estimate is not None and abs(estimate - measured) <= 0.10 * capacity, (suggestion, estimate, measured)
        if "Split" in suggestion:  # the split is chosen with a margin: it must fit when run
            assert done["summary"]["fits"], (suggestion, measured)


def test_no_fix_breaks_the_planners_rules_at_the_largest_system(tmp_path):
    # GIVEN GPT-3 175B as the blog maps it: 8 stages x 8 shards x 4 replicas fill an IPU-POD256
    result = run_cli("run", "gpt", "--preset", "gpt3-175b", "--profile", "--profile-dir", str(tmp_path / "g"), "-q")
    assert result.exit_code == 0, result.output
    with pv.open(tmp_path / "g" / "profile.pop") as r:
        insights = r.summary.insights()
    for command in filter(None, insights["command"]):
        words = shlex.split(command)
        stages = len(words[words.index("--stages") + 1].split()) if "--stages" in words else 8
        replicas = int(words[words.index("--replicas") + 1]) if "--replicas" in words else 4
        # THEN no command asks for more than the 256 IPUs of the largest system
        assert stages * 8 * replicas <= 256, command
    # AND replicated tensor sharding, already on, is not suggested again
    assert not any("replicated tensor sharding" in text for text in insights["suggestion"])
    # AND the phased run gets a runnable fix that doubles the micro-batches per weight update (its
    # all-reduce and its pipeline fill and flush are both paid once per update)
    doubling = [c for c in insights["command"] if c and "--gradient-accumulation 32" in c]
    assert len(doubling) == 1 and "--preset gpt3-175b" in doubling[0]
