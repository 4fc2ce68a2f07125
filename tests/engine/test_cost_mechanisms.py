"""The cost model's mechanisms, each checked against a figure worked out by hand.

- the AMP's efficiency follows how a shape fills its channel groups (a skinny matmul is slower per FLOP);
- normalisations and softmax reduce their statistics across tiles before applying them;
- a ring all-reduce pays a sync and a link start per step, so it grows with the replicas.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pytest

from engine.costs import PARTIAL_BYTES, STATISTICS_FLOPS, CostModel
from engine.model import Model, ModelBlock
from engine.options import RunOptions
from engine.targets import Assumptions, make_target
from tests.engine.helpers import run_profile, write_model

EFF = Assumptions().amp_efficiency  # the calibrated share of the planned rate

def _vertex_cycles(rows: int, passes: int, units: int) -> int:
    """poplibs' AMP vertex estimate on one tile (lib/poplin/PerformanceEstimation.hpp): 66 per call,
    per pass 4 cycles per row (rows in sixes, one per worker) + 157 + 4 per unit."""
    return 66 + passes * (4 * 6 * math.ceil(rows / 6) + 157 + 4 * units)


def _op(build) -> object:
    m = Model("one", RunOptions(micro_batch_size=1))
    with ModelBlock("B"):
        build(m)
    return m.ops[0]


def test_a_matmul_that_fills_the_amp_runs_nearer_peak_than_a_skinny_one() -> None:
    # GIVEN 96 rows through a 64 -> 64 linear and a 64 -> 10 linear, on one tile, FP16 partials
    costs = CostModel(make_target("mk2"), RunOptions(partials="fp16"))
    wide = _op(lambda m: m.linear(m.input((96, 64)), 64))
    skinny = _op(lambda m: m.linear(m.input((96, 64)), 10))
    # THEN the wide one runs 4 x 4 passes of 16 channels in and 16 out, at 96 x 64 x 64 / 64 ideal
    # cycles: 0.63 of the AMP's peak (poplibs' own table gives 0.63 for 96 rows per tile)
    ideal = 96 * 64 * 64 / 64
    assert costs.amp_plan(wide, 1).efficiency == pytest.approx(EFF * ideal / _vertex_cycles(96, 16, 16))
    assert ideal / _vertex_cycles(96, 16, 16) == pytest.approx(0.63, abs=0.005)
    # AND the skinny one pads its 10 outputs to a pass of 16: 4 passes for 96 x 64 x 10 / 64 cycles
    skinny_share = (96 * 64 * 10 / 64) / _vertex_cycles(96, 4, 16)
    assert costs.amp_plan(skinny, 1).efficiency == pytest.approx(EFF * skinny_share)
    assert skinny_share < 0.4 < 0.6 < ideal / _vertex_cycles(96, 16, 16)


def test_more_rows_per_tile_amortise_the_weights_load_and_fp32_partials_halve_the_peak() -> None:
    half = CostModel(make_target("mk2"), RunOptions(partials="fp16"))
    single = CostModel(make_target("mk2"), RunOptions(partials="fp32"))
    shares = [half.amp_plan(_op(lambda m, r=r: m.linear(m.input((r, 64)), 64)), 1).efficiency / EFF
              for r in (24, 96, 384, 768)]
    # poplibs' estimate: 0.30, 0.63, 0.87, 0.93 of the peak for 24, 96, 384 and 768 rows per tile
    assert shares == pytest.approx([0.30, 0.63, 0.87, 0.93], abs=0.01)
    # FP32 partials run 8 units: 8 passes of 8 outputs, at half the FP16 peak
    op = _op(lambda m: m.linear(m.input((384, 64)), 64))
    own = (384 * 64 * 64 / 32) / _vertex_cycles(384, 4 * 8, 8)
    assert single.amp_plan(op, 1).efficiency == pytest.approx(EFF * own / 2)


def test_a_three_channel_convolution_folds_its_kernel_width_into_the_channels() -> None:
    # GIVEN ResNet's stem: 3 channels, a 7 x 7 kernel, 64 outputs, one 16 x 16 image on one tile
    costs = CostModel(make_target("mk2"), RunOptions(partials="fp16"))
    stem = _op(lambda m: m.conv2d(m.input((3, 16, 16)), 64, 7, padding=3))
    # THEN 3 x 7 = 21 channels take 2 passes of 16 per kernel row (7 rows), 4 output groups of 16:
    # 56 passes over 256 rows, for 256 x 21 x 64 x 7 / 64 ideal cycles
    ideal = 256 * 21 * 64 * 7 / 64
    assert costs.amp_plan(stem, 1).efficiency == pytest.approx(EFF * ideal / _vertex_cycles(256, 2 * 4 * 7, 16))


def test_a_whole_model_op_runs_at_its_planned_rate(tmp_path: Path) -> None:
    # GIVEN a 1024 -> 1024 linear over 64 rows, inference on one IPU
    source = textwrap.dedent(
        """
        from engine import Layout, Model, ModelBlock

        DEFAULTS = {"micro_batch_size": 64, "gradient_accumulation": 1}

        def build(options):
            m = Model("wide", options)
            with ModelBlock("B0"):
                m.linear(m.input((1024,)), 1024, name="wide")
            return m.set_default_layout(Layout.of("sharded", "B0"))
        """)
    t = run_profile(tmp_path, write_model(tmp_path, source), "--mode", "inference", "--device-iterations", "1",
                    "--partials", "fp16")
    cycles = t["programs"].set_index("name").loc["wide/fwd", "cycles"]
    # THEN its 4 x 64 blocks of 16 x 16 outputs take one tile each, at the plan's efficiency
    costs = CostModel(make_target("mk2"), RunOptions(partials="fp16"))
    op = _op(lambda m: m.linear(m.input((64, 1024)), 1024))
    plan = costs.amp_plan(op, 256)
    assert cycles == 80 + math.ceil(2 * 16 * 16 * 1024 / (128 * plan.efficiency) + 12)
    # AND the plan splits the reduction or the rows so that each tile's passes amortise their load:
    # a tile does no worse than one 16-row, 1024-deep pass sequence on its own
    assert plan.efficiency >= EFF * (16 * 1024 * 16 / 64) / _vertex_cycles(16, 64, 16)


NORM = textwrap.dedent(
    """
    from engine import Layout, Model, ModelBlock

    DEFAULTS = {"micro_batch_size": 8, "gradient_accumulation": 1}

    def build(options):
        m = Model("norm", options)
        x = m.input((64, 56, 56))
        with ModelBlock("B0"):
            m.batch_norm(x, name="bn")
        return m.set_default_layout(Layout.of("sharded", "B0"))
    """
)


def test_a_batch_norm_reduces_its_statistics_across_tiles_before_it_normalises(tmp_path: Path) -> None:
    # GIVEN a batch norm over 8 x 64 x 56 x 56 elements (grains of 64: 25,088 grains on 1,472 tiles)
    t = run_profile(tmp_path, write_model(tmp_path, NORM), "--mode", "inference", "--device-iterations", "1")
    p = t["programs"]
    names = list(p["name"].astype(str))
    # THEN the op's pass is: sync, exchange, the statistics' compute set, a sync, the statistics'
    # exchange, then the compute set that normalises
    first = names.index("bn/fwd/sync")
    assert names[first:first + 6] == ["bn/fwd/sync", "bn/fwd/exchange", "bn/fwd/statistics", "bn/fwd/statistics/sync",
                                      "bn/fwd/statistics/exchange", "bn/fwd"]
    # AND the statistics' exchange gathers and broadcasts two FP32 partials per channel a tile holds:
    # a tile holds 8 x 64 x 3,136 / 1,472 = 1,091 elements, less than one channel's run of 3,136, so
    # at most 2 channels: 16 bytes, two exchange latencies of 100 cycles (poplibs' planner's fixed overhead) and
    # 2 x 16 / 4 cycles
    stats = p.set_index("name").loc["bn/fwd/statistics/exchange"]
    per_tile = min(64, math.ceil(8 * 64 * 3136 / 1472 / 3136) + 1) * PARTIAL_BYTES
    assert per_tile == 16
    assert stats["cycles"] == 2 * 100 + math.ceil(2 * per_tile / 4)
    # AND its reduction pass costs 3 FLOP per element on the vector units: a grain of 64 elements is
    # 192 FLOP at 8 FLOP/cycle, in rounds of six grains per worker set
    grains = math.ceil(8 * 64 * 56 * 56 / 64)
    busiest = -(-grains // 1472)
    rounds = -(-busiest // 6)
    assert STATISTICS_FLOPS["batch_norm"] == 3
    assert p.set_index("name").loc["bn/fwd/statistics", "cycles"] == 80 + math.ceil(rounds * (6 * 64 * 3 / 8 + 12))


