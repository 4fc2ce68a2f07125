"""How a model's blocks are laid out on IPUs: the engine's one description of stages and their order.

A ``StageSpec`` places blocks on one IPU; a ``Layout`` is the stages in order and how they run
(``kind``): ``pipelined`` (stages on ascending IPUs, all busy at once on different micro-batches),
``sharded`` (stages one after another, one IPU busy at a time) or ``phased`` (each stage a phase,
its weights streamed from streaming memory). They are plain values: a model file sets its default
(``Model.set_default_layout``), ``popvision run --stages`` parses into one, ``popvision tune``
builds its candidates from them, and the PopTorch shim converts PopTorch's ``Stage`` and execution
strategies into one (``poptorch._options``), so PopTorch's classes stay PopTorch's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from popvision_py.errors import ConfigError

KINDS = ("pipelined", "sharded", "phased")


@dataclass(frozen=True)
class StageSpec:
    """Blocks placed on one IPU: ``StageSpec(("B1", "B2"), ipu=0)`` (one block may be a bare name)."""

    blocks: tuple[str, ...]
    ipu: int

    def __post_init__(self) -> None:
        blocks = (self.blocks,) if isinstance(self.blocks, str) else tuple(self.blocks)
        if not blocks:
            raise ConfigError("A stage needs at least one block name.")
        object.__setattr__(self, "blocks", tuple(str(b) for b in blocks))
        object.__setattr__(self, "ipu", int(self.ipu))

    def __str__(self) -> str:
        return f"{','.join(self.blocks)}@{self.ipu}"


@dataclass(frozen=True)
class Layout:
    """The stages in order and how they run: ``Layout("pipelined", [StageSpec("B1", 0), StageSpec("B2", 1)])``."""

    kind: str
    stages: tuple[StageSpec, ...]

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"Unknown execution strategy {self.kind!r}; choose one of {', '.join(KINDS)}.")
        object.__setattr__(self, "stages", tuple(self.stages))

    @classmethod
    def of(cls, kind: str, *stages: StageSpec | str) -> Layout:
        """PopTorch's shorthand in plain values: a bare block name is a stage of its own, on the IPU
        of its position (``Layout.of("pipelined", "B0", "B1")``: B0 on IPU 0, B1 on IPU 1)."""
        return cls(kind, tuple(StageSpec(s, k) if isinstance(s, str) else s for k, s in enumerate(stages)))

    def with_kind(self, kind: str) -> Layout:
        """The same stages under another kind."""
        return replace(self, kind=kind)

    @property
    def ipus(self) -> list[int]:
        """Each stage's IPU, in order."""
        return [s.ipu for s in self.stages]

    def __str__(self) -> str:
        return f"{self.kind}: {' '.join(map(str, self.stages))}"

