"""The host input pipeline: the host's data loaders prepare each host call's samples while the IPUs
run the previous call (PopTorch's Async DataLoader); when they are slower, the IPUs wait for them.
A loader's rate is its cores (its share of the host server, or --loader-workers) times the rate
of one core for the kind of sample (--input: synthetic, tensor, image, text). Unless its workers
persist, the loader starts them again at every epoch of the model's dataset, and the calls wait for
what its ring buffer of calls does not hide."""

from __future__ import annotations

import json
import math

import pytest

from engine import RunOptions
from engine.assumptions import Assumptions
from engine.targets import ARCHS
from tests.engine.conventions import check_profile
from tests.engine.helpers import run_cli, run_profile

CLOCK = ARCHS["mk2"].clock_hz
HOST_RATE = Assumptions().host_tensor_samples_per_s_per_core  # MNIST-like samples per second on one core
FAST_HOST = ("--input", "synthetic")  # no loading at all: the IPUs' time alone
# The PopTorch pipelining tutorial's run (batch 40, GA 10, 10 device iterations, 4 IPUs pipelined,
# AdamW with its state in streaming memory) fed by one process with a single loader worker whose
# workers persist from epoch to epoch (the steady state; the epochs' starts are tested apart).
TUTORIAL_RUN = ("mnist", "--batch-size", "40", "--gradient-accumulation", "10", "--device-iterations", "10",
                "--offload-optimiser", "--optimiser", "adamw")
TUTORIAL = (*TUTORIAL_RUN, "--loader-workers", "1", "--persistent-workers")
TUTORIAL_SAMPLES_PER_CALL = 40 * 10 * 10
MNIST_TRAINING_SAMPLES = 60_000  # MNIST's training split: an epoch
ASYNC_BUFFER_CALLS = 3  # PopTorch's AsynchronousDataAccessor loads this many calls ahead (buffer_size=3)


def summary(*args: str) -> dict:
    """The run's JSON summary, central figures only: these tests look at the host's input, not the ranges."""
    result = run_cli("run", *args, "--json", "-q", "--no-ranges")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def error(*args: str) -> str:
    result = run_cli("run", *args, "-q")
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and lines[0].endswith("."), result.stderr
    return lines[0]


def test_one_loader_worker_makes_the_tutorials_run_host_bound():
    # GIVEN the tutorial's configuration: 4,000 images per host call, one process with one worker
    s = summary(*TUTORIAL)
    # THEN each call lasts as long as one core takes for its 4,000 MNIST-like images
    host_s = TUTORIAL_SAMPLES_PER_CALL / HOST_RATE
    seconds_per_call = s["seconds_per_step"] * 10  # 10 iterations (steps) per call
    assert seconds_per_call == pytest.approx(host_s, abs=2 / CLOCK)
    assert s["samples_per_second"] == pytest.approx(TUTORIAL_SAMPLES_PER_CALL / host_s, rel=1e-6)
    # AND the run says it is host-bound, the IPUs waiting for most of each call
    assert s["host_bound"] is True
    assert s["host_input_seconds_per_call"] == pytest.approx(host_s, abs=1 / CLOCK)
    assert s["input_wait_pct"] == pytest.approx(100 * s["input_wait_seconds_per_call"] / seconds_per_call, rel=1e-9)
    free_call = summary(*TUTORIAL, *FAST_HOST)["seconds_per_step"] * 10  # the call when the IPUs never wait
    assert s["input_wait_seconds_per_call"] == pytest.approx(host_s - free_call, abs=3 / CLOCK)
    assert s["input_wait_pct"] > 50


def test_the_run_text_says_host_bound_and_what_would_help():
    result = run_cli("run", *TUTORIAL, "-q")
    assert result.exit_code == 0, result.output
    line = next(x for x in result.stdout.splitlines() if "host-bound" in x)
    wait = float(line.split("wait ", 1)[1].split("%", 1)[0])
    assert wait == pytest.approx(summary(*TUTORIAL)["input_wait_pct"], abs=0.05)
    assert "--host-processes" in line and "more IPUs would not" in line
    # AND it names the loader: the kind of sample, its processes and cores and a core's rate
    assert (f"the loader: small in-memory tensors (MNIST-like), 1 process(es) x 1 core(s) at {HOST_RATE:,.0f} "
            "samples/s per core") in line


def test_image_samples_feed_fewer_per_core_than_tensor_samples():
    # GIVEN the same ResNet-50 run fed ImageNet-like JPEGs (its own kind) or MNIST-like tensors
    image, tensor = summary("resnet50"), summary("resnet50", "--input", "tensor")
    a = Assumptions()
    # THEN a core decodes and augments far fewer JPEGs than it converts small tensors
    assert a.host_image_samples_per_s_per_core * 10 < a.host_tensor_samples_per_s_per_core
    # so the host takes that much longer per call, and synthetic data costs it nothing
    ratio = a.host_tensor_samples_per_s_per_core / a.host_image_samples_per_s_per_core
    assert image["host_input_seconds_per_call"] == pytest.approx(ratio * tensor["host_input_seconds_per_call"],
                                                                 rel=1e-3)
    assert summary("resnet50", *FAST_HOST)["host_input_seconds_per_call"] == 0
    assert "JPEG decode and augmentation (ImageNet-like)" in image["host_loader"]


def test_the_processes_share_their_host_servers_cores():
    # GIVEN ResNet-50 over 16 replicas (one host server of 128 cores for 16 IPUs) fed by 8 processes
    a = Assumptions()
    s = summary("resnet50", "--replicas", "16", "--stages", "stem..head@0", "--gradient-accumulation", "6",
                "--host-processes", "8")
    samples = 16 * 6 * 16  # the model's micro-batch x GA x replicas per call (one device iteration)
    cores = a.host_cores_per_server // 8  # each process's share of the one server
    # THEN the loaders prepare a call's samples at 8 processes x 16 cores x a core's JPEG rate
    rate = 8 * cores * a.host_image_samples_per_s_per_core
    assert s["host_input_seconds_per_call"] == pytest.approx(samples / rate, rel=1e-4)
    assert f"8 process(es) x {cores} core(s)" in s["host_loader"]


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
    # GIVEN ResNet-50's defaults with persistent workers: 4 x 16 = 64 images per call, ~1 ms of loading
    # against ~15 ms on the IPUs
    s = summary("resnet50", "--persistent-workers")
    assert 64 / HOST_RATE < s["seconds_per_step"]
    # THEN the IPUs never wait, and the time is the device's alone
    assert s["host_bound"] is False and s["input_wait_pct"] == 0 and s["input_wait_seconds_per_call"] == 0
    assert s["cycles_per_step"] == summary("resnet50", *FAST_HOST)["cycles_per_step"]
    # AND with 128 named workers that do not persist, the epochs' starts wait, spread over ImageNet's
    # 20,018 calls an epoch; without --loader-workers the loader is the ideal one (every core, kept)
    assert summary("resnet50")["cycles_per_step"] == s["cycles_per_step"]
    fresh = summary("resnet50", "--loader-workers", "128")
    assert fresh["input_wait_seconds_per_call"] > 0 and fresh["cycles_per_step"] > s["cycles_per_step"]
    # AND a wait of 0 leaves no row in the trace
    tables = run_profile(tmp_path, "mnist", *FAST_HOST)
    p = tables["programs"]
    waits = p[p["name"].astype(str) == "host/input_wait"]
    assert len(waits) == 4 and (waits["cycles"] == 0).all()
    assert not tables["trace"].merge(waits[["ipu", "step"]], on=["ipu", "step"]).shape[0]


def test_a_loader_twice_the_device_rate_is_not_host_bound():
    # mnist's IPUs take ~4 ms per call of 4,000 images (1,000,000 images/s): a 2,000,000 images/s loader keeps up
    s = summary("mnist", "--assume", "host_tensor_samples_per_s_per_core=2e6", "--loader-workers", "1")
    assert s["host_bound"] is False
    assert s["cycles_per_step"] == summary("mnist", *FAST_HOST)["cycles_per_step"]


def test_host_processes_each_feed_their_replicas(tmp_path):
    # GIVEN mnist over 4 replicas: 16,000 images per call
    one = summary("mnist", "--replicas", "4", "--loader-workers", "1", "--persistent-workers")
    four = summary("mnist", "--replicas", "4", "--host-processes", "4", "--loader-workers", "1", "--persistent-workers")
    # THEN one process takes 16,000 / rate per call; four take a quarter of that
    assert one["samples_per_second"] == pytest.approx(HOST_RATE, rel=1e-6)
    assert four["samples_per_second"] == pytest.approx(4 * HOST_RATE, rel=1e-6)
    assert one["host_bound"] and four["host_bound"]
    # AND the manifest's run settings record the processes
    tables = run_profile(tmp_path, "mnist", "--replicas", "4", "--host-processes", "4")
    assert tables["manifest"]["run"]["host_processes"] == 4
    assert tables["manifest"]["run"]["request"]["options"]["host_processes"] == 4


def test_popTorchs_spelling_sets_the_processes():
    assert RunOptions().Distributed.configureProcessId(0, 4).host_processes == 4
    assert RunOptions().Distributed.numProcesses == 1


@pytest.mark.parametrize("args, words", [
    (("--host-processes", "0"), ["Host processes must be a positive integer, not 0"]),
    (("--host-processes", "-3"), ["Host processes must be a positive integer, not -3"]),
    (("--host-processes", "2"), ["Host processes 2 exceed the 1 replica(s)", "--host-processes 1"]),
    (("--host-processes", "5", "--replicas", "4"), ["Host processes 5 exceed the 4 replica(s)"]),
    (("--assume", "host_tensor_samples_per_s_per_core=0"), ["host_tensor_samples_per_s_per_core=0 is out of range",
                                                            ">= 1", "samples per second per host core"]),
    (("--loader-workers", "0"), ["Loader workers must be a positive integer, not 0"]),
])
def test_bad_host_settings_are_one_sentence(tmp_path, args, words):
    line = error("mnist", *args)
    for w in words:
        assert w in line, line


def test_each_epoch_starts_the_loaders_workers_again():
    # GIVEN the tutorial's run with its 16 workers, once persistent and once started at every epoch
    a = Assumptions()
    steady = summary(*TUTORIAL_RUN, "--loader-workers", "16", "--persistent-workers")
    fresh = summary(*TUTORIAL_RUN, "--loader-workers", "16")
    call_s = steady["seconds_per_step"] * 10  # 10 device iterations per call
    assert steady["input_wait_seconds_per_call"] == 0  # 16 workers keep up with the calls
    # WHEN an epoch starts: 16 workers start one after the other, one of them builds the first call's
    # 4,000 samples, and the 3 calls the accessor loaded ahead hide part of it
    exposed = 16 * a.loader_worker_start_s + TUTORIAL_SAMPLES_PER_CALL / a.host_tensor_samples_per_s_per_core \
        - ASYNC_BUFFER_CALLS * call_s
    calls = MNIST_TRAINING_SAMPLES // TUTORIAL_SAMPLES_PER_CALL  # 15 calls per epoch
    # THEN each call waits the exposed start spread over the epoch's calls
    assert exposed > 0
    assert fresh["input_wait_seconds_per_call"] == pytest.approx(exposed / calls, abs=2 / CLOCK)
    assert fresh["seconds_per_step"] * 10 == pytest.approx(call_s + exposed / calls, abs=3 / CLOCK)
    # AND a faster start (pinned with --assume) shortens the wait by the workers' saving over the epoch
    quick = summary(*TUTORIAL_RUN, "--loader-workers", "16", "--assume", "loader_worker_start_s=0.01")
    saved = 16 * (a.loader_worker_start_s - 0.01) / calls
    assert quick["input_wait_seconds_per_call"] == pytest.approx(exposed / calls - saved, abs=2 / CLOCK)


def test_a_model_without_a_dataset_has_no_epochs_to_start():
    # GIVEN BERT, whose tokenised corpus is too long for epochs to matter, with and without persistent workers
    fresh, steady = summary("bert-base", "--layers", "2"), summary("bert-base", "--layers", "2", "--persistent-workers")
    # THEN the two runs take the same time
    assert fresh["cycles_per_step"] == steady["cycles_per_step"]
