"""The compiler: lower each IPU's ops into program steps, map work and tensors onto tiles, plan memory.

``compile_plan`` is the entry point; ``Compiler`` holds what its parts share (the plan, its cost
model, the tile mappings, where tensors live) and composes them, one module each:

- ``mapping.py``: tile mapping, the op's work, weights and optimiser state spread over tiles in grains;
- ``lowering.py``: each IPU's ops, stages, copies and host call lowered into program steps;
- ``update.py``: the weight-update segment (the gradient all-reduce, the optimiser per weighted op);
- ``variables.py``: the program's variables and their liveness intervals, for the memory plan.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from engine.costs import CostModel
from engine.lowering import Lowering
from engine.program import IpuProgram
from engine.mapping import Mapping, TileMapper
from engine.plan import Plan
from engine.update import WeightUpdate
from engine.variables import Liveness


@dataclass
class Compiled:
    """The compiled run: one program per IPU and the op mappings they share."""

    plan: Plan
    programs: list[IpuProgram]
    mappings: dict[int, Mapping]
    weight_mappings: dict[int, Mapping]


class Compiler(Lowering, WeightUpdate, Liveness):
    """Lowers a Plan into per-IPU programs (see the module docstring)."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.target = plan.target
        self.options = plan.options
        self.tiles = plan.target.tiles
        self.costs = cost_model(plan)
        self.dt = self.costs.dtype_bytes
        self.a = plan.target.assumptions
        self.stage_of = plan.stage_of_op()
        self.ops = {op.op_id: op for s in plan.stages for op in s.ops}
        self._signatures: dict[int, tuple] = {}  # op id -> its work signature (see _pass_costs)
        self._costs: dict[tuple[tuple, int, float], tuple[int, int, np.ndarray, np.ndarray, int]] = {}
        self.outlining = plan.options.enable_outlining
        mapper = TileMapper(self.tiles, self.outlining)
        self.mappings = {op_id: mapper.map(op) for op_id, op in self.ops.items()}
        # Weights an op reads: its own, and a matrix tied to another op's (a decoder's embedding).
        self.weight_mappings = {op_id: mapper.map_weights(op, self.mappings[op_id])
                                for op_id, op in self.ops.items() if op.weight_params}
        self.state_mappings = mapper.map_state(plan.stages)
        locations = plan.options.tensor_locations
        self.weights_streamed = plan.strategy == "phased" or not locations.weights_on_chip
        self.optimiser_off_chip = not locations.optimiser_on_chip
        self.activations_off_chip = not locations.activations_on_chip
        self.rts = plan.optimiser_shards > 1
        # Activations kept for several micro-batches at once: a training pipeline's in-flight
        # micro-batches, or every micro-batch of the step under phased execution.
        self.pipelined_training = plan.training and (
            (plan.pipelined and plan.pipeline_depth > 1) or plan.strategy == "phased")
        # Phased execution over stages on distinct IPUs: a pipeline whose stages stream each
        # weighted op's weights just before it (a phase per op), overlapped with the compute before.
        self.phased_pipeline = plan.strategy == "phased" and plan.pipelined
        self.shards = plan.tensor_sharding
        # consumers of each op's output, by op id
        self.consumers: dict[int, list[int]] = {}
        for op in self.ops.values():
            for t in op.inputs:
                self.consumers.setdefault(t.producer, []).append(op.op_id)

    def compile(self, progress: Callable[[], None] = lambda: None) -> Compiled:
        """Lower every IPU's program and its variables."""
        programs = []
        for ipu in range(self.plan.num_ipus):
            programs.append(self._compile_ipu(ipu))
            progress()
        return Compiled(self.plan, programs, self.mappings, self.weight_mappings)


def cost_model(plan: Plan) -> CostModel:
    """The cost model of a checked plan: its target, options and how its tensors are split."""
    return CostModel(plan.target, plan.options, shards=plan.tensor_sharding, stream_shards=plan.optimiser_shards,
                     ipus=plan.num_ipus, input_kind=plan.options.host_input or plan.model.input_kind,
                     epoch_samples=plan.model.dataset_samples.get("training" if plan.training else "inference"))


def compile_plan(plan: Plan, progress: Callable[[], None] = lambda: None) -> Compiled:
    """Compile a checked plan into per-IPU programs."""
    return Compiler(plan).compile(progress)
