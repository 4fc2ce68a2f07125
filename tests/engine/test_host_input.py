"""The host input pipeline: the host's data loaders prepare each host call's samples while the IPUs
run the previous call (PopTorch's Async DataLoader); when they are slower, the IPUs wait for them."""

from __future__ import annotations

import json
import math

import pytest

from engine import Options
from engine.targets import ARCHS, Assumptions
from tests.engine.conventions import check_profile
from tests.engine.helpers import run_cli, run_profile

CLOCK = ARCHS["mk2"].clock_hz
HOST_RATE = Assumptions().host_samples_per_s  # samples per second per host process
FAST_HOST = ("--assume", "host_samples_per_s=1e9")  # a loader that keeps up with any run here
# The PopTorch pipelining tutorial: batch 40, GA 10, 10 device iterations, 4 IPUs pipelined, AdamW with
# its state in streaming memory; one host process; tqdm said 15.04 it/s of 4,000 images (epoch 2).
TUTORIAL = ("mnist", "--batch-size", "40", "--gradient-accumulation", "10", "--device-iterations", "10",
            "--offload-optimiser", "--optimiser", "adamw")
TUTORIAL_SAMPLES_PER_CALL = 40 * 10 * 10
TUTORIAL_IMAGES_PER_S = 15.04 * TUTORIAL_SAMPLES_PER_CALL


def summary(*args: str) -> dict:
    result = run_cli("run", *args, "--json", "-q")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def error(*args: str) -> str:
    result = run_cli("run", *args, "-q")
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and lines[0].endswith("."), result.stderr
    return lines[0]


def test_the_tutorials_mnist_run_is_host_bound_at_the_tutorials_rate():
    # GIVEN the tutorial's configuration: 4,000 images per host call, one host process
    s = summary(*TUTORIAL)
    # THEN each call lasts as long as the host's loader takes for its 4,000 images
    host_s = TUTORIAL_SAMPLES_PER_CALL / HOST_RATE
    seconds_per_call = s["seconds_per_step"] * 10  # 10 iterations (steps) per call
    assert seconds_per_call == pytest.approx(host_s, abs=2 / CLOCK)
    assert s["samples_per_second"] == pytest.approx(TUTORIAL_SAMPLES_PER_CALL / host_s, rel=1e-6)
    # which is the tutorial's ~60,000 images/s, within 10%
    assert abs(s["samples_per_second"] / TUTORIAL_IMAGES_PER_S - 1) < 0.10
    # AND the run says it is host-bound, the IPUs waiting for most of each call
    assert s["host_bound"] is True
    assert s["host_input_seconds_per_call"] == pytest.approx(host_s, abs=1 / CLOCK)
    assert s["input_wait_pct"] == pytest.approx(100 * s["input_wait_seconds_per_call"] / seconds_per_call, rel=1e-9)
    assert s["input_wait_pct"] > 90


def test_the_run_text_says_host_bound_and_what_would_help():
    result = run_cli("run", *TUTORIAL, "-q")
    assert result.exit_code == 0, result.output
    line = next(x for x in result.stdout.splitlines() if "host-bound" in x)
    wait = float(line.split("wait ", 1)[1].split("%", 1)[0])
    assert wait == pytest.approx(summary(*TUTORIAL)["input_wait_pct"], abs=0.05)
    assert "--host-processes" in line and "more IPUs would not" in line


def test_the_wait_is_the_host_time_beyond_the_rest_of_the_call(tmp_path):
    # GIVEN the tutorial's run twice a call, and the same run with a loader that keeps up
    tables = run_profile(tmp_path, *TUTORIAL, "--runs", "2", name="bound")
    free = run_profile(tmp_path, *TUTORIAL, "--runs", "2", *FAST_HOST, name="free")
    device_per_call = free["trace"]["end_cycle"].max() // 2  # what a call takes when the IPUs never wait
    host_per_call = math.ceil(TUTORIAL_SAMPLES_PER_CALL / HOST_RATE * CLOCK)
    # WHEN the wait steps are read from the trace
    p, trace = tables["programs"], tables["trace"]
    wait_steps = p[p["name"].astype(str) == "host/input_wait"]
    rows = trace.merge(wait_steps[["ipu", "step"]], on=["ipu", "step"])
    # THEN every IPU waits once per call, before the call's first micro-batch, as a stream phase without bytes
    assert sorted(wait_steps["ipu"]) == [0, 1, 2, 3] and (wait_steps["bytes"] == 0).all()
    assert len(rows) == 4 * 2 and set(rows["phase"].astype(str)) == {"stream"}
    work = trace[trace["pass"].astype(str) == "forward"]
    assert (rows.groupby("run")["end_cycle"].max() <= work.groupby("run")["start_cycle"].min()).all()
    assert not tables["exchanges"].merge(wait_steps[["ipu", "step"]], on=["ipu", "step"]).shape[0]
    # and each wait is the host's time minus the device's time of the call
    durations = set(rows["end_cycle"] - rows["start_cycle"])
    assert durations == {host_per_call - device_per_call}
    # so a call lasts the host's time, and the profile keeps its conventions
    assert tables["trace"]["end_cycle"].max() == 2 * host_per_call
    check_profile(tmp_path / "bound" / "profile.pop")


def test_a_run_whose_host_keeps_up_waits_for_nothing(tmp_path):
    # GIVEN ResNet-50's defaults: 4 x 16 = 64 images per call, ~1 ms of loading against ~15 ms on the IPUs
    s = summary("resnet50")
    assert 64 / HOST_RATE < s["seconds_per_step"]
    # THEN the IPUs never wait, and the time is the device's alone
    assert s["host_bound"] is False and s["input_wait_pct"] == 0 and s["input_wait_seconds_per_call"] == 0
    assert s["cycles_per_step"] == summary("resnet50", *FAST_HOST)["cycles_per_step"]
    # AND a wait of 0 leaves no row in the trace
    tables = run_profile(tmp_path, "mnist", *FAST_HOST)
    p = tables["programs"]
    waits = p[p["name"].astype(str) == "host/input_wait"]
    assert len(waits) == 4 and (waits["cycles"] == 0).all()
    assert not tables["trace"].merge(waits[["ipu", "step"]], on=["ipu", "step"]).shape[0]


def test_a_loader_twice_the_device_rate_is_not_host_bound():
    # mnist's IPUs take ~4 ms per call of 4,000 images (1,000,000 images/s): a 2,000,000 images/s loader keeps up
    s = summary("mnist", "--assume", "host_samples_per_s=2e6")
    assert s["host_bound"] is False
    assert s["cycles_per_step"] == summary("mnist", *FAST_HOST)["cycles_per_step"]


def test_host_processes_each_feed_their_replicas(tmp_path):
    # GIVEN mnist over 4 replicas: 16,000 images per call
    one = summary("mnist", "--replicas", "4")
    four = summary("mnist", "--replicas", "4", "--host-processes", "4")
    # THEN one process takes 16,000 / rate per call; four take a quarter of that
    assert one["samples_per_second"] == pytest.approx(HOST_RATE, rel=1e-6)
    assert four["samples_per_second"] == pytest.approx(4 * HOST_RATE, rel=1e-6)
    assert one["host_bound"] and four["host_bound"]
    # AND the manifest's run settings record the processes
    tables = run_profile(tmp_path, "mnist", "--replicas", "4", "--host-processes", "4")
    assert tables["manifest"]["run"]["host_processes"] == 4
    assert tables["manifest"]["run"]["request"]["options"]["host_processes"] == 4


def test_popTorchs_spelling_sets_the_processes():
    assert Options().Distributed.configureProcessId(0, 4).host_processes == 4
    assert Options().Distributed.numProcesses == 1


@pytest.mark.parametrize("args, words", [
    (("--host-processes", "0"), ["Host processes must be a positive integer, not 0"]),
    (("--host-processes", "-3"), ["Host processes must be a positive integer, not -3"]),
    (("--host-processes", "2"), ["Host processes 2 exceed the 1 replica(s)", "--host-processes 1"]),
    (("--host-processes", "5", "--replicas", "4"), ["Host processes 5 exceed the 4 replica(s)"]),
    (("--assume", "host_samples_per_s=0"), ["host_samples_per_s=0 is out of range", ">= 1",
                                            "samples per second per host process"]),
])
def test_bad_host_settings_are_one_sentence(tmp_path, args, words):
    line = error("mnist", *args)
    for w in words:
        assert w in line, line
