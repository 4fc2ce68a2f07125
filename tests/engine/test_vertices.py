"""The vertices the emulator records per tile and compute set (``tile_cycles.vertices``, schema 2):
one per busy worker, from the op's grains split over its tiles."""

from __future__ import annotations

import numpy as np

from engine.compiler import compile_plan
from engine.instrument import tile_cycles_batches
from engine.runner import RunRequest, prepare

WORKERS = 6  # worker contexts per tile (the IPU's public figure)


def test_each_forward_compute_set_runs_one_vertex_per_busy_worker_on_each_tile():
    # GIVEN mnist compiled, and the rows the profile's tile_cycles gets
    compiled = compile_plan(prepare(RunRequest("mnist")))
    rows = {k: np.concatenate([b[k] for b in tile_cycles_batches(compiled)])
            for k in ("ipu", "step", "tile", "vertices")}
    tiles = compiled.plan.target.tiles
    ops = {op.op_id: op for op in compiled.plan.model.ops}
    checked = 0
    for prog in compiled.programs:
        for step, (kind, name, op_id) in enumerate(zip(prog.type, prog.name, prog.op_id)):
            if kind != "compute_set" or op_id < 0 or name != f"{ops[op_id].name}/fwd":
                continue
            # WHEN the op's grains are spread as the mapping spreads them: over min(grains, tiles)
            # tiles, the first grains % used taking one more
            grains = ops[op_id].grains
            used = min(grains, tiles)
            per_tile = np.full(used, grains // used)
            per_tile[:grains % used] += 1
            mine = (rows["ipu"] == prog.ipu) & (rows["step"] == step)
            # THEN each tile runs min(its grains, 6) vertices, in tile order
            assert rows["vertices"][mine].tolist() == np.minimum(per_tile, WORKERS).tolist(), name
            checked += 1
    assert checked == len([op for op in compiled.plan.model.ops])  # every op's forward pass
    assert rows["vertices"].min() >= 1 and rows["vertices"].max() <= WORKERS
