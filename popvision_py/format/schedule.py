"""The run's schedule as the profile records it: what the analysis needs to read a profile's stages.

Since schema version 4 the manifest's ``run`` records three facts the planner decided
(docs/profile-format.md): ``runs_as_pipeline`` (the stages ran as a pipeline, or one after
another), ``pipeline_positions`` (each stage's position in the pipeline, in the order of
``run.stages``) and ``samples_per_step`` (samples one step takes). The analysis reads them here,
never from the planner's rules, so a change of those rules changes the profiles written after it,
not how an existing profile reads.

A profile of schema version 1 to 3 does not record them: ``run_schedule`` derives them from the
fields it does record, by the rules every planner that wrote such a profile applied. Those rules are
frozen here, as a description of how old profiles were written; they are not the planner's current
rules (``engine.rules``) and do not follow them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RunSchedule:
    """The facts of a run's schedule (``run_schedule``)."""

    strategy: str  # the run's execution strategy: pipelined, sharded or phased
    runs_as_pipeline: bool  # stages ran as a pipeline; else one after another
    stage_ipus: tuple[int, ...]  # each stage's IPU, in the order of run.stages
    pipeline_positions: tuple[int, ...]  # each stage's pipeline position, in the same order
    samples_per_step: int  # samples one weight update (training) or one micro-batch per replica (inference) takes

    @property
    def pipeline_depth(self) -> int:
        """Positions of the pipeline: the N of ``2N-1`` (0 without stages)."""
        return max(self.pipeline_positions) + 1 if self.pipeline_positions else 0

    def of_stages(self, stage_ipus: Sequence[int]) -> tuple[bool, list[int]]:
        """Whether the stages whose IPUs are ``stage_ipus`` ran as a pipeline, and their pipeline
        positions: the recorded facts when they are the run's stages (in order); for another list (a
        trace naming a stage the manifest does not), derived from the IPUs as a schema-3 profile's are."""
        ipus = tuple(int(i) for i in stage_ipus)
        if ipus == self.stage_ipus:
            return self.runs_as_pipeline, list(self.pipeline_positions)
        return _v3_runs_as_pipeline(self.strategy, ipus), _v3_positions(ipus)


def run_schedule(run: Mapping[str, Any]) -> RunSchedule:
    """The schedule facts of a manifest's ``run``: recorded (schema 4), else derived from its other fields."""
    stages = [s for s in run.get("stages") or [] if isinstance(s, Mapping)]
    ipus = tuple(int(s.get("ipu", s.get("stage", k))) for k, s in enumerate(stages))
    strategy = str(run.get("strategy", "pipelined"))
    pipelined = run.get("runs_as_pipeline")
    if not isinstance(pipelined, bool):
        pipelined = _v3_runs_as_pipeline(strategy, ipus)
    positions = run.get("pipeline_positions")
    if not (isinstance(positions, list) and len(positions) == len(ipus)
            and all(isinstance(p, int) and not isinstance(p, bool) for p in positions)):
        positions = _v3_positions(ipus)
    samples = run.get("samples_per_step")
    if not isinstance(samples, int) or isinstance(samples, bool):
        samples = _v3_samples_per_step(run)
    return RunSchedule(strategy, pipelined, ipus, tuple(int(p) for p in positions), int(samples))


# -- how a profile of schema version 1 to 3 was written ------------------------------------------------

def _v3_runs_as_pipeline(strategy: str, stage_ipus: Sequence[int]) -> bool:
    """Pipelined execution, or phased execution whose stages are on distinct IPUs."""
    if strategy == "pipelined":
        return True
    return strategy == "phased" and len(stage_ipus) > 1 and len(set(stage_ipus)) == len(stage_ipus)


def _v3_positions(stage_ipus: Sequence[int]) -> list[int]:
    """Consecutive stages on one IPU share a position; a stage on another IPU is the next one."""
    positions: list[int] = []
    for k, ipu in enumerate(stage_ipus):
        positions.append(0 if k == 0 else positions[-1] + (int(ipu) != int(stage_ipus[k - 1])))
    return positions


def _v3_samples_per_step(run: Mapping[str, Any]) -> int:
    """Micro-batch x gradient accumulation x replicas x the packing factor, rounded."""
    inputs = (int(run.get("micro_batch_size", 1)) * int(run.get("gradient_accumulation", 1) or 1)
              * int(run.get("replication_factor", 1) or 1))
    return int(round(inputs * float(run.get("packing_factor", 1.0) or 1.0)))
