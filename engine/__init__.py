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

then ``popvision run mine.py --profile``. The engine depends on popvision_py.format,
popvision_py.errors and the planner's rules (popvision_py.planner_rules) only.
"""

from engine.model import Model, ModelBlock, Tensor
from engine.options import RunOptions, TensorLocations
from engine.layout import Layout, StageSpec
from engine.runner import RunRequest, emulate, prepare
from engine.assumptions import Assumptions
from engine.targets import ARCHS, SYSTEMS, Target, make_target
from engine.zoo import ZOO

__all__ = [
    "ARCHS", "SYSTEMS", "ZOO", "Assumptions", "Layout", "Model", "ModelBlock", "RunOptions",
    "RunRequest", "StageSpec", "Target", "Tensor", "TensorLocations", "emulate", "make_target", "prepare",
]
