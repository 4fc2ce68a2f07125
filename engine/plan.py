"""From a built model and its options to a checked plan: stages, their ops and IPUs, the system size.

Every rule a run must satisfy is checked here, before anything is compiled or written, and each
failure is one ``ConfigError`` sentence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from popvision_py.errors import ConfigError

from engine import rules
from engine.model import Model, Op, shard_ops
from engine.options import RunOptions
from engine.layout import Layout, StageSpec
from engine.targets import Target, make_target


@dataclass(frozen=True)
class StagePlan:
    """One PopTorch Stage: its index, IPU, blocks and ops (in program order)."""

    index: int
    ipu: int
    blocks: tuple[str, ...]
    ops: tuple[Op, ...]


@dataclass(frozen=True)
class Plan:
    """Everything the compiler and scheduler need, already checked."""

    model: Model
    options: RunOptions
    strategy: str  # pipelined, sharded or phased
    stages: tuple[StagePlan, ...]
    num_ipus: int
    target: Target
    # What the run's command gave (model and options, see runner.request_record): the manifest keeps it
    # so that a report can write the command of a changed configuration.
    request: dict[str, Any] = field(default_factory=dict)

    @property
    def training(self) -> bool:
        return self.options.training

    @property
    def tensor_sharding(self) -> int:
        return self.options.tensor_sharding

    @property
    def pipelined(self) -> bool:
        """Stages run as a pipeline (see ``runs_as_pipeline``)."""
        return runs_as_pipeline(self.strategy, [s.ipu for s in self.stages])

    @property
    def pipeline_stages(self) -> int:
        """PopART's count (``rules.pipeline_stages``): 2N-1 training over N stages, N for inference;
        N counts the IPUs the stages run on (consecutive stages on one IPU run one after another)."""
        return rules.pipeline_stages(self.pipeline_depth, self.training)

    @property
    def pipeline_depth(self) -> int:
        """Distinct IPUs the stages run on (``rules.pipeline_depth``)."""
        return rules.pipeline_depth([s.ipu for s in self.stages])

    def pipeline_rank(self, stage: StagePlan) -> int:
        """The stage's place in the pipeline: its IPU's rank (``rules.pipeline_ranks``)."""
        return rules.pipeline_ranks([s.ipu for s in self.stages])[stage.index]

    @property
    def optimiser_shards(self) -> int:
        """Replicas each weight's optimiser state and update are split over (replicated tensor sharding)."""
        o = self.options
        return o.replication_factor if o.tensor_locations.replicated_tensor_sharding else 1

    def stage_of_op(self) -> dict[int, int]:
        return {op.op_id: s.index for s in self.stages for op in s.ops}

    def manifest_stages(self) -> list[dict]:
        return [{"stage": s.index, "ipu": s.ipu, "blocks": list(s.blocks)} for s in self.stages]


def runs_as_pipeline(kind: str, stage_ipus: Sequence[int]) -> bool:
    """Stages run as a pipeline (``rules.runs_as_pipeline``, the rule the analysis reads profiles by)."""
    return rules.runs_as_pipeline(kind, stage_ipus)


def resolve_layout(model: Model, options: RunOptions, kind: str | None) -> Layout:
    """The stages to run: the options' layout, else the model's default, else PopTorch's auto-stage
    (one stage per block, on the block's ``ipu_id`` if given), under ``kind`` if named."""
    layout = options.layout or model.default_layout
    if layout is None:
        if model.block_ipus:
            stages = [StageSpec(b, model.block_ipus.get(b, 0)) for b in model.blocks]
        else:
            stages = [StageSpec(tuple(model.blocks), 0)]
        layout = Layout("pipelined", stages)
    return layout.with_kind(kind) if kind else layout


def make_plan(model: Model, options: RunOptions, layout: Layout, *,
              assumptions: dict[str, float] | None = None) -> Plan:
    """Check the stages against the model and the options; ConfigError on the first broken rule."""
    options.validate()
    if not model.ops:
        raise ConfigError(f"Model {model.name} has no ops.")
    stages = layout.stages
    if not stages:
        raise ConfigError("The execution strategy has no stages.")
    known = set(model.blocks)
    owner: dict[str, int] = {}
    for i, stage in enumerate(stages):
        if stage.ipu < 0:
            raise ConfigError(f"Stage {i} ({', '.join(stage.blocks)}) is on IPU {stage.ipu}; IPUs are numbered from 0.")
        for block in stage.blocks:
            if block not in known:
                raise ConfigError(f"Stage {i} names block {block!r}, which model {model.name} does not have "
                                  f"(its blocks are {', '.join(model.blocks)}).")
            if block in owner:
                raise ConfigError(f"Block {block} is in both stage {owner[block]} and stage {i}.")
            owner[block] = i
    missing = [b for b in model.blocks if b not in owner]
    if missing:
        raise ConfigError(f"Block {missing[0]} is in no stage; every block must be placed in a stage.")
    broken = rules.ascending_rule(layout.kind, layout.ipus)
    if broken:
        raise ConfigError(broken)
    plans = []
    stage_of: dict[int, int] = {}
    sharded = shard_ops(model.ops, options.tensor_sharding)
    for i, stage in enumerate(stages):
        ops = tuple(op for op in sharded if owner[op.block] == i)
        plans.append(StagePlan(i, stage.ipu, stage.blocks, ops))
        stage_of.update({op.op_id: i for op in ops})
    for op in model.ops:
        for t in op.inputs:
            if t.producer >= 0 and stage_of[t.producer] > stage_of[op.op_id]:
                producer = model.ops[t.producer]
                raise ConfigError(f"Op {op.name} in stage {stage_of[op.op_id]} uses {producer.name} from the later "
                                  f"stage {stage_of[t.producer]}; stages must follow the model's order.")
    broken = rules.host_processes_rule(options.host_processes, options.replication_factor)
    if broken:
        raise ConfigError(broken)
    num_ipus = 1 + max(p.ipu for p in plans)
    amp = options.available_memory_proportion
    if isinstance(amp, tuple) and len(amp) not in (1, num_ipus):
        raise ConfigError(f"The available memory proportion gives {len(amp)} values for {num_ipus} IPUs; give one "
                          f"value, or one per IPU.")
    total_ipus = num_ipus * options.tensor_sharding * options.replication_factor
    target = make_target(options.arch, total_ipus, options.system, assumptions)
    plan = Plan(model, options, layout.kind, tuple(plans), num_ipus, target)
    empty = [p for p in plans if not p.ops]
    if empty:
        raise ConfigError(f"Stage {empty[0].index} ({', '.join(empty[0].blocks)}) holds no ops.")
    broken = rules.pipeline_rule(layout.kind, [p.ipu for p in plans], options.training,
                                     options.gradient_accumulation, options.device_iterations)
    if broken:
        raise ConfigError(broken)
    return plan
