"""Replay fidelity: what-ifs re-timed from one real pipeline run's trace, against the plain runs they predict.

    .venv/bin/python benchmarks/replay_fidelity.py            # record, predict, print the table
    .venv/bin/python benchmarks/replay_fidelity.py --write    # and write it into docs/real-traces.md

Records real ``torch.distributed.pipelining`` runs on this machine (tests/traces/record.py: the CPU,
gloo, 2 ranks so the two cores are not shared, one thread per rank, a stack of Linear or of Transformer
encoder blocks with a planted heavy stage holding four times the blocks of the other) at several
configurations: GPipe, 1F1B, Interleaved1F1B and LoopedBFS (these two 2 ranks x 2 stages), each at 4, 8
and 16 micro-batches, and the split moved (the heavy stage first instead of last). Each run times its
steps without the profiler in the same processes: ``--plain`` steps in the profiler's wait phase (written
into the trace by ``popvision_py.importer.plain_steps.PlainSteps``, which the import reads) and
``--plain`` more after the profiler has stopped (the first of these, after a barrier, left out). Each is
imported (`popvision import`); then every configuration's step is predicted from the trace of every
*other* configuration of the same stage layout and block (``Replay.predict``: the schedule and
micro-batch count changed; for the moved split, the blocks of each stage as recorded and as asked,
``Replay.block_scale`` moving each pass's cost per block between the stages, read off the source's own
stages: what a user knows of a split they have not run is its blocks), and scored against its own
**plain** step
(the median over its plain steps of the ranks' mean step), with the profiled figures beside (the
prediction with the profiler's cost left in, against the median profiled step).

Each run also says how far its profiled step is from its plain one, and the bound a trace without plain
steps would give for it (analysis/pipeline/plain.py); each prediction's range is also computed as a
trace without plain steps would have it, and its containment counted.

Nothing is fitted to these runs: the replay's only parameters are read from the source trace.
Targets (issue 49): median |error| within 5%, worst within 15%, the plain step inside the printed range
in 90% of cases, every range narrower than +-30% of its point.
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
BLOCKS = ("linear", "transformer")
SCHEDULE = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "Interleaved1F1B", "loopedbfs": "LoopedBFS"}
MULTI_STAGE = ("interleaved", "loopedbfs")


@dataclass(frozen=True)
class Config:
    kind: str
    micro_batches: int
    heavy_stage: int
    block: str = "linear"

    @property
    def tag(self) -> str:
        return f"{self.block[:5]}-{self.kind}-m{self.micro_batches}-heavy{self.heavy_stage}"

    @property
    def layout(self) -> str:
        return f"{self.block}, {'4 stages' if self.kind in MULTI_STAGE else '2 stages'}"


def configs(blocks: tuple[str, ...] = BLOCKS) -> list[Config]:
    """Every schedule x count with the heavy stage last on rank 1; the split moved for GPipe and 1F1B at 8."""
    out = []
    for b in blocks:
        out += [Config(k, m, 3 if k in MULTI_STAGE else 1, b) for k in KINDS for m in COUNTS]
        out += [Config(k, 8, 0, b) for k in ("gpipe", "1f1b")]
    return out


def record_one(c: Config, folder: Path, steps: int, plain: int) -> Path:
    from tests.traces.record import record
    from popvision_py.importer import find_traces, import_traces

    shutil.rmtree(folder, ignore_errors=True)
    record(c.kind, folder / "traces", heavy_stage=c.heavy_stage, micro_batches=c.micro_batches, steps=steps,
           world_size=2, block=c.block, plain_steps=plain, plain_after=plain + 1)
    import_traces(find_traces([folder / "traces"]), folder / "profile.pop")
    shutil.copy(folder / "traces" / "meta.json", folder / "meta.json")
    for trace in (folder / "traces").glob("rank*.json"):
        trace.unlink()  # the profile holds what is read from them (a transformer trace is tens of MB)
    return folder / "profile.pop"


def wait_quiet(load: float, max_wait_s: float) -> float:
    """Wait (at most ``max_wait_s``) for the 1-minute load average to fall under ``load``; the load then."""
    deadline = time.monotonic() + max_wait_s
    while os.getloadavg()[0] >= load and time.monotonic() < deadline:
        time.sleep(5)
    return os.getloadavg()[0]


def record_all(work: Path, steps: int, plain: int, blocks: tuple[str, ...], quiet: float,
               max_wait_s: float) -> dict[Config, Path]:
    profiles = {}
    for c in configs(blocks):
        if (work / c.tag / "profile.pop").is_file() and (work / c.tag / "meta.json").is_file():
            profiles[c] = work / c.tag / "profile.pop"  # recorded by an earlier, interrupted pass
            continue
        profiles[c] = record_noted(c, work / c.tag, steps, plain, quiet, max_wait_s)
    return profiles


def record_noted(c: Config, folder: Path, steps: int, plain: int, quiet: float, max_wait_s: float) -> Path:
    """``record_one`` once the machine is quiet (``wait_quiet``), the load before and after noted in its meta.json."""
    load = wait_quiet(quiet, max_wait_s)
    start = time.perf_counter()
    profile = record_one(c, folder, steps, plain)
    meta = json.loads((folder / "meta.json").read_text())
    meta["load_before"], meta["load_after"] = load, os.getloadavg()[0]
    (folder / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"recorded {c.tag} in {time.perf_counter() - start:.1f} s (load {load:.2f} before, "
          f"{meta['load_after']:.2f} after)", file=sys.stderr)
    return profile


def loads(profiles: dict[Config, Path]) -> str:
    """The 1-minute load average before each recording: median and range."""
    got = [json.loads((p.parent / "meta.json").read_text()).get("load_before") for p in profiles.values()]
    got = [g for g in got if g is not None]
    if not got:
        return "not noted"
    return f"{statistics.median(got):.2f} (median; {min(got):.2f} to {max(got):.2f})"


def plain_ms(profile: Path) -> float:
    """The run's plain step: the median over its steps timed without the profiler (those of its wait phase,
    and those after it but the first) of the ranks' mean step, ms."""
    import numpy as np

    meta = json.loads((profile.parent / "meta.json").read_text())
    before = np.asarray(meta["plain_step_ns"], float).mean(axis=0)
    after = np.asarray(meta["plain_after_ns"], float).mean(axis=0)[1:]
    return float(np.median(np.concatenate([before, after]))) / 1e6


def stage_blocks(source: Config, target: Config) -> tuple[list[int], list[int]]:
    """The blocks of each stage in the source's split and in the target's: what a user knows of a split they
    have not run (``Replay.predict(blocks=...)`` moves each pass's cost per block between the stages)."""
    from tests.traces.record import plan

    a = plan(source.kind, heavy_stage=source.heavy_stage, micro_batches=source.micro_batches, world_size=2)
    b = plan(target.kind, heavy_stage=target.heavy_stage, micro_batches=target.micro_batches, world_size=2)
    stages = sorted(a["stage_layers"], key=int)
    return [len(a["stage_layers"][s]) for s in stages], [len(b["stage_layers"][s]) for s in stages]


def without_plain_steps(report, replay):
    """The same replay as a trace without plain steps would give it: the profiler's cost bounded."""
    from dataclasses import replace

    from popvision_py.analysis.pipeline.plain import profiler_cost
    from popvision_py.analysis.pipeline.replay import Replay

    m = replay.m
    run = {"import": {**report.run["import"], "plain_step_ns": []}}
    cost = profiler_cost(m.measured_step_ns(), run, report.profile.read_pandas("trace"), m.steps["iteration"].nunique())
    return Replay(replace(m, profiler=cost))


def predict_all(profiles: dict[Config, Path]) -> tuple[list[dict], list[dict]]:
    import popvision_py

    plain, profiled, replays, bounded, runs = {}, {}, {}, {}, []
    for c, path in profiles.items():
        with popvision_py.open(path) as report:
            replays[c] = report.critical_path.replay()
            bounded[c] = without_plain_steps(report, replays[c])
        m = replays[c].m
        profiled[c] = m.measured_step_ns() / 1e6
        plain[c] = plain_ms(path)
        own = replays[c].predict()
        runs.append({"run": c.tag, "profiled_ms": profiled[c], "plain_ms": plain[c],
                     "overhead_pct": 100.0 * (profiled[c] / plain[c] - 1.0),
                     "trace_plain_ms": m.profiler.plain_ns / 1e6, "bound_pct": bounded[c].m.profiler.bound_pct,
                     "measured_share_pct": 100.0 * (1.0 - plain[c] / profiled[c]),
                     "own_ms": own.step_ns / 1e6, "own_low_ms": own.low_ns / 1e6, "own_high_ms": own.high_ns / 1e6,
                     "own_error_pct": 100.0 * (own.step_ns / 1e6 - plain[c]) / plain[c],
                     "residual_pct": replays[c].residual_pct()})
    rows = []
    for target in profiles:
        for source in profiles:
            if source == target or source.layout != target.layout:
                continue
            if (source.heavy_stage != target.heavy_stage) and source.micro_batches != target.micro_batches:
                continue  # a moved split is predicted at its own micro-batch count
            moved = stage_blocks(source, target) if source.heavy_stage != target.heavy_stage else None
            ask = {"schedule": SCHEDULE[target.kind], "micro_batches": target.micro_batches, "blocks": moved}
            p = replays[source].predict(**ask)
            b = bounded[source].predict(**ask)
            real, prof = plain[target], profiled[target]
            point, low, high = p.step_ns / 1e6, p.low_ns / 1e6, p.high_ns / 1e6
            rows.append({"target": target.tag, "source": source.tag, "change": p.change,
                         "predicted_ms": point, "low_ms": low, "high_ms": high, "plain_ms": real,
                         "error_pct": 100.0 * (point - real) / real, "inside": bool(low <= real <= high),
                         "width_pct": 100.0 * max(point - low, high - point) / point,
                         "profiled_predicted_ms": p.profiled_ns / 1e6, "profiled_ms": prof,
                         "profiled_error_pct": 100.0 * (p.profiled_ns / 1e6 - prof) / prof,
                         "bounded_ms": b.step_ns / 1e6, "bounded_low_ms": b.low_ns / 1e6,
                         "bounded_high_ms": b.high_ns / 1e6,
                         "bounded_error_pct": 100.0 * (b.step_ns / 1e6 - real) / real,
                         "bounded_inside": bool(b.low_ns / 1e6 <= real <= b.high_ns / 1e6),
                         "bounded_width_pct": 100.0 * max(b.step_ns - b.low_ns, b.high_ns - b.step_ns) / b.step_ns})
    return rows, runs


def tune_check(profiles: dict[Config, Path], work: Path, steps: int, plain: int, quiet: float,
               max_wait_s: float) -> list[dict]:
    """`popvision tune PROFILE`'s fastest candidate for each 8-micro-batch run of the heavy-last split, run for
    real: is its plain step as fast as predicted, within the printed range?"""
    import popvision_py
    from popvision_py.analysis.pipeline import whatif

    kinds = {v: k for k, v in SCHEDULE.items()}
    out = []
    for source in [c for c in profiles if c.micro_batches == 8 and c.heavy_stage in (1, 3)]:
        with popvision_py.open(profiles[source]) as report:
            best = whatif.search(report.critical_path.replay()).iloc[0]
        config = Config(kinds[best["schedule"]], int(best["micro_batches"]), source.heavy_stage, source.block)
        path = profiles.get(config)
        if path is None and (work / f"tuned-{config.tag}" / "meta.json").is_file():
            path = work / f"tuned-{config.tag}" / "profile.pop"  # recorded by an earlier pass
        if path is None:  # not among the runs recorded: record it now
            path = record_noted(config, work / f"tuned-{config.tag}", steps, plain, quiet, max_wait_s)
        real = plain_ms(path)
        load = json.loads((path.parent / "meta.json").read_text()).get("load_before")
        out.append({"source": source.tag, "load": load, "best": f"{best['schedule']} x {int(best['micro_batches'])}",
                    "predicted_ms": float(best["step_ms"]), "low_ms": float(best["low_ms"]),
                    "high_ms": float(best["high_ms"]), "plain_ms": real,
                    "error_pct": 100.0 * (float(best["step_ms"]) - real) / real,
                    "inside": float(best["low_ms"]) <= real <= float(best["high_ms"])})
    return out


def _mark(inside: bool) -> str:
    return "" if inside else " (outside)"


def tune_table(rows: list[dict]) -> str:
    lines = ["| tune of the trace of | its fastest candidate | predicted ms | range ms | run for real (plain), ms "
             "| error | load before the real run |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        load = "not noted" if r.get("load") is None else f"{r['load']:.2f}"
        lines.append(f"| {r['source']} | {r['best']} | {r['predicted_ms']:.1f} | "
                     f"{r['low_ms']:.1f} - {r['high_ms']:.1f} | {r['plain_ms']:.1f} | "
                     f"{r['error_pct']:+.1f}%{_mark(r['inside'])} | {load} |")
    return "\n".join(lines)


def runs_table(runs: list[dict]) -> str:
    lines = ["| run | profiled step ms | plain step ms | profiler's cost | its share of the profiled step: measured "
             "/ bound without plain steps | the run predicted from itself, ms | error | re-timed residual |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in runs:
        inside = r["own_low_ms"] <= r["plain_ms"] <= r["own_high_ms"]
        lines.append(f"| {r['run']} | {r['profiled_ms']:.1f} | {r['plain_ms']:.1f} | {r['overhead_pct']:+.1f}% | "
                     f"{r['measured_share_pct']:.1f}% / {r['bound_pct']:.1f}% | {r['own_ms']:.1f} "
                     f"({r['own_low_ms']:.1f} - {r['own_high_ms']:.1f}) | {r['own_error_pct']:+.1f}%{_mark(inside)} | "
                     f"{r['residual_pct']:+.1f}% |")
    held = sum(1 for r in runs if r["bound_pct"] >= r["measured_share_pct"])
    own = [abs(r["own_error_pct"]) for r in runs]
    lines += ["", f"{len(runs)} runs: the profiled step {statistics.median(r['overhead_pct'] for r in runs):+.1f}% "
                  f"longer than the plain one (median; {min(r['overhead_pct'] for r in runs):+.1f}% to "
                  f"{max(r['overhead_pct'] for r in runs):+.1f}%). The bound a trace without plain steps gives held "
                  f"the measured share in {held} of {len(runs)}. Each run predicted from its own trace: median "
                  f"|error| {statistics.median(own):.1f}%, worst {max(own):.1f}% against its plain step."]
    return "\n".join(lines)


def summary(cross: list[dict], key: str = "", what: str = "") -> str:
    errors = [abs(r[f"{key}error_pct"]) for r in cross]
    inside = sum(1 for r in cross if r[f"{key}inside"])
    widths = [r[f"{key}width_pct"] for r in cross]
    return (f"{what}{len(cross)} predictions against the plain step: median |error| {statistics.median(errors):.1f}%, "
            f"worst {max(errors):.1f}%, {sum(1 for e in errors if e <= 15)} within 15%; the plain step inside the "
            f"printed range in {inside} of {len(cross)} ({100.0 * inside / len(cross):.0f}%); the range's half-width "
            f"median {statistics.median(widths):.1f}%, widest {max(widths):.1f}% of the point.")


def table(rows: list[dict]) -> str:
    cross = sorted(rows, key=lambda r: (r["target"], r["source"]))
    lines = ["| target | from the trace of | change | predicted ms | range ms | plain ms | error | profiled: "
             "predicted / measured ms | error |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in cross:
        lines.append(f"| {r['target']} | {r['source']} | {r['change']} | {r['predicted_ms']:.1f} | "
                     f"{r['low_ms']:.1f} - {r['high_ms']:.1f} | {r['plain_ms']:.1f} | {r['error_pct']:+.1f}%"
                     f"{_mark(r['inside'])} | {r['profiled_predicted_ms']:.1f} / {r['profiled_ms']:.1f} | "
                     f"{r['profiled_error_pct']:+.1f}% |")
    prof = [abs(r["profiled_error_pct"]) for r in cross]
    lines += ["", summary(cross),
              f"With the profiler's cost left in, against the profiled steps: median |error| "
              f"{statistics.median(prof):.1f}%, worst {max(prof):.1f}%.",
              summary(cross, "bounded_", "As a trace without plain steps would have them (the profiler's cost "
                      "bounded, not timed): ")]
    for layout in sorted({r["target"].split("-")[0] for r in cross}):
        mine = [r for r in cross if r["target"].startswith(layout)]
        lines.append(summary(mine, what=f"{layout} blocks alone: "))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=ROOT / "benchmarks" / "out" / "replay")
    ap.add_argument("--steps", type=int, default=4, help="profiled steps per run (after one warm-up step)")
    ap.add_argument("--plain", type=int, default=8, help="steps timed without the profiler, before it and after it")
    ap.add_argument("--blocks", default=",".join(BLOCKS), help="linear, transformer or both")
    ap.add_argument("--reuse", action="store_true", help="predict from the runs already recorded in --work")
    ap.add_argument("--quiet", type=float, default=1.2, help="wait for the 1-minute load average under this")
    ap.add_argument("--max-wait", type=float, default=300.0, help="seconds to wait for it before each run")
    ap.add_argument("--write", action="store_true", help="write the table into docs/real-traces.md")
    a = ap.parse_args(argv)
    blocks = tuple(b for b in a.blocks.split(",") if b)
    load = os.getloadavg()
    if a.reuse:
        profiles = {c: a.work / c.tag / "profile.pop" for c in configs(blocks)
                    if (a.work / c.tag / "profile.pop").is_file()}
    else:
        profiles = record_all(a.work, a.steps, a.plain, blocks, a.quiet, a.max_wait)
    rows, runs = predict_all(profiles)
    tuned = tune_check(profiles, a.work, a.steps, a.plain, a.quiet, a.max_wait)
    load_after = os.getloadavg()
    results = {"predictions": rows, "runs": runs, "tune": tuned}
    (a.work / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    text = (table(rows) + "\n\nEach run: its profiled and plain steps, the profiler's cost, and the run predicted "
            "from its own trace:\n\n" + runs_table(runs) + "\n\n`popvision tune PROFILE`'s fastest candidate, "
            "run for real:\n\n" + tune_table(tuned))
    header = (f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()} with {os.cpu_count()} cores, "
              f"{a.steps} profiled steps, {a.plain} plain steps before them and {a.plain + 1} after per run; "
              f"the 1-minute load average before each recording {loads(profiles)} (the machine shared with "
              f"other work; {load[0]:.2f} when the predictions started, {load_after[0]:.2f} at their end): "
              f"`.venv/bin/python benchmarks/replay_fidelity.py --plain {a.plain} --quiet {a.quiet:g} --write`.\n\n")
    print(header + text)
    if a.write:
        doc = DOC.read_text()
        start, end = doc.index(BEGIN) + len(BEGIN), doc.index(END)
        DOC.write_text(doc[:start] + "\n" + header + text + "\n" + doc[end:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
