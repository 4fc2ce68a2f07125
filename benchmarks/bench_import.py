"""`popvision import` of PyTorch profiler traces, and the whole path after it, at each size: time and peak memory.

    .venv/bin/python benchmarks/bench_import.py [--sizes 100 1000 10000] [--variants gpipe gpipe-gpu ddp ddp-gpu]
        [--big-variants gpipe gpipe-gpu] [--src-dir /tmp/traces] [--work /tmp/popvision-bench-import]
        [--ranks 4 256 1024 4096] [--layers 16] [--cap-gib 20] [--timeout-min 30] [--json OUT.json] [--keep-traces]
        [--tools popvision hta] [--hta-python /work/hta-venv/bin/python]

For each size (MB of trace JSON, all ranks together; 100 MB, 1 GB and 10 GB by default) and variant,
``make_large_trace.py`` grows recorded rank traces to that size by repeating their real profiler
steps, once (the folder ``--work``/``<variant>_<MB>mb`` is kept and reused unless it is the largest
size and ``--keep-traces`` is not given: 10 GB folders are deleted after their run). The variants:

- ``gpipe``: CPU traces with pipeline annotations, the 4-rank GPipe recording (``python -m
  tests.traces.record gpipe SRC_DIR/gpipe``: gloo on the CPU, ``Forward {i}`` / ``Backward {i}``);
- ``ddp``: CPU traces without pipeline annotations, the 2-rank DistributedDataParallel recording
  (``python -m tests.traces.record ddp SRC_DIR/ddp``);
- ``gpipe-gpu``, ``ddp-gpu``: the same recordings rewritten as GPU traces (``make_large_trace.py
  --gpu-style``: operators as ``kernel`` events on a compute stream, gloo's transfers as NCCL kernels on
  a stream of their own). No GPU recording is at hand: these stand in for one, with the CPU's times.
- ``gpu``: synthetic GPU traces of a 4-rank DistributedDataParallel run on GPUs (``make_gpu_trace.py``:
  runtime launches joined to kernels by correlation, NCCL kernels with their args, copies and sets on
  three streams, GPU-side annotations), written to the size; no recording needed. ``--ranks`` cuts the
  same total size into each rank count given (``make_gpu_trace.make_copies``: 4 ranks written, the others
  copies of them naming their own rank, so that a rank's step is the same size whatever the world), to
  measure what the path costs per rank (``<variant>_<MB>mb_<N>ranks``); without it, 4. ``--layers`` sets its
  model's layers (16 by default): a size is reached by repeating the profiler step, so at 16 layers 10 GB is
  17,400 steps a rank of 90 kernels each, at 1,600 layers 189 steps of 8,400 (``..._<L>layers``), the way a
  real trace grows with its model rather than with the steps recorded.

Each step of the path then runs as a whole command in a fresh process, in order, on the result of
the one before:

1. ``popvision import FOLDER -o OUT -q``;
2. ``popvision report OUT --section all`` (its text to a file), and for GPU traces ``--section gpu``;
3. ``popvision sql OUT QUERY`` (each phase's rows and cycles per IPU over the whole trace);
4. ``popvision export-trace OUT/profile.pop -o OUT/trace.json -q``;
5. the dashboard's warm-up (``create_app([OUT]); data.current().warm()``, as ``popvision dashboard``
   runs it in a thread while the server starts).

A step that fails (non-zero exit, out of memory, past the time cap) fails the benchmark: it goes on
to the next variant, and the script exits 1 at the end. Time is the wall time of each whole command
(interpreter start and imports included), and its CPU time (user + system, of the command and the
worker processes it waited for: what it costs whatever else the shared machine runs). Peak memory
is the peak of the **sum of the resident sets (RSS) of the command's process and all its
descendants** (the import reads in worker processes), sampled every 0.1 s from ``/proc/PID/statm``
(the process tree rescanned every 0.5 s), or the largest single process's exact high-water mark
(``VmHWM``, ``ru_maxrss``) where that is higher. The sum counts pages a forked worker shares with its
parent once per process. Before the import the trace
files are read once, so that it starts with them in the page cache as far as memory allows.

Each command runs capped: ``RLIMIT_AS`` at ``--cap-gib`` per process, killed when its summed RSS
passes ``--cap-gib`` or the machine's available memory falls under 0.75 GiB, or past
``--timeout-min``. The machine's load average is recorded before and after each size. The figures go
to ``--json`` (default ``--work``/results.json) and a table is printed.

``--tools hta`` also times Holistic Trace Analysis 0.5.0 on the same folders (``TraceAnalysis(
trace_dir=FOLDER)`` then ``get_temporal_breakdown(visualize=False)``, in its own virtual env,
``--hta-python``; not a dependency of the project), as issue 23's comparison did.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import make_gpu_trace  # noqa: E402  (benchmarks/ is this script's folder)
import make_large_trace  # noqa: E402


SIZES_MB = (100, 1000, 10000)
PAGE = os.sysconf("SC_PAGE_SIZE")
SAMPLE_S = 0.1
RESCAN_S = 0.5
MACHINE_FLOOR = int(0.75 * 2**30)  # kill a run when the machine's available memory falls under this

# HTA in its own env: load the folder, then the temporal breakdown; phase times and outcome to $RESULT_FILE.
HTA_SCRIPT = """
import json, os, sys, time
began = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
imported = time.perf_counter()
analyzer = TraceAnalysis(trace_dir=sys.argv[1])
loaded = time.perf_counter()
try:
    frame = analyzer.get_temporal_breakdown(visualize=False)
    breakdown = {"ok": True, "rows": len(frame), "frame": frame.to_string()}
except Exception as exc:  # a CPU-only trace has no GPU kernel to break down
    breakdown = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
done = time.perf_counter()
kept = sum(len(analyzer.t.get_trace(rank)) for rank in analyzer.t.traces)
with open(os.environ["RESULT_FILE"], "w") as out:
    json.dump({"import_s": imported - began, "load_s": loaded - imported, "breakdown_s": done - loaded,
               "breakdown": breakdown, "ranks": sorted(analyzer.t.traces), "rows_kept": kept}, out)
"""


def proc_tree(root: int) -> list[int]:
    """``root`` and its descendants, from every process's parent in /proc/PID/stat."""
    parent: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            parent[int(name)] = int(stat[stat.rindex(b")") + 2:].split()[1])
    tree, frontier = [root], [root]
    while frontier:
        frontier = [p for p, pp in parent.items() if pp in frontier]
        tree += frontier
    return tree


def rss_bytes(pid: int) -> int:
    """The process's resident set (``/proc/PID/statm``: O(1), unlike ``smaps_rollup``'s PSS, which walks
    every page table entry: 30 ms for a 1.5 GB process, a core's worth at 10 Hz on HTA's 8 GB workers)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def hwm_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def available_bytes() -> int:
    with open("/proc/meminfo", "rb") as f:
        for line in f:
            if line.startswith(b"MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 1 << 62


def measure(command: list[str], log: Path, env: dict[str, str], cap: int, timeout_s: float, cwd: Path = ROOT) -> dict:
    """Run ``command`` as a fresh process tree under the caps: wall time, peak memory, outcome."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    with open(log, "wb") as out:
        began = time.perf_counter()
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=env,
                                 start_new_session=True, preexec_fn=limit)
        state = {"peak_sum": 0, "peak_one": 0, "processes": 1, "killed": None, "sampler_cpu_s": 0.0}
        stop = threading.Event()

        def sample() -> None:
            tree, scanned = [child.pid], 0.0
            while not stop.is_set():
                now = time.perf_counter()
                if now - scanned >= RESCAN_S:
                    tree, scanned = proc_tree(child.pid), now
                    state["processes"] = max(state["processes"], len(tree))
                total = sum(rss_bytes(p) for p in tree)
                state["peak_sum"] = max(state["peak_sum"], total)
                state["peak_one"] = max([state["peak_one"], *(hwm_bytes(p) for p in tree)])
                reason = ("memory" if total > cap else "machine" if available_bytes() < MACHINE_FLOOR
                          else "time" if now - began > timeout_s else None)
                if reason and state["killed"] is None:
                    state["killed"] = reason
                    try:
                        os.killpg(child.pid, signal.SIGKILL)  # the run's own session: the command and its workers
                    except ProcessLookupError:
                        pass
                state["sampler_cpu_s"] = time.thread_time()
                stop.wait(SAMPLE_S)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - began
        child.returncode = os.waitstatus_to_exitcode(status)
        stop.set()
        sampler.join()
    if state["killed"] is None and child.returncode == 0:
        try:  # workers left behind by the command (none expected): end them with it
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    text = log.read_text(errors="replace")
    gib = cap / 2**30
    if state["killed"] in ("memory", "machine") or (child.returncode != 0 and any(
            word in text for word in ("MemoryError", "Cannot allocate memory", "std::bad_alloc"))):
        outcome = f"out of memory at {gib:g} GiB" + (" (machine's memory low)" if state["killed"] == "machine" else "")
    elif state["killed"] == "time":
        outcome = f"did not finish in {timeout_s / 60:g} min"
    elif child.returncode < 0:  # a signal this benchmark did not send
        outcome = f"ended from outside by signal {-child.returncode} ({signal.Signals(-child.returncode).name})"
    elif child.returncode != 0:
        last = [line for line in text.strip().splitlines() if line.strip()][-1:] or ["no message"]
        outcome = f"failed (exit {child.returncode}: {last[0][:200]})"
    else:
        outcome = "ok"
    largest = max(state["peak_one"], usage.ru_maxrss * 1024)
    return {"outcome": outcome, "wall_s": round(wall, 2), "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
            "peak_mb": round(max(state["peak_sum"], largest) / 2**20, 1),
            "peak_rss_sum_mb": round(state["peak_sum"] / 2**20, 1),
            "largest_process_mb": round(largest / 2**20, 1), "sampler_cpu_s": round(state["sampler_cpu_s"], 2),
            "processes": state["processes"], "exit_code": child.returncode, "log": str(log)}


def warm(folder: Path) -> None:
    """Read every trace once, so that each run starts with them in the page cache as far as memory allows."""
    for p in sorted(folder.iterdir()):
        with open(p, "rb", buffering=0) as f:
            while f.read(1 << 20):
                pass


VARIANTS = {  # name -> (recording, GPU-style rewrite); "gpu": synthetic GPU traces (make_gpu_trace.py), no recording
    "gpipe": ("gpipe", False), "gpipe-gpu": ("gpipe", True), "ddp": ("ddp", False), "ddp-gpu": ("ddp", True),
    "gpu": (None, True)}
SQL = ("SELECT ipu, phase, count(*) AS rows, sum(end_cycle - start_cycle) AS cycles FROM trace "
       "GROUP BY ipu, phase ORDER BY ipu, phase")
WARM_UP = (
    "import sys, time\n"
    "from dashboards import data\n"
    "from dashboards.app import create_app\n"
    "create_app([sys.argv[1]])\n"
    "data.current().warm()\n"
)
# The environment `popvision dashboard` runs in (``popvision_py.cli.ENVIRONMENT``), the warm-up's: Arrow on the
# system's allocator
DASHBOARD_ENV = {"ARROW_DEFAULT_MEMORY_POOL": "system"}
STEPS = ("import", "report", "report-gpu", "sql", "export-trace", "warm-up")  # report-gpu: GPU traces only
LAYERS = 16  # the synthetic GPU traces' model, by default (``make_gpu_trace.py --layers``)


def _layered(layers: int) -> str:
    """What a folder's or a run's name adds for a model of ``layers`` (nothing for the default's)."""
    return "" if layers == LAYERS else f"_{layers}layers"


def traces(src: Path, work: Path, variant: str, size_mb: int, ranks: int | None = None,
           layers: int = LAYERS) -> tuple[Path, dict]:
    """The grown traces of ``variant`` at ``size_mb`` (made once, then reused while the source and size hold);
    ``ranks``: the synthetic GPU traces cut into that many ranks (4 where not given), of a model of ``layers``."""
    recording, gpu = VARIANTS[variant]
    source = src / recording if recording else None
    layers = layers if source is None else LAYERS
    folder = work / (f"{variant}_{size_mb}mb" + (f"_{ranks}ranks" if ranks else "") + _layered(layers))
    summary_path = make_large_trace.manifest(folder)
    if summary_path.exists():
        summary = json.loads(summary_path.read_text())
        same_ranks = source is not None or (len(summary["files"]) == (ranks or 4)
                                            and summary.get("layers", LAYERS) == layers)
        if summary.get("source") == str(source or "make_gpu_trace") and summary.get("total_mb") == size_mb and \
                bool(summary.get("gpu_style", False)) == gpu and same_ranks and all(
                Path(f["file"]).exists() and Path(f["file"]).stat().st_size == f["bytes"] for f in summary["files"]):
            return folder, summary
    if source is None:
        print(f"writing synthetic GPU traces of {size_mb:,} MB ({ranks or 4:,} ranks) in {folder} ...", flush=True)
        summary = _made(make_gpu_trace.make_copies, folder, size_mb, ranks, layers=layers) if ranks and ranks > 4 \
            else _made(make_gpu_trace.make, folder, size_mb, layers=layers)
    else:
        print(f"growing {source} to {size_mb:,} MB in {folder}{' (GPU-style)' if gpu else ''} ...", flush=True)
        summary = _made(make_large_trace.grow, source, folder, size_mb, gpu=gpu)
    print(f"  {summary['copies']} copies of the steps, {summary['bytes'] / 1e6:,.0f} MB, {summary['events']:,} "
          f"events, {summary['seconds']} s", flush=True)
    return folder, summary


def _made(make, *args, **kwargs) -> dict:
    """``make(*args, **kwargs)`` (a trace maker) in a fresh interpreter: its texts are held there, not in this
    process. Every command is forked from this one, and a child's ``ru_maxrss`` counts what it held before its
    exec: 10 GB of traces of 1,600 layers made here gave sql and export-trace peaks of 137 MiB, against 91."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(make, *args, **kwargs).result()


def commands(folder: Path, out: Path, gpu: bool = False) -> dict[str, list[str]]:
    """Each step's command line (``report --section gpu`` for GPU traces only)."""
    cli = [sys.executable, "-m", "popvision_py.cli"]
    gpu_report = {"report-gpu": [*cli, "report", str(out), "--section", "gpu", "-o", str(out / "report_gpu.txt")]}
    return {"import": [*cli, "import", str(folder), "-o", str(out), "-q"],
            "report": [*cli, "report", str(out), "--section", "all", "-o", str(out / "report.txt")],
            **(gpu_report if gpu else {}),
            "sql": [*cli, "sql", str(out / "profile.pop"), SQL, "-o", str(out / "sql.txt")],
            "export-trace": [*cli, "export-trace", str(out / "profile.pop"), "-o", str(out / "trace.json"), "-q"],
            "warm-up": [sys.executable, "-c", WARM_UP, str(out / "profile.pop")]}


def run_path(folder: Path, work: Path, tag: str, cap: int, timeout_s: float, root: Path,
             gpu: bool = False) -> dict[str, dict]:
    """Every step of the path on ``folder``, in order, until one fails."""
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    out = work / f"profile_{tag}"
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ)
    # `python -m` puts the working folder first: the given checkout's popvision_py (and dashboards) run
    env["PYTHONPATH"] = str(root) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    steps: dict[str, dict] = {}
    for step, command in commands(folder, out, gpu).items():
        if step == "import":
            warm(folder)
        run_env = {**DASHBOARD_ENV, **env} if step == "warm-up" else env
        figures = measure(command, logs / f"{step}_{tag}.log", run_env, cap, timeout_s, root)
        steps[step] = figures
        if step == "import" and figures["outcome"] == "ok":
            figures["profile_bytes"] = (out / "profile.pop").stat().st_size
            figures["message"] = Path(figures["log"]).read_text().strip().splitlines()[0]
        print(f"    {step:12} {figures['outcome']}, {figures['wall_s']:,.1f} s ({figures['cpu_s']:,.1f} s CPU), "
              f"peak {figures['peak_mb']:,.0f} MiB "
              f"({figures['processes']} process(es))", flush=True)
        if figures["outcome"] != "ok":
            break
    if (out / "trace.json").exists():
        steps.setdefault("export-trace", {})["trace_json_bytes"] = (out / "trace.json").stat().st_size
        (out / "trace.json").unlink()  # gigabytes at 10 GB: its size is kept
    return steps


def run_hta(folder: Path, work: Path, tag: str, hta_python: str, cap: int, timeout_s: float) -> dict:
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    result_file = logs / f"hta_{tag}.result.json"
    result_file.unlink(missing_ok=True)
    env = dict(os.environ)
    env["RESULT_FILE"] = str(result_file)
    env.pop("PYTHONPATH", None)
    warm(folder)
    figures = measure([hta_python, "-c", HTA_SCRIPT, str(folder)], logs / f"hta_{tag}.log", env, cap, timeout_s)
    if figures["outcome"] == "ok":
        phases = json.loads(result_file.read_text())
        phases["breakdown"].pop("frame", None)
        figures["phases"] = phases
    return figures


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    memory = next((int(line.split()[1]) / 2**20 for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal")), float("nan"))
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(memory, 1), "os": platform.platform(),
            "python": platform.python_version()}


def size_label(mb: float) -> str:
    return f"{mb / 1000:g} GB" if mb >= 1000 else f"{mb:g} MB"


def memory(mb: float) -> str:
    return f"{mb / 1024:,.2f} GiB" if mb >= 1024 else f"{mb:,.0f} MiB"


def cell(figures: dict | None) -> str:
    if not figures:
        return "-"
    if figures["outcome"] != "ok":
        return f"{figures['outcome']} after {figures['wall_s']:,.0f} s"
    return f"{figures['wall_s']:,.1f} s ({figures['cpu_s']:,.1f} s CPU) / {memory(figures['peak_mb'])}"


def table(results: list[dict]) -> str:
    """Markdown: each size and variant, each step's time and peak memory, the import's throughput."""
    lines = ["| trace JSON | variant | ranks | events | import | MB/s | report --section all | report --section gpu "
             "| sql | export-trace | dashboard warm-up | import + report |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        steps = r["steps"]
        imp = steps.get("import")
        rate = f"{r['bytes'] / 1e6 / imp['wall_s']:,.0f}" if imp and imp["outcome"] == "ok" else "-"
        both = (f"{imp['wall_s'] + steps['report']['wall_s']:,.1f} s" if imp and "report" in steps
                and steps["report"]["outcome"] == "ok" and imp["outcome"] == "ok" else "-")
        lines.append(f"| {size_label(r['size_mb'])} ({r['bytes'] / 1e6:,.0f} MB) | {r['variant']} | {r['ranks']} | "
                     f"{r['events']:,} | {cell(imp)} | {rate} | "
                     + " | ".join(cell(steps.get(s)) for s in STEPS[1:]) + f" | {both} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES_MB), help="MB of trace JSON (all ranks)")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS),
                        help="variants at sizes under 10 GB")
    parser.add_argument("--big-variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS),
                        help="variants at 10 GB and over (growing each takes minutes and 10 GB of disk)")
    parser.add_argument("--src-dir", type=Path, default=Path("/tmp/traces"),
                        help="folder of recordings: gpipe/ and ddp/ (python -m tests.traces.record KIND DIR)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/popvision-bench-import"),
                        help="folder for the grown traces (kept and reused), profiles, logs and results")
    parser.add_argument("--keep-traces", action="store_true", help="keep the grown traces of 10 GB and over")
    parser.add_argument("--tools", nargs="+", choices=("popvision", "hta"), default=["popvision"])
    parser.add_argument("--hta-python", default="/work/hta-venv/bin/python", help="Python of HTA's virtual env")
    parser.add_argument("--ranks", type=int, nargs="+",
                        help="the gpu variant's total size cut into each of these rank counts (default: 4); other "
                             "variants keep their recordings' ranks")
    parser.add_argument("--layers", type=int, default=LAYERS,
                        help=f"the gpu variant's model's layers (default {LAYERS}): more layers, fewer and longer "
                             "steps at a size")
    parser.add_argument("--cap-gib", type=float, default=20, help="memory cap of a command (GiB)")
    parser.add_argument("--timeout-min", type=float, default=30, help="time cap of a command (minutes)")
    parser.add_argument("--json", type=Path, help="figures as JSON (default: WORK/results.json)")
    parser.add_argument("--popvision-root", type=Path, default=ROOT,
                        help="checkout whose popvision_py is run (default: this one), e.g. a branch to compare")
    parser.add_argument("--label", default="", help="added to the names of the run's logs and profiles")
    args = parser.parse_args(argv)
    if "hta" in args.tools and not Path(args.hta_python).exists():
        parser.error(f"{args.hta_python} does not exist: python3 -m venv /work/hta-venv && "
                     "/work/hta-venv/bin/pip install HolisticTraceAnalysis (or give --hta-python)")
    args.work.mkdir(parents=True, exist_ok=True)
    cap = int(args.cap_gib * 2**30)
    root = args.popvision_root.resolve()
    facts: dict = {"machine": machine(), "src_dir": str(args.src_dir), "popvision_root": str(root),
                   "cap_gib": args.cap_gib, "timeout_min": args.timeout_min,
                   "method": "wall time of each whole command; peak of the summed RSS of its process tree, sampled "
                             f"every {SAMPLE_S} s", "runs": []}
    out_json = args.json or args.work / "results.json"
    failed = []
    for size_mb in sorted(args.sizes):
        for variant, ranks in [(v, n) for v in (args.variants if size_mb < 10000 else args.big_variants)
                               for n in (args.ranks if args.ranks and VARIANTS[v][0] is None else [None])]:
            synthetic = VARIANTS[variant][0] is None
            folder, grown = traces(args.src_dir, args.work, variant, size_mb, ranks, args.layers)
            tag = (f"{variant}_{size_mb}mb{f'_{ranks}ranks' if ranks else ''}"
                   f"{_layered(args.layers) if synthetic else ''}{args.label}")
            load_before = os.getloadavg()
            print(f"{size_label(size_mb)} {variant}, {len(grown['files']):,} ranks (load average "
                  f"{load_before[0]:.1f}):", flush=True)
            run = {"size_mb": size_mb, "variant": variant, "bytes": grown["bytes"], "events": grown["events"],
                   "ranks": len(grown["files"]), "copies": grown["copies"], "folder": str(folder),
                   "layers": grown.get("layers"),
                   "load_average_before": load_before}
            if "popvision" in args.tools:
                gpu = VARIANTS[variant][1]
                run["steps"] = run_path(folder, args.work, tag, cap, args.timeout_min * 60, root, gpu)
                if any(f.get("outcome") != "ok" for f in run["steps"].values()) or \
                        len(run["steps"]) < len(STEPS) - (not gpu):
                    failed.append(tag)
            if "hta" in args.tools:
                run["hta"] = run_hta(folder, args.work, tag, args.hta_python, cap, args.timeout_min * 60)
                print(f"    {'HTA':12} {run['hta']['outcome']}, {run['hta']['wall_s']:,.1f} s, "
                      f"peak {run['hta']['peak_mb']:,.0f} MiB", flush=True)
            run["load_average_after"] = os.getloadavg()
            facts["runs"].append(run)
            out_json.write_text(json.dumps(facts, indent=2))  # after each run: a long benchmark keeps what it measured
            if size_mb >= 10000 and not args.keep_traces:
                shutil.rmtree(folder, ignore_errors=True)
                make_large_trace.manifest(folder).unlink(missing_ok=True)
    out_json.write_text(json.dumps(facts, indent=2))
    print()
    if "popvision" in args.tools:
        print(table([r for r in facts["runs"] if "steps" in r]))
    print(f"\nfigures written to {out_json}")
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
