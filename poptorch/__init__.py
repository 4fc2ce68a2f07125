"""popvision's ``poptorch``: PopTorch programs run unchanged on the CPU, timed by the IPU emulator.

``import poptorch`` gives the PopTorch API that Graphcore's tutorial and public examples use
(docs/poptorch.md lists it): ``Options`` and its sub-options, ``Block`` / ``BeginBlock`` /
``BlockFunction``, ``Stage`` and the execution strategies, ``trainingModel`` / ``inferenceModel``,
``optim``, ``DataLoader``. The model runs on the CPU with PyTorch, so the script's training loop,
losses and accuracy are real; on its first call each model's forward is captured and emulated on
IPUs with the script's options, its summary printed and, under ``POPLAR_ENGINE_OPTIONS``'
``autoReport``, its profile written. Any other PopTorch name is an error that names it.
"""

from __future__ import annotations

try:
    import torch
except ImportError:  # pragma: no cover - exercised by a test that hides torch
    raise ImportError('popvision\'s poptorch needs PyTorch: pip install "popvision-py[torch]".') from None

from typing import Any

from poptorch import optim
from poptorch._blocks import STATE as _STATE
from poptorch._blocks import BeginBlock, Block, BlockFunction, removeBlocks
from poptorch._dataloader import DataLoader
from poptorch._emulation import GenericOpsWarning
from poptorch._errors import Error, UnsupportedError
from poptorch._executor import PoplarExecutor, inferenceModel, trainingModel
from poptorch._options import (AutoStage, ConnectionType, DataLoaderMode, MeanReductionStrategy, Options, OutputMode,
                               ParallelPhasedExecution, Phase, PhasedExecution, PipelinedExecution, ReductionType,
                               SerialPhasedExecution, ShardedExecution, Stage, SyncPattern, TensorLocationSettings)

# The PopTorch release whose API this follows (SDK 3.3, the last public one), marked as popvision's.
__version__ = "3.3.0+popvision"

RecoverableError = Error
UnrecoverableError = Error


# -- ops: what changes the IPU's program, not the values ----------------------------------------


def ipu_print_tensor(tensor: torch.Tensor, title: str = "", print_gradient: bool = True,
                     summarise_threshold: int = 1000, edge_items: int = 3, max_line_width: int = 80,
                     digits: int = 8, float_format: str = "auto", separator: str = ", ",
                     open_bracket: str = "(", close_bracket: str = ")") -> torch.Tensor:
    """On the IPU, prints the tensor as the program runs; here, the tensor unchanged (no output)."""
    return tensor


def nop(tensor: torch.Tensor) -> torch.Tensor:
    """An op that does nothing (PopTorch uses it to keep graphs apart): the tensor."""
    return tensor


def recomputationCheckpoint(*tensors: torch.Tensor) -> Any:  # noqa: N802
    """Marks recomputation checkpoints: the tensors unchanged; the emulation of the model then
    recomputes activations in the backward pass from its blocks' outputs."""
    _STATE.checkpoints += 1
    return tensors[0] if len(tensors) == 1 else tensors


def identity_loss(x: torch.Tensor, reduction: str) -> torch.Tensor:
    """``x`` reduced as a loss: "sum", "mean" or "none"."""
    if reduction == "sum":
        return x.sum()
    if reduction == "mean":
        return x.mean()
    if reduction == "none":
        return x
    raise ValueError(f"identity_loss: reduction must be 'sum', 'mean' or 'none', not {reduction!r}.")


def set_available_memory(tensor: torch.Tensor, available_memory_proportion: float) -> torch.Tensor:
    """Per-op memory proportion: the tensor unchanged (the emulation uses the Options' proportion)."""
    return tensor


def serializedMatMul(lhs: torch.Tensor, rhs: torch.Tensor, mode: Any, factor: int = 0,  # noqa: N802
                     keep_precision: bool = False) -> torch.Tensor:
    """A matmul the IPU computes in pieces: the same product."""
    return torch.matmul(lhs, rhs)


def setLogLevel(level: int | str) -> None:  # noqa: N802
    """PopTorch's log level: there is no PopTorch log here."""


def ipuHardwareIsAvailable(num_ipus: int = 1) -> bool:  # noqa: N802
    """No IPU is attached: the emulator stands in for them."""
    return False


def __getattr__(name: str) -> Any:
    if name.startswith("_"):
        raise AttributeError(name)
    raise UnsupportedError(f"poptorch.{name}")


__all__ = [
    "AutoStage", "BeginBlock", "Block", "BlockFunction", "ConnectionType", "DataLoader", "DataLoaderMode", "Error",
    "GenericOpsWarning", "MeanReductionStrategy", "Options", "OutputMode", "ParallelPhasedExecution", "Phase",
    "PhasedExecution", "PipelinedExecution", "PoplarExecutor", "RecoverableError", "ReductionType",
    "SerialPhasedExecution", "ShardedExecution", "Stage", "SyncPattern", "TensorLocationSettings",
    "UnrecoverableError", "UnsupportedError", "identity_loss", "inferenceModel", "ipuHardwareIsAvailable",
    "ipu_print_tensor", "nop", "optim", "recomputationCheckpoint", "removeBlocks", "serializedMatMul",
    "setLogLevel", "set_available_memory", "trainingModel",
]
