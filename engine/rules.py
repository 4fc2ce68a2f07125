"""The planner's rules: which run configurations the emulator's planner accepts, in the manifest's terms.

``engine.plan`` refuses a configuration that breaks one, ``engine.targets`` picks the system that
holds a run, and ``popvision tune`` prunes its candidates by them. The analysis asks the same rules
whether a fix it suggests is a configuration the planner would accept, but never imports them: it
declares what it needs of a planner (``popvision_py.analysis.findings.fixes.Planner``: ``check_run``,
``ipus_used``, ``system_holding``, ``SYSTEMS``, ``LARGEST_SYSTEM``, ``runs_as_pipeline``,
``pipeline_stages``), and whoever opens a profile hands this module in (``popvision_py.open``, the
CLI; docs/architecture.md). A fix is a command the user runs with today's emulator, so it is checked
against today's rules. The analysis never *reads a profile* by these rules: what it needs of the
run's schedule (pipelined or not, each stage's pipeline position, samples per step) the profile
records (``popvision_py.format.schedule``). Each rule returns ``None`` or the sentence the planner raises.

It imports nothing of the project, and nothing heavy: ``engine/__init__`` loads the rest of the
emulator lazily, so ``import engine.rules`` (what ``popvision report`` loads of the engine) stays light.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# IPU systems by size. One IPU is a single card; an IPU-M2000 (or Bow-2000) is an IPU-POD4.
SYSTEMS: dict[str, int] = {
    "IPU": 1,
    "IPU-POD4": 4,
    "IPU-POD16": 16,
    "IPU-POD64": 64,
    "IPU-POD128": 128,
    "IPU-POD256": 256,
}
LARGEST_SYSTEM = max(SYSTEMS, key=SYSTEMS.__getitem__)


def runs_as_pipeline(strategy: str, stage_ipus: Sequence[int]) -> bool:
    """Stages run as a pipeline: pipelined execution, or phased execution whose stages are on
    distinct IPUs (each stage's phases stream their weights while micro-batches flow through).
    Otherwise (sharded, or phased stages sharing IPUs) the stages run one after another."""
    if strategy == "pipelined":
        return True
    return strategy == "phased" and len(stage_ipus) > 1 and len(set(stage_ipus)) == len(stage_ipus)


def pipeline_ranks(stage_ipus: Sequence[int]) -> list[int]:
    """Each stage's position in the pipeline (PopART's forward pipeline stage).

    Consecutive stages on one IPU share a position: they run one after another on that IPU in each
    superstep (their boundary is a stash and recomputation checkpoint, as in Graphcore's one-IPU
    MLPerf ResNet-50 with a Sequential pipeline schedule). A stage on another IPU than the one
    before is the next position, including a last stage that returns to the first IPU (Graphcore's
    BERT and GPT-2 heads, tied to the embedding on IPU 0): that IPU then runs two positions."""
    ranks: list[int] = []
    for k, ipu in enumerate(stage_ipus):
        ranks.append(0 if k == 0 else ranks[-1] + (int(ipu) != int(stage_ipus[k - 1])))
    return ranks


def pipeline_depth(stage_ipus: Sequence[int]) -> int:
    """Positions of a pipeline (``pipeline_ranks``): the N of the pipeline rules."""
    return (pipeline_ranks(stage_ipus)[-1] + 1) if len(stage_ipus) else 0


def pipeline_stages(stages: int, training: bool) -> int:
    """PopART's count of pipeline stages: 2N-1 when training over N stages (the last stage's forward
    and backward are one pipeline stage), N for inference."""
    return 2 * stages - 1 if training else stages


def pipeline_rule(strategy: str, stage_ipus: Sequence[int], training: bool, gradient_accumulation: int,
                  device_iterations: int) -> str | None:
    """A pipeline needs enough micro-batches in flight: GA >= 2N-1 (training), device iterations >= N
    (inference), N the IPUs the stages run on (``pipeline_depth``)."""
    n = pipeline_depth(stage_ipus)
    if n < 2 or not runs_as_pipeline(strategy, stage_ipus):
        return None
    if training and gradient_accumulation < pipeline_stages(n, True):
        least = pipeline_stages(n, True)
        return (f"Gradient accumulation {gradient_accumulation} is below the {least} pipeline stages of a {n}-stage "
                f"training pipeline (2N-1 for N={n}); use --gradient-accumulation {least} or more.")
    if not training and device_iterations < n:
        return (f"Device iterations {device_iterations} is below the {n} stages of the inference pipeline; "
                f"use --device-iterations {n} or more.")
    return None


def ascending_rule(strategy: str, stage_ipus: Sequence[int]) -> str | None:
    """Pipelined stages sit on ascending IPUs; consecutive stages may share one (``pipeline_ranks``),
    and the last of three or more may return to the first stage's IPU (PopTorch allows it:
    Graphcore's BERT and GPT-2 put their heads, tied to the word embedding, back on IPU 0)."""
    if strategy != "pipelined":
        return None
    n = len(stage_ipus)
    for i in range(1, n):
        if i == n - 1 and n > 2 and stage_ipus[i] == stage_ipus[0] != stage_ipus[i - 1]:
            continue
        if stage_ipus[i] < stage_ipus[i - 1]:
            return (f"Pipelined stages must be on ascending IPUs, but stage {i} is on IPU {stage_ipus[i]} after "
                    f"stage {i - 1} on IPU {stage_ipus[i - 1]}.")
    return None


def host_processes_rule(host_processes: int, replicas: int) -> str | None:
    """Each host process (a poprun instance) feeds at least one replica: at most one process per replica."""
    if host_processes > replicas:
        return (f"Host processes {host_processes} exceed the {replicas} replica(s): each host process feeds at least "
                f"one replica; use --host-processes {replicas} or fewer, or more --replicas.")
    return None


def samples_per_step(run: Mapping[str, Any]) -> int:
    """Samples one weight update (training) or one micro-batch per replica (inference: GA 1) takes:
    micro-batch x gradient accumulation x replicas, each input holding ``packing_factor`` samples on
    average (Graphcore's packed BERT packs several sequences per input and counts sequences)."""
    inputs = (int(run.get("micro_batch_size", 1)) * int(run.get("gradient_accumulation", 1) or 1)
              * int(run.get("replication_factor", 1) or 1))
    return int(round(inputs * float(run.get("packing_factor", 1.0) or 1.0)))


def system_rule(ipus: int) -> str | None:
    """Every IPU the run uses (IPUs per replica x tensor shards x replicas) is in one system."""
    if ipus > SYSTEMS[LARGEST_SYSTEM]:
        return f"The run needs {ipus} IPUs but the largest system, an {LARGEST_SYSTEM}, has {SYSTEMS[LARGEST_SYSTEM]}."
    return None


def ipus_used(run: Mapping[str, Any]) -> int:
    """IPUs a run configuration takes: IPUs per replica (the highest stage IPU + 1) x tensor shards x replicas."""
    ipus = [int(s.get("ipu", k)) for k, s in enumerate(run.get("stages") or [])]
    sharding = int(run.get("tensor_sharding", 1) or 1)
    return (1 + max(ipus, default=0)) * sharding * int(run.get("replication_factor", 1) or 1)


def system_holding(ipus: int, wanted: str | None = None) -> str:
    """``wanted`` (a system name as a user writes it: "POD16", "ipu-pod16") if it holds ``ipus`` IPUs,
    else the smallest system that does (the largest if none does)."""
    names = {name.lower(): name for name in SYSTEMS}
    if wanted:
        key = wanted.lower() if wanted.lower() in names else "ipu-" + wanted.lower()
        if key in names and SYSTEMS[names[key]] >= ipus:
            return names[key]
    return next((name for name, size in SYSTEMS.items() if size >= ipus), LARGEST_SYSTEM)


def check_run(run: Mapping[str, Any]) -> str | None:
    """The first rule a manifest-style run configuration breaks, as the planner's sentence; ``None`` if it runs.

    ``run`` has the manifest's ``run`` keys (strategy, mode, stages, gradient_accumulation,
    device_iterations, replication_factor, tensor_sharding, micro_batch_size, host_processes).
    """
    stages = list(run.get("stages") or [])
    ipus = [int(s.get("ipu", k)) for k, s in enumerate(stages)]
    strategy = str(run.get("strategy", "pipelined"))
    training = str(run.get("mode", "training")) != "inference"
    for name in ("micro_batch_size", "gradient_accumulation", "device_iterations", "replication_factor",
                 "tensor_sharding", "host_processes"):
        value = run.get(name, 1)
        if not isinstance(value, int) or value < 1:
            return f"{name.replace('_', ' ').capitalize()} must be a positive integer, not {value}."
    if not stages:
        return "The execution strategy has no stages."
    seen: set[str] = set()
    for k, stage in enumerate(stages):
        blocks = list(stage.get("blocks") or [])
        if not blocks:
            return f"Stage {k} names no block."
        for block in blocks:
            if block in seen:
                return f"Block {block} is in two stages."
            seen.add(block)
    return (ascending_rule(strategy, ipus)
            or pipeline_rule(strategy, ipus, training, int(run.get("gradient_accumulation", 1)),
                             int(run.get("device_iterations", 1)))
            or host_processes_rule(int(run.get("host_processes", 1)), int(run.get("replication_factor", 1)))
            or system_rule(ipus_used(run)))
