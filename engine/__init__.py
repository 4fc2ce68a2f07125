"""The instrumented IPU emulator: targets, the model description API, the zoo, compiler and scheduler.

Describe a model in PopTorch's words and run it::

    from engine import Layout, Model, ModelBlock, RunOptions, StageSpec

    def build(options: RunOptions) -> Model:
        m = Model("mine", options)
        x = m.input((784,))
        with ModelBlock("B1"):
            x = m.relu(m.linear(x, 512))
        with ModelBlock("B2"):
            m.loss(m.linear(x, 10))
        return m.set_default_layout(Layout("pipelined", [StageSpec("B1", ipu=0), StageSpec("B2", ipu=1)]))

then ``popvision run mine.py --profile``. The engine depends on popvision_py.format and
popvision_py.errors only. The planner's rules are its own (``engine.rules``); the analysis is handed
them to check the fixes it suggests, and never imports the engine.

The public names below are loaded on first use (PEP 562), so that importing one small module of the
engine (``engine.rules``, which ``popvision report`` and ``popvision_py.open`` hand the analysis)
does not load the compiler, the scheduler and NumPy with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Each public name and the module (under engine.) that defines it.
_HOME = {
    "Model": "model", "ModelBlock": "model", "Tensor": "model",
    "RunOptions": "options", "TensorLocations": "options",
    "Layout": "layout", "StageSpec": "layout",
    "RunRequest": "runner", "emulate": "runner", "prepare": "runner",
    "Assumptions": "assumptions",
    "ARCHS": "targets", "SYSTEMS": "targets", "Target": "targets", "make_target": "targets",
    "ZOO": "zoo",
}

__all__ = [
    "ARCHS", "SYSTEMS", "ZOO", "Assumptions", "Layout", "Model", "ModelBlock", "RunOptions",
    "RunRequest", "StageSpec", "Target", "Tensor", "TensorLocations", "emulate", "make_target", "prepare",
]

if TYPE_CHECKING:
    from engine.assumptions import Assumptions
    from engine.layout import Layout, StageSpec
    from engine.model import Model, ModelBlock, Tensor
    from engine.options import RunOptions, TensorLocations
    from engine.runner import RunRequest, emulate, prepare
    from engine.targets import ARCHS, SYSTEMS, Target, make_target
    from engine.zoo import ZOO


def __getattr__(name: str) -> Any:
    """A public name, imported from its module the first time it is asked for."""
    if name not in _HOME:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"engine.{_HOME[name]}"), name)
    globals()[name] = value  # asked once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
