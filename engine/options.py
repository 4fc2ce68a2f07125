"""A run's options: ``RunOptions``, everything one emulated run is configured with, and its sub-options.

Not ``poptorch.Options``: that is PopTorch's API, which the shim (``poptorch/_options.py``) converts
into a ``RunOptions``; this also holds the emulator's own choices (``arch``, ``system``, ``runs``,
``host_input``, ``loader_workers``...). Its attributes are snake_case; a few of PopTorch's setters
(``deviceIterations``, ``Training.gradientAccumulation``, ``replicationFactor``,
``setAvailableMemoryProportion``) also work, for model files written in PopTorch's words. Beside it,
the names an option may take (``PRECISIONS``, ``MODES``, ``OPTIMISERS``, ``RECOMPUTE_CHECKPOINTS``,
``INPUT_KINDS``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from popvision_py.errors import ConfigError

if TYPE_CHECKING:
    from engine.layout import Layout

# Bytes of one element of each dtype (the precisions' and the model's tensors').
DTYPE_BYTES = {"fp16": 2, "fp32": 4, "int32": 4}


# The names an option may take (the CLI offers them as choices).
PRECISIONS = ("fp16", "fp32")
MODES = ("training", "inference")
OPTIMISERS = ("adamw", "adam", "lamb", "sgd", "lars")
# Recomputation checkpoints by name (a positive int k also works: every k-th block's output).
RECOMPUTE_CHECKPOINTS = ("blocks", "stage")


@dataclass
class TensorLocations:
    """On-chip or off-chip (streaming memory) for optimiser state, weights and activations."""

    optimiser_on_chip: bool = True
    weights_on_chip: bool = True
    activations_on_chip: bool = True
    replicated_tensor_sharding: bool = False

    def as_manifest(self) -> dict[str, Any]:
        where = {True: "on_chip", False: "off_chip"}
        return {
            "optimiser": where[self.optimiser_on_chip],
            "weights": where[self.weights_on_chip],
            "activations": where[self.activations_on_chip],
            "replicated_tensor_sharding": self.replicated_tensor_sharding,
        }


class _Distributed:
    """``options.Distributed``: PopTorch's distributed sub-options (one host process per poprun instance)."""

    def __init__(self, options: RunOptions) -> None:
        self._options = options

    def configureProcessId(self, process_id: int, num_processes: int) -> RunOptions:  # noqa: N802
        # The emulator times the whole run: only the number of processes feeding it matters.
        self._options.host_processes = int(num_processes)
        return self._options

    @property
    def numProcesses(self) -> int:  # noqa: N802
        return self._options.host_processes


class _Training:
    """``options.Training``: PopTorch's training sub-options."""

    def __init__(self, options: RunOptions) -> None:
        self._options = options

    def gradientAccumulation(self, n: int) -> RunOptions:  # noqa: N802
        self._options.gradient_accumulation = int(n)
        return self._options


class _Precision:
    """``options.Precision``: PopTorch's precision sub-options."""

    def __init__(self, options: RunOptions) -> None:
        self._options = options

    def setPartialsType(self, dtype: object) -> RunOptions:  # noqa: N802
        """``torch.half`` / ``"fp16"`` or ``torch.float`` / ``"fp32"``."""
        name = str(dtype).removeprefix("torch.")
        self._options.partials = {"half": "fp16", "float16": "fp16", "float": "fp32", "float32": "fp32"}.get(name, name)
        return self._options


INPUT_KINDS = {  # what a sample is, as --input names it, and how the run summary says it
    "synthetic": "synthetic data (no host loading)",
    "tensor": "small in-memory tensors (MNIST-like)",
    "image": "JPEG decode and augmentation (ImageNet-like)",
    "text": "tokenised text",
}


@dataclass
class RunOptions:
    """A run's options (see the module's docstring). Attribute names are snake_case; a few PopTorch setters chain."""

    micro_batch_size: int = 1
    device_iterations: int = 1
    gradient_accumulation: int = 1
    replication_factor: int = 1
    precision: str = "fp16"
    # Precision of a matmul's / convolution's partial sums: poplibs' and PopTorch's default is FP32,
    # which runs the Mk2 AMP at half its FP16 rate; Graphcore's published models use FP16 partials
    # (PopTorch ``Precision.setPartialsType(torch.half)``).
    partials: str = "fp32"
    mode: str = "training"
    recompute: bool = False
    optimiser: str = "adamw"
    runs: int = 1
    arch: str = "mk2"
    system: str | None = None
    # Share of each tile's memory a matmul or convolution may use for its temporary data (received
    # operands, partials); above it the planner serialises the op. Poplar's default is 0.6
    # (PopTorch's setAvailableMemoryProportion). One value for every IPU, or one per IPU (a tuple).
    available_memory_proportion: float | tuple[float, ...] = 0.6
    # With recompute: where the backward restarts from (see RECOMPUTE_CHECKPOINTS): every block's
    # output ("blocks"), every k-th block's (an int k), or only the stage inputs ("stage", PopART's
    # RecomputationType::Pipeline: the backward recomputes the whole stage's forward).
    recompute_checkpoints: str | int = "blocks"
    # Attention computed in this many pieces over the heads (Graphcore's attention splits): each
    # piece's scores and probabilities are live alone, at the price of a launch per piece.
    attention_serialisation: int = 1
    # The blog's t axis: each stage's ops (weights and work) split over this many IPUs.
    tensor_sharding: int = 1
    # Optimiser state precision: PopTorch's first_order_momentum_accum_type /
    # second_order_momentum_accum_type (Adam, AdamW, LAMB) and velocity_accum_type (SGD, LARS);
    # PopTorch's default is FP32.
    optimiser_state_type: str = "fp32"
    # Adam / AdamW / LAMB: the first moment's type alone (PopTorch's first_order_momentum_accum_type;
    # Graphcore's BERT-Large sets it to FP16, enable_half_first_order_momentum); None: the state's type.
    first_moment_type: str | None = None
    # Gradient accumulators' type (PopTorch's accum_type); None: the weights' type (PopART's default).
    accum_type: str | None = None
    # SGD with momentum keeps one velocity that also accumulates the gradients (PopART's "SGD1",
    # PopTorch's SGD(use_combined_accum=True), as Graphcore's CNN examples run it); False: a
    # separate gradient accumulator beside the velocity ("SGD2").
    use_combined_accum: bool = True
    # PopART outlines identical subgraphs (SessionOptions.enableOutlining, on by default): repeated
    # layers share one copy of their code and vertex state.
    enable_outlining: bool = True
    # Host processes feeding the replicas (poprun instances, PopTorch's Distributed.numProcesses):
    # each runs its own data loader, so the host prepares samples this many times as fast.
    host_processes: int = 1
    # What one sample is for the host's data loaders (synthetic, tensor, image, text); None: the model's.
    host_input: str | None = None
    # Worker processes each host process's DataLoader runs (PopTorch DataLoader num_workers); None:
    # every core of the process's share of its host server.
    loader_workers: int | None = None
    # PopTorch DataLoader's persistent_workers: keep the workers from one epoch to the next. Without it
    # torch's DataLoader starts its workers again at every epoch (TensorFlow's tf.data repeats without).
    persistent_workers: bool = False
    tensor_locations: TensorLocations = field(default_factory=TensorLocations)
    layout: Layout | None = None  # the stages to run, over the model's default

    # PopTorch's spelling -------------------------------------------------------------------
    def deviceIterations(self, n: int) -> RunOptions:  # noqa: N802
        self.device_iterations = int(n)
        return self

    def replicationFactor(self, n: int) -> RunOptions:  # noqa: N802
        self.replication_factor = int(n)
        return self

    def setAvailableMemoryProportion(self, proportion: float | dict[str, float]) -> RunOptions:  # noqa: N802
        # PopTorch takes {"IPU0": 0.2, ...}: one value per IPU, the IPUs it leaves out at Poplar's 0.6.
        if isinstance(proportion, dict):
            try:
                by_ipu = {int(str(k).upper().removeprefix("IPU")): float(v) for k, v in proportion.items()}
            except ValueError:
                raise ConfigError(f"setAvailableMemoryProportion takes {{'IPU0': 0.2, ...}}, "
                                  f"not {proportion}.") from None
            if any(i < 0 for i in by_ipu):
                raise ConfigError(f"setAvailableMemoryProportion names a negative IPU: {proportion}.")
            self.available_memory_proportion = tuple(by_ipu.get(i, 0.6) for i in range(max(by_ipu, default=0) + 1))
        else:
            self.available_memory_proportion = float(proportion)
        return self

    def memory_proportion(self, ipu: int) -> float:
        """The available memory proportion of one IPU (the last value given for IPUs beyond the list:
        a tuple shorter than the IPUs is refused by the plan, so that is only Python callers' case)."""
        amp = self.available_memory_proportion
        if isinstance(amp, (tuple, list)):
            return float(amp[min(ipu, len(amp) - 1)])
        return float(amp)

    @property
    def Precision(self) -> _Precision:  # noqa: N802
        return _Precision(self)

    @property
    def Training(self) -> _Training:  # noqa: N802
        return _Training(self)

    @property
    def Distributed(self) -> _Distributed:  # noqa: N802
        return _Distributed(self)

    @property
    def training(self) -> bool:
        return self.mode == "training"

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.precision]

    def validate(self) -> None:
        """ConfigError for sizes that are zero or negative and for unknown names."""
        amp = self.available_memory_proportion
        if isinstance(amp, list):
            amp = self.available_memory_proportion = tuple(amp)
        for value in (amp if isinstance(amp, tuple) else (amp,)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise ConfigError(f"Available memory proportion must be in (0, 1], not {value}.")
        if isinstance(amp, tuple) and not amp:
            raise ConfigError("Available memory proportion needs at least one value.")
        checkpoints = self.recompute_checkpoints
        blocks = isinstance(checkpoints, int) and not isinstance(checkpoints, bool) and checkpoints >= 1
        if not (checkpoints in RECOMPUTE_CHECKPOINTS or blocks):
            raise ConfigError(f"Recompute checkpoints must be {' or '.join(RECOMPUTE_CHECKPOINTS)} or a positive "
                              f"number of blocks, not {checkpoints!r}.")
        if not isinstance(self.attention_serialisation, int) or self.attention_serialisation < 1:
            raise ConfigError(f"Attention serialisation must be a positive integer, not "
                              f"{self.attention_serialisation}.")
        for name in ("micro_batch_size", "device_iterations", "gradient_accumulation", "replication_factor", "runs",
                     "tensor_sharding", "host_processes"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name.replace('_', ' ').capitalize()} must be a positive integer, not {value}.")
        for what, value, choices in (("precision", self.precision, PRECISIONS), ("partials", self.partials, PRECISIONS),
                                     ("mode", self.mode, MODES),
                                     ("optimiser", self.optimiser, OPTIMISERS),
                                     ("optimiser state type", self.optimiser_state_type, PRECISIONS),
                                     ("first moment type", self.first_moment_type or self.optimiser_state_type,
                                      PRECISIONS),
                                     ("accumulator type", self.accum_type or self.precision, PRECISIONS)):
            if value not in choices:
                raise ConfigError(f"Unknown {what} {value!r}; choose one of {', '.join(choices)}.")
        if self.host_input is not None and self.host_input not in INPUT_KINDS:
            raise ConfigError(f"Unknown input kind {self.host_input!r}; choose one of {', '.join(INPUT_KINDS)}.")
        workers = self.loader_workers
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
            raise ConfigError(f"Loader workers must be a positive integer, not {workers}.")
