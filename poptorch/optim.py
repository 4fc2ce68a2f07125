"""``poptorch.optim``: SGD, Adam, AdamW and LAMB, PyTorch's updates on the CPU with PopTorch's arguments.

PopTorch's extra arguments (``loss_scaling``, ``accum_type``, ``*_momentum_accum_type``,
``use_combined_accum``, ``max_grad_norm``...) are accepted; those that set the IPU's storage
types feed the emulation (the optimiser state's bytes), the rest change only the hardware's
rounding and leave the CPU's FP32 update as PyTorch computes it. ``loss_scaling`` divides back
out exactly, so the CPU update is the unscaled one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch

from poptorch._errors import UnsupportedError
from poptorch._options import _dtype_name

_HARDWARE_ONLY = ("loss_scaling", "velocity_scaling", "max_grad_norm", "max_weight_norm", "bias_correction",
                  "weight_decay_mode", "use_combined_accum")


class _PopTorchOptimizer:
    """What the PopTorch optimisers share: the storage types the emulation reads."""

    ENGINE_NAME = "sgd"

    def _take_popart_args(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """Remove PopTorch's own arguments from ``kwargs``; keep the ones the emulation reads."""
        engine: dict[str, Any] = {}
        if (t := kwargs.pop("accum_type", None)) is not None:
            engine["accum_type"] = _dtype_name(t)
        for name, key in (("first_order_momentum_accum_type", "first_moment_type"),
                          ("second_order_momentum_accum_type", "optimiser_state_type"),
                          ("velocity_accum_type", "optimiser_state_type")):
            if (t := kwargs.pop(name, None)) is not None:
                engine[key] = _dtype_name(t)
        if "use_combined_accum" in kwargs:
            engine["use_combined_accum"] = bool(kwargs["use_combined_accum"])
        for name in _HARDWARE_ONLY:
            kwargs.pop(name, None)
        self._engine_options = engine
        # PopTorch's None means "the default": leave the argument to PyTorch's default.
        return {k: v for k, v in kwargs.items() if v is not None}

    def engine_options(self) -> dict[str, Any]:
        """The emulator's optimiser options (``engine.RunOptions`` field names)."""
        return {"optimiser": self.ENGINE_NAME, **getattr(self, "_engine_options", {})}


class SGD(_PopTorchOptimizer, torch.optim.SGD):
    ENGINE_NAME = "sgd"

    def __init__(self, params: Iterable, lr: float, **kwargs: Any) -> None:
        super().__init__(params, lr=lr, **self._take_popart_args(kwargs))


class Adam(_PopTorchOptimizer, torch.optim.Adam):
    ENGINE_NAME = "adam"

    def __init__(self, params: Iterable, lr: float = 0.001, **kwargs: Any) -> None:
        super().__init__(params, lr=lr, **self._take_popart_args(kwargs))


class AdamW(_PopTorchOptimizer, torch.optim.AdamW):
    ENGINE_NAME = "adamw"

    def __init__(self, params: Iterable, lr: float = 0.001, **kwargs: Any) -> None:
        super().__init__(params, lr=lr, **self._take_popart_args(kwargs))


class LAMB(_PopTorchOptimizer, torch.optim.Optimizer):
    """LAMB (You et al., 2019): Adam's step scaled per weight by ||w|| / ||step|| (the trust ratio)."""

    ENGINE_NAME = "lamb"

    def __init__(self, params: Iterable, lr: float = 0.001, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01, **kwargs: Any) -> None:
        kwargs = self._take_popart_args(kwargs)
        if kwargs:
            raise TypeError(f"poptorch.optim.LAMB got unexpected arguments: {', '.join(kwargs)}.")
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                m_hat = m / (1 - beta1 ** state["step"])
                v_hat = v / (1 - beta2 ** state["step"])
                update = m_hat / (v_hat.sqrt() + group["eps"]) + group["weight_decay"] * p
                w_norm, u_norm = float(p.norm()), float(update.norm())
                trust = w_norm / u_norm if w_norm > 0 and u_norm > 0 and math.isfinite(w_norm / u_norm) else 1.0
                p.add_(update, alpha=-group["lr"] * trust)
        return loss


# PyTorch's own optimisers passed to trainingModel: the emulator's name for their state.
TORCH_OPTIMISERS = {torch.optim.SGD: "sgd", torch.optim.Adam: "adam", torch.optim.AdamW: "adamw"}


def engine_options(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The emulator's optimiser options for any optimiser a training model was given."""
    if isinstance(optimizer, _PopTorchOptimizer):
        return optimizer.engine_options()
    if (name := TORCH_OPTIMISERS.get(type(optimizer))) is not None:
        return {"optimiser": name}
    raise UnsupportedError(f"the optimiser {type(optimizer).__module__}.{type(optimizer).__name__}",
                           "use poptorch.optim.SGD, Adam, AdamW or LAMB (or torch.optim.SGD, Adam, AdamW)")


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    raise UnsupportedError(f"poptorch.optim.{name}")
