"""Stages and execution strategies, as PopTorch names them.

Stages group blocks on IPUs (``Stage("B1", "B2").ipu(0)``) and an execution strategy orders them
(``PipelinedExecution``, ``ShardedExecution``, ``PhasedExecution``); ``STRATEGIES`` maps each
strategy's kind to its class.
"""

from __future__ import annotations

from popvision_py.errors import ConfigError


class Stage:
    """A group of blocks placed on one IPU: ``Stage("B1", "B2").ipu(0)``."""

    def __init__(self, *blocks: str) -> None:
        if not blocks:
            raise ConfigError("A Stage needs at least one block name.")
        self.blocks: tuple[str, ...] = tuple(blocks)
        self.ipu_id: int | None = None

    def ipu(self, ipu_id: int) -> "Stage":
        self.ipu_id = int(ipu_id)
        return self

    def __repr__(self) -> str:
        return f"Stage({', '.join(map(repr, self.blocks))}).ipu({self.ipu_id})"


class ExecutionStrategy:
    """Stages and how they run; ``kind`` is pipelined, sharded or phased."""

    kind = ""

    def __init__(self, *stages: Stage | str) -> None:
        # PopTorch's shorthand: bare block names are one stage each, on IPUs 0, 1, 2...
        self.stages: list[Stage] = [Stage(s) if isinstance(s, str) else s for s in stages]
        for i, stage in enumerate(self.stages):
            if stage.ipu_id is None:
                stage.ipu_id = i

    def with_kind(self, kind: str) -> "ExecutionStrategy":
        """The same stages under another strategy."""
        cls = STRATEGIES[kind]
        return cls(*[Stage(*s.blocks).ipu(s.ipu_id) for s in self.stages])

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(map(repr, self.stages))})"


class PipelinedExecution(ExecutionStrategy):
    """Stages on ascending IPUs, all busy at once on different micro-batches."""

    kind = "pipelined"


class ShardedExecution(ExecutionStrategy):
    """Stages one after another: one IPU busy at a time."""

    kind = "sharded"


class PhasedExecution(ExecutionStrategy):
    """Each stage is a phase; phases run one after another, their weights streamed from streaming memory."""

    kind = "phased"


STRATEGIES: dict[str, type[ExecutionStrategy]] = {
    "pipelined": PipelinedExecution,
    "sharded": ShardedExecution,
    "phased": PhasedExecution,
}
