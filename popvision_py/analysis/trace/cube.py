"""The trace's cycles per (IPU, stage, pass, phase), held for the (IPU, stage) pairs the trace has
(``Cube``): ``scan`` folds them, the reports ask for its sums."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Cube:
    """The trace's cycles per ``[ipu, stage + 1, pass, phase]`` (``shape``), held as the (ipu, stage) pairs that
    have rows: ``cells[pair, pass, phase]``, the pairs sorted by ``ipu`` then ``stage`` (stage + 1: stage -1 at
    0). A run of N ranks, each its own stage, has N pairs, not N x N: the dense array of 4,096 ranks would be
    4 GB. The reports ask for its sums over IPUs, stages or both (``by_ipu``, ``by_stage``, ``of_stage``,
    ``total``); ``np.asarray`` gives the dense array (tests, small runs)."""

    shape: tuple[int, int, int, int]
    ipu: np.ndarray
    stage: np.ndarray
    cells: np.ndarray

    @classmethod
    def from_dense(cls, dense: np.ndarray) -> Cube:
        """The cube of a dense ``[ipu, stage + 1, pass, phase]`` array (every pair kept)."""
        n_ipu, n_stage = dense.shape[:2]
        ipu, stage = np.divmod(np.arange(n_ipu * n_stage, dtype=np.int64), max(n_stage, 1))
        return cls(tuple(dense.shape), ipu, stage, np.ascontiguousarray(dense.reshape(-1, *dense.shape[2:])))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        dense = np.zeros(self.shape, np.int64)
        dense[self.ipu, self.stage] = self.cells
        return dense if dtype is None else dense.astype(dtype)

    def by_ipu(self) -> np.ndarray:
        """``[ipu, pass, phase]``: every stage's cycles summed."""
        out = np.zeros((self.shape[0], *self.shape[2:]), np.int64)
        np.add.at(out, self.ipu, self.cells)
        return out

    def by_stage(self) -> np.ndarray:
        """``[stage + 1, pass, phase]``: every IPU's cycles summed."""
        out = np.zeros(self.shape[1:], np.int64)
        np.add.at(out, self.stage, self.cells)
        return out

    def of_stage(self, stage: int) -> np.ndarray:
        """``[ipu, pass, phase]`` of one stage index (stage + 1: 0 for the rows of no stage)."""
        out = np.zeros((self.shape[0], *self.shape[2:]), np.int64)
        mine = self.stage == stage
        out[self.ipu[mine]] = self.cells[mine]  # a pair once
        return out

    def total(self) -> np.ndarray:
        """``[pass, phase]``: every IPU's and stage's cycles summed."""
        return self.cells.sum(axis=0) if len(self.cells) else np.zeros(self.shape[2:], np.int64)

    def present(self) -> tuple[np.ndarray, np.ndarray]:
        """The (ipu, stage) pairs of a stage (>= 0) with cycles, sorted by ipu then stage."""
        has = (self.stage >= 1) & (self.cells.sum(axis=(1, 2)) > 0)
        return self.ipu[has], self.stage[has] - 1
