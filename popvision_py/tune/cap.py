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

from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from itertools import zip_longest
from typing import TypeVar

from popvision_py.tune.space import Candidate

T = TypeVar("T")
_GAP = object()


@dataclass
class Kept:
    """A round's candidates under the budget: every refused one and ``emulate`` of the others, in
    generation order; ``cut`` others not tried."""

    candidates: list[Candidate]
    emulate: int
    cut: int


def spread(values: Sequence[T]) -> list[T]:
    """``values`` (in order) ends first, then the middle of each gap, breadth first:
    1, 2, 4, 8, 16 -> 1, 16, 4, 2, 8."""
    n = len(values)
    if n <= 2:
        return list(values)
    order = [0, n - 1]
    gaps = deque([(0, n - 1)])
    while gaps:
        a, b = gaps.popleft()
        if b - a > 1:
            middle = (a + b) // 2
            order.append(middle)
            gaps += [(a, middle), (middle, b)]
    return [values[k] for k in order]


def round_robin(lists: Sequence[Sequence[T]]) -> list[T]:
    """The first item of every list, then the second of every list that has one, and so on."""
    return [item for items in zip_longest(*lists, fillvalue=_GAP) for item in items if item is not _GAP]


def spread_keys(keys: Sequence[tuple]) -> list[tuple]:
    """Distinct tuples interleaved field by field: round-robin over the first field's values (in
    ``spread`` order of their sorted values), each value's tuples ordered the same way by the rest."""
    if not keys or not keys[0]:
        return list(keys)
    rests: dict = {}
    for key in keys:
        rests.setdefault(key[0], []).append(key[1:])
    return round_robin([[(value, *rest) for rest in spread_keys(rests[value])] for value in spread(sorted(rests))])


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
