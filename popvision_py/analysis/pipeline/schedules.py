"""The pipeline schedules an imported run may use, as each rank's order of actions.

``torch.distributed.pipelining``'s schedules (``SCHEDULES``; ``SCHEDULE_CLASS`` names each one's
class) written from their definitions: ``schedule_order`` gives each rank's actions (the forward
or backward of one micro-batch on one stage) in the order the schedule runs them, and ``source``
the action whose output an action takes. ``analysis.pipeline.replay`` re-times these orders with
measured costs; a schedule torch would refuse is a ``ReplayError`` here as there.
"""

from __future__ import annotations

from popvision_py.errors import PopvisionError

# torch.distributed.pipelining's schedules whose actions the traces time: the zero-bubble ones split a
# backward into its input and weight gradients, which a run of these schedules does not time apart
SCHEDULES = ("GPipe", "1F1B", "Interleaved1F1B", "LoopedBFS")
# the torch.distributed.pipelining class each schedule is
SCHEDULE_CLASS = {"GPipe": "ScheduleGPipe", "1F1B": "Schedule1F1B", "Interleaved1F1B": "ScheduleInterleaved1F1B",
                  "LoopedBFS": "ScheduleLoopedBFS"}
MULTI_STAGE = ("Interleaved1F1B", "LoopedBFS")  # several stages per rank
F, B = "forward", "backward"


class ReplayError(PopvisionError):
    """A profile or a what-if the re-timing cannot answer (one sentence)."""


# -- the schedules' action orders (torch.distributed.pipelining's, written from their definitions) ---


def _interleaved_order(rank: int, world: int, local: int, m: int) -> list[tuple[str, int, int]]:
    """ScheduleInterleaved1F1B's actions for ``rank``: ``local`` stages per rank (stage = l x world + rank).

    Micro-batches go in rounds of ``m // rounds`` (rounds = max(1, m // world)); the warm-up runs
    ``(local - 1) x per_round + 2 (world - 1 - rank)`` forwards (at most all of them), then one
    forward and one backward alternate, then the remaining backwards: the earlier micro-batch first,
    forwards through the local stages in order and backwards in reverse.
    """
    rounds = max(1, m // world)
    per_round = m // rounds
    total = local * m
    warmup = min((local - 1) * per_round + 2 * (world - 1 - rank), total)
    next_mb: dict[tuple[str, int], int] = {}

    def take(kind: str, stage: int) -> tuple[str, int, int]:
        mb = next_mb.get((kind, stage), 0)
        next_mb[(kind, stage)] = mb + 1
        return kind, stage, mb

    def fwd_stage(op: int) -> int:
        return (op // per_round) % local * world + rank

    def bwd_stage(op: int) -> int:
        return (local - 1 - ((op - warmup) // per_round) % local) * world + rank

    order = [take(F, fwd_stage(op)) for op in range(warmup)]
    for op in range(warmup, total):
        order += [take(F, fwd_stage(op)), take(B, bwd_stage(op))]
    order += [take(B, bwd_stage(op)) for op in range(total, total + warmup)]
    return order


def schedule_order(schedule: str, world: int, stages_per_rank: int, m: int) -> list[list[tuple[str, int, int]]]:
    """Each rank's actions, in the order ``schedule`` runs them: (pass, stage, micro-batch).

    Stage s runs on rank s mod ``world``. ReplayError for a schedule torch would refuse.
    """
    if schedule not in SCHEDULES:
        raise ReplayError(f"Unknown schedule {schedule!r}: one of {', '.join(SCHEDULES)}.")
    if m < 1:
        raise ReplayError(f"{m} micro-batches: a schedule needs at least 1.")
    n_stages = world * stages_per_rank
    if schedule in MULTI_STAGE and stages_per_rank < 2:
        raise ReplayError(f"{schedule} runs several stages per rank; this run has one stage per rank "
                          f"(the traces do not time its layers apart, so its stages cannot be split).")
    if schedule == "LoopedBFS":  # each local stage's forwards of every micro-batch, then backwards in reverse
        orders = []
        for r in range(world):
            local = [k * world + r for k in range(stages_per_rank)]
            orders.append([(F, s, i) for s in local for i in range(m)]
                          + [(B, s, i) for s in reversed(local) for i in reversed(range(m))])
        return orders
    if schedule == "Interleaved1F1B":
        rounds = max(1, m // world)
        if m % rounds:
            raise ReplayError(f"Interleaved1F1B needs the micro-batches to be a multiple of its rounds "
                              f"(max(1, {m} // {world} ranks) = {rounds}); {m} is not.")
        return [_interleaved_order(r, world, stages_per_rank, m) for r in range(world)]
    if stages_per_rank != 1:
        raise ReplayError(f"{schedule} runs one stage per rank; this run has {stages_per_rank} per rank "
                          f"(use Interleaved1F1B).")
    orders = []
    for s in range(n_stages):
        if schedule == "GPipe":
            orders.append([(F, s, i) for i in range(m)] + [(B, s, i) for i in range(m)])
            continue
        warmup = min(m, n_stages - s)  # Schedule1F1B: the last stage one forward ahead, the first S
        order = [(F, s, i) for i in range(warmup)]
        for i in range(m):
            order.append((B, s, i))
            if warmup + i < m:
                order.append((F, s, warmup + i))
        orders.append(order)
    return orders


def source(kind: str, stage: int, mb: int, n_stages: int) -> tuple[str, int, int] | None:
    """The action whose output ``(kind, stage, mb)`` takes: the previous stage's forward, the next one's backward."""
    if kind == F:
        return (kind, stage - 1, mb) if stage > 0 else None
    return (kind, stage + 1, mb) if stage < n_stages - 1 else None
