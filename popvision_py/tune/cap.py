"""What `popvision tune --max-candidates N` keeps when a round has more candidates than the budget left.

The budget counts candidates to emulate. A refused candidate (``Candidate.reason``) costs nothing,
so it is a row whatever the cap. When a round's other candidates are more than the budget left, the
ones kept cover the round's space rather than its first corner:

- **Round 1** (the mappings): the candidates are grouped by (pipeline depth, tensor shards,
  replicas). The start's group comes first, then the others in *spread order*: round-robin over the
  depths, within a depth round-robin over the tensor shards, within those over the replicas, each
  dimension's values taken ends first and then halving the gaps (depths 1, 64, 8, 2, 16, 4, 32 for
  1..64). The candidates are then taken round-robin over the groups: the first (in generation
  order, the start first) of every group, then the second of every group that has one, and so on.
  Every group is tried before a second split of any, and a cap smaller than the number of groups
  still reaches every depth, the fewest and the most shards and replicas.
- **Round 2** (moved cuts and settings): round-robin over the refined mappings, fastest first: every
  mapping's first candidate (a moved cut, then a settings variant, in turn), then every mapping's
  second, and so on.

The choice depends on the candidates alone (never on a previous result or on timing), so the same
search keeps the same candidates; a round that fits the budget is kept whole, in generation order,
so an uncapped search is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

from popvision_py.tune.order import round_robin, spread_keys
from popvision_py.tune.space import Candidate


@dataclass
class Kept:
    """A round's candidates under the budget: every refused one and ``emulate`` of the others, in
    generation order; ``cut`` others not tried."""

    candidates: list[Candidate]
    emulate: int
    cut: int


def mapping_shape(cand: Candidate) -> tuple[int, int, int]:
    """Round 1's group: (pipeline depth, tensor shards, replicas)."""
    return len(cand.stages), cand.config["tensor_sharding"], cand.config["replication_factor"]


def mapping(cand: Candidate) -> Hashable:
    """Round 2's group: the mapping a candidate refines (its key; else its stages, tensor shards, replicas)."""
    return cand.refines or (cand.config["stages"], cand.config["tensor_sharding"], cand.config["replication_factor"])


def keep(cands: list[Candidate], budget: int, group: Callable[[Candidate], Hashable],
         spread_groups: bool) -> Kept:
    """``cands`` under ``budget`` candidates to emulate: the first group (of the first candidate) first,
    then the others in ``spread_keys`` order (``spread_groups``) or in order of appearance; candidates
    taken round-robin over the groups."""
    todo = [c for c in cands if not c.reason]
    budget = max(budget, 0)
    if len(todo) <= budget:
        return Kept(cands, len(todo), 0)
    groups: dict[Hashable, list[Candidate]] = {}
    for c in todo:
        groups.setdefault(group(c), []).append(c)
    order = list(groups)
    if spread_groups:
        order = order[:1] + [k for k in spread_keys(order) if k != order[0]]
    chosen = {c.key for c in round_robin([groups[k] for k in order])[:budget]}
    return Kept([c for c in cands if c.reason or c.key in chosen], budget, len(todo) - budget)


def keep_mappings(cands: list[Candidate], budget: int) -> Kept:
    """Round 1 under the budget (the start is its first candidate, so always kept)."""
    return keep(cands, budget, mapping_shape, spread_groups=True)


def keep_settings(cands: list[Candidate], budget: int) -> Kept:
    """Round 2 under the budget."""
    return keep(cands, budget, mapping, spread_groups=False)
