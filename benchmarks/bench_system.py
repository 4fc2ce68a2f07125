"""The System page at a million events: its server-side query at full range and zoomed.

    .venv/bin/python benchmarks/bench_system.py [--events 1000000] [--repeat 5] [--tmp DIR] [--json OUT.json] [--quick]

Writes a run's system timeline of about ``--events`` events as two processes' files (popdist instances
0 and 1, the second starting 0.3 ms later), each a training loop of 1 ms steps: a wait for data
holding its loading, a model call holding two optimizer updates, the call's samples/s, and an epoch
instant every 1,000 steps; beside it a small synthetic profile (``DIR/training/profile.pop``), so the
files are found as a PopTorch run's are. Then, in this process:

- **open**: reading and checking the files, ``system.load`` and ``SystemIndex`` (what the dashboard's
  warm-up does before the page's first query);
- **queries**: the page's ``timeline`` callback (``system.window``, the figure, and its JSON encoding
  as Dash sends it) over the whole run, 10 %, 1 %, 0.1 % and 0.01 % of it in the middle, and the whole
  run on the absolute (date) axis: the first call and the median of ``--repeat`` more; with the
  analysis alone (``system.window``) and the bytes sent.

The budget is the dashboard's, 500 ms a callback; the bench exits 1 when a median misses it, after
writing its figures. ``--quick`` makes 20,000 events (a smoke run; its figures mean nothing).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import plotly.utils  # noqa: E402

BUDGET_S = 0.5
T0 = 1_750_000_000_000_000_000  # ns since 1970
EVENTS_PER_STEP = 6  # wait, loading, call, two updates, samples/s


def write_process(folder: Path, instance: int, steps: int, offset_ns: int) -> Path:
    """One process's file: ``steps`` steps of 1 ms (see the module docstring)."""
    from popvision_py.format import system as S

    k = np.arange(steps, dtype=np.int64)
    base = T0 + offset_ns + k * 1_000_000
    epochs = base[::1000]
    jitter = (np.sin(k / 500.0) * 50_000).astype(np.int64)  # calls that slow down and speed up again
    parts = [("dataloader", "wait for data", "span", base, base + 200_000),
             ("dataloader", "data loading", "span", base + 10_000, base + 190_000),
             ("poptorch", "model call", "span", base + 250_000, base + 850_000 + jitter),
             ("poptorch", "optimizer update", "span", base + 400_000, base + 450_000),
             ("poptorch", "optimizer update", "span", base + 700_000, base + 750_000),
             ("poptorch", "samples per second", "counter", base + 850_000 + jitter, base + 850_000 + jitter),
             ("dataloader", "epoch", "instant", epochs, epochs)]
    sizes = [len(p[3]) for p in parts]
    n = sum(sizes)
    value = np.full(n, np.nan)
    at = sum(sizes[:5])
    value[at:at + steps] = 32e9 / (600_000 + jitter)
    process = f"instance-{instance}"
    return S.write_system(folder / f"{process}{S.SUFFIX}", {
        "process": np.full(n, process, object), "pid": np.full(n, 1000 + instance, np.int64),
        "thread": np.full(n, "MainThread", object),
        "channel": np.repeat(np.array([p[0] for p in parts], object), sizes),
        "name": np.repeat(np.array([p[1] for p in parts], object), sizes),
        "kind": np.repeat(np.array([p[2] for p in parts], object), sizes),
        "start_ns": np.concatenate([p[3] for p in parts]), "end_ns": np.concatenate([p[4] for p in parts]),
        "value": value}, process, 1000 + instance, instance)


def make_run(folder: Path, events: int) -> Path:
    """The profile and the two processes' files; returns the profile."""
    from tests import synthetic

    profile = synthetic.write_pipeline_profile(folder / "training" / "profile.pop", [10, 10], stages=[1, 1],
                                               micro_batches=2, iterations=1, tiles_per_ipu=4, bytes_per_tile=1000)
    steps = max(events // (2 * EVENTS_PER_STEP), 10)
    for instance in (0, 1):
        write_process(folder, instance, steps, instance * 300_000)
    return profile


def timed(func, repeat: int) -> tuple[float, float, object]:
    start = time.perf_counter()
    result = func()
    first = time.perf_counter() - start
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        runs.append(time.perf_counter() - start)
    return first, statistics.median(runs) if runs else first, result


def bench(folder: Path, events: int, repeat: int) -> dict:
    began = time.perf_counter()
    profile = make_run(folder, events)
    written = time.perf_counter() - began
    from dashboards import data
    from dashboards.app import create_app

    create_app([str(profile)])
    from dashboards.pages import system as page  # a page module is loaded by the app it registers with
    report = data.report("a")
    start = time.perf_counter()
    report.system.index()
    opened = time.perf_counter() - start
    total = len(report.system.index())
    origin, end = report.system.extent()
    span = end - origin
    cases = {"whole run": (origin, end)}
    for share in (0.1, 0.01, 0.001, 0.0001):
        middle = origin + span // 2
        cases[f"{share:.2%} of the run"] = (middle, middle + max(int(span * share), 1))
    out: dict = {"events": total, "files_bytes": sum(p.stat().st_size for p in report.system.files()),
                 "write_s": written, "open_s": opened, "queries": {}}
    for name, window in [*cases.items(), ("whole run, absolute time", (origin, end))]:
        mode = "absolute" if "absolute" in name else "relative"

        def callback(window=window, mode=mode) -> int:
            fig, level, _ = page.timeline("a", window, mode)
            return len(json.dumps(fig, cls=plotly.utils.PlotlyJSONEncoder)), level

        first, median, (size, level) = timed(callback, repeat)

        def analysis(window=window):
            return report.system.window(*window, max_events=page.MAX_EVENTS, max_bins=page.MAX_BINS)

        a_first, a_median, result = timed(analysis, repeat)
        out["queries"][name] = {"first_s": first, "median_s": median, "analysis_median_s": a_median,
                                "level": result.level, "events_in_window": result.events, "drawn": len(result.frame),
                                "bytes": size}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--tmp", type=Path, default=None, help="where to write the files [a temporary folder]")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--quick", action="store_true", help="20,000 events, 1 repeat: a smoke run")
    args = parser.parse_args(argv)
    events, repeat = (20_000, 1) if args.quick else (args.events, args.repeat)
    with tempfile.TemporaryDirectory(prefix="bench-system-", dir=args.tmp) as folder:
        figures = bench(Path(folder), events, repeat)
    print(f"{figures['events']:,} events in {figures['files_bytes'] / 2**20:.1f} MiB of files (written in "
          f"{figures['write_s']:.2f} s); read, checked and indexed in {figures['open_s']:.2f} s")
    print(f"{'window':<28} {'level':<7} {'in window':>10} {'drawn':>7} {'first':>8} {'median':>8} {'analysis':>9} "
          f"{'sent':>9}")
    missed = False
    for name, q in figures["queries"].items():
        missed |= q["median_s"] > BUDGET_S
        print(f"{name:<28} {q['level']:<7} {q['events_in_window']:>10,} {q['drawn']:>7,} {q['first_s'] * 1e3:>6.0f} ms "
              f"{q['median_s'] * 1e3:>5.0f} ms {q['analysis_median_s'] * 1e3:>6.1f} ms {q['bytes'] / 1024:>6.0f} KiB")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 1 if missed and not args.quick else 0


if __name__ == "__main__":
    sys.exit(main())
