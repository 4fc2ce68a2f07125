"""`popvision tune --max-candidates N`: the budget counts candidates emulated, and what it keeps covers
the mappings (every (depth, tensor shards, replicas) group before a second split of any)."""

from __future__ import annotations

import json
import math
from collections import Counter

import pandas as pd
import pytest

from engine.runner import RunRequest
from popvision_py.format.tunefile import read_tune
from popvision_py.tune.cap import keep_mappings, keep_settings, mapping_shape
from popvision_py.tune.order import round_robin, spread, spread_keys
from popvision_py.tune.space import SearchSettings, Space
from popvision_py.tune.table import capped_lines
from tests.tune.conftest import BLOCKS, tune

# The uneven model (micro-batch 16) on an IPU-POD4, at a global batch of 64: gradient accumulation is
# 64 / (16 x replicas), so 4, 2 and 1 for 1, 2 and 4 replicas, and a training pipeline of N stages
# needs at least 2N-1. Mappings only (no settings round worth the name).
SEARCH = ("--system", "POD4", "--search", "stages,sharding,replicas", "--global-batch", "64", "--workers", "1",
          "-q", "--no-profile")
CAP = 10


def expected_groups() -> tuple[dict[tuple[int, int, int], int], int]:
    """From first principles: each (depth, shards, replicas) group on 4 IPUs, with its count of splits that
    the planner accepts, and the count it refuses."""
    kept, refused = {}, 0
    for depth in range(1, 5):
        splits = math.comb(len(BLOCKS) - 1, depth - 1)
        for shards in (1, 2, 4, 8):
            for replicas in (1, 2, 4):
                if depth * shards * replicas > 4:
                    continue
                accumulation = 64 // (16 * replicas)
                if depth == 1 or accumulation >= 2 * depth - 1:
                    kept[(depth, shards, replicas)] = splits
                else:
                    refused += splits
    # the start (one stage on IPU 0, accumulating 64 / 16 = 4 at the global batch) is the (1, 1, 1) split
    return kept, refused


def group_of(request: str) -> tuple[int, int, int]:
    """A row's (depth, tensor shards, replicas), read from its request."""
    r = json.loads(request)
    return len(r["stages"].split()), r["options"]["tensor_sharding"], r["options"]["replication_factor"]


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, dict, str]:
    from tests.tune.conftest import UNEVEN_MODEL

    folder = tmp_path_factory.mktemp("cap")
    model = folder / "uneven.py"
    model.write_text(UNEVEN_MODEL)
    out = folder / "tune.parquet"
    result = tune(str(model), *SEARCH, "--max-candidates", str(CAP), "-o", str(out))
    assert result.exit_code == 0, result.output
    rows, meta = read_tune(out)
    return rows, meta, result.output


def test_refused_candidates_do_not_use_the_budget(capped) -> None:
    rows, meta, output = capped
    groups, refused = expected_groups()
    assert (len(groups), sum(groups.values()), refused) == (8, 14, 14)
    # GIVEN a cap of 10 on a search of 14 candidates to emulate and 14 the planner refuses
    # THEN 10 candidates are emulated and all 14 refused ones are rows besides
    emulated = rows[rows["status"] != "rejected"]
    assert len(emulated) == CAP
    assert (rows["status"] == "rejected").sum() == refused
    assert rows.loc[rows["status"] == "rejected", "reason"].str.startswith("Gradient accumulation").all()
    # AND the 4 not emulated are what the output says was cut
    assert meta["capped"] == meta["capped_mappings"] == sum(groups.values()) - CAP == 4
    assert ("The search stopped at --max-candidates 10 (it counts candidates emulated; refused ones are rows and do "
            "not count): 4 more mappings were not tried.") in output
    assert "every such group before a second split of any; none were left for round two" in output


def test_every_group_is_tried_before_any_group_has_two(capped) -> None:
    rows, _, _ = capped
    groups, _ = expected_groups()
    emulated = rows[rows["status"] != "rejected"]
    counts = Counter(emulated["request"].map(group_of))
    # THEN all 8 groups are there; the 2 candidates beyond one each are seconds of groups that have more
    assert set(counts) == set(groups)
    assert sorted(counts.values()) == [1] * 6 + [2] * 2
    assert all(groups[g] >= 2 for g, n in counts.items() if n == 2)
    # AND the start is kept
    assert emulated["is_start"].sum() == 1


def test_a_cap_below_the_groups_spreads_over_them_and_is_the_same_every_time(uneven: str) -> None:
    # GIVEN the same search's space (nothing emulated) and a cap of 4 for its 8 groups
    space = Space(RunRequest(model=uneven), SearchSettings(system="IPU-POD4", global_batch=64,
                                                           search=("stages", "sharding", "replicas")))
    first = keep_mappings(space.round_one(), 4)
    # THEN 4 candidates to emulate are kept (and every refused one; all in generation order, the start first),
    # each of another group
    todo = [c for c in first.candidates if not c.reason]
    assert len(todo) == 4 and todo[0].is_start
    assert sum(bool(c.reason) for c in first.candidates) == expected_groups()[1]
    # AND they reach both depths that can run and the fewest, the most and the middle tensor shards
    # (depths 1, 2; shards 1, 4, 2 in turn), not depth 1's groups alone
    assert sorted(mapping_shape(c) for c in todo) == [(1, 1, 1), (1, 4, 1), (2, 1, 1), (2, 2, 1)]
    # AND the choice is the same however often it is made
    assert [c.key for c in keep_mappings(space.round_one(), 4).candidates] == [c.key for c in first.candidates]


def test_spread_and_round_robin_orders() -> None:
    assert spread([1, 2, 4, 8, 16, 32, 64]) == [1, 64, 8, 2, 16, 4, 32]
    assert spread([1, 2]) == [1, 2]
    assert round_robin([[1, 2, 3], [4], [5, 6]]) == [1, 4, 5, 2, 6, 3]
    # depths first, then shards within a depth
    assert spread_keys([(1, 1), (1, 2), (2, 1), (3, 1)]) == [(1, 1), (3, 1), (2, 1), (1, 2)]


def test_a_cut_settings_round_takes_the_refined_mappings_in_turn(uneven: str) -> None:
    # GIVEN the settings variants of two mappings (depth 2 at replicas 1, the cut after B0 and after B1) at a
    # global batch of 64: a micro-batch of 32 leaves an accumulation of 2, below the 3 a 2-stage pipeline needs
    space = Space(RunRequest(model=uneven), SearchSettings(system="IPU-POD4", global_batch=64))
    mappings = [c for c in space.round_one() if mapping_shape(c) == (2, 1, 1) and not c.reason][:2]
    variants = space.round_two(mappings)
    todo = [c for c in variants if not c.reason]
    assert len(todo) > 5 and all(c.config["micro_batch_size"] == 32 for c in variants if c.reason)
    assert len(variants) - len(todo) == len(todo) / 2  # micro-batch 32 of 8, 16, 32: a third refused
    # WHEN the budget left for them is 5
    kept = keep_settings(variants, 5)
    # THEN 5 are kept to emulate, 3 of the first mapping and 2 of the second, and every refused variant besides
    chosen = Counter(c.config["stages"] for c in kept.candidates if not c.reason)
    assert chosen == {mappings[0].config["stages"]: 3, mappings[1].config["stages"]: 2}
    assert [c for c in kept.candidates if c.reason] == [c for c in variants if c.reason]
    assert (kept.emulate, kept.cut) == (5, len(todo) - 5)
    # AND the output says so
    meta = {"max_candidates": 40, "capped": kept.cut, "capped_mappings": 0, "capped_settings": kept.cut}
    assert capped_lines(meta) == [
        f"The search stopped at --max-candidates 40 (it counts candidates emulated; refused ones are rows and do "
        f"not count): {kept.cut} more round-two candidates (moved cuts and settings) were not tried.",
        "Kept: every mapping; then round two's candidates round-robin over the refined mappings, fastest first."]


def test_a_cut_round_two_takes_moved_cuts_and_settings_of_each_refined_mapping_in_turn() -> None:
    # GIVEN bert-large on an IPU-POD16 (too many splits for round 1 to try them all) and two 8-stage mappings
    space = Space(RunRequest(model="bert-large"), SearchSettings(system="IPU-POD16"))
    mappings = [c for c in space.round_one() if mapping_shape(c) == (8, 1, 1) and not c.reason][:2]
    second = space.round_two(mappings)
    # THEN each mapping's candidates alternate a moved cut (other stages, same settings) and a settings
    # variant (same stages), and every one names the mapping it refines
    for m in mappings:
        mine = [c for c in second if c.refines == m.key]
        kinds = ["moved" if c.config["stages"] != m.config["stages"] else "settings" for c in mine[:4]]
        assert kinds == ["moved", "settings", "moved", "settings"]
    # WHEN the budget left is 4: two of each mapping, one moved cut and one settings variant each
    kept = keep_settings(second, 4)
    chosen = [c for c in kept.candidates if not c.reason]
    assert Counter(c.refines for c in chosen) == {mappings[0].key: 2, mappings[1].key: 2}
