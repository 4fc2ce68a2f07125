"""What the compiler builds for each IPU: its program (``IpuProgram``: the steps as parallel lists, the
tile cycles, the exchanges) and the tensors it holds (``Variable``). The lowering (engine/lowering.py)
fills the steps, the liveness (engine/variables.py) and the update (engine/update.py) add variables,
and the memory plan (engine/memory.py) and the scheduler read them."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Variable:
    """A tensor on one IPU: bytes per tile over a tile range, live over a step interval."""

    name: str
    category: str
    always_live: bool
    start: int
    per_tile: np.ndarray
    live_from: int
    live_to: int
    op_id: int
    # element type of its data (schema.DTYPES): fp16, fp32, int32, or mixed (moments of two types)
    dtype: str


@dataclass
class IpuProgram:
    """One IPU's compiled program: its steps as parallel lists, plus tile cycles, exchanges, variables."""

    ipu: int
    type: list[str] = field(default_factory=list)
    name: list[str] = field(default_factory=list)
    op_id: list[int] = field(default_factory=list)
    stage: list[int] = field(default_factory=list)
    pass_: list[str] = field(default_factory=list)
    tiles: list[int] = field(default_factory=list)
    bytes: list[int] = field(default_factory=list)
    cycles: list[int] = field(default_factory=list)
    # (step, start tile, cycles per tile, grains per tile) of each compute set
    tile_cycles: list[tuple[int, int, np.ndarray, np.ndarray]] = field(default_factory=list)
    exchanges: list[tuple[int, str, int, int, int, int]] = field(default_factory=list)
    variables: list[Variable] = field(default_factory=list)
    # Segments: (stage, pass) -> [first step, end step); "sync" and "update" are per IPU.
    segments: dict[tuple[int, str], tuple[int, int]] = field(default_factory=dict)
    sync_step: int = -1
    update_segment: tuple[int, int] = (0, 0)
    # Always-live bookkeeping: codelets (kind, pass) -> tiles that hold their code; per-tile extras.
    codelets: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    # The program's distinct op passes (an outlined layer's passes once): key -> (first tile, grains
    # per tile, exchange buffer per tile or None, program steps). Their vertex state, exchange code
    # and control code are held once per key; ``op_steps`` counts every op pass's steps.
    code_sets: dict[tuple, tuple[int, np.ndarray, np.ndarray | None, int]] = field(default_factory=dict)
    op_steps: int = 0
    op_passes: int = 0

    @property
    def steps(self) -> int:
        return len(self.type)

    def add(self, type_: str, name: str, op_id: int, stage: int, pass_: str, tiles: int, bytes_: int,
            cycles: int) -> int:
        self.type.append(type_)
        self.name.append(name)
        self.op_id.append(op_id)
        self.stage.append(stage)
        self.pass_.append(pass_)
        self.tiles.append(int(tiles))
        self.bytes.append(int(bytes_))
        self.cycles.append(int(cycles))
        return len(self.type) - 1
