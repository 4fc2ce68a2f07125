"""Training under poprun, as the seed talk's scale-out walkthrough does: real instances, real gradients.

Launches (each once, shared by the tests): the PopDist example (examples/tutorial_mnist.py) under
``poprun --num-instances 2 --num-replicas 4`` in ``popvision run --profile``; the same script reading each
global batch by replica under plain ``python`` (1 instance of 4 replicas) and under poprun with 2
and 4 instances; a script whose instance 1 fails mid-training.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from popvision_py.format import open_profile  # noqa: E402
from tests.popdist.conftest import EXAMPLE, HERE, Launched, poprun, python  # noqa: E402

pytestmark = pytest.mark.slow

@pytest.fixture(scope="module")
def launched(launches: Path) -> Launched:
    """The README's launch, with profiles: ``poprun --num-instances 2 --num-replicas 4 popvision run
    tutorial_mnist.py --profile --profile-dir profiles`` (each instance runs the script in ``popvision run``)."""
    done = poprun(launches / "profiled", "--num-instances", "2", "--num-replicas", "4", sys.executable, "-m",
                  "popvision_py.cli", "run", str(EXAMPLE), "--profile", "--profile-dir", "profiles")
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def curves(launches: Path) -> dict[int, Launched]:
    """The same global batches at 1 instance (plain python), 2 and 4 instances, 4 replicas in all."""
    runs = {1: python(launches / "by-replica-1", str(EXAMPLE), "--by-replica", "--num-replicas", "4")}
    for n in (2, 4):
        runs[n] = poprun(launches / f"by-replica-{n}", "--num-instances", str(n), "--num-replicas", "4",
                         sys.executable, str(EXAMPLE), "--by-replica")
    for n, done in runs.items():
        assert done.returncode == 0, (n, done.stderr[-3000:])
    return runs


def seen(folder: Path, instances: int) -> list[dict]:
    return [json.loads((folder / f"seen-instance-{i}.json").read_text()) for i in range(instances)]


def test_the_example_runs_under_poprun_each_instance_with_its_replicas(launched: Launched) -> None:
    # THEN both instances ran with their 2 replicas, logged through poprun with their tags, instance 0 alone
    # logging the losses, and both validated their share
    for index in (0, 1):
        assert f"[instance {index}] this process runs 2 of the 4 replicas" in launched.stderr
        assert f"[instance {index}] validation accuracy on this instance's share: " in launched.stderr
    assert launched.stderr.count(": loss ") == 8
    assert "[instance 1] epoch" not in launched.stderr
    # and each compiled the model as one of 4 replicas over the launch (the emulation is the whole launch's)
    assert launched.stdout.count("StripeClassifier: training, pipelined over 1 IPU(s) x 4 replica(s)") == 2


def test_each_instance_trains_on_its_own_block_of_one_shuffled_order(launched: Launched) -> None:
    # GIVEN 64 samples shuffled with randomSeed(0); per call 2 local replicas x micro-batch 2 = 4 samples
    permutation = torch.randperm(64, generator=torch.Generator().manual_seed(0)).tolist()
    for record in seen(launched.folder, 2):
        steps = [step["indices"] for step in record["steps"]]
        # THEN instance I read 8 calls of 4: the samples 32 I to 32 I + 31 of that order, in order (PopTorch's rule)
        block = permutation[32 * record["instance"]:32 * record["instance"] + 32]
        assert steps == [block[4 * k:4 * k + 4] for k in range(8)]
        assert all(len(step["losses"]) == 2 for step in record["steps"])  # one loss per local replica


def test_every_instance_ends_with_the_same_weights(launched: Launched) -> None:
    first, second = (torch.load(launched.folder / f"checkpoint-instance-{i}.pt") for i in (0, 1))
    assert first.keys() == second.keys()
    for name in first:
        assert torch.equal(first[name], second[name]), name
    # and execute_on_instances({0}, ...) wrote the run's summary once, from instance 0
    lines = (launched.folder / "summary.jsonl").read_text().splitlines()
    assert [json.loads(line)["instance"] for line in lines] == [0]


def test_each_instance_writes_its_profiles_into_its_own_folder(launched: Launched) -> None:
    # THEN profiles/instance-I/{training,inference}/profile.pop, each of the whole launch: 4 replicas, 2 host
    # processes (and neither instance waited for the other's lock on the folder)
    folder = launched.folder / "profiles"
    assert sorted(p.name for p in folder.iterdir()) == ["instance-0", "instance-1"]
    for index in (0, 1):
        for model in ("training", "inference"):
            run = open_profile(folder / f"instance-{index}" / model / "profile.pop").run
            assert (run["replication_factor"], run["host_processes"]) == (4, 2)


def test_the_loss_curve_is_the_same_at_one_two_and_four_instances(curves: dict[int, Launched]) -> None:
    # GIVEN 8 global batches of 4 replicas x 2 samples, each replica's samples the same at any instance count
    losses = {}
    for n, done in curves.items():
        records = seen(done.folder, n)
        # THEN every instance read its replicas' samples: instance I of n, replicas 4 I / n on
        for record in records:
            first = record["instance"] * 4 // n
            assert record["steps"][3]["indices"] == [3 * 8 + 2 * r + k for r in range(first, first + 4 // n)
                                                     for k in range(2)]
        losses[n] = torch.tensor([sum((r["steps"][s]["losses"] for r in records), []) for s in range(8)])
    assert losses[1].shape == (8, 4) and losses[1][-1].mean() < losses[1][0].mean()  # it learnt
    # and each replica's loss, step by step, agrees to float rounding
    torch.testing.assert_close(losses[2], losses[1], rtol=1e-5, atol=0)
    torch.testing.assert_close(losses[4], losses[1], rtol=1e-5, atol=0)
    assert "[instance" not in curves[1].stderr  # plain python: no poprun


def test_a_failing_instance_stops_the_others_waiting_for_its_gradients(launches: Path) -> None:
    # GIVEN instance 1 fails at its second step, where instance 0 waits for its gradients
    done = poprun(launches / "fails", "--num-instances", "2", "--num-replicas", "2", sys.executable,
                  str(HERE / "fails_at_step.py"), timeout=120)
    # THEN poprun stopped instance 0 there, said so in one sentence and exits with instance 1's code
    assert done.returncode == 3
    assert done.stderr.splitlines()[-1] == "poprun: instance 1 failed with exit code 3; stopped the others."
    assert "[instance 0] step 0 done" in done.stdout and "[instance 0] step 1 done" not in done.stdout
    assert "[instance 0] popdist: instance 0 lost the other instances during the gradient reduction (" in done.stderr
    assert "finished" not in done.stdout


def test_the_runs_folder_reports_its_instances_side_by_side(launched: Launched) -> None:
    # GIVEN poprun's profiles/instance-I/training/profile.pop WHEN the run's folder is reported
    from click.testing import CliRunner

    from popvision_py.cli import main

    result = CliRunner().invoke(main, ["report", str(launched.folder / "profiles"), "--section", "summary"])
    # THEN each instance emulated the whole launch: their figures agree, and instance 0's report follows
    assert result.exit_code == 0, result.output
    assert "Instances of the run (instance-0, instance-1)" in result.output
    assert "The 2 instances' profiles give the same figures" in result.output
    assert str(launched.folder / "profiles" / "instance-0" / "training" / "profile.pop") in result.output
