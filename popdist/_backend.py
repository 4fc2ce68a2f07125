"""PopDist's backend: the instances' process group, over which their replicas stay identical.

On IPUs the replicas of all instances reduce their gradients together (GCL over IPU-Links and
GW-Links). Here each instance runs its own replicas on the CPU, and this backend joins the instances
with ``torch.distributed`` over gloo on loopback: poprun gives every instance ``MASTER_ADDR``,
``MASTER_PORT``, ``RANK`` (the instance index) and ``WORLD_SIZE`` (the instances). The group is made
on first use (``popdist.init()`` or a distributed ``trainingModel``'s first step) and destroyed when
the process exits. ``popdist.execute_on_instances`` narrows it to some instances for a while.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator

import torch
import torch.distributed as dist

from popdist._env import PEER_LOST_EXIT_CODE
from popdist._errors import PopDistError

# The groups ``execute_on_instances`` narrowed the collectives to (innermost last), each with its ranks;
# each group is made once (every instance makes the same ones, in the same order).
_NARROWED: list[tuple[object, tuple[int, ...]]] = []
_GROUPS: dict[tuple[int, ...], object] = {}
_TORCH_RENDEZVOUS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")


def is_initialised() -> bool:
    return dist.is_available() and dist.is_initialized()


def initialise(instances: int) -> None:
    """Join the ``instances`` processes' group (once per process), from poprun's environment."""
    if is_initialised():
        if dist.get_world_size() != instances:
            raise PopDistError(f"The process group has {dist.get_world_size()} processes, not the {instances} "
                               f"instances the options distribute over.")
        return
    missing = [name for name in _TORCH_RENDEZVOUS if not os.environ.get(name)]
    if missing:
        raise PopDistError(f"Distributing over {instances} processes needs poprun's {', '.join(missing)} to join "
                           f"them; start the program with `poprun --num-instances {instances} ...`.")
    if int(os.environ["WORLD_SIZE"]) != instances:
        raise PopDistError(f"poprun started {os.environ['WORLD_SIZE']} instance(s), but the options distribute over "
                           f"{instances} processes; use popdist.poptorch.Options() to take poprun's.")
    dist.init_process_group("gloo", init_method="env://")
    atexit.register(_finalise)


def _finalise() -> None:
    if is_initialised():
        _GROUPS.clear()
        dist.destroy_process_group()


def _group() -> tuple[object, tuple[int, ...]]:
    """The collectives' group and its ranks: the narrowest ``execute_on_instances`` asked for, else all."""
    if _NARROWED:
        return _NARROWED[-1]
    return dist.group.WORLD, tuple(range(dist.get_world_size()))


@contextlib.contextmanager
def narrowed(instances: Iterable[int]) -> Iterator[bool]:
    """Collectives inside reach only ``instances``; yields whether this instance is one of them.
    Every instance must enter it (making a group is itself collective)."""
    ranks = tuple(sorted(set(instances)))
    if ranks not in _GROUPS:
        _GROUPS[ranks] = dist.new_group(list(ranks))
    _NARROWED.append((_GROUPS[ranks], ranks))
    try:
        yield dist.get_rank() in ranks
    finally:
        _NARROWED.pop()


class PeerLost(SystemExit):
    """Another instance left a collective (it failed, or was stopped): this one stops too, with
    ``PEER_LOST_EXIT_CODE``, so that poprun names the instance that failed first."""


@contextlib.contextmanager
def _collective(what: str) -> Iterator[None]:
    try:
        yield
    except RuntimeError as exc:  # gloo's "Connection reset by peer", a timeout: the launch cannot go on
        reason = str(exc).splitlines()[0].split("] ")[-1].split(". ")[0]
        print(f"popdist: instance {dist.get_rank()} lost the other instances during {what} ({reason}); stopping.",
              file=sys.stderr, flush=True)
        raise PeerLost(PEER_LOST_EXIT_CODE) from None


def broadcast_from_first(tensors: Iterable[torch.Tensor]) -> None:
    """Every instance's ``tensors`` become the first instance's (of the group), in place."""
    group, ranks = _group()
    with torch.no_grad(), _collective("the broadcast of the first instance's weights"):
        for tensor in tensors:
            dist.broadcast(tensor.data, src=ranks[0], group=group)


def reduce_gradients(parameters: Iterable[torch.nn.Parameter], mean: bool) -> None:
    """Sum (``mean``: average) the parameters' gradients over the instances, in place: afterwards
    every instance holds the same gradients, so the same optimiser step keeps the weights identical.
    A parameter no instance has a gradient for keeps none (the optimiser skips it, as it would
    alone); one only some instances have counts as zero on the others."""
    group, ranks = _group()
    by_dtype: dict[torch.dtype, list[torch.nn.Parameter]] = defaultdict(list)
    for p in parameters:
        if p.requires_grad:
            by_dtype[p.dtype].append(p)
    for dtype, params in by_dtype.items():
        # one flat buffer per dtype: the gradients, then how many instances had each (a single all-reduce)
        pieces = [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params]
        pieces.append(torch.tensor([float(p.grad is not None) for p in params], dtype=dtype))
        flat = torch.cat(pieces)
        with _collective("the gradient reduction"):
            dist.all_reduce(flat, group=group)
        if mean:
            flat /= len(ranks)
        had = flat[-len(params):]
        start = 0
        for k, p in enumerate(params):
            chunk = flat[start:start + p.numel()].view_as(p)
            start += p.numel()
            if had[k] > 0:
                p.grad = chunk.clone()
