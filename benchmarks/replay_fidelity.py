"""Replay fidelity: what-ifs re-timed from one real pipeline run's trace, against the real runs they predict.

    .venv/bin/python benchmarks/replay_fidelity.py            # record, predict, print the table
    .venv/bin/python benchmarks/replay_fidelity.py --write    # and write it into docs/real-traces.md

Records real ``torch.distributed.pipelining`` runs on this machine (tests/traces/record.py: the CPU,
gloo, 2 ranks so the two cores are not shared, one thread per rank, a stack of Linear blocks with a
planted heavy stage holding four times the blocks of the other) at several configurations: GPipe,
1F1B, Interleaved1F1B and LoopedBFS (these two 2 ranks x 2 stages), each at 4, 8 and 16 micro-batches, and the split
moved (the heavy stage first instead of last). Each is imported (`popvision import`); then every
configuration's step time is predicted from the trace of every *other* configuration of the same
stage layout (``Replay.predict``: the schedule and micro-batch count changed; for the moved split,
each stage's cost scaled by the ratio of its blocks, which is what a user knows of a split they have
not run), and compared with its own measured step: the median over its profiled steps of the ranks'
mean ``ProfilerStep`` span.

Nothing is fitted to these runs: the replay's only parameters are read from the source trace
(analysis/pipeline/replay.py). Misses are reported, not tuned away. Targets (issue 32): median error within
5 %, every case within 10 %, the measured step inside the printed range in every case.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DOC = ROOT / "docs" / "real-traces.md"
BEGIN, END = "<!-- replay:begin -->", "<!-- replay:end -->"
KINDS = ("gpipe", "1f1b", "interleaved", "loopedbfs")
COUNTS = (4, 8, 16)
SCHEDULE = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "Interleaved1F1B", "loopedbfs": "LoopedBFS"}
MULTI_STAGE = ("interleaved", "loopedbfs")


@dataclass(frozen=True)
class Config:
    kind: str
    micro_batches: int
    heavy_stage: int

    @property
    def tag(self) -> str:
        return f"{self.kind}-m{self.micro_batches}-heavy{self.heavy_stage}"

    @property
    def layout(self) -> str:
        return "4 stages" if self.kind in MULTI_STAGE else "2 stages"


def configs() -> list[Config]:
    """Every schedule x count with the heavy stage last on rank 1; the split moved for GPipe and 1F1B at 8."""
    out = [Config(k, m, 3 if k in MULTI_STAGE else 1) for k in KINDS for m in COUNTS]
    out += [Config(k, 8, 0) for k in ("gpipe", "1f1b")]
    return out


def record_all(work: Path, steps: int) -> dict[Config, Path]:
    from tests.traces.record import record
    from popvision_py.importer import find_traces, import_traces

    profiles = {}
    for c in configs():
        folder = work / c.tag
        shutil.rmtree(folder, ignore_errors=True)
        start = time.perf_counter()
        record(c.kind, folder / "traces", heavy_stage=c.heavy_stage, micro_batches=c.micro_batches, steps=steps,
               world_size=2)
        import_traces(find_traces([folder / "traces"]), folder / "profile.pop")
        profiles[c] = folder / "profile.pop"
        print(f"recorded {c.tag} in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return profiles


def stage_scale(source: Config, target: Config) -> dict[int, float]:
    """Each stage's cost in the target's split over the source's: the ratio of its blocks."""
    from tests.traces.record import plan

    a = plan(source.kind, heavy_stage=source.heavy_stage, micro_batches=source.micro_batches, world_size=2)
    b = plan(target.kind, heavy_stage=target.heavy_stage, micro_batches=target.micro_batches, world_size=2)
    return {int(s): len(b["stage_layers"][s]) / len(a["stage_layers"][s]) for s in a["stage_layers"]
            if len(b["stage_layers"][s]) != len(a["stage_layers"][s])}


def predict_all(profiles: dict[Config, Path]) -> list[dict]:
    import popvision_py

    measured, replays = {}, {}
    for c, path in profiles.items():
        with popvision_py.open(path) as report:
            replays[c] = report.critical_path.replay()
            measured[c] = replays[c].m.measured_step_ns() / 1e6
    rows = []
    for target in profiles:
        for source in profiles:
            if source == target or source.layout != target.layout:
                continue
            if (source.heavy_stage != target.heavy_stage) and source.micro_batches != target.micro_batches:
                continue  # a moved split is predicted at its own micro-batch count
            scale = stage_scale(source, target) if source.heavy_stage != target.heavy_stage else {}
            p = replays[source].predict(schedule=SCHEDULE[target.kind], micro_batches=target.micro_batches,
                                        scale=scale)
            real = measured[target]
            rows.append({"target": target.tag, "source": source.tag, "change": p.change,
                         "predicted_ms": p.step_ns / 1e6, "low_ms": p.low_ns / 1e6, "high_ms": p.high_ns / 1e6,
                         "measured_ms": real, "error_pct": 100.0 * (p.step_ns / 1e6 - real) / real,
                         "inside": p.low_ns / 1e6 <= real <= p.high_ns / 1e6})
    for c, rp in replays.items():
        rows.append({"target": c.tag, "source": c.tag, "change": "re-timed with its own costs",
                     "predicted_ms": float("nan"), "low_ms": float("nan"), "high_ms": float("nan"),
                     "measured_ms": measured[c], "error_pct": rp.residual_pct(), "inside": None})
    return rows


def tune_check(profiles: dict[Config, Path], work: Path, steps: int) -> list[dict]:
    """`popvision tune PROFILE`'s fastest candidate for each 8-micro-batch run of the heavy-last split, run for
    real: is it as fast as predicted, within the printed range?"""
    import popvision_py
    from popvision_py.analysis.pipeline import whatif
    from popvision_py.importer import find_traces, import_traces
    from tests.traces.record import record

    kinds = {v: k for k, v in SCHEDULE.items()}
    out = []
    for source in [c for c in profiles if c.micro_batches == 8 and c.heavy_stage in (1, 3)]:
        with popvision_py.open(profiles[source]) as report:
            best = whatif.search(report.critical_path.replay()).iloc[0]
        config = Config(kinds[best["schedule"]], int(best["micro_batches"]), source.heavy_stage)
        path = profiles.get(config)
        if path is None:  # not among the runs recorded: record it now
            folder = work / f"tuned-{config.tag}"
            shutil.rmtree(folder, ignore_errors=True)
            record(config.kind, folder / "traces", heavy_stage=config.heavy_stage, micro_batches=config.micro_batches,
                   steps=steps, world_size=2)
            import_traces(find_traces([folder / "traces"]), folder / "profile.pop")
            path = folder / "profile.pop"
        with popvision_py.open(path) as report:
            real = report.critical_path.measured().measured_step_ns() / 1e6
        out.append({"source": source.tag, "best": f"{best['schedule']} x {int(best['micro_batches'])}",
                    "predicted_ms": float(best["step_ms"]), "low_ms": float(best["low_ms"]),
                    "high_ms": float(best["high_ms"]), "measured_ms": real,
                    "error_pct": 100.0 * (float(best["step_ms"]) - real) / real,
                    "inside": float(best["low_ms"]) <= real <= float(best["high_ms"])})
    return out


def tune_table(rows: list[dict]) -> str:
    lines = ["| tune of the trace of | its fastest candidate | predicted ms | range ms | run for real, ms | error |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['source']} | {r['best']} | {r['predicted_ms']:.1f} "
                     f"| {r['low_ms']:.1f} - {r['high_ms']:.1f} "
                     f"| {r['measured_ms']:.1f} | {r['error_pct']:+.1f}% {'' if r['inside'] else '(outside)'} |")
    return "\n".join(lines)


def table(rows: list[dict]) -> str:
    cross = [r for r in rows if r["inside"] is not None]
    own = [r for r in rows if r["inside"] is None]
    errors = [abs(r["error_pct"]) for r in cross]
    lines = ["| target (measured) | from the trace of | change | predicted ms | range ms | measured ms | error |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in sorted(cross, key=lambda r: (r["target"], r["source"])):
        lines.append(f"| {r['target']} | {r['source']} | {r['change']} | {r['predicted_ms']:.1f} | "
                     f"{r['low_ms']:.1f} - {r['high_ms']:.1f} | {r['measured_ms']:.1f} | {r['error_pct']:+.1f}% "
                     f"{'' if r['inside'] else '(outside)'} |")
    residuals = [abs(r["error_pct"]) for r in own]
    lines += ["", f"{len(cross)} predictions: median |error| {statistics.median(errors):.1f}%, worst "
                  f"{max(errors):.1f}%, {sum(1 for r in cross if abs(r['error_pct']) <= 10)} within 10%; measured "
                  f"inside the printed range in {sum(1 for r in cross if r['inside'])} of {len(cross)}.",
              f"Each run re-timed with its own costs: median |residual| {statistics.median(residuals):.1f}%, "
              f"worst {max(residuals):.1f}% ({len(own)} runs)."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=ROOT / "benchmarks" / "out" / "replay")
    ap.add_argument("--steps", type=int, default=4, help="profiled steps per run (after one warm-up step)")
    ap.add_argument("--reuse", action="store_true", help="predict from the runs already recorded in --work")
    ap.add_argument("--write", action="store_true", help="write the table into docs/real-traces.md")
    a = ap.parse_args(argv)
    if a.reuse:
        profiles = {c: a.work / c.tag / "profile.pop" for c in configs() if (a.work / c.tag / "profile.pop").is_file()}
    else:
        profiles = record_all(a.work, a.steps)
    rows = predict_all(profiles)
    tuned = tune_check(profiles, a.work, a.steps)
    (a.work / "results.json").write_text(json.dumps({"predictions": rows, "tune": tuned}, indent=1) + "\n")
    text = table(rows) + "\n\n`popvision tune PROFILE`'s fastest candidate, run for real:\n\n" + tune_table(tuned)
    header = (f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()} with {os.cpu_count()} cores, "
              f"{a.steps} profiled steps per run: `.venv/bin/python benchmarks/replay_fidelity.py --write`.\n\n")
    print(header + text)
    if a.write:
        doc = DOC.read_text()
        start, end = doc.index(BEGIN) + len(BEGIN), doc.index(END)
        DOC.write_text(doc[:start] + "\n" + header + text + "\n" + doc[end:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
