"""Re-timing imported pipelines (issue 49): a step ends once its sends are taken, a wait for an input not yet
sent is not the rank's own time, and the model's blocks moved between stages.

Graphs small enough to time on paper, and the real 4-rank GPipe run the suite records (heavy stage 2).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import popvision_py
from popvision_py.analysis.pipeline import replay as R
from popvision_py.analysis.pipeline import schedules
from popvision_py.cli import main

pytestmark = pytest.mark.slow

F, B = schedules.F, schedules.B


def test_a_rank_ends_its_step_once_its_last_send_is_taken() -> None:
    # GIVEN GPipe over 2 ranks, 2 micro-batches: a heavy first stage (forward 10, backward 30) and a light
    # last one (1 and 1), no latency, no head or tail
    orders = schedules.schedule_order("GPipe", 2, 1, 2)
    cost = {(F, 0): 10.0, (B, 0): 30.0, (F, 1): 1.0, (B, 1): 1.0}
    latency = {(p, first): 0.0 for p in (F, B) for first in (True, False)}
    sim = R.simulate(orders, {0: 0, 1: 1}, lambda _st, kind, s, _mb: (cost[(kind, s)], 0.0, 0.0), latency,
                     np.zeros(2), np.zeros(2), steps=1)
    # THEN on paper: rank 0 runs F0 0-10, F1 10-20, then B0 from 22 (rank 1's B0 ends at 22) to 52, B1 52-82;
    # rank 1 runs F0 10-11, F1 20-21, B0 21-22, B1 22-23, and its B1's gradient is taken only at 52, when
    # rank 0 starts B1: rank 1 ends its step at 52, not at 23
    assert sim.rank_step_ns.tolist() == [82.0, 52.0]


def test_a_wait_for_an_input_not_yet_sent_is_not_the_ranks_own_time(recorded) -> None:
    # GIVEN the recorded GPipe run: stage 0, done with its forwards, waits for its first gradient
    with popvision_py.open(recorded("gpipe").profile) as report:
        a = report.critical_path.measured().actions
    first_b = a[(a["pass"] == B) & (a["stage"] == 0) & (a["micro_batch"] == 0)]
    last_f = a[(a["pass"] == F) & (a["stage"] == 0)].groupby("iteration")["end"].max()
    assert len(first_b) >= 2
    for _, row in first_b.iterrows():
        waited = row["start"] - last_f[row["iteration"]]
        # THEN it waited long (the heavy stage 2 ran every forward and the first backward meanwhile), and
        # of that wait, at most what came after its gradient was sent is taken as its own time
        assert row["sender_end"] - last_f[row["iteration"]] > 0.5 * waited
        assert row["receive"] <= max(0.0, row["start"] - row["sender_end"])


def _blocks(meta: dict) -> list[int]:
    return [len(meta["stage_layers"][s]) for s in sorted(meta["stage_layers"], key=int)]


def test_blocks_moved_between_stages_move_a_cost_per_block(recorded) -> None:
    # GIVEN the recorded GPipe run (4 stages, the heavy one holds four times the blocks of the others)
    run = recorded("gpipe")
    blocks = _blocks(run.meta)
    heavy = int(np.argmax(blocks))
    asked = [blocks[heavy] if s == 0 else (blocks[0] if s == heavy else b) for s, b in enumerate(blocks)]
    with popvision_py.open(run.profile) as report:
        rp = report.critical_path.replay()
    a = rp.m.actions
    factors = rp.block_scale(blocks, asked)
    for kind in (F, B):
        # each stage's typical cost: the median of its actions but a step's first micro-batch
        y = np.array([a[(a["pass"] == kind) & (a["stage"] == s) & ~a["first"]]["cost"].median() for s in range(4)])
        x = np.asarray(blocks, float)
        per_block = np.cov(x, y, bias=True)[0, 1] / np.var(x)  # the least-squares line's slope
        assert per_block > 0
        # THEN the stage that gains blocks gains per_block each, the one that loses them loses as much;
        # the stages whose blocks stay are not touched
        for s in (0, heavy):
            moved = y[s] + per_block * (asked[s] - blocks[s])
            assert factors[(kind, s)] == pytest.approx(moved / y[s], rel=1e-9)
        assert not {(kind, s) for s in range(4) if asked[s] == blocks[s]} & set(factors)
    # and a split that moves the heavy stage's blocks to the first is predicted, named in the user's words
    p = rp.predict(blocks=(blocks, asked))
    assert p.change == f"blocks {','.join(map(str, blocks))} -> {','.join(map(str, asked))}"
    assert p.low_ns <= p.step_ns <= p.high_ns


def test_tune_set_blocks_and_its_mistakes_in_one_sentence(recorded) -> None:
    run = recorded("gpipe")
    blocks = _blocks(run.meta)
    moved = list(reversed(blocks))
    good = f"blocks={','.join(map(str, blocks))}:{','.join(map(str, moved))}"
    result = CliRunner().invoke(main, ["tune", str(run.profile), "--set", good, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["change"].startswith("blocks ")
    for wrong, says in [("blocks=1,4", "give KEY=VALUE"),
                        ("blocks=1,1:1,1", "Give the blocks of each of the 4 stages"),
                        (f"blocks={','.join(map(str, blocks))}:{','.join(['9'] * 4)}", "moved, not added")]:
        result = CliRunner().invoke(main, ["tune", str(run.profile), "--set", wrong])
        assert result.exit_code == 2, result.output
        assert says in result.output and "Traceback" not in result.output
        assert len(result.output.strip().splitlines()) == 1
