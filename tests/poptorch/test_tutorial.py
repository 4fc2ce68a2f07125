"""The project's pipelined PopTorch example (examples/mnist_pipeline.py) under `popvision run --profile`.

The example is written as a user writes a PopTorch script, with the PopTorch pipelining tutorial's
network and settings. Its training and testing run on the CPU through the real CLI; the profiles it
leaves are compared with the zoo's `mnist`, the same network written in the engine's own API, run
with the same options.

Why the comparison is exact (tolerance zero): the capture maps the script's ATen ops onto the
same engine builders the zoo calls (convolution, max-pool, ReLU, linear, cross-entropy) with the
same shapes, and an op's FLOPs, bytes, tile mapping and memory are functions of its kind, shapes,
weights, block and the options only, never of its name. The options are the tutorial's: micro-batch
40, 10 device iterations, gradient accumulation 10, stages B1..B4 on IPUs 0..3, AdamW, the
optimiser state off chip (the script's default; `--optimiser-on-chip` keeps it on chip), FP32 (a
PyTorch model's weights; PopTorch runs an FP32 model in FP32), which the zoo run is given as flags.
Only the model's name differs. Any other difference is a capture that saw a different op, shape or
weight.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from popvision_py.cli import main
from tests.engine.conventions import check_profile
from tests.poptorch.conftest import EXAMPLE, accuracy_on_test_set, losses

pytestmark = pytest.mark.slow  # the example trains 3 calls of 100 micro-batches: about 5 s each run


def run(*args: str):
    result = CliRunner().invoke(main, ["run", *args], catch_exceptions=False)
    return result


def manifest(path: Path) -> dict:
    with zipfile.ZipFile(path) as z:
        return json.loads(z.read("manifest.json"))


def figures(path: Path) -> dict:
    import popvision_py as pv

    with pv.open(path) as report:
        summary = report.summary.figures()
        ops = report.profile.read_table("ops").to_pandas()
        memory = report.memory.by_ipu()
        host = report.exchange.host_input()
    # A step on the IPUs alone, without the wait for the host's loaders: a script's loading is measured
    # and the zoo's assumed, so only the device's time can agree to the cycle
    device = summary.step_cycles * (1 - host.input_wait_cycles / (host.call_cycles * host.host_calls))
    return {"summary": summary, "ops": ops, "memory": memory, "device_step_cycles": device}


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory):
    """`popvision run examples/mnist_pipeline.py --profile --profile-dir D`, once for the module."""
    folder = tmp_path_factory.mktemp("example") / "profile"
    result = run(str(EXAMPLE), "--profile", "--profile-dir", str(folder))
    assert result.exit_code == 0, result.output + result.stderr
    return result, folder


@pytest.fixture(scope="module")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The zoo's mnist with the example's options (its defaults are the tutorial's sizes, as the example's are)."""
    folder = tmp_path_factory.mktemp("zoo")
    result = run("mnist", "--precision", "fp32", "--offload-optimiser", "--profile", "--profile-dir", str(folder), "-q")
    assert result.exit_code == 0, result.output
    return folder / "profile.pop"


def test_the_script_trains_on_the_cpu_and_its_loss_decreases(example) -> None:
    result, _ = example
    # THEN the progress bar shows one loss per call of the training model (3 epochs of one 4,000-image
    # call), each lower than the one before, and the inference model classifies the test set
    shown = losses(result.stderr)
    assert len(shown) == 3, result.stderr[-2000:]
    assert shown[0] > shown[1] > shown[2], shown
    assert shown[-1] < 1.5  # from ln(10) = 2.3 for a guess (0.72 to 1.02 over --seed 0 to 4)
    assert accuracy_on_test_set(result.stdout) > 80.0


def test_each_compiled_model_prints_its_summary_and_writes_its_profile(example) -> None:
    result, folder = example
    # THEN one profile per compiled model, named as PopTorch names them
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.pop")) == [
        "inference/profile.pop", "training/profile.pop"]
    # and the summary `popvision run` prints, once per model, when the model is compiled (first call)
    out = result.stdout
    assert out.index("epoch 1 of 3") < out.index("DigitClassifier: training, pipelined over 4 IPU(s) x 1 replica(s)")
    assert out.index("epoch 3 of 3") < out.index("DigitClassifier: inference, pipelined over 4 IPU(s)")
    for line in ("time per step", "throughput", "fit               fits", "worst tile",
                 f"profile           {folder / 'training' / 'profile.pop'}",
                 f"profile           {folder / 'inference' / 'profile.pop'}"):
        assert line in out


def test_the_training_profile_has_the_tutorials_blocks_stages_and_options(example) -> None:
    _, folder = example
    run_config = manifest(folder / "training" / "profile.pop")["run"]
    assert [(s["stage"], s["ipu"], s["blocks"]) for s in run_config["stages"]] == [
        (0, 0, ["B1"]), (1, 1, ["B2"]), (2, 2, ["B3"]), (3, 3, ["B4"])]
    assert run_config["strategy"] == "pipelined" and run_config["mode"] == "training"
    assert (run_config["micro_batch_size"], run_config["gradient_accumulation"], run_config["device_iterations"]) == (
        40, 10, 10)
    assert run_config["optimiser"] == "adamw" and run_config["precision"] == "fp32"
    assert run_config["tensor_locations"]["optimiser"] == "off_chip"
    # the inference model: the training options cloned, with gradient accumulation 1 and 100 device
    # iterations, the test loader's micro-batch of 8
    inference = manifest(folder / "inference" / "profile.pop")["run"]
    assert inference["mode"] == "inference"
    assert (inference["micro_batch_size"], inference["device_iterations"]) == (8, 100)
    assert [s["blocks"] for s in inference["stages"]] == [["B1"], ["B2"], ["B3"], ["B4"]]
    # each records the request that re-emulates it (its fixes' commands): the script, emulate-only, the mode
    run_config["request"].pop("host_measured")
    inference["request"].pop("host_measured")
    assert run_config["request"] == {"model": str(EXAMPLE), "options": {}, "script_args": [], "emulate_only": True}
    assert inference["request"] == {"model": str(EXAMPLE), "options": {"mode": "inference"}, "script_args": [],
                                    "emulate_only": True}


def test_the_host_work_is_measured_and_the_profile_says_how(example) -> None:
    """The script's own loading ran here, for real: its rate, not an assumed one, feeds the emulation."""
    _, folder = example
    run_config = manifest(folder / "training" / "profile.pop")["run"]
    measured = run_config["request"]["host_measured"]
    # GIVEN the example's training loader: 4,000 samples per call (40 x GA 10 x 10 iterations), 16 workers
    # THEN the model was compiled at its first call, after one combined batch was loaded and timed
    assert measured["samples"] == 4_000 and measured["seconds"] > 0
    assert measured["samples_per_s_per_core"] == pytest.approx(measured["samples"] / measured["seconds"])
    assert measured["num_workers"] == 16 and measured["persistent_workers"] is False
    assert measured["dataset_samples"] == 4_000 and "next()" in measured["how"]
    # AND the emulation took the script's loader as it is: its workers, restarted at every epoch
    assert run_config["loader_workers"] == 16 and run_config["persistent_workers"] is False


def test_the_capture_agrees_with_the_zoo_mnist(example, zoo: Path) -> None:
    _, folder = example
    captured, written = figures(folder / "training" / "profile.pop"), figures(zoo)
    # ops: the same kinds in the same blocks, stages and passes, with the same FLOPs and bytes
    columns = ["op_id", "kind", "block", "stage", "ipu", "pass", "flops", "bytes", "tiles"]
    ours, theirs = captured["ops"][columns].astype(str), written["ops"][columns].astype(str)
    pd.testing.assert_frame_equal(ours.reset_index(drop=True), theirs.reset_index(drop=True))
    forward = captured["ops"][captured["ops"]["pass"] == "forward"]
    assert list(forward["kind"]) == ["conv", "maxpool", "relu", "conv", "maxpool", "relu", "matmul", "relu",
                                     "matmul", "cross_entropy"]
    # the first convolution's FLOPs by hand: 2 x (40 x 24 x 24 outputs) x (1 x 5 x 5) x 10 channels
    assert int(forward["flops"].iloc[0]) == 2 * 40 * 24 * 24 * 25 * 10
    # memory per IPU and the headline figures, to the byte and the cycle
    pd.testing.assert_frame_equal(captured["memory"], written["memory"])
    for name in ("total_flops", "worst_tile_bytes"):
        assert getattr(captured["summary"], name) == getattr(written["summary"], name), name
    assert captured["device_step_cycles"] == pytest.approx(written["device_step_cycles"], rel=1e-9)


def test_the_inference_capture_agrees_with_the_zoo_mnist_in_inference(example, tmp_path: Path) -> None:
    # GIVEN the zoo's mnist in inference (its inference defaults: micro-batch 8, 100 device iterations)
    _, folder = example
    zoo = run("mnist", "--mode", "inference", "--precision", "fp32", "--profile", "--profile-dir", str(tmp_path), "-q")
    assert zoo.exit_code == 0, zoo.output
    captured, written = figures(folder / "inference" / "profile.pop"), figures(tmp_path / "profile.pop")
    # THEN the forward ops (no loss: called without labels, the classifier returns its scores) and memory
    # agree exactly
    columns = ["kind", "block", "stage", "ipu", "pass", "flops", "bytes", "tiles"]
    pd.testing.assert_frame_equal(captured["ops"][columns], written["ops"][columns])
    assert list(captured["ops"]["kind"])[-1] == "matmul"
    pd.testing.assert_frame_equal(captured["memory"], written["memory"])
    assert captured["device_step_cycles"] == pytest.approx(written["device_step_cycles"], rel=1e-9)


def test_the_reports_and_the_dashboard_open_both_profiles(example, tmp_path: Path) -> None:
    _, folder = example
    for model in ("training", "inference"):  # the format's conventions, as every engine profile keeps them
        check_profile(folder / model / "profile.pop")
    for model in ("training", "inference"):
        path = folder / model / "profile.pop"
        html = tmp_path / f"{model}.html"
        result = CliRunner().invoke(main, ["report", str(path), "--format", "html", "-o", str(html)])
        assert result.exit_code == 0, result.output
        assert html.stat().st_size > 0
    import dash

    from dashboards.app import create_app

    create_app([str(folder / "training" / "profile.pop"), str(folder / "inference" / "profile.pop")])
    from dashboards import data

    data.current().check()
    data.current().warm()
    for page in dash.page_registry.values():
        layout = page["layout"]
        assert layout() if callable(layout) else layout, page["path"]


def test_the_sharded_variant_with_the_optimiser_on_chip_agrees_with_the_zoo(tmp_path: Path) -> None:
    # GIVEN the example run with its two other choices, as a user asks for them: the sharded strategy
    # and the optimiser state left on chip (the arguments after -- are the script's)
    result = run(str(EXAMPLE), "--profile", "--profile-dir", str(tmp_path / "profile"), "--",
                 "--strategy", "sharded", "--optimiser-on-chip")
    assert result.exit_code == 0, result.output + result.stderr
    # WHEN the zoo's mnist runs sharded with the optimiser on chip
    zoo = run("mnist", "--strategy", "sharded", "--precision", "fp32", "--profile", "--profile-dir",
              str(tmp_path / "zoo"), "-q")
    assert zoo.exit_code == 0, zoo.output
    # THEN the profiles say sharded, on chip, and agree to the byte and cycle
    path = tmp_path / "profile" / "training" / "profile.pop"
    run_config = manifest(path)["run"]
    assert run_config["strategy"] == "sharded" and run_config["tensor_locations"]["optimiser"] == "on_chip"
    assert run_config["request"]["script_args"] == ["--strategy", "sharded", "--optimiser-on-chip"]
    captured, written = figures(path), figures(tmp_path / "zoo" / "profile.pop")
    pd.testing.assert_frame_equal(captured["memory"], written["memory"])
    assert captured["device_step_cycles"] == pytest.approx(written["device_step_cycles"], rel=1e-9)
    assert "DigitClassifier: inference, sharded over 4 IPU(s)" in result.stdout
