"""What-ifs of a pipeline imported from PyTorch traces: schedules x micro-batch counts, each re-timed with
the run's own measured costs (``analysis.pipeline.replay``), the fastest named in PyTorch's words. `popvision tune
PROFILE` prints the search, `--set` one answer, and the insights the best change.

An emulated model's search emulates each candidate on Dask; here a candidate is one list schedule of a
few hundred actions (about a millisecond), so the whole search runs in the process. Candidates are
ranked by the time per micro-batch (of the recorded size): a step of more micro-batches carries more
samples. ``what_if`` answers one question (``--set``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from popvision_py.analysis.pipeline.replay import Replay, ReplayError, WhatIf
from popvision_py.analysis.pipeline.schedules import MULTI_STAGE, SCHEDULE_CLASS, SCHEDULES, schedule_order

COLUMNS = ["rank", "schedule", "micro_batches", "step_ms", "low_ms", "high_ms", "ms_per_micro_batch", "gain_pct",
           "bubble_pct", "pytorch"]
# the insights suggest a change of schedule or micro-batches only above this throughput gain: below it, the
# measured costs' own spread from step to step moves the answer as much
MIN_GAIN_PCT = 5.0


def micro_batch_counts(recorded: int, world: int) -> list[int]:
    """The counts tried: the recorded one, halves and doubles of it, and multiples of the ranks up to 4x."""
    counts = {recorded, max(1, recorded // 2), recorded * 2, recorded * 4}
    counts |= {world * k for k in range(1, 4 * recorded // world + 1)}
    return sorted(c for c in counts if 1 <= c <= 4 * recorded)


def pytorch_words(p: WhatIf) -> str:
    """The change to make, as a torch.distributed.pipelining user writes it."""
    stages = "stages" if p.schedule in MULTI_STAGE else "stage"
    return f"{SCHEDULE_CLASS[p.schedule]}({stages}, n_microbatches={p.micro_batches}, loss_fn=...)"


def search(replay: Replay) -> pd.DataFrame:
    """Every schedule the stages allow x ``micro_batch_counts``, fastest per micro-batch first."""
    m = replay.m
    rows = []
    for schedule in SCHEDULES:
        for count in micro_batch_counts(m.micro_batches, m.world):
            try:
                schedule_order(schedule, m.world, m.stages_per_rank, count)
            except ReplayError:
                continue  # a schedule torch refuses for these stages or this count
            p = replay.predict(schedule=schedule, micro_batches=count)
            rows.append({"schedule": schedule, "micro_batches": count, "step_ms": p.step_ns / 1e6,
                         "low_ms": p.low_ns / 1e6, "high_ms": p.high_ns / 1e6,
                         "ms_per_micro_batch": p.per_micro_batch_ns / 1e6, "gain_pct": p.gain_pct,
                         "bubble_pct": p.bubble_pct, "pytorch": pytorch_words(p)})
    out = pd.DataFrame(rows).sort_values(["ms_per_micro_batch", "micro_batches"], kind="stable").reset_index(drop=True)
    out.insert(0, "rank", range(1, len(out) + 1))
    return out[COLUMNS]


def parse_sets(pairs: Iterable[str]) -> dict[str, Any]:
    """``--set KEY=VALUE`` pairs: schedule=NAME, micro_batches=N, fast_rank=R, stageN=FACTOR (scale stage N's
    cost), blocks=A,B,...:C,D,... (each stage's blocks as recorded and as asked: ``Replay.block_scale``).
    ReplayError, one sentence, for anything else."""
    out: dict[str, Any] = {"scale": {}}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key, value = key.strip().replace("-", "_"), value.strip()
        try:
            if not sep or not value:
                raise ValueError
            if key == "schedule":
                match = [s for s in SCHEDULES if s.lower() == value.lower().removeprefix("schedule")]
                if not match:
                    raise ReplayError(f"--set schedule={value}: one of {', '.join(SCHEDULES)}.")
                out["schedule"] = match[0]
            elif key in ("micro_batches", "n_microbatches"):
                out["micro_batches"] = int(value)
            elif key == "fast_rank":
                out["fast_rank"] = int(value)
            elif key.startswith("stage") and key[5:].isdigit():
                out["scale"][int(key[5:])] = float(value)
            elif key == "blocks":
                recorded, colon, asked = value.partition(":")
                if not colon:
                    raise ValueError
                out["blocks"] = ([int(b) for b in recorded.split(",")], [int(b) for b in asked.split(",")])
            else:
                raise ReplayError(f"--set {pair}: the keys are schedule, micro_batches, fast_rank, stageN "
                                  f"(stage N's cost times a factor, e.g. stage2=0.5) and blocks (each stage's "
                                  f"blocks as recorded and as asked, e.g. blocks=1,4:4,1).")
        except ValueError:
            raise ReplayError(f"--set {pair}: give KEY=VALUE with a number where one is due "
                              f"(e.g. micro_batches=16, stage2=0.5, blocks=1,4:4,1).") from None
    return out


def best_change(replay: Replay) -> pd.Series | None:
    """The search's fastest candidate if it beats the run as recorded, else None."""
    found = search(replay)
    m = replay.m
    best = found.iloc[0]
    recorded = (best["schedule"] == m.schedule) and int(best["micro_batches"]) == m.micro_batches
    return None if recorded or best["gain_pct"] < MIN_GAIN_PCT else best


def what_if(replay: Replay, sets: Mapping[str, Any]) -> WhatIf:
    return replay.predict(schedule=sets.get("schedule"), micro_batches=sets.get("micro_batches"),
                          scale=sets.get("scale"), fast_rank=sets.get("fast_rank"), blocks=sets.get("blocks"))


def insight(view: Any) -> list[tuple[str, str, str, str]]:
    """The insights' row for an imported pipeline (``view``: ``report.critical_path``): the one change of
    schedule or micro-batches that helps most, re-timed; none without a pipeline or a gain of MIN_GAIN_PCT."""
    try:
        best = best_change(view.replay())
    except ReplayError:
        return []  # no pipeline to re-time: nothing to suggest
    if best is None:
        return []
    m = view.measured()
    return [("info", "what-if", f"re-timed with its measured costs, {best['schedule']} with "
             f"{int(best['micro_batches'])} micro-batches (now {m.schedule} with {m.micro_batches}) would run "
             f"{best['gain_pct']:.0f}% more micro-batches a second (step {best['step_ms']:,.1f} ms without the "
             f"profiler, range "
             f"{best['low_ms']:,.1f} to {best['high_ms']:,.1f} ms)",
             f"{best['pytorch']}; memory is not modelled (more micro-batches in flight hold more activations).")]
