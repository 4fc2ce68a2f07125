"""The orders the search takes things in, whatever they are: ``spread`` (ends first, then the middles of
the gaps), ``round_robin`` over lists and ``spread_keys`` over tuples. The search space (``space``)
and the budget's cap (``cap``) both use them."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from itertools import zip_longest
from typing import TypeVar

T = TypeVar("T")
_GAP = object()


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
