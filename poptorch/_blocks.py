"""Blocks: ``Block`` (a context manager), ``BeginBlock`` (a module's pre-hook), ``BlockFunction`` (a decorator).

As in PopTorch, entering a block *begins* it: the ops that follow belong to it until another block
begins (leaving the ``with`` does not go back to the previous block). The capture reads the
current block for every op it records; outside a capture the blocks only keep this state.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch


class _BlockState:
    """The block the ops of the running forward belong to, and the IPU it asked for."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.block: str | None = None
        self.ipu: int | None = None
        self.auto_ids = 0
        self.checkpoints = 0  # recomputationCheckpoint calls seen

    def begin(self, user_id: str | None, ipu_id: int | None) -> None:
        if user_id is None:
            # PopTorch's automatic ids: "0", "1"... for blocks given no name.
            user_id = str(self.auto_ids)
            self.auto_ids += 1
        self.block, self.ipu = str(user_id), None if ipu_id is None else int(ipu_id)

    def current(self) -> tuple[str | None, int | None]:
        return self.block, self.ipu


STATE = _BlockState()


class Block:
    """``with poptorch.Block("B1", ipu_id=0):`` puts the ops inside into block B1 (on IPU 0 if given)."""

    def __init__(self, user_id: str | None = None, ipu_id: int | None = None) -> None:
        if ipu_id is not None and (not isinstance(ipu_id, int) or ipu_id < 0):
            raise ValueError(f"poptorch.Block: ipu_id must be a non-negative integer, not {ipu_id!r}.")
        self._user_id = user_id
        self._ipu_id = ipu_id

    @staticmethod
    def useAutoId() -> None:  # noqa: N802 (PopTorch's name)
        """Number the blocks given no name from 0 again, as at the start of ``forward``."""
        STATE.auto_ids = 0

    @staticmethod
    def start(user_id: str | None = None, ipu_id: int | None = None) -> None:
        """Begin a block without a ``with``."""
        STATE.begin(user_id, ipu_id)

    def __enter__(self) -> Block:
        STATE.begin(self._user_id, self._ipu_id)
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class _BlockHook:
    """The forward pre-hook ``BeginBlock`` registers: the module (and what follows) is in the block."""

    def __init__(self, user_id: str | None, ipu_id: int | None) -> None:
        self.user_id, self.ipu_id = user_id, ipu_id

    def __call__(self, module: torch.nn.Module, inputs: Any) -> None:
        STATE.begin(self.user_id, self.ipu_id)

    def __repr__(self) -> str:
        return f"BeginBlock(user_id={self.user_id}, ipu_id={self.ipu_id})"


def BeginBlock(layer_to_call: torch.nn.Module | Callable, user_id: str | None = None,  # noqa: N802
               ipu_id: int | None = None) -> Any:
    """Begin block ``user_id`` where ``layer_to_call`` runs; returns the layer (PopTorch's signature)."""
    if not isinstance(layer_to_call, torch.nn.Module):
        if not callable(layer_to_call):
            raise TypeError("poptorch.BeginBlock takes a torch.nn.Module or a function.")

        @functools.wraps(layer_to_call)
        def begin_then_call(*args: Any, **kwargs: Any) -> Any:
            STATE.begin(user_id, ipu_id)
            return layer_to_call(*args, **kwargs)

        return begin_then_call
    if any(isinstance(h, _BlockHook) for h in layer_to_call._forward_pre_hooks.values()):
        raise ValueError("poptorch.BeginBlock: the module has already been assigned to a block.")
    layer_to_call.register_forward_pre_hook(_BlockHook(user_id, ipu_id))
    return layer_to_call


def BlockFunction(user_id: str | None = None, ipu_id: int | None = None) -> Callable:  # noqa: N802
    """``@poptorch.BlockFunction("Decoder", ipu_id=1)``: the function's ops are in the block."""

    def decorator(func: Callable) -> Callable:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with Block(user_id, ipu_id):
                return func(*args, **kwargs)

        return wrapper

    return decorator


def removeBlocks(module: torch.nn.Module) -> None:  # noqa: N802
    """Remove every ``BeginBlock`` annotation from ``module`` and its sub-modules."""
    for m in module.modules():
        for key in [k for k, h in m._forward_pre_hooks.items() if isinstance(h, _BlockHook)]:
            del m._forward_pre_hooks[key]
