"""popdist's API in one process: the getters under an environment set by hand (as poprun sets it),
popdist.poptorch.Options, PopTorch's partition of a dataset among processes, and what a model of an
instance compiles to. The launches themselves are in test_poprun.py and test_training.py."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import popdist  # noqa: E402
import popdist.poptorch  # noqa: E402
import poptorch  # noqa: E402

POPRUN_VARIABLES = ("POPDIST_NUM_TOTAL_REPLICAS", "POPDIST_NUM_LOCAL_REPLICAS", "POPDIST_REPLICA_INDEX_OFFSET",
                    "POPDIST_NUM_IPUS_PER_REPLICA", "POPDIST_UNIFORM_REPLICAS_PER_INSTANCE",
                    "POPDIST_LOCAL_INSTANCE_INDEX", "POPVISION_SYSTEM", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                    "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "POPLAR_ENGINE_OPTIONS")


@pytest.fixture(autouse=True)
def outside_poprun(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in POPRUN_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def as_instance(monkeypatch: pytest.MonkeyPatch, total: int, local: int, offset: int, ipus: int = 1) -> None:
    """The variables poprun gives the instance whose first replica is ``offset``."""
    for name, value in (("POPDIST_NUM_TOTAL_REPLICAS", total), ("POPDIST_NUM_LOCAL_REPLICAS", local),
                        ("POPDIST_REPLICA_INDEX_OFFSET", offset), ("POPDIST_NUM_IPUS_PER_REPLICA", ipus),
                        ("POPDIST_UNIFORM_REPLICAS_PER_INSTANCE", 1),
                        ("POPDIST_LOCAL_INSTANCE_INDEX", offset // local)):
        monkeypatch.setenv(name, str(value))


def test_outside_poprun_the_getters_give_one_instance_of_one_replica() -> None:
    assert not popdist.isPopdistEnvSet()
    assert (popdist.getNumTotalReplicas(), popdist.getNumLocalReplicas(), popdist.getReplicaIndexOffset(),
            popdist.getNumIpusPerReplica(), popdist.getInstanceIndex(), popdist.getNumInstances(),
            popdist.getLocalInstanceIndex()) == (1, 1, 0, 1, 0, 1, 0)
    # popdist.init() has nothing to join and execute_on_instances runs the function here
    popdist.init()
    assert not popdist.isBackendInitialized()
    assert popdist.execute_on_instances({0}, lambda a, b: a + b, 2, b=3) == 5


def test_under_poprun_the_getters_read_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the third of four instances of 8 replicas of 2 IPUs (poprun --num-instances 4 --num-replicas 8
    # --ipus-per-replica 2): its replicas are 4 and 5
    as_instance(monkeypatch, total=8, local=2, offset=4, ipus=2)
    assert popdist.isPopdistEnvSet()
    assert (popdist.getNumTotalReplicas(), popdist.getNumLocalReplicas(), popdist.getReplicaIndexOffset(),
            popdist.getNumIpusPerReplica(), popdist.getInstanceIndex(), popdist.getNumInstances(),
            popdist.getLocalInstanceIndex()) == (8, 2, 4, 2, 2, 4, 2)
    assert popdist.checkNumIpusPerReplica(2) and not popdist.checkNumIpusPerReplica(1)
    info = popdist.instance_info()
    assert (info.index, info.instances, list(info.replicas), info.under_poprun) == (2, 4, [4, 5], True)
    # and instance 7 is no instance of 4
    with pytest.raises(popdist.PopDistError, match=r"^popdist.execute_on_instances: instance 7 does not exist; "
                                                   r"poprun started 4 \(0 to 3\)\.$"):
        popdist.execute_on_instances({0, 7}, print)


@pytest.mark.parametrize(("env", "sentence"), [
    ({"POPDIST_NUM_TOTAL_REPLICAS": "4", "POPDIST_NUM_LOCAL_REPLICAS": "3"},
     "POPDIST_NUM_TOTAL_REPLICAS=4 is not a multiple of POPDIST_NUM_LOCAL_REPLICAS=3: PopDist needs the same number "
     "of replicas on every instance."),
    ({"POPDIST_NUM_TOTAL_REPLICAS": "four"},
     "POPDIST_NUM_TOTAL_REPLICAS is 'four', not a whole number; PopRun sets it, so start the program with poprun."),
    ({"POPDIST_NUM_TOTAL_REPLICAS": "4", "POPDIST_NUM_LOCAL_REPLICAS": "2", "POPDIST_REPLICA_INDEX_OFFSET": "3"},
     "POPDIST_REPLICA_INDEX_OFFSET=3 is not the first replica of an instance of 2 replica(s) among 4."),
])
def test_an_environment_poprun_would_not_set_is_one_sentence(env: dict, sentence: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(popdist.PopDistError) as caught:
        popdist.getInstanceIndex()
    assert str(caught.value) == sentence


def test_any_other_popdist_name_is_one_sentence_naming_it() -> None:
    with pytest.raises(popdist.PopDistUnsupportedError, match=r"^popdist.getDeviceId is not supported by "
                                                              r"popvision's PopDist emulation; docs/poptorch.md "
                                                              r"lists what is covered\.$"):
        popdist.getDeviceId()
    with pytest.raises(popdist.PopDistUnsupportedError, match=r"^popdist.poptorch.broadcastWeights is not supported"):
        from popdist.poptorch import broadcastWeights  # noqa: F401


def test_popdist_poptorch_options_take_poprun_replicas_and_instance(monkeypatch: pytest.MonkeyPatch) -> None:
    # outside poprun: one process, one replica (Graphcore's test_getters)
    opts = popdist.poptorch.Options(ipus_per_replica=2)
    assert (opts.replication_factor, opts.Distributed.processId, opts.Distributed.numProcesses) == (1, 0, 1)
    # GIVEN instance 1 of 2 sharing 4 replicas
    as_instance(monkeypatch, total=4, local=2, offset=2)
    opts = popdist.poptorch.Options().deviceIterations(3)
    # THEN the options hold the instance's 2 replicas and its place; a copy keeps them
    assert (opts.replication_factor, opts.Distributed.processId, opts.Distributed.numProcesses) == (2, 1, 2)
    assert opts.clone().Distributed.processId == 1 and opts.device_iterations == 3
    # and the calls that would contradict poprun are refused by name (Graphcore's test_blocked_options)
    for call, refuse in (("replicationFactor", lambda: opts.replicationFactor(1)),
                         ("useIpuId", lambda: opts.useIpuId(1)),
                         ("Distributed.disable", lambda: opts.Distributed.disable()),
                         ("Distributed.setEnvVarNames", lambda: opts.Distributed.setEnvVarNames("A", "B")),
                         ("Distributed.configureProcessId", lambda: opts.Distributed.configureProcessId(1, 2))):
        with pytest.raises(poptorch.Error, match=rf"^Cannot call `{call}` with popdist\.poptorch\.Options: poprun's "):
            refuse()
    with pytest.raises(poptorch.Error, match=r"^popdist.poptorch.Options\(ipus_per_replica=2\) differs from poprun's "
                                             r"--ipus-per-replica 1\.$"):
        popdist.poptorch.Options(ipus_per_replica=2)


def test_poptorch_options_read_mpiruns_process_id_as_poptorchs_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "2")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    opts = poptorch.Options()
    assert (opts.Distributed.processId, opts.Distributed.numProcesses) == (2, 4)
    assert opts.Distributed.disable().numProcesses == 1


def shares(dataset: torch.utils.data.Dataset, processes: int, epochs: int = 1, **loader: object) -> list[list[int]]:
    """Each process's samples (the dataset's values are their indices), epoch after epoch."""
    seen = []
    for process in range(processes):
        opts = poptorch.Options().replicationFactor(2).randomSeed(5)
        opts.Distributed.configureProcessId(process, processes)
        data = poptorch.DataLoader(opts, dataset, batch_size=2, **loader)
        seen.append([int(v) for _ in range(epochs) for (x,) in data for v in x])
    return seen


def test_the_data_loader_gives_each_process_its_block_by_poptorchs_rule() -> None:
    # GIVEN 70 samples, 3 processes, 2 replicas of micro-batch 2: a combined batch of 4 per call
    dataset = torch.utils.data.TensorDataset(torch.arange(70))
    # THEN each process reads 20 samples, 4 x (70 // 12) = 5 calls: [0, 20), [20, 40), [40, 60)
    assert shares(dataset, 3) == [list(range(0, 20)), list(range(20, 40)), list(range(40, 60))]
    # and without drop_last the 70 are spread 24, 23, 23
    assert [len(s) for s in shares(dataset, 3, drop_last=False)] == [24, 23, 23]


def test_shuffled_every_process_cuts_its_block_from_the_same_permutation() -> None:
    # GIVEN the same 70 samples shuffled, over two epochs, randomSeed(5)
    dataset = torch.utils.data.TensorDataset(torch.arange(70))
    seen = shares(dataset, 3, epochs=2, shuffle=True)
    # THEN epoch by epoch a permutation of all 70 drawn from the seed; process p reads 20 of it from 20 p, the
    # first epoch 70 % 20 = 10 later (PopTorch starts every other pass after the leftover, so that it is read too)
    generator = torch.Generator().manual_seed(5)
    first, second = torch.randperm(70, generator=generator).tolist(), torch.randperm(70, generator=generator).tolist()
    assert seen == [first[20 * p + 10:20 * p + 30] + second[20 * p:20 * p + 20] for p in range(3)]
    assert not set(seen[0][:20]) & set(seen[1][:20]) and not set(seen[1][:20]) & set(seen[2][:20])
    # and shuffling without randomSeed is PopTorch's sentence
    opts = poptorch.Options()
    opts.Distributed.configureProcessId(0, 2)
    with pytest.raises(poptorch.Error, match=r"^When using auto_distributed_partitioning you must set "
                                             r"poptorch.Options.randomSeed\(\)"):
        poptorch.DataLoader(opts, dataset, shuffle=True)


class Regression(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(2, 1, bias=False)

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None):
        out = self.fc(x)
        return out if y is None else (out, ((out - y) ** 2).mean())


def test_training_returns_each_replicas_last_outputs() -> None:
    # GIVEN 2 replicas x gradient accumulation 2 of micro-batch 1, OutputMode.Final (training's default)
    opts = poptorch.Options().replicationFactor(2)
    opts.Training.gradientAccumulation(2)
    model = Regression()
    training = poptorch.trainingModel(model, opts, optimizer=poptorch.optim.SGD(model.parameters(), lr=0.0))
    x = torch.tensor([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0], [4.0, 0.0]])
    with torch.no_grad():
        model.fc.weight.copy_(torch.tensor([[1.0, 0.0]]))
    out, loss = training(x, torch.zeros(4, 1))
    # THEN as PopTorch: one loss per replica, the replicas' last micro-batches (3 and 4: [accumulation, replica] order)
    assert loss.tolist() == [9.0, 16.0] and out.shape == (2, 1)


def test_a_distributed_training_model_outside_poprun_is_one_sentence() -> None:
    opts = poptorch.Options()
    opts.Distributed.configureProcessId(0, 2)
    model = Regression()
    with pytest.raises(popdist.PopDistError, match=r"^Distributing over 2 processes needs poprun's MASTER_ADDR, "
                                                   r"MASTER_PORT, RANK, WORLD_SIZE to join them; start the program "
                                                   r"with `poprun "):
        poptorch.trainingModel(model, opts)(torch.ones(1, 2), torch.ones(1, 1))


def test_an_instance_emulates_the_whole_launch_and_writes_its_own_profile(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN instance 1 of 2 sharing 4 replicas on an IPU-POD16, profiles asked for under tmp_path
    as_instance(monkeypatch, total=4, local=2, offset=2)
    monkeypatch.setenv("POPVISION_SYSTEM", "IPU-POD16")
    monkeypatch.setenv("POPLAR_ENGINE_OPTIONS", f'{{"autoReport.all":"true","autoReport.directory":"{tmp_path}"}}')
    inference = poptorch.inferenceModel(Regression().eval(), popdist.poptorch.Options())
    inference(torch.ones(2, 2))
    # THEN the emulation is of all 4 replicas on the POD16, its profile in the instance's own folder
    summary = inference.compiled.summary
    assert (summary.replicas, summary.system) == (4, "IPU-POD16")
    assert inference.compiled.profile == tmp_path / "instance-1" / "inference" / "profile.pop"
    assert inference.compiled.profile.is_file() and not (tmp_path / "inference").exists()


def test_a_model_on_other_ipus_than_poprun_gave_is_one_sentence(monkeypatch: pytest.MonkeyPatch) -> None:
    as_instance(monkeypatch, total=2, local=1, offset=0, ipus=2)
    inference = poptorch.inferenceModel(Regression().eval(), popdist.poptorch.Options())
    with pytest.raises(poptorch.Error, match=r"^Compiling Regression: its replica takes 1 IPU\(s\) but poprun was "
                                             r"given --ipus-per-replica 2; launch it with --ipus-per-replica 1\.$"):
        inference(torch.ones(1, 2))
