"""Replay fidelity: what-ifs re-timed from one real pipeline run's trace, against the plain runs they predict.

    .venv/bin/python benchmarks/replay_fidelity.py            # record 3 rounds, predict, print the tables
    .venv/bin/python benchmarks/replay_fidelity.py --write    # and write them into docs/real-traces.md
    .venv/bin/python benchmarks/replay_fidelity.py --reuse    # predict again from the rounds recorded in --work

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

Every configuration is recorded ``--rounds`` times (default 3), all configurations in turn and then again, so
that the machine's drift over the minutes of a pass falls on every configuration alike. A configuration's
plain step is the median over the plain steps of all its recordings, and each prediction is made from each
recording of its source on its own (a user has one trace). How far one recording's plain step lies from its
configuration's is printed as the machine's own variation: a prediction made from one recording, whose
plain steps are all it knows of the machine's speed, cannot be surer than that. The signed errors are also
summed by (source schedule, target schedule), the part of the error the recordings' variation does not
average out.

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
PLAIN_SKIP = 5  # unprofiled steps before the plain ones are timed: a process's first steps are not its steady state
QUIET_WINDOW_S = 5.0  # the machine is quiet when it used under --quiet cores over this many seconds


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


@dataclass(frozen=True)
class Recording:
    """How each run is recorded: ``steps`` profiled, ``plain`` timed without the profiler before them (after ``skip``
    untimed) and ``plain + 1`` after; each begun once the machine used under ``quiet`` cores, waited for at most
    ``max_wait_s``."""

    steps: int
    plain: int
    skip: int = PLAIN_SKIP
    quiet: float = 0.3
    max_wait_s: float = 300.0


def configs(blocks: tuple[str, ...] = BLOCKS) -> list[Config]:
    """Every schedule x count with the heavy stage last on rank 1; the split moved for GPipe and 1F1B at 8."""
    out = []
    for b in blocks:
        out += [Config(k, m, 3 if k in MULTI_STAGE else 1, b) for k in KINDS for m in COUNTS]
        out += [Config(k, 8, 0, b) for k in ("gpipe", "1f1b")]
    return out


def record_one(c: Config, folder: Path, how: Recording) -> Path:
    from tests.traces.record import record
    from popvision_py.importer import find_traces, import_traces

    shutil.rmtree(folder, ignore_errors=True)
    record(c.kind, folder / "traces", heavy_stage=c.heavy_stage, micro_batches=c.micro_batches, steps=how.steps,
           world_size=2, block=c.block, plain_steps=how.plain, plain_after=how.plain + 1, plain_skip=how.skip)
    import_traces(find_traces([folder / "traces"]), folder / "profile.pop")
    shutil.copy(folder / "traces" / "meta.json", folder / "meta.json")
    for trace in (folder / "traces").glob("rank*.json"):
        trace.unlink()  # the profile holds what is read from them (a transformer trace is tens of MB)
    return folder / "profile.pop"


def busy_cores(seconds: float = QUIET_WINDOW_S) -> float:
    """The cores' worth of CPU time the whole machine used over the next ``seconds`` (/proc/stat: all but idle and
    iowait); the 1-minute load average where /proc/stat is not there."""
    def sample() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(fields), fields[3] + fields[4]

    if not Path("/proc/stat").is_file():
        return os.getloadavg()[0]
    total0, idle0 = sample()
    time.sleep(seconds)
    total1, idle1 = sample()
    share = 1.0 - (idle1 - idle0) / max(total1 - total0, 1)
    return share * (os.cpu_count() or 1)


def wait_quiet(cores: float, max_wait_s: float) -> float:
    """Wait (at most ``max_wait_s``) until the machine used under ``cores`` cores' worth over ``QUIET_WINDOW_S``
    (``busy_cores``): nothing else running. A load average would still hold the last recording's minute."""
    deadline = time.monotonic() + max_wait_s
    busy = busy_cores()
    while busy >= cores and time.monotonic() < deadline:
        busy = busy_cores()
    return busy


def record_all(work: Path, how: Recording, blocks: tuple[str, ...]) -> dict[Config, Path]:
    profiles = {}
    for c in configs(blocks):
        if (work / c.tag / "profile.pop").is_file() and (work / c.tag / "meta.json").is_file():
            profiles[c] = work / c.tag / "profile.pop"  # recorded by an earlier, interrupted pass
            continue
        profiles[c] = record_noted(c, work / c.tag, how)
    return profiles


def record_noted(c: Config, folder: Path, how: Recording) -> Path:
    """``record_one`` once the machine is quiet (``wait_quiet``), the cores busy before it and the load average
    after it noted in its meta.json."""
    busy = wait_quiet(how.quiet, how.max_wait_s)
    start = time.perf_counter()
    profile = record_one(c, folder, how)
    meta = json.loads((folder / "meta.json").read_text())
    meta["busy_before"], meta["load_after"] = busy, os.getloadavg()[0]
    (folder / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"recorded {c.tag} in {time.perf_counter() - start:.1f} s ({busy:.2f} cores busy before, "
          f"load {meta['load_after']:.2f} after)", file=sys.stderr)
    return profile


def quiet_before(profiles: list[Path]) -> str:
    """The cores busy in the ``QUIET_WINDOW_S`` before each recording (``busy_cores``): median and range."""
    metas = [json.loads((p.parent / "meta.json").read_text()) for p in profiles]
    got = [m["busy_before"] for m in metas if "busy_before" in m]
    if not got:
        return "not noted"
    missing = len(metas) - len(got)
    return (f"{statistics.median(got):.2f} (median; {min(got):.2f} to {max(got):.2f})"
            + (f", not noted for the {missing} recorded before it was" if missing else ""))


def plain_steps_ms(profile: Path) -> list[float]:
    """The run's steps timed without the profiler (those of its wait phase, and those after it but the
    first), each the ranks' mean step, ms."""
    import numpy as np

    meta = json.loads((profile.parent / "meta.json").read_text())
    before = np.asarray(meta["plain_step_ns"], float).mean(axis=0)
    after = np.asarray(meta["plain_after_ns"], float).mean(axis=0)[1:]
    return [float(x) / 1e6 for x in np.concatenate([before, after])]


def plain_ms(*profiles: Path) -> float:
    """The configuration's plain step: the median of the plain steps of every recording of it given, ms."""
    return float(statistics.median([x for p in profiles for x in plain_steps_ms(p)]))


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


def predict_all(recorded: dict[Config, list[Path]]) -> tuple[list[dict], list[dict]]:
    """Every configuration predicted from each recording of every other configuration of its layout and
    block, against its plain step over all its recordings; and each recording's own figures."""
    import popvision_py

    plain = {c: plain_ms(*paths) for c, paths in recorded.items()}
    replays, bounded, runs = {}, {}, []
    for c, paths in recorded.items():
        for k, path in enumerate(paths, 1):
            with popvision_py.open(path) as report:
                replays[c, k] = report.critical_path.replay()
                bounded[c, k] = without_plain_steps(report, replays[c, k])
            m = replays[c, k].m
            profiled, own_plain = m.measured_step_ns() / 1e6, plain_ms(path)
            own = replays[c, k].predict()
            runs.append({"run": c.tag, "round": k, "profiled_ms": profiled, "plain_ms": own_plain,
                         "config_plain_ms": plain[c], "overhead_pct": 100.0 * (profiled / own_plain - 1.0),
                         "trace_plain_ms": m.profiler.plain_ns / 1e6, "bound_pct": bounded[c, k].m.profiler.bound_pct,
                         "measured_share_pct": 100.0 * (1.0 - own_plain / profiled),
                         "own_ms": own.step_ns / 1e6, "own_low_ms": own.low_ns / 1e6, "own_high_ms": own.high_ns / 1e6,
                         "own_error_pct": 100.0 * (own.step_ns / 1e6 - plain[c]) / plain[c],
                         "round_error_pct": 100.0 * (own_plain - plain[c]) / plain[c],
                         "residual_pct": replays[c, k].residual_pct()})
    profiled_cfg = {c: statistics.median(replays[c, k].m.measured_step_ns() / 1e6 for k in range(1, len(paths) + 1))
                    for c, paths in recorded.items()}
    rows = []
    for target in recorded:
        for source in recorded:
            if source == target or source.layout != target.layout:
                continue
            if (source.heavy_stage != target.heavy_stage) and source.micro_batches != target.micro_batches:
                continue  # a moved split is predicted at its own micro-batch count
            moved = stage_blocks(source, target) if source.heavy_stage != target.heavy_stage else None
            ask = {"schedule": SCHEDULE[target.kind], "micro_batches": target.micro_batches, "blocks": moved}
            for k in range(1, len(recorded[source]) + 1):
                rows.append(_scored(replays[source, k].predict(**ask), bounded[source, k].predict(**ask),
                                    target, source, k, plain[target], profiled_cfg[target]))
    return rows, runs


def _scored(p, b, target: Config, source: Config, k: int, real: float, prof: float) -> dict:
    """One prediction (``p``, and ``b`` as a trace without plain steps gives it) against the plain step
    ``real`` (and the profiled prediction against the profiled step ``prof``)."""
    point, low, high = p.step_ns / 1e6, p.low_ns / 1e6, p.high_ns / 1e6
    return {"target": target.tag, "source": source.tag, "round": k, "change": p.change,
            "predicted_ms": point, "low_ms": low, "high_ms": high, "plain_ms": real,
            "error_pct": 100.0 * (point - real) / real, "inside": bool(low <= real <= high),
            "width_pct": 100.0 * max(point - low, high - point) / point,
            "profiled_predicted_ms": p.profiled_ns / 1e6, "profiled_ms": prof,
            "profiled_error_pct": 100.0 * (p.profiled_ns / 1e6 - prof) / prof,
            "bounded_ms": b.step_ns / 1e6, "bounded_low_ms": b.low_ns / 1e6, "bounded_high_ms": b.high_ns / 1e6,
            "bounded_error_pct": 100.0 * (b.step_ns / 1e6 - real) / real,
            "bounded_inside": bool(b.low_ns / 1e6 <= real <= b.high_ns / 1e6),
            "bounded_width_pct": 100.0 * max(b.step_ns - b.low_ns, b.high_ns - b.step_ns) / b.step_ns}


def tune_check(recorded: dict[Config, list[Path]], work: Path, how: Recording) -> list[dict]:
    """`popvision tune PROFILE`'s fastest candidate for each 8-micro-batch run of the heavy-last split (its first
    recording), run for real: is its plain step as fast as predicted, within the printed range? A candidate
    that is not among the configurations is recorded once, in ``work/tuned-TAG``."""
    import popvision_py
    from popvision_py.analysis.pipeline import whatif

    kinds = {v: k for k, v in SCHEDULE.items()}
    out = []
    for source in [c for c in recorded if c.micro_batches == 8 and c.heavy_stage in (1, 3)]:
        with popvision_py.open(recorded[source][0]) as report:
            best = whatif.search(report.critical_path.replay()).iloc[0]
        config = Config(kinds[best["schedule"]], int(best["micro_batches"]), source.heavy_stage, source.block)
        paths = recorded.get(config, [])
        if not paths and (work / f"tuned-{config.tag}" / "meta.json").is_file():
            paths = [work / f"tuned-{config.tag}" / "profile.pop"]  # recorded by an earlier pass
        if not paths:  # not among the runs recorded: record it now
            paths = [record_noted(config, work / f"tuned-{config.tag}", how)]
        real = plain_ms(*paths)
        load = json.loads((paths[0].parent / "meta.json").read_text()).get("busy_before")
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
             "| error | cores busy before the real run |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        load = "not noted" if r.get("load") is None else f"{r['load']:.2f}"
        lines.append(f"| {r['source']} | {r['best']} | {r['predicted_ms']:.1f} | "
                     f"{r['low_ms']:.1f} - {r['high_ms']:.1f} | {r['plain_ms']:.1f} | "
                     f"{r['error_pct']:+.1f}%{_mark(r['inside'])} | {load} |")
    return "\n".join(lines)


def runs_table(runs: list[dict]) -> str:
    lines = ["| run | recording | profiled step ms | plain step ms: this recording / all | profiler's cost | its share "
             "of the profiled step: measured / bound without plain steps | the run predicted from itself, ms | error "
             "| re-timed residual |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in runs:
        inside = r["own_low_ms"] <= r["config_plain_ms"] <= r["own_high_ms"]
        lines.append(f"| {r['run']} | {r['round']} | {r['profiled_ms']:.1f} | {r['plain_ms']:.1f} / "
                     f"{r['config_plain_ms']:.1f} ({r['round_error_pct']:+.1f}%) | {r['overhead_pct']:+.1f}% | "
                     f"{r['measured_share_pct']:.1f}% / {r['bound_pct']:.1f}% | {r['own_ms']:.1f} "
                     f"({r['own_low_ms']:.1f} - {r['own_high_ms']:.1f}) | {r['own_error_pct']:+.1f}%{_mark(inside)} | "
                     f"{r['residual_pct']:+.1f}% |")
    held = sum(1 for r in runs if r["bound_pct"] >= r["measured_share_pct"])
    own = [abs(r["own_error_pct"]) for r in runs]
    overhead = statistics.median(r["overhead_pct"] for r in runs)
    lines += ["", f"{len(runs)} recordings: the profiled step {overhead:+.1f}% "
                  f"longer than the plain one (median; {min(r['overhead_pct'] for r in runs):+.1f}% to "
                  f"{max(r['overhead_pct'] for r in runs):+.1f}%). The bound a trace without plain steps gives held "
                  f"the measured share in {held} of {len(runs)}. Each run predicted from its own trace: median "
                  f"|error| {statistics.median(own):.1f}%, worst {max(own):.1f}% against its configuration's plain "
                  f"step.", "", noise_floor(runs)]
    return "\n".join(lines)


def noise_floor(runs: list[dict]) -> str:
    """How far one recording's plain step is from its configuration's over every recording: what no prediction
    from one recording can beat, since the recording's own plain steps are all it knows of the machine."""
    dev = [abs(r["round_error_pct"]) for r in runs]
    rounds = len({r["round"] for r in runs})
    if rounds < 2:
        return "One recording per configuration: the machine's own variation between recordings is not measured."
    return (f"The machine's own variation: one recording's plain step against its configuration's over the {rounds} "
            f"recordings, median |difference| {statistics.median(dev):.1f}%, worst {max(dev):.1f}%, "
            f"{sum(1 for d in dev if d > 5)} of {len(dev)} over 5%: a prediction from one recording cannot be surer "
            f"than this.")


def summary(cross: list[dict], key: str = "", what: str = "") -> str:
    errors = [abs(r[f"{key}error_pct"]) for r in cross]
    inside = sum(1 for r in cross if r[f"{key}inside"])
    widths = [r[f"{key}width_pct"] for r in cross]
    return (f"{what}{len(cross)} predictions against the plain step: median |error| {statistics.median(errors):.1f}%, "
            f"worst {max(errors):.1f}%, {sum(1 for e in errors if e <= 15)} within 15%; the plain step inside the "
            f"printed range in {inside} of {len(cross)} ({100.0 * inside / len(cross):.0f}%); the range's half-width "
            f"median {statistics.median(widths):.1f}%, widest {max(widths):.1f}% of the point, "
            f"{sum(1 for w in widths if w < 30)} ranges within +-30%.")


def error_sources(cross: list[dict], runs: list[dict]) -> str:
    """Each prediction's error split in two: the source recording's plain step against its configuration's (the
    machine's speed in that recording: all a prediction knows of it), and the re-timing's ratio applied to the
    source configuration's plain step (the method, the machine's speed taken as known)."""
    own = {(r["run"], r["round"]): r for r in runs}
    level, method = [], []
    for p in cross:
        r = own[(p["source"], p["round"])]
        level.append(100.0 * (r["trace_plain_ms"] / r["config_plain_ms"] - 1.0))
        method.append(100.0 * (p["predicted_ms"] / r["trace_plain_ms"] * r["config_plain_ms"] / p["plain_ms"] - 1.0))

    def told(errors: list[float]) -> str:
        size = [abs(e) for e in errors]
        return (f"median |error| {statistics.median(size):.1f}%, worst {max(size):.1f}%, "
                f"{sum(1 for e in size if e <= 15)} of {len(size)} within 15%")

    return (f"Where the error comes from: the source recording's plain step against its configuration's, "
            f"{told(level)}; the re-timing's ratio times the source configuration's plain step (the machine's "
            f"speed taken as known), {told(method)}.")


def _joined(values: list[float], fmt: str) -> str:
    return " / ".join(format(v, fmt) for v in values)


def table(rows: list[dict]) -> str:
    """One line per (target, source): the prediction from each recording of the source, against the target's
    plain step over all its recordings."""
    pairs: dict[tuple[str, str], list[dict]] = {}
    for r in sorted(rows, key=lambda r: (r["target"], r["source"], r["round"])):
        pairs.setdefault((r["target"], r["source"]), []).append(r)
    lines = ["| target | from the trace of | change | predicted ms (each recording) | plain ms | error | inside the "
             "range | profiled: error |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for (target, source), got in pairs.items():
        predicted = _joined([r["predicted_ms"] for r in got], ".1f")
        lines.append(f"| {target} | {source} | {got[0]['change']} | {predicted} | "
                     f"{got[0]['plain_ms']:.1f} | {_joined([r['error_pct'] for r in got], '+.1f')}% | "
                     f"{sum(r['inside'] for r in got)} of {len(got)} | "
                     f"{_joined([r['profiled_error_pct'] for r in got], '+.1f')}% |")
    prof = [abs(r["profiled_error_pct"]) for r in rows]
    lines += ["", summary(rows),
              f"With the profiler's cost left in, against the profiled steps: median |error| "
              f"{statistics.median(prof):.1f}%, worst {max(prof):.1f}%.",
              summary(rows, "bounded_", "As a trace without plain steps would have them (the profiler's cost "
                      "bounded, not timed): ")]
    for layout in sorted({r["target"].split("-")[0] for r in rows}):
        mine = [r for r in rows if r["target"].startswith(layout)]
        lines.append(summary(mine, what=f"{layout} blocks alone: "))
    return "\n".join(lines)


def bias_table(rows: list[dict]) -> str:
    """The signed error by block and (source schedule -> target schedule): what the noise does not average out."""
    groups: dict[tuple[str, str, str], list[float]] = {}
    for r in rows:
        block, src, tgt = r["source"].split("-")[0], r["source"].split("-")[1], r["target"].split("-")[1]
        groups.setdefault((block, src, tgt), []).append(r["error_pct"])
    lines = ["| blocks | from the trace of | predicting | predictions | mean error | median error | within 15% |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for (block, src, tgt), errs in sorted(groups.items()):
        lines.append(f"| {block} | {SCHEDULE[src]} | {SCHEDULE[tgt]} | {len(errs)} | {statistics.mean(errs):+.1f}% | "
                     f"{statistics.median(errs):+.1f}% | {sum(1 for e in errs if abs(e) <= 15)} |")
    return "\n".join(lines)


def recorded_rounds(work: Path, rounds: int, blocks: tuple[str, ...], how: Recording | None
                    ) -> dict[Config, list[Path]]:
    """Each configuration's recordings, one per round (``work/round1``, ``work/round2``...): recorded now, round
    after round (so the machine's drift falls across every configuration alike), ``how``; with ``how`` None those
    already there."""
    recorded: dict[Config, list[Path]] = {c: [] for c in configs(blocks)}
    for k in range(1, rounds + 1):
        folder = work / f"round{k}"
        if how is not None:
            got = record_all(folder, how, blocks)
        else:
            got = {c: folder / c.tag / "profile.pop" for c in recorded if (folder / c.tag / "profile.pop").is_file()}
        for c, path in got.items():
            recorded[c].append(path)
    return {c: paths for c, paths in recorded.items() if paths}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=ROOT / "benchmarks" / "out" / "replay")
    ap.add_argument("--steps", type=int, default=4, help="profiled steps per run (after one warm-up step)")
    ap.add_argument("--plain", type=int, default=8, help="steps timed without the profiler, before it and after it")
    ap.add_argument("--plain-skip", type=int, default=PLAIN_SKIP,
                    help="unprofiled steps each run warms up with before its plain steps are timed")
    ap.add_argument("--rounds", type=int, default=3, help="recordings of every configuration, one round after another")
    ap.add_argument("--blocks", default=",".join(BLOCKS), help="linear, transformer or both")
    ap.add_argument("--reuse", action="store_true", help="predict from the runs already recorded in --work")
    ap.add_argument("--quiet", type=float, default=0.3,
                    help=f"wait until the machine used under this many cores over {QUIET_WINDOW_S:g} s")
    ap.add_argument("--max-wait", type=float, default=300.0, help="seconds to wait for it before each run")
    ap.add_argument("--write", action="store_true", help="write the table into docs/real-traces.md")
    a = ap.parse_args(argv)
    blocks = tuple(b for b in a.blocks.split(",") if b)
    if a.rounds < 1 or a.plain_skip < 1:
        ap.error("--rounds and --plain-skip are at least 1")
    how = Recording(a.steps, a.plain, a.plain_skip, a.quiet, a.max_wait)
    load = os.getloadavg()
    recorded = recorded_rounds(a.work, a.rounds, blocks, None if a.reuse else how)
    if not recorded:
        ap.error(f"no recordings in {a.work}/round1 ... round{a.rounds}: run without --reuse first")
    rows, runs = predict_all(recorded)
    tuned = tune_check(recorded, a.work, how)
    load_after = os.getloadavg()
    results = {"predictions": rows, "runs": runs, "tune": tuned}
    (a.work / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    text = (table(rows) + "\n\n" + error_sources(rows, runs)
            + "\n\nThe signed error by schedule (what the recordings' own variation does not average "
            "out):\n\n" + bias_table(rows) + "\n\nEach recording: its profiled and plain steps, the profiler's cost, "
            "and the run predicted from its own trace:\n\n" + runs_table(runs) + "\n\n`popvision tune PROFILE`'s "
            "fastest candidate, run for real:\n\n" + tune_table(tuned))
    rounds = max(len(p) for p in recorded.values())
    header = (f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()} with {os.cpu_count()} cores: every "
              f"configuration recorded {rounds} times, round after round, each recording {a.steps} profiled steps, "
              f"{a.plain} plain steps before them (after {a.plain_skip} untimed) and {a.plain + 1} after, each once "
              f"the machine was quiet: the "
              f"cores busy in the {QUIET_WINDOW_S:g} s before each recording "
              f"{quiet_before([p for ps in recorded.values() for p in ps])} (the 1-minute load average "
              f"{load[0]:.2f} when the predictions started, {load_after[0]:.2f} at their end): "
              f"`.venv/bin/python benchmarks/replay_fidelity.py --rounds {a.rounds} --plain {a.plain} "
              f"--plain-skip {a.plain_skip} "
              f"--quiet {a.quiet:g} --write`.\n\n")
    print(header + text)
    if a.write:
        doc = DOC.read_text()
        start, end = doc.index(BEGIN) + len(BEGIN), doc.index(END)
        DOC.write_text(doc[:start] + "\n" + header + text + "\n" + doc[end:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
