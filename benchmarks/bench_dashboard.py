"""How fast the dashboard answers: every callback's server time, and the first page in a browser.

Usage::

    .venv/bin/python benchmarks/bench_dashboard.py [PROFILE] [--compare-with PROFILE_B] [--repeat N] [--no-browser]
        [--warm-up N [--before DIR]]

``--warm-up N`` also times the warm-up in N fresh processes (``bench_warm_up``), alternating with
another checkout's (``--before DIR``, e.g. ``git worktree add /tmp/before 1ea6a37``) when given.

Without PROFILE it makes the largest profile the benchmarks use: a synthetic pipeline through
``tests/synthetic.py`` of 24 blocks over 4 IPUs of 1,472 tiles, 64 micro-batches and 1,000
iterations (about 3.5 million trace rows), plus the engine's bert-large
(``popvision run bert-large --profile``) when the engine is there.

- **Callbacks**: each page's callback functions called directly (as Dash calls them), including the
  JSON encoding of what they return; the first call and the median of ``--repeat`` later calls.
  The budget is 500 ms per callback. First the dashboard's warm-up runs and is timed (what
  ``popvision dashboard`` does in a background thread while its server starts), so the first
  calls are what a person's first clicks get; ``--cold`` skips it (the first calls then read and
  reduce the tables themselves).
- **Memory**: the process's peak RSS after the warm-up and every callback (``ru_maxrss``), with
  PROFILE given; the budget is 2 GB at a billion rows, within 1.5x of the 50M-row peak.
- **First page**: ``popvision dashboard PROFILE`` started as a subprocess; then headless Chromium
  opens the summary page; the time from launching the command, and from asking for the page, until
  its key figures and figures are drawn. The budget is 3 s.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import plotly.utils  # noqa: E402
from compiled import compile_tree  # noqa: E402

BUDGET_CALLBACK_S = 0.5
BUDGET_P95_S = 1.0
BUDGET_FIRST_PAGE_S = 3.0
# How long the server may take to listen, and the first page to draw, before the bench gives up: the
# dashboard checks every table before it serves, a billion rows' trace included (minutes).
PAGE_WAIT_S = 600


def make_profiles(folder: Path, iterations: int = 1000, engine: bool = True) -> list[tuple[Path, str]]:
    from tests import synthetic

    made = []
    big = synthetic.write_pipeline_profile(
        folder / "large_synthetic.pop", [100] * 24, stages=[6, 6, 6, 6], micro_batches=64, iterations=iterations,
        tiles_per_ipu=1472, bytes_per_tile=638976, exchange_bytes=65536, exchange_cycles=40, host_bytes=4096,
        host_cycles=20, sync_cycles=10,
    )
    made.append((big, "large synthetic pipeline (tests/synthetic.py)"))
    if not engine:
        return made
    exe = ROOT / ".venv" / "bin" / "popvision"
    done = subprocess.run([str(exe), "run", "bert-large", "--profile", "--profile-dir", str(folder / "bert")],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode == 0:
        made.append((folder / "bert" / "profile.pop", "bert-large (popvision run bert-large --profile)"))
    return made


def encode(result: object) -> int:
    """JSON-encode a callback's return value as Dash does; returns the bytes sent."""
    return len(json.dumps(result, cls=plotly.utils.PlotlyJSONEncoder))


class NoUpdate(Exception):
    """A callback that sends nothing for this profile (Dash's ``PreventUpdate``: an IPU's tile clicked on an
    imported trace's page, which has no tiles): nothing to time."""


def timed(func: Callable[[], object], repeat: int) -> tuple[float, float, float, int]:
    """(first call, median and 95th percentile of the next ``repeat`` calls) in seconds, and the response size;
    ``NoUpdate`` where the callback sends nothing."""
    from dash.exceptions import PreventUpdate

    start = time.perf_counter()
    try:
        size = encode(func())
    except PreventUpdate:
        raise NoUpdate from None
    first = time.perf_counter() - start
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        encode(func())
        runs.append(time.perf_counter() - start)
    ordered = sorted(runs)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return first, statistics.median(runs), p95, size


def callbacks(paths: list[str], warm: bool = True) -> list[tuple[str, Callable[[], object]]]:
    """Every callback of every page, with the arguments a person's first clicks give it.

    With ``warm`` the dashboard's background warm-up (``Profiles.warm``, which ``popvision
    dashboard`` starts in a thread while the server starts) runs first and is timed: the first
    calls are then what a person's first clicks get. Without it they are cold.
    """
    from dashboards import data
    from dashboards.app import create_app
    from engine import rules

    create_app(paths, planner=rules)  # as `popvision dashboard` builds it: the fixes checked
    if warm:
        started = time.perf_counter()
        data.current().warm()
        print(f"{'warm-up (background thread at start)':<52} {(time.perf_counter() - started) * 1e3:7.1f} ms")
    page = {name: importlib.import_module(f"dashboards.pages.{name}")
            for name in ("summary", "memory", "liveness", "trace", "stages", "exchange", "compare", "programs",
                         "operations", "gpu", "system")}
    report = data.report("a")
    summary = report.summary.figures()
    ipu = int(summary.worst_ipu)
    peaks = report.liveness.peaks()
    top = peaks.loc[peaks["not_always_live_bytes"].idxmax()]
    start, end = report.trace.extent()
    span = end - start
    steps = report.trace.steps(0)
    sets = steps[steps["type"].astype(str) == "compute_set"]
    compute_set = int(sets.iloc[0]["step"]) if len(sets) else 0  # an imported trace has none: its tiles' views decline
    variables = report.memory.depth.choices(ipu)["var_id"] if not report.imported else []
    variable = int(variables[0]) if len(variables) else 0
    mid = start + span // 2
    step_cycles = int(steps["cycles"].median())
    found = [
        ("summary.render", lambda: page["summary"].render("a")),
        ("summary.render_tile_insights", lambda: page["summary"].render_tile_insights("a")),
        ("memory.render_overview", lambda: page["memory"].render_overview("a")),
        ("memory.render_ipu", lambda: page["memory"].render_ipu(ipu, "peak", None, None, "a")),
        ("memory.show_tile (click)", lambda: page["memory"].show_tile({"points": [{"x": 5, "y": 3}]}, ipu, "a")),
        # memory in depth: the map's other colourings, the variable picker, a typed tile, the tile's tabs, worst tiles
        ("memory.render_ipu (dominant category)", lambda: page["memory"].render_ipu(ipu, "category", None, None, "a")),
        ("memory.variable_options", lambda: page["memory"].variable_options(ipu, "a")),
        ("memory.render_ipu (a variable)", lambda: page["memory"].render_ipu(ipu, "variable", variable, None, "a")),
        ("memory.type_tile", lambda: page["memory"].type_tile(7, ipu, "a")),
        ("memory.tile_tabs", lambda: page["memory"].tile_tabs({"ipu": ipu, "tile": 0}, "a")),
        ("memory.worst_steps", lambda: page["memory"].worst_steps(ipu, "a")),
        ("liveness.choose_peak", lambda: page["liveness"].choose_peak("a")),
        ("liveness.render_plot", lambda: page["liveness"].render_plot(int(top["ipu"]), int(top["peak_step"]), "a")),
        ("liveness.render_peaks", lambda: page["liveness"].render_peaks("a")),
        ("liveness.choose_clicked",
         lambda: page["liveness"].choose_clicked({"points": [{"x": 3, "customdata": [0, "s"]}]})),
        ("liveness.show_live", lambda: page["liveness"].show_live(int(top["ipu"]), int(top["peak_step"]), "a")),
        ("trace.render_timeline (whole run)", lambda: page["trace"].render_timeline("a", 0)),
        ("trace.zoom_timeline (10 % window)", lambda: page["trace"].zoom_timeline(
            {"xaxis.range[0]": mid, "xaxis.range[1]": mid + span // 10}, "a", 0)),
        ("trace.zoom_timeline (0.1 % window)", lambda: page["trace"].zoom_timeline(
            {"xaxis.range[0]": mid, "xaxis.range[1]": mid + span // 1000}, "a", 0)),
        ("trace.zoom_timeline (a few steps)", lambda: page["trace"].zoom_timeline(
            {"xaxis.range[0]": mid, "xaxis.range[1]": mid + 5 * step_cycles}, "a", 0)),
        ("trace.zoom_timeline (autorange)", lambda: page["trace"].zoom_timeline({"xaxis.autorange": True}, "a", 0)),
        ("trace.render_figures", lambda: page["trace"].render_figures("a")),
        ("trace.choose_ipu", lambda: page["trace"].choose_ipu(0, "a")),
        ("trace.show_tile_cycles", lambda: page["trace"].show_tile_cycles(compute_set, 0, "a")),
        # tiles in time: the busiest 8 and 64 tiles of IPU 0 (8 get 800 bins each, 64 get 100), zoomed out and in
        *[(f"trace.render_tile_timeline ({label}, {n} tiles)",
           lambda window=window, n=n: page["trace"].render_tile_timeline(window, f"worst {n}", 0, "a"))
          for n in (8, 64)
          for label, window in (("whole run", None), ("10 % window", [mid, mid + span // 10]),
                                ("0.1 % window", [mid, mid + span // 1000]),
                                ("a few steps", [mid, mid + 5 * step_cycles]))],
        ("trace.show_tile_balance (in view, 10 %)", lambda: page["trace"].show_tile_balance(
            compute_set, "view", [mid, mid + span // 10], 0, "a")),
        ("stages.render", lambda: page["stages"].render("a")),
        ("exchange.render", lambda: page["exchange"].render("a")),
        ("exchange.render_matrix", lambda: page["exchange"].render_matrix("a", "bytes")),
        ("programs.render_header", lambda: page["programs"].render_header("a")),
        ("programs.render_tree (IPU 0)", lambda: page["programs"].render_tree(0, "", "a")),
        ("programs.render_tree (every IPU)", lambda: page["programs"].render_tree("all", "", "a")),
        ("programs.render_tree (search)", lambda: page["programs"].render_tree("all", "update", "a")),
        ("operations.render_table (by op)", lambda: page["operations"].render_table("a", "op")),
        ("operations.render_table (by layer)", lambda: page["operations"].render_table("a", "layer")),
        ("operations.select (the costliest op)", lambda: page["operations"].select("a", "op", {"row_id": 0})),
        ("operations.select (the costliest layer)", lambda: page["operations"].select("a", "layer", {"row_id": 0})),
    ]
    if report.imported:  # a PyTorch trace's own pages: the GPU's kernels and the ranks' CPU time lines
        found += [
            ("gpu.render", lambda: page["gpu"].render("a")),
            ("gpu.render_timeline (the page's first call, the picker empty)",
             lambda: page["gpu"].render_timeline("a", 0, None)),
            ("gpu.render_timeline (the page's first ranks)", lambda: page["gpu"].render_timeline(
                "a", 0, page["gpu"].ranks_of(report)[:page["gpu"].RANKS_SHOWN])),
            ("system.render_figures", lambda: page["system"].render_figures("a")),
            ("system.render_timeline (whole run)", lambda: page["system"].render_timeline("a", 0, "relative")),
        ]
    if len(paths) == 2:
        found.append(("compare.render", lambda: page["compare"].render("a")))
    return found


def bench_callbacks(paths: list[str], repeat: int, warm: bool = True, only: str = "") -> dict[str, dict[str, float]]:
    """Each callback's first call and median later call (seconds) and response size (bytes); ``only``: those
    whose name holds it."""
    figures = {}
    print(f"{'callback':<52} {'first':>9} {'median':>9} {'p95':>9} {'sent':>10}")
    for name, func in callbacks(paths, warm):
        if only not in name:
            continue
        try:
            first, median, p95, size = timed(func, repeat)
        except NoUpdate:
            print(f"{name:<52} sends nothing for this profile (PreventUpdate)")
            continue
        verdict = "ok" if median < BUDGET_CALLBACK_S and p95 < BUDGET_P95_S else "OVER BUDGET"
        print(f"{name:<52} {first * 1e3:7.1f} ms {median * 1e3:7.1f} ms {p95 * 1e3:7.1f} ms {size / 1024:7.0f} KiB  "
              f"{verdict}")
        figures[name] = {"first_s": first, "median_s": median, "p95_s": p95, "bytes": size}
    return figures


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bench_first_page(path: str) -> dict[str, float]:
    """Launch `popvision dashboard PROFILE`, then time the summary page in headless Chromium."""
    from dashboards.screenshots import chrome

    port = _free_port()
    driver = chrome()  # the browser is started first: its own start-up is not the dashboard's
    exe = ROOT / ".venv" / "bin" / "popvision"
    launched = time.perf_counter()
    server = subprocess.Popen([str(exe), "dashboard", path, "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:  # until the server accepts connections
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if server.poll() is not None or time.perf_counter() - launched > PAGE_WAIT_S:
                raise RuntimeError("the dashboard did not start")
            time.sleep(0.02)
        listening = time.perf_counter()
        driver.get(f"http://127.0.0.1:{port}/")
        usable = """
            const cards = document.querySelectorAll('#summary-figures .card').length;
            const graphs = ['summary-time', 'summary-memory'].every(
                id => document.querySelector('#' + id + ' .main-svg .trace'));
            const insights = document.querySelector('#summary-insights');
            return cards > 0 && graphs && !!insights && insights.children.length > 0;
        """
        while not driver.execute_script(usable):
            if time.perf_counter() - listening > PAGE_WAIT_S:
                raise RuntimeError("the first page did not finish drawing")
            time.sleep(0.01)
        done = time.perf_counter()
    finally:
        driver.quit()
        server.terminate()
        server.wait(timeout=10)
    from_launch, from_request = done - launched, done - listening
    verdict = "ok" if from_request < BUDGET_FIRST_PAGE_S else "OVER BUDGET"
    print(f"first page usable: {from_request:.2f} s after asking for it ({verdict}); "
          f"{from_launch:.2f} s after launching `popvision dashboard` (server listening after "
          f"{listening - launched:.2f} s)")
    return {"from_request_s": from_request, "from_launch_s": from_launch, "listening_s": listening - launched}


# Issue 26: the warm-up at 50M trace rows was 4.35 s before the read-side checks landed (1ea6a37).
WARM_UP_BEFORE_S = 4.35
_WARM_UP = (
    "import sys, time\n"
    "from dashboards import data\n"
    "from dashboards.app import create_app\n"
    "from engine import rules\n"
    "create_app([sys.argv[1]], planner=rules)\n"
    "began = time.perf_counter()\n"
    "data.current().warm()\n"
    "print(time.perf_counter() - began)\n"
)


def bench_warm_up(path: str, repeat: int, before: str | None = None) -> dict:
    """The dashboard's warm-up (``Profiles.warm``), each run in a fresh process after the app is
    made; with ``before`` (another checkout, e.g. a ``git worktree`` of an earlier commit) that
    tree's warm-up too, the two alternating so that the shared machine's load hits both alike."""
    trees = {"now": ROOT, **({"before": Path(before).resolve()} if before else {})}
    times: dict[str, list[float]] = {name: [] for name in trees}
    for tree in trees.values():
        compile_tree(tree)
    for _ in range(repeat):
        for name, tree in trees.items():
            done = subprocess.run([sys.executable, "-c", _WARM_UP, str(Path(path).resolve())], cwd=tree, check=True,
                                  env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True)
            times[name].append(float(done.stdout.strip().splitlines()[-1]))
    out = {f"{name}_s": statistics.median(t) for name, t in times.items()}
    out.update({"runs": times, "target_s": WARM_UP_BEFORE_S, "met": out["now_s"] < WARM_UP_BEFORE_S})
    shown = "  ".join(f"{name} {statistics.median(t):.2f} s ({min(t):.2f}-{max(t):.2f})" for name, t in times.items())
    print(f"{'warm-up, fresh processes, median of ' + str(repeat):<38} {shown}  (target < {WARM_UP_BEFORE_S} s)")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profiles", nargs="*", help="profiles to measure (default: make the large ones)")
    parser.add_argument("--compare-with", help="a second profile, to time the compare page too")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--no-browser", action="store_true", help="skip the first-page measurement")
    parser.add_argument("--first-page-only", action="store_true", help="skip the callbacks: the first page alone")
    parser.add_argument("--cold", action="store_true",
                        help="time the callbacks without the warm-up first (cold first calls)")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--quick", action="store_true",
                        help="a small profile and 2 repeats, to check the benchmark runs")
    parser.add_argument("--only", default="", help="time only the callbacks whose name holds this (e.g. tile_)")
    parser.add_argument("--warm-up", type=int, default=0, metavar="N",
                        help="also time the warm-up in N fresh processes (issue 26's target: below 4.35 s at 50M rows)")
    parser.add_argument("--before", metavar="DIR",
                        help="with --warm-up: another checkout whose warm-up alternates with this one's")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeat = 2
    with tempfile.TemporaryDirectory(prefix="bench-dashboard-") as tmp:
        if args.profiles:
            targets = [(Path(p), str(p)) for p in args.profiles]
        else:
            print("making the profiles...", flush=True)
            targets = make_profiles(Path(tmp), iterations=5, engine=False) if args.quick else make_profiles(Path(tmp))
        ok = True
        results = []
        for path, what in targets:
            from popvision_py.format import open_profile

            with open_profile(path) as profile:
                rows = {name: profile.num_rows(name) for name in ("trace", "tile_cycles", "tile_memory")}
            print(f"\n== {what}: {path.stat().st_size / 2**20:.1f} MiB, "
                  + ", ".join(f"{n} {r:,} rows" for n, r in rows.items()))
            paths = [str(path)] + ([args.compare_with] if args.compare_with else [])
            measured = {"profile": what, "bytes": path.stat().st_size, "rows": rows}
            if args.first_page_only:
                measured["first_page"] = bench_first_page(str(path))
                ok &= measured["first_page"]["from_request_s"] < BUDGET_FIRST_PAGE_S
                results.append(measured)
                continue
            measured["callbacks"] = bench_callbacks(paths, args.repeat, not args.cold, args.only)
            measured["max_median_s"] = max(c["median_s"] for c in measured["callbacks"].values())
            measured["max_p95_s"] = max(c["p95_s"] for c in measured["callbacks"].values())
            # this process's peak: the dashboard's warm-up and every callback (and, without PROFILE, the making)
            measured["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            print(f"peak RSS {measured['peak_rss_bytes'] / 2**20:,.0f} MiB; slowest median "
                  f"{measured['max_median_s'] * 1e3:.0f} ms, slowest p95 {measured['max_p95_s'] * 1e3:.0f} ms")
            measured["max_first_s"] = max(c["first_s"] for c in measured["callbacks"].values())
            if args.warm_up:
                measured["warm_up"] = bench_warm_up(str(path), args.warm_up, args.before)
            ok &= measured["max_median_s"] < BUDGET_CALLBACK_S and measured["max_p95_s"] < BUDGET_P95_S
            if not args.no_browser:
                measured["first_page"] = bench_first_page(str(path))
                ok &= measured["first_page"]["from_request_s"] < BUDGET_FIRST_PAGE_S
            results.append(measured)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"profiles": results}, indent=2))
    print("\nall within budget" if ok else "\nSOME OVER BUDGET")
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
