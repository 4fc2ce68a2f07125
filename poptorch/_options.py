"""``poptorch.Options`` and what it holds: sub-options, tensor locations, stages and execution strategies.

The names and chained setters are PopTorch's. Each setting either drives the CPU run (device
iterations, gradient accumulation, replicas, output mode, random seed), or the emulation (the
strategy and stages, tensor locations, memory proportions, partials), or is accepted as having no
effect off the hardware (``useIpuModel``, ``enableExecutableCaching``...: docs/poptorch.md lists
them). Every other name is an ``UnsupportedError`` naming it, never silently ignored.
"""

from __future__ import annotations

import copy
import enum
import os
from typing import Any

from engine import options as eo
from engine.layout import Layout, StageSpec
from poptorch._errors import UnsupportedError


# -- enums (PopTorch's names and values) -----------------------------------------------------


class OutputMode(enum.IntEnum):
    """What a call returns of its micro-batches' outputs."""

    Final = 0
    EveryN = 1
    All = 2
    Sum = 3
    Default = 4


class DataLoaderMode(enum.IntEnum):
    Sync = 0
    Async = 1
    AsyncRebatched = 2


class AutoStage(enum.IntEnum):
    """Stages made from blocks: one per IPU named by the blocks (SameAsIpu), or one per block."""

    SameAsIpu = 0
    AutoIncrement = 1


class ReductionType(enum.IntEnum):
    Sum = 0
    Mean = 1
    NoReduction = 2


class MeanReductionStrategy(enum.IntEnum):
    Running = 0
    Post = 1
    PostAndLoss = 2


class ConnectionType(enum.IntEnum):
    Always = 0
    OnDemand = 1
    Never = 2


class SyncPattern(enum.IntEnum):
    Full = 0
    SinglePipeline = 1
    ReplicaAndLadder = 2


def _dtype_name(dtype: object) -> str:
    """``torch.half`` / ``torch.float`` (or "half", "float16"...) as the engine's fp16 / fp32."""
    name = str(dtype).removeprefix("torch.")
    names = {"half": "fp16", "float16": "fp16", "bfloat16": "fp16", "float": "fp32", "float32": "fp32",
             "fp16": "fp16", "fp32": "fp32"}
    if name not in names:
        raise ValueError(f"Expected torch.half or torch.float, not {dtype!r}.")
    return names[name]


class _Unsupported:
    """Any name not defined on the object is an ``UnsupportedError`` naming ``_OWNER.name``."""

    _OWNER = "poptorch.Options"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise UnsupportedError(f"{self._OWNER}.{name}")


# -- stages and strategies -------------------------------------------------------------------


class Stage:
    """One or more blocks on one IPU: ``poptorch.Stage("B1", "B2").ipu(0)``."""

    def __init__(self, *block_ids: str) -> None:
        if not all(isinstance(b, str) for b in block_ids):
            raise TypeError(f"poptorch.Stage takes block names (strings), not {block_ids!r}.")
        self._blocks = tuple(block_ids)
        self._ipu: int | None = None

    @property
    def blocks(self) -> list[str]:
        return list(self._blocks)

    def ipu(self, ipu: int) -> Stage:
        self._ipu = int(ipu)
        return self

    def spec(self, position: int) -> StageSpec:
        """The engine's ``StageSpec`` of this stage, the ``position``-th of its strategy: on the IPU
        ``ipu()`` named, else on IPU ``position`` (PopTorch's default)."""
        return StageSpec(self._blocks, position if self._ipu is None else self._ipu)

    def __repr__(self) -> str:
        return f"Stage({', '.join(map(repr, self._blocks))}).ipu({self._ipu})"


class Phase:
    """A phase of a phased execution: stages (or block names) that run together."""

    def __init__(self, *arg: Stage | str | list) -> None:
        self.stages: list[Stage] = []
        for a in arg:
            if isinstance(a, (list, tuple)):
                self.stages.extend(Stage(x) if isinstance(x, str) else x for x in a)
            else:
                self.stages.append(Stage(a) if isinstance(a, str) else a)


class _ExecutionStrategy(_Unsupported):
    kind = "pipelined"

    def __init__(self, *args: Stage | str | AutoStage) -> None:
        self.auto: AutoStage | None = None
        self.stages: list[Stage] = []
        if len(args) == 1 and isinstance(args[0], AutoStage):
            self.auto = args[0]
        else:
            for a in args:
                if isinstance(a, AutoStage):
                    raise TypeError(f"{type(self).__name__} takes an AutoStage alone or stages, not both.")
                self.stages.append(Stage(a) if isinstance(a, str) else a)
        if not self.stages and self.auto is None:
            self.auto = AutoStage.SameAsIpu

    @property
    def _OWNER(self) -> str:  # noqa: N802
        return f"poptorch.{type(self).__name__}"

    def layout(self, blocks: list[str], block_ipus: dict[str, int]) -> Layout:
        """The engine's description of this strategy (``engine.layout.Layout``) over the captured
        model's ``blocks`` (in model order): PopTorch's classes convert into it, never mirror it."""
        if self.stages:
            return Layout(self.kind, [s.spec(k) for k, s in enumerate(self.stages)])
        if self.auto == AutoStage.AutoIncrement:
            return Layout(self.kind, [StageSpec(b, block_ipus.get(b, k)) for k, b in enumerate(blocks)])
        # SameAsIpu: consecutive blocks on one IPU form one stage.
        groups: list[tuple[list[str], int]] = []
        for b in blocks:
            ipu = block_ipus.get(b, 0)
            if groups and groups[-1][1] == ipu:
                groups[-1][0].append(b)
            else:
                groups.append(([b], ipu))
        return Layout(self.kind, [StageSpec(tuple(names), ipu) for names, ipu in groups])


class PipelinedExecution(_ExecutionStrategy):
    """Stages on IPUs, all busy at once on different micro-batches."""

    kind = "pipelined"


class ShardedExecution(PipelinedExecution):
    """Stages one after another: one IPU busy at a time."""

    kind = "sharded"


class _PhasedExecution(_ExecutionStrategy):
    """Phases run one after another, their weights streamed from streaming memory."""

    kind = "phased"

    def __init__(self, *phases: Phase | Stage | str | list) -> None:
        stages: list[Stage] = []
        for p in phases:
            stages.extend(p.stages if isinstance(p, Phase) else Phase(p).stages)
        super().__init__(*stages)

    def phaseIpus(self, *args: Any) -> _PhasedExecution:  # noqa: N802 - accepted: stages carry their IPUs
        return self


class PhasedExecution(_PhasedExecution):
    pass


class ParallelPhasedExecution(_PhasedExecution):
    pass


class SerialPhasedExecution(_PhasedExecution):
    pass


# -- tensor locations ------------------------------------------------------------------------


class TensorLocationSettings(_Unsupported):
    """Where a class of tensors lives: ``TensorLocationSettings().useOnChipStorage(False)``."""

    _OWNER = "poptorch.TensorLocationSettings"

    def __init__(self) -> None:
        self.on_chip = True
        self.replicated_tensor_sharding = False

    def useOnChipStorage(self, use: bool = True) -> TensorLocationSettings:  # noqa: N802
        self.on_chip = bool(use)
        return self

    def useReplicatedTensorSharding(self, use: bool = True) -> TensorLocationSettings:  # noqa: N802
        self.replicated_tensor_sharding = bool(use)
        return self

    def minElementsForOffChip(self, min_elements: int) -> TensorLocationSettings:  # noqa: N802
        return self  # every tensor of the class moves: the emulator has no per-tensor threshold

    def minElementsForReplicatedTensorSharding(self, min_elements: int) -> TensorLocationSettings:  # noqa: N802
        return self

    def useIOTilesToLoad(self, use: bool = True) -> TensorLocationSettings:  # noqa: N802
        return self

    def useIOTilesToStore(self, use: bool = True) -> TensorLocationSettings:  # noqa: N802
        return self


class _TensorLocationOptions(_Unsupported):
    _OWNER = "poptorch.Options.TensorLocations"

    def __init__(self) -> None:
        self.optimizer = TensorLocationSettings()
        self.weights = TensorLocationSettings()
        self.activations = TensorLocationSettings()

    def setOptimizerLocation(self, location: TensorLocationSettings) -> _TensorLocationOptions:  # noqa: N802
        self.optimizer = location
        return self

    def setWeightLocation(self, location: TensorLocationSettings) -> _TensorLocationOptions:  # noqa: N802
        self.weights = location
        return self

    def setActivationLocation(self, location: TensorLocationSettings) -> _TensorLocationOptions:  # noqa: N802
        self.activations = location
        return self

    def setAccumulatorLocation(self, location: TensorLocationSettings) -> _TensorLocationOptions:  # noqa: N802
        if not location.on_chip:
            raise UnsupportedError("poptorch.Options.TensorLocations.setAccumulatorLocation with off-chip storage",
                                   "the emulator keeps gradient accumulators on chip")
        return self


# -- sub-options -----------------------------------------------------------------------------


class _TrainingOptions(_Unsupported):
    _OWNER = "poptorch.Options.Training"

    def __init__(self) -> None:
        self.gradient_accumulation = 1
        self.accumulation_and_replication_reduction_type = ReductionType.Mean

    def gradientAccumulation(self, gradient_accumulation: int) -> _TrainingOptions:  # noqa: N802
        if int(gradient_accumulation) < 1:
            raise ValueError(f"gradientAccumulation must be at least 1, not {gradient_accumulation}.")
        self.gradient_accumulation = int(gradient_accumulation)
        return self

    def accumulationAndReplicationReductionType(self, reduction: ReductionType) -> _TrainingOptions:  # noqa: N802
        if reduction not in (ReductionType.Sum, ReductionType.Mean):
            raise ValueError("accumulationAndReplicationReductionType takes ReductionType.Sum or .Mean.")
        self.accumulation_and_replication_reduction_type = ReductionType(reduction)
        return self

    def setAutomaticLossScaling(self, enabled: bool) -> _TrainingOptions:  # noqa: N802
        return self  # loss scaling guards FP16 gradients on the IPU; the CPU update is FP32

    def setMeanAccumulationAndReplicationReductionStrategy(  # noqa: N802
            self, strategy: MeanReductionStrategy) -> _TrainingOptions:
        return self  # when the mean is taken changes rounding on the IPU, not the CPU's result


class _PrecisionOptions(_Unsupported):
    _OWNER = "poptorch.Options.Precision"

    def __init__(self) -> None:
        self.partials = "fp32"

    def setPartialsType(self, dtype: object) -> _PrecisionOptions:  # noqa: N802
        self.partials = _dtype_name(dtype)
        return self

    # Numerics of the hardware that a CPU run in FP32 cannot show: accepted, no effect.
    def enableStochasticRounding(self, enabled: bool = True) -> _PrecisionOptions:  # noqa: N802
        return self

    def enableFloatingPointExceptions(self, enabled: bool = True) -> _PrecisionOptions:  # noqa: N802
        return self

    def halfFloatCasting(self, behaviour: Any) -> _PrecisionOptions:  # noqa: N802
        return self

    def runningStatisticsAlwaysFloat(self, value: bool = True) -> _PrecisionOptions:  # noqa: N802
        return self


class _DistributedOptions(_Unsupported):
    """The process's place among those a distributed run spans; as PopTorch's, read at first from
    mpirun's ``OMPI_COMM_WORLD_SIZE`` / ``OMPI_COMM_WORLD_RANK`` (one process when unset), which
    poprun sets too. ``replicationFactor`` is then each process's replicas."""

    _OWNER = "poptorch.Options.Distributed"

    def __init__(self) -> None:
        self.num_distributed_processes = 1
        self.distributed_process_id = 0
        self.setEnvVarNames("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK")

    def configureProcessId(self, process_id: int, num_processes: int) -> _DistributedOptions:  # noqa: N802
        process_id, num_processes = int(process_id), int(num_processes)
        if not 0 <= process_id < num_processes:
            raise ValueError(f"configureProcessId: process {process_id} is not one of {num_processes} processes.")
        self.distributed_process_id, self.num_distributed_processes = process_id, num_processes
        return self

    def setEnvVarNames(self, var_num_processes: str, var_process_id: str) -> _DistributedOptions:  # noqa: N802
        """The process id and count from these environment variables (0 and 1 when unset)."""
        return self.configureProcessId(int(os.environ.get(var_process_id, "0")),
                                       int(os.environ.get(var_num_processes, "1")))

    def disable(self) -> _DistributedOptions:
        """One process, whatever the environment says."""
        return self.configureProcessId(0, 1)

    @property
    def processId(self) -> int:  # noqa: N802
        return self.distributed_process_id

    @property
    def numProcesses(self) -> int:  # noqa: N802
        return self.num_distributed_processes


class _JitOptions(_Unsupported):
    _OWNER = "poptorch.Options.Jit"

    def traceModel(self, trace_model: bool) -> _JitOptions:  # noqa: N802
        return self  # how PopTorch lowers the model to its IR; the capture is the same either way


# PopART session options Graphcore's examples set through ``Options._Popart.set``: those the
# emulation reads, and those that change nothing it models (kept by name: any other is refused).
_POPART_READ = ("autoRecomputation", "enableOutlining")
_POPART_NO_EFFECT = frozenset({
    "saveInitializersToFile", "disableGradAccumulationTensorStreams", "outlineThreshold",
    "accumulateOuterFragmentSettings.schedule", "accumulateOuterFragmentSettings.excludedVirtualGraphs",
    "scheduleNonWeightUpdateGradientConsumersEarly", "rearrangeAnchorsOnHost", "rearrangeStreamsOnHost",
    "enableStochasticRounding", "enableFloatingPointChecks", "instrumentWithHardwareCycleCounter",
    "replicatedCollectivesSettings.prepareScheduleForMergingCollectives",
    "replicatedCollectivesSettings.mergeAllReduceCollectives", "subgraphCopyingStrategy", "decomposeGradSum",
})


class _PopartOptions(_Unsupported):
    """``options._Popart``: PopART's session options, as Graphcore's examples set them."""

    _OWNER = "poptorch.Options._Popart"

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def set(self, key: str, value: Any) -> _PopartOptions:
        if key not in _POPART_READ and key not in _POPART_NO_EFFECT:
            raise UnsupportedError(f'poptorch.Options._Popart.set("{key}")')
        self.values[key] = value
        return self

    def recompute(self) -> tuple[bool, str] | None:
        """PopART's ``autoRecomputation`` as the engine's (recompute, checkpoints); None when unset.
        RecomputationType: 0 None, 1 Standard and 2 NormOnly (from checkpoints: every block's
        output here), 3 Pipeline (only the stage inputs are kept: the engine's "stage")."""
        if "autoRecomputation" not in self.values:
            return None
        kind = int(self.values["autoRecomputation"])
        return (kind != 0, "stage" if kind == 3 else "blocks")


# -- Options ---------------------------------------------------------------------------------


class Options(_Unsupported):
    """PopTorch's options: ``poptorch.Options().deviceIterations(10)`` and so on (setters chain)."""

    _OWNER = "poptorch.Options"

    def __init__(self) -> None:
        self.device_iterations = 1
        self.replication_factor = 1
        self.output_mode = OutputMode.Default
        self.output_return_period = 1
        self.random_seed: int | None = None
        self.model_name: str | None = None
        self.profile_dir: str | None = None
        self.available_memory_proportion: float | dict[str, float] | None = None
        self.execution_strategy: _ExecutionStrategy | None = None
        self._training = _TrainingOptions()
        self._precision = _PrecisionOptions()
        self._locations = _TensorLocationOptions()
        self._distributed = _DistributedOptions()
        self._jit = _JitOptions()
        self._popart = _PopartOptions()

    # sub-options
    @property
    def Training(self) -> _TrainingOptions:  # noqa: N802
        return self._training

    @property
    def Precision(self) -> _PrecisionOptions:  # noqa: N802
        return self._precision

    @property
    def TensorLocations(self) -> _TensorLocationOptions:  # noqa: N802
        return self._locations

    @property
    def Distributed(self) -> _DistributedOptions:  # noqa: N802
        return self._distributed

    @property
    def Jit(self) -> _JitOptions:  # noqa: N802
        return self._jit

    @property
    def _Popart(self) -> _PopartOptions:  # noqa: N802
        return self._popart

    # what drives the CPU run
    def deviceIterations(self, device_iterations: int) -> Options:  # noqa: N802
        if int(device_iterations) < 1:
            raise ValueError(f"deviceIterations must be at least 1, not {device_iterations}.")
        self.device_iterations = int(device_iterations)
        return self

    def replicationFactor(self, replication_factor: int) -> Options:  # noqa: N802
        if int(replication_factor) < 1:
            raise ValueError(f"replicationFactor must be at least 1, not {replication_factor}.")
        self.replication_factor = int(replication_factor)
        return self

    def outputMode(self, output_mode: OutputMode, output_return_period: int | None = None) -> Options:  # noqa: N802
        self.output_mode = OutputMode(output_mode)
        if self.output_mode == OutputMode.EveryN:
            if output_return_period is None or int(output_return_period) < 1:
                raise ValueError("OutputMode.EveryN needs a positive output_return_period.")
            self.output_return_period = int(output_return_period)
        elif output_return_period is not None:
            raise ValueError("output_return_period is only for OutputMode.EveryN.")
        return self

    def randomSeed(self, random_seed: int) -> Options:  # noqa: N802
        self.random_seed = int(random_seed)
        return self

    def modelName(self, name: str) -> Options:  # noqa: N802
        """The profile's sub-directory (PopTorch's default: "training" or "inference")."""
        self.model_name = str(name)
        return self

    def enableProfiling(self, profile_dir: str | None = None) -> Options:  # noqa: N802
        """Write the profile under ``profile_dir`` (the current directory by default); the
        ``POPLAR_ENGINE_OPTIONS`` directory wins over it, as in PopTorch."""
        self.profile_dir = profile_dir or "."
        return self

    # what drives the emulation
    def setExecutionStrategy(self, strategy: _ExecutionStrategy) -> Options:  # noqa: N802
        if not isinstance(strategy, _ExecutionStrategy):
            raise TypeError(f"setExecutionStrategy takes a poptorch execution strategy, not {type(strategy).__name__}.")
        self.execution_strategy = strategy
        return self

    def setAvailableMemoryProportion(  # noqa: N802
            self, available_memory_proportion: float | dict[str, float]) -> Options:
        self.available_memory_proportion = (dict(available_memory_proportion)
                                            if isinstance(available_memory_proportion, dict)
                                            else float(available_memory_proportion))
        return self

    # accepted, no effect off the hardware
    def useIpuModel(self, use_model: bool) -> Options:  # noqa: N802
        return self

    def enableExecutableCaching(self, path: str | None) -> Options:  # noqa: N802
        return self

    def autoRoundNumIPUs(self, auto_round_num_ipus: bool = True) -> Options:  # noqa: N802
        return self

    def logCycleCount(self, log_cycle_count: bool) -> Options:  # noqa: N802
        return self

    def connectionType(self, connection_type: ConnectionType) -> Options:  # noqa: N802
        return self

    def syncPattern(self, sync_pattern: SyncPattern) -> Options:  # noqa: N802
        return self

    def useIpuId(self, ipu_id: int) -> Options:  # noqa: N802
        return self

    def enableStableNorm(self, enabled: bool) -> Options:  # noqa: N802
        return self

    def disableModuleNamescope(self) -> Options:  # noqa: N802
        return self

    def clone(self) -> Options:
        """A deep copy: changing the clone leaves this one as it is."""
        return copy.deepcopy(self)

    def defaultOutputMode(self) -> bool:  # noqa: N802
        return self.output_mode == OutputMode.Default

    # -- the engine's view -------------------------------------------------------------------

    def engine_options(self, *, training: bool, micro_batch_size: int, precision: str, optimiser: dict[str, Any],
                       recompute: bool) -> eo.RunOptions:
        """The emulator's options for a model compiled with these options: the whole run's replicas
        (``replicationFactor`` is each distributed process's, as in PopTorch)."""
        loc = self._locations
        checkpoints = "blocks"
        if (popart := self._popart.recompute()) is not None:
            recompute, checkpoints = recompute or popart[0], popart[1]
        o = eo.RunOptions(
            micro_batch_size=micro_batch_size, device_iterations=self.device_iterations,
            gradient_accumulation=self._training.gradient_accumulation if training else 1,
            replication_factor=self.replication_factor * self._distributed.num_distributed_processes,
            precision=precision, partials=self._precision.partials,
            mode="training" if training else "inference", recompute=recompute and training,
            recompute_checkpoints=checkpoints,
            enable_outlining=bool(self._popart.values.get("enableOutlining", True)),
            host_processes=self._distributed.num_distributed_processes, **optimiser)
        o.tensor_locations = eo.TensorLocations(
            optimiser_on_chip=loc.optimizer.on_chip, weights_on_chip=loc.weights.on_chip,
            activations_on_chip=loc.activations.on_chip,
            replicated_tensor_sharding=(loc.optimizer.replicated_tensor_sharding
                                        or loc.weights.replicated_tensor_sharding))
        if self.available_memory_proportion is not None:
            o.setAvailableMemoryProportion(self.available_memory_proportion)
        return o
