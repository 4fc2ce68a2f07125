"""A host-bound run, read from its profile alone: the wait for input in the trace, the reports that say
so, and the insight whose command feeds the IPUs faster."""

from __future__ import annotations

import json
import shlex

import pytest

import popvision_py as pv
from engine import rules
from engine.assumptions import Assumptions
from tests.engine.helpers import profile_path, run_cli

HOST_RATE = Assumptions().host_tensor_samples_per_s_per_core  # one loader worker's MNIST-like samples per second
FAST_HOST = ("--input", "synthetic")
ONE_WORKER = ("--loader-workers", "1", "--persistent-workers")  # one core per process, kept: host-bound


def _profile(folder, name, *args):
    return profile_path(folder, "mnist", *args, name=name)


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    folder = tmp_path_factory.mktemp("host")
    return {
        # 4 replicas x 4,000 images per call, all loaded by one host process
        "four_replicas": _profile(folder, "four", "--replicas", "4", *ONE_WORKER),
        # the tutorial's single replica
        "one_replica": _profile(folder, "one", "--offload-optimiser", *ONE_WORKER),
        "keeps_up": _profile(folder, "free", *FAST_HOST),
    }


def _report(path, section, fmt):
    result = run_cli("report", str(path), "--section", section, "--format", fmt)
    assert result.exit_code == 0, result.output
    return result.stdout


def _run_fix(command: str, tmp_path, monkeypatch) -> dict:
    words = shlex.split(command)
    assert words[:2] == ["popvision", "run"]
    monkeypatch.chdir(tmp_path)  # the command writes profile-<fix>/ where it runs
    result = run_cli(*words[1:], "--json", "-q")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_wait_is_read_from_the_trace(profiles):
    with pv.open(profiles["four_replicas"]) as r:
        host = r.exchange.host_input()
        programs, trace = r.table("programs"), r.profile.read_pandas("trace")
        total = trace["end_cycle"].max() - trace["start_cycle"].min()
    # GIVEN the wait steps' rows in the trace
    waits = programs[programs["name"].astype(str) == "host/input_wait"]
    rows = trace.merge(waits[["ipu", "step"]], on=["ipu", "step"])
    per_ipu = (rows["end_cycle"] - rows["start_cycle"]).groupby(rows["ipu"]).sum()
    # THEN the report's wait is what each IPU waited, as a share of the run
    assert host.host_bound
    assert host.input_wait_cycles == per_ipu.max() == per_ipu.min()
    assert host.wait_ipu_cycles == per_ipu.sum()
    assert host.input_wait_pct == pytest.approx(100 * per_ipu.max() / total)
    # and the call lasts the host's time for its 4 x 4,000 images (one call traced)
    assert host.samples_per_call == 16_000
    assert host.call_cycles == pytest.approx(16_000 / HOST_RATE * 1.33e9, abs=1)


def test_the_run_and_the_report_give_one_wait(profiles):
    result = run_cli("run", "mnist", "--replicas", "4", *ONE_WORKER, "--json", "-q")
    assert result.exit_code == 0, result.output
    run = json.loads(result.stdout)
    with pv.open(profiles["four_replicas"]) as r:
        host = r.exchange.host_input()
    assert run["host_bound"] is host.host_bound is True
    assert run["input_wait_pct"] == pytest.approx(host.input_wait_pct, rel=1e-9)
    assert run["input_wait_seconds_per_call"] == pytest.approx(host.wait_per_call_cycles / 1.33e9, rel=1e-9)


def test_the_stages_and_exchange_reports_say_host_bound_in_every_format(profiles):
    for section in ("stages", "exchange"):
        for fmt in ("text", "md"):
            assert "host-bound: the IPUs wait" in _report(profiles["four_replicas"], section, fmt), (section, fmt)
            assert "not host-bound" in _report(profiles["keeps_up"], section, fmt), (section, fmt)
        doc = json.loads(_report(profiles["four_replicas"], section, "json"))["sections"][section]["host_input"]
        assert doc["host_bound"] is True and doc["verdict"].startswith("host-bound")
        assert doc["input_wait_pct"] > 90


def test_the_insight_feeds_every_replica_from_its_own_process(profiles, tmp_path, monkeypatch):
    with pv.open(profiles["four_replicas"]) as r:
        insights = r.summary.insights()
        before = r.summary.figures().throughput_samples_per_s
    host = insights[insights["topic"] == "host"]
    # THEN one host finding, and no other about time: the IPUs' own time does not set the pace (the
    # FP32 optimiser state's precision finding is about memory)
    assert len(host) == 1 and set(insights["topic"]) - {"precision"} == {"host"}
    assert "host-bound" in host["finding"].iloc[0]
    command = host["command"].iloc[0]
    assert "--host-processes 4" in command and "--replicas 4" in command
    # AND running it gives four times the samples per second: four loaders, the same IPUs
    after = _run_fix(command, tmp_path, monkeypatch)
    assert before == pytest.approx(HOST_RATE, rel=1e-6)
    assert after["samples_per_second"] == pytest.approx(4 * before, rel=1e-6)
    assert f"{after['samples_per_second']:,.0f}" in host["effect"].iloc[0]


def test_a_single_replica_needs_more_replicas_for_more_processes(profiles, tmp_path, monkeypatch):
    with pv.open(profiles["one_replica"]) as r:
        insights, run = r.summary.insights(), r.run
    host = insights[insights["topic"] == "host"]
    command = host["command"].iloc[0]
    # a process per replica at most: more processes alone would be refused by the planner's rule
    assert rules.check_run({**run, "host_processes": 2}) is not None
    assert "--replicas 2" in command and "--host-processes 2" in command
    after = _run_fix(command, tmp_path, monkeypatch)
    assert after["samples_per_second"] == pytest.approx(2 * HOST_RATE, rel=1e-6)


def test_a_run_whose_host_keeps_up_has_no_host_finding(profiles):
    with pv.open(profiles["keeps_up"]) as r:
        host = r.exchange.host_input()
        topics = set(r.summary.insights()["topic"])
    assert not host.host_bound and host.input_wait_cycles == 0 and host.input_wait_pct == 0
    assert "host" not in topics
