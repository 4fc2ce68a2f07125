"""A PopTorch script as a model source: `popvision run script.py --emulate-only [options] -- ARGS`.

The script runs up to its model's first call (no training loop), its captured model is emulated
with the script's poptorch.Options as defaults and the run options over them, and the profile it
writes records that request, so the reports' fix commands re-run the script and `report --verify`
re-emulates them.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import popvision_py as pv
from popvision_py.cli import main
from tests.poptorch.conftest import EXAMPLE, subprocess_env

# A model that does not fit one IPU: 12 linear layers of 2048 x 2048 (50,356,224 parameters) with
# Adam's two FP32 moments on chip, every block on IPU 0. Its insights suggest offloading the
# optimiser state and a second stage; halving the micro-batch (the DataLoader's batch) is not
# suggested for a script. Its argument is the number of layers.
BIG = """\
import sys
import torch
import poptorch

layers = int(sys.argv[1])


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(
            poptorch.BeginBlock(torch.nn.Linear(2048, 2048), f"L{k}", ipu_id=0) for k in range(layers))

    def forward(self, x, labels):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x, torch.nn.functional.cross_entropy(x, labels)


opts = poptorch.Options().deviceIterations(2)
opts.Training.gradientAccumulation(4)
net = Net()
model = poptorch.trainingModel(net, opts, optimizer=poptorch.optim.Adam(net.parameters(), lr=1e-3))
model(torch.randn(2 * 4 * 8, 2048), torch.randint(0, 2048, (64,)))
"""


def run(*args: str):
    return CliRunner().invoke(main, ["run", *args])


def request_of(path: Path) -> dict:
    with zipfile.ZipFile(path) as z:
        return json.loads(z.read("manifest.json"))["run"]


def figures(path: Path) -> dict:
    with pv.open(path) as report:
        return {"summary": report.summary.figures(), "ops": report.profile.read_table("ops").to_pandas(),
                "memory": report.memory.by_ipu()}


def test_emulate_only_is_the_zoo_mnist_with_the_same_options(tmp_path: Path, monkeypatch) -> None:
    # GIVEN the pipelined example emulated, not run, with gradient accumulation 20 instead of its 10, and
    # the zoo's mnist (the same network in the engine's API) with the example's options and the same change;
    # the script's loader assumed like the zoo's (its measured rate and 16 workers are tested apart)
    monkeypatch.setenv("POPVISION_HOST_INPUT", "assumed")
    script = run(str(EXAMPLE), "--emulate-only", "--gradient-accumulation", "20", "-q", "--profile", "--profile-dir",
                 str(tmp_path / "script"))
    assert script.exit_code == 0, script.output
    zoo = run("mnist", "--precision", "fp32", "--offload-optimiser", "--gradient-accumulation", "20", "-q",
              "--profile", "--profile-dir", str(tmp_path / "zoo"))
    assert zoo.exit_code == 0, zoo.output
    # THEN the script's loop did not run (no epoch printed) and its summary is the usual one
    assert "epoch 1 of 3" not in script.stdout
    assert "DigitClassifier: training, pipelined over 4 IPU(s) x 1 replica(s)" in script.stdout
    assert f"profile           {tmp_path / 'script' / 'profile.pop'}" in script.stdout
    # a step is 40 samples x 20 micro-batches; the script's other options are its own
    run_config = request_of(tmp_path / "script" / "profile.pop")
    assert (run_config["micro_batch_size"], run_config["gradient_accumulation"], run_config["device_iterations"]) == (
        40, 20, 10)
    assert run_config["tensor_locations"]["optimiser"] == "off_chip" and run_config["precision"] == "fp32"
    # the same ops (same kinds, blocks, FLOPs, bytes, tiles), memory and figures as the zoo's run
    ours, theirs = figures(tmp_path / "script" / "profile.pop"), figures(tmp_path / "zoo" / "profile.pop")
    assert ours["summary"].samples_per_step == 40 * 20 == theirs["summary"].samples_per_step
    columns = ["op_id", "kind", "block", "stage", "ipu", "pass", "flops", "bytes", "tiles"]
    pd.testing.assert_frame_equal(ours["ops"][columns].reset_index(drop=True),
                                  theirs["ops"][columns].reset_index(drop=True))
    pd.testing.assert_frame_equal(ours["memory"], theirs["memory"])
    for name in ("step_cycles", "total_flops", "worst_tile_bytes", "throughput_samples_per_s"):
        assert getattr(ours["summary"], name) == getattr(theirs["summary"], name), name
    # AND the profile records the request that re-runs it: the script's absolute path, its arguments
    assert run_config["request"] == {"model": str(EXAMPLE), "options": {"gradient_accumulation": 20},
                                     "script_args": [], "emulate_only": True}


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The script that does not fit, emulated into FOLDER/v/profile.pop (run from FOLDER)."""
    folder = tmp_path_factory.mktemp("big")
    (folder / "big.py").write_text(BIG)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        result = run("big.py", "--emulate-only", "-q", "--profile", "--profile-dir", "v", "--", "12")
    assert result.exit_code == 0, result.output
    assert "fit               does not fit" in result.stdout
    return folder


def test_every_fix_command_of_a_script_profile_runs_and_writes_its_profile(big: Path, monkeypatch) -> None:
    # GIVEN the insights of the script's profile, read where the script is
    monkeypatch.chdir(big)
    with pv.open(big / "v" / "profile.pop") as report:
        commands = [c for c in report.summary.insights()["command"].tolist() if c]
    # THEN each fix is a command over the script as the user named it, emulate-only, its argument after --
    # (the memory fixes first; then, as each call's 15 ms host latency is a large part of its time, more
    # device iterations per call)
    assert [c.split(" --profile")[0] for c in commands] == [
        "popvision run big.py --emulate-only --offload-optimiser",
        "popvision run big.py --emulate-only --stages 'L0..L5@0 L6..L11@1'",
        "popvision run big.py --emulate-only --device-iterations 4"]
    assert all(c.endswith(" -- 12") for c in commands) and not any("--batch-size" in c for c in commands)
    # WHEN each runs as typed (the words after `popvision`)
    for command in commands:
        words = shlex.split(command)
        result = CliRunner().invoke(main, words[1:])
        # THEN it exits 0 and writes profile-<tag>/profile.pop, the change made, the rest the script's
        assert result.exit_code == 0, f"{command}\n{result.output}"
        folder = words[words.index("--profile-dir") + 1]
        run_config = request_of(big / folder / "profile.pop")
        iterations = 4 if "--device-iterations" in words else 2
        assert (run_config["micro_batch_size"], run_config["gradient_accumulation"], run_config["device_iterations"],
                run_config["optimiser"]) == (8, 4, iterations, "adam")
        assert ("fit               does not fit" if iterations == 4 else "fit               fits") in result.stdout
    offloaded, split = (request_of(big / f"profile-{tag}" / "profile.pop") for tag in ("offload-optimiser", "2-stages"))
    assert offloaded["tensor_locations"]["optimiser"] == "off_chip"
    assert [(s["ipu"], s["blocks"]) for s in split["stages"]] == [
        (0, [f"L{k}" for k in range(6)]), (1, [f"L{k}" for k in range(6, 12)])]


def test_report_verify_re_emulates_each_fix_of_a_script_profile(big: Path) -> None:
    # WHEN `popvision report --verify` runs the fixes of the script's profile
    result = CliRunner().invoke(main, ["report", str(big / "v" / "profile.pop"), "--section", "summary", "--verify",
                                       "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = {r["tag"]: r for r in json.loads(result.stdout)["sections"]["verify"]["fixes"]}
    # THEN both memory fixes were measured (a profile each), fit, and held within the stated tolerance
    assert {"offload-optimiser", "2-stages"} <= set(rows) and len(rows) == 3
    for tag, row in ((t, rows[t]) for t in ("offload-optimiser", "2-stages")):
        assert row["status"] == "held", row["verdict"]
        assert row["fits_after"] and Path(row["profile"]).is_file()
        assert abs(row["worst_tile_bytes_after"] - row["worst_tile_bytes_predicted"]) <= 0.1 * row[
            "worst_tile_bytes_predicted"], tag
    # two IPUs each doing half the layers: faster; the optimiser state streamed at each update: slower
    assert rows["2-stages"]["samples_per_second_after"] > rows["2-stages"]["samples_per_second_before"]
    offloaded = rows["offload-optimiser"]
    assert offloaded["samples_per_second_after"] < offloaded["samples_per_second_before"]


def test_the_dashboards_verify_button_measures_a_fix_of_a_script_profile(big: Path, tmp_path: Path) -> None:
    import importlib

    from dashboards.app import create_app
    from engine import rules
    from popvision_py.emulation import run_fields
    from tests.dashboard.test_callbacks import text

    # GIVEN the dashboard on the script's profile, with the emulator and the planner's rules
    create_app([str(big / "v" / "profile.pop")], runner=run_fields, emulated_dir=str(tmp_path / "emulated"),
               planner=rules)
    summary = importlib.import_module("dashboards.pages.summary")
    with pv.open(big / "v" / "profile.pop") as report:
        commands = report.summary.insights()["command"].tolist()
    # WHEN the Verify button of the first fix (offload the optimiser) is pressed
    row = next(k for k, command in enumerate(commands) if command)
    assert "--offload-optimiser" in commands[row]
    view = text(summary.verified("a", row))
    # THEN the script's model was emulated with the fix: measured, and held
    assert view.startswith("Held:"), view
    assert list((tmp_path / "emulated").rglob("profile.pop"))


@pytest.mark.slow
def test_a_profile_written_under_poplar_engine_options_records_the_script_request(tmp_path: Path) -> None:
    # GIVEN the script run by Python itself with PopTorch's autoReport options and two layers
    (tmp_path / "big.py").write_text(BIG)
    env = subprocess_env(POPLAR_ENGINE_OPTIONS=json.dumps({"autoReport.all": "true", "autoReport.directory": "d"}))
    done = subprocess.run([sys.executable, "big.py", "2"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    # THEN its profile records the request that emulates the same script with the same argument
    profile = tmp_path / "d" / "training" / "profile.pop"
    assert request_of(profile)["request"] == {"model": str(tmp_path / "big.py"), "options": {},
                                              "script_args": ["2"], "emulate_only": True}
    # AND a fix command that re-emulates it, typed from there, gives the same figures without a change
    with pv.open(profile) as report:
        before = report.summary.figures()
    again = subprocess.run([sys.executable, "-m", "popvision_py.cli", "run", "big.py", "--emulate-only", "-q",
                            "--profile", "--profile-dir", "again", "--", "2"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    with pv.open(tmp_path / "again" / "profile.pop") as report:
        after = report.summary.figures()
    assert (after.step_cycles, after.worst_tile_bytes) == (before.step_cycles, before.worst_tile_bytes)


def test_what_a_script_fixes_itself_and_a_missing_script_are_one_sentence(tmp_path: Path) -> None:
    (tmp_path / "big.py").write_text(BIG)
    script = str(tmp_path / "big.py")
    # GIVEN a batch size the script's DataLoader does not give
    result = run(script, "--emulate-only", "--batch-size", "16", "--", "1")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.strip().endswith(f"--batch-size 16 cannot apply to {script}: its micro-batch of 8 is the "
                                          f"captured inputs' size; change batch_size in the script's "
                                          f"poptorch.DataLoader instead.")
    # a precision its weights do not have
    result = run(script, "--emulate-only", "--precision", "fp16", "--", "1")
    assert result.exit_code == 2
    assert "--precision fp16 cannot apply" in result.output and "model.half()" in result.output
    # a run option without --emulate-only: the script would run with its own options, so it is refused
    result = run(script, "--gradient-accumulation", "8", "--", "1")
    assert result.exit_code == 2
    assert "--gradient-accumulation applies to a PopTorch script only with --emulate-only" in result.output
    # a script that does not exist, with or without --emulate-only
    for args in (["--emulate-only"], ["--", "1"]):
        result = run(str(tmp_path / "missing.py"), *args)
        assert result.exit_code == 2 and "Traceback" not in result.output
        assert f"Script {tmp_path / 'missing.py'} does not exist." in result.output
    # a script without an inference model, asked for one
    result = run(script, "--emulate-only", "--mode", "inference", "--", "1")
    assert result.exit_code == 2
    assert "ended without calling a poptorch inference model" in result.output
    assert "--mode training emulates its training model" in result.output


@pytest.mark.slow
def test_tune_searches_a_scripts_stages_and_its_best_command_runs(tmp_path: Path, monkeypatch) -> None:
    # GIVEN the script with four layers (blocks L0..L3, all on IPU 0), tuned over its stages on an
    # IPU-POD4 by one Dask worker (a process of its own, which captures the script itself)
    (tmp_path / "big.py").write_text(BIG)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    result = CliRunner().invoke(main, ["tune", "big.py", "--system", "POD4", "--search", "stages", "--workers", "1",
                                       "-q", "--no-profile", "-o", "tune.parquet", "--", "4"])
    assert result.exit_code == 0, result.output
    from popvision_py.format.tunefile import read_tune

    rows, _ = read_tune(tmp_path / "tune.parquet")
    # THEN every contiguous split of the four blocks over one to four IPUs (2^3 = 8) was emulated, and fits
    assert len(rows) == 8 and (rows["status"] == "ok").all() and rows["fits"].all()
    # each row's command emulates the script with its argument, the micro-batch the script's own
    best = rows[rows["rank"] == 1].iloc[0]
    words = shlex.split(best["command"])
    assert words[:4] == ["popvision", "run", str(tmp_path / "big.py"), "--emulate-only"] and words[-2:] == ["--", "4"]
    assert words[words.index("--batch-size") + 1] == "8"
    # AND the best's command, run, gives the row's throughput
    again = CliRunner().invoke(main, [*words[1:-2], "--json", "-q", "--", "4"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["samples_per_second"] == pytest.approx(best["samples_per_second"])


def test_a_captured_script_prints_nothing_and_an_early_exit_is_one_sentence(tmp_path: Path) -> None:
    # GIVEN the script with a line of its own on stdout and on stderr (a log, a tqdm bar) before its model runs
    noisy = BIG.replace("layers = int(sys.argv[1])\n", "layers = int(sys.argv[1])\nprint('SCRIPT-OUT')\n"
                        "print('SCRIPT-ERR', file=sys.stderr)\n")
    (tmp_path / "big.py").write_text(noisy)
    env = subprocess_env()

    def emulate(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "popvision_py.cli", "run", "big.py", "--emulate-only", "-q",
                               "--", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    # WHEN its model is emulated (as each of tune's Dask workers does)
    done = emulate("1")
    # THEN neither line shows: the capture is not the script's run
    assert done.returncode == 0, done.stderr[-3000:]
    assert "SCRIPT-" not in done.stdout + done.stderr
    # AND a script that exits before its model runs (argparse refusing its arguments, here) is one sentence
    # with the last line it wrote to stderr, where its message had gone to the capture's buffer
    (tmp_path / "big.py").write_text(noisy.replace("layers = int(sys.argv[1])",
                                                   "import argparse\nlayers = argparse.ArgumentParser()"
                                                   ".parse_args().layers"))
    refused = emulate("--layrs", "3")
    assert (refused.returncode, refused.stderr) == (
        2, "Error: Script big.py exited with code 2 before calling a poptorch training model: big.py: error: "
           "unrecognized arguments: --layrs 3.\n")
