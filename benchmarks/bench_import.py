"""`popvision import` against HTA (Holistic Trace Analysis) on the same PyTorch profiler traces: time and peak memory.

    .venv/bin/python benchmarks/bench_import.py [--sizes 100 1000 10000] [--src /tmp/traces/gpipe]
        [--work /tmp/popvision-bench-import] [--hta-python /work/hta-venv/bin/python] [--repeat 3]
        [--cap-gib 20] [--timeout-min 30] [--json OUT.json]

For each size (MB of trace JSON, all ranks together; 100 MB, 1 GB and 10 GB by default),
``make_large_trace.py`` grows the recorded rank traces in ``--src`` (one Chrome-trace JSON per rank,
from ``python -m tests.traces.record gpipe DIR``) to that size by repeating their real profiler
steps, once: the folder ``--work``/``traces_<MB>mb`` is kept and reused. It holds the rank files only,
so that both tools read the same folder: HTA takes every ``.json`` file in it and each file's rank
from its ``distributedInfo``, `popvision import` every trace in it.

Each tool then runs as a whole command in a fresh process (sizes under 1 GB ``--repeat`` times,
alternately, medians quoted; larger sizes once):

- **popvision**: ``python -m popvision_py.cli import FOLDER -o OUT -q`` (the ranks read in parallel
  worker processes, one per core);
- **HTA**: ``TraceAnalysis(trace_dir=FOLDER)`` (HTA 0.5.0's documented API, its default parser: a
  ``json.loads`` of each rank's file into a pandas frame, ranks in a pool of one process per core)
  then ``get_temporal_breakdown(visualize=False)``, in HTA's own virtual env (``--hta-python``; not a
  dependency of the project: ``python3 -m venv /work/hta-venv && /work/hta-venv/bin/pip install
  HolisticTraceAnalysis``). The temporal breakdown measures GPU kernels: on a CPU-only trace it
  raises at once (IndexError, no kernel); the script records that and times its load and the call
  apart.

Time is the wall time of the whole command (interpreter start, imports and the write included).
Peak memory is the peak of the **sum of the resident sets (RSS) of the command's process and all
its descendants**, sampled every 0.1 s from ``/proc/PID/statm`` (the process tree rescanned every
0.5 s), or the largest single process's exact high-water mark (``VmHWM``, ``ru_maxrss``) where that
is higher (a short peak between two samples). Both tools parse in forked worker processes, so the
largest process alone would understate them. The sum counts the pages a forked worker still shares
with its parent (the imported libraries) once per process: about 100 MB of each figure here, for
both tools (the proportional set size, PSS, which divides shared pages among their sharers, was
80-110 MB lower at 100 MB; it is not sampled, as reading it walks every page table entry: 30 ms for
a 1.5 GB process, a core's worth at 10 Hz on HTA's 8 GB workers). The sampler's own CPU time is
recorded (well under 1 % of the run's). Before each run the trace files are read once, so both
tools start with them in the page cache as far as memory allows.

Each run is capped: the command and its workers run with ``RLIMIT_AS`` at ``--cap-gib`` per process,
and the sampler kills the tree when its summed RSS passes ``--cap-gib`` or the machine's
available memory falls under 0.75 GiB (recorded as "out of memory at N GiB"), or when it runs past
``--timeout-min`` ("did not finish in N min"); a run that fails otherwise is recorded with its last
message. None stops the benchmark. The figures go to ``--json`` (default ``--work``/results.json) and a
table is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import make_large_trace  # noqa: E402  (benchmarks/ is this script's folder)

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
    return {"outcome": outcome, "wall_s": round(wall, 2), "peak_mb": round(max(state["peak_sum"], largest) / 2**20, 1),
            "peak_rss_sum_mb": round(state["peak_sum"] / 2**20, 1),
            "largest_process_mb": round(largest / 2**20, 1), "sampler_cpu_s": round(state["sampler_cpu_s"], 2),
            "processes": state["processes"], "exit_code": child.returncode, "log": str(log)}


def warm(folder: Path) -> None:
    """Read every trace once, so that each run starts with them in the page cache as far as memory allows."""
    for p in sorted(folder.iterdir()):
        with open(p, "rb", buffering=0) as f:
            while f.read(1 << 20):
                pass


def traces(src: Path, work: Path, size_mb: int) -> tuple[Path, dict]:
    """The grown traces of ``size_mb`` (made once, then reused while the source and the size are the same)."""
    folder = work / f"traces_{size_mb}mb"
    summary_path = make_large_trace.manifest(folder)
    if summary_path.exists():
        summary = json.loads(summary_path.read_text())
        if summary.get("source") == str(src) and summary.get("total_mb") == size_mb and all(
                Path(f["file"]).exists() and Path(f["file"]).stat().st_size == f["bytes"] for f in summary["files"]):
            return folder, summary
    print(f"growing {src} to {size_mb:,} MB in {folder} ...", flush=True)
    summary = make_large_trace.grow(src, folder, size_mb)
    print(f"  {summary['copies']} copies of the steps, {summary['bytes'] / 1e6:,.0f} MB, {summary['events']:,} events, "
          f"{summary['seconds']} s", flush=True)
    return folder, summary


def run_tool(tool: str, folder: Path, work: Path, tag: str, hta_python: str, cap: int, timeout_s: float,
             popvision_root: Path = ROOT) -> dict:
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    cwd = ROOT
    if tool == "popvision":
        out = work / f"profile_{tag}"
        cwd = popvision_root  # `python -m` puts the working folder first: this checkout's popvision_py is run
        env["PYTHONPATH"] = str(popvision_root) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        command = [sys.executable, "-m", "popvision_py.cli", "import", str(folder), "-o", str(out), "-q"]
    else:
        result_file = logs / f"hta_{tag}.result.json"
        result_file.unlink(missing_ok=True)
        env["RESULT_FILE"] = str(result_file)
        env.pop("PYTHONPATH", None)
        command = [hta_python, "-c", HTA_SCRIPT, str(folder)]
    warm(folder)
    figures = measure(command, logs / f"{tool}_{tag}.log", env, cap, timeout_s, cwd)
    if tool == "popvision" and figures["outcome"] == "ok":
        figures["profile_bytes"] = (out / "profile.pop").stat().st_size
        figures["message"] = Path(figures["log"]).read_text().strip().splitlines()[0]
    if tool == "hta" and figures["outcome"] == "ok":
        phases = json.loads(result_file.read_text())
        phases["breakdown"].pop("frame", None)
        figures["phases"] = phases
    return figures


def summarise(runs: list[dict]) -> dict:
    """Medians of the runs that finished; the first miss otherwise."""
    done = [r for r in runs if r["outcome"] == "ok"]
    if not done:
        return {"outcome": runs[0]["outcome"], "runs": len(runs), "wall_s": runs[0]["wall_s"],
                "peak_mb": runs[0]["peak_mb"]}
    return {"outcome": "ok" if len(done) == len(runs) else f"{len(done)} of {len(runs)} finished",
            "runs": len(runs), "wall_s": statistics.median(r["wall_s"] for r in done),
            "peak_mb": statistics.median(r["peak_mb"] for r in done),
            "largest_process_mb": statistics.median(r["largest_process_mb"] for r in done)}


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    memory = next((int(line.split()[1]) / 2**20 for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal")), float("nan"))
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(memory, 1), "os": platform.platform(),
            "python": platform.python_version(), "load_average": os.getloadavg()}


def size_label(mb: float) -> str:
    return f"{mb / 1000:g} GB" if mb >= 1000 else f"{mb:g} MB"


def memory(mb: float) -> str:
    return f"{mb / 1024:,.2f} GiB" if mb >= 1024 else f"{mb:,.0f} MiB"


def table(results: list[dict]) -> str:
    """Markdown: each size and tool, time, peak memory, throughput."""
    lines = ["| trace JSON (4 ranks) | events | tool | wall time | peak memory (process tree) | throughput |", "| --- | ---: | --- | ---: | ---: | ---: |"]
    for size in results:
        for tool in ("popvision", "hta"):
            if tool not in size["tools"]:
                continue
            s = size["tools"][tool]
            runs = size["runs"][tool]
            name = "popvision import"
            if tool == "hta":
                errors = {r["phases"]["breakdown"].get("error") for r in runs if "phases" in r}
                name = "HTA load + temporal breakdown" + (" (raises: no GPU kernel)" if errors and None not in errors
                                                         else "")
            count = f" (median of {s['runs']})" if s["runs"] > 1 else " (1 run)"
            if s["outcome"] == "ok" or "finished" in s["outcome"]:
                wall = f"{s['wall_s']:,.1f} s{count}"
                peak = memory(s["peak_mb"])
                rate = (f"{size['bytes'] / 1e6 / s['wall_s']:,.1f} MB/s, "
                        f"{size['events'] / s['wall_s'] / 1e3:,.0f}k events/s")
            else:
                wall = f"{s['outcome']} (stopped after {s['wall_s']:,.0f} s)"
                peak = f"{memory(s['peak_mb'])} when stopped"
                rate = "-"
            lines.append(f"| {size_label(size['size_mb'])} ({size['bytes'] / 1e6:,.0f} MB) | {size['events']:,} | "
                         f"{name} | {wall} | {peak} | {rate} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES_MB), help="MB of trace JSON (all ranks)")
    parser.add_argument("--src", type=Path, default=Path("/tmp/traces/gpipe"), help="recorded rank traces")
    parser.add_argument("--work", type=Path, default=Path("/tmp/popvision-bench-import"),
                        help="folder for the grown traces (kept and reused), profiles, logs and results")
    parser.add_argument("--hta-python", default="/work/hta-venv/bin/python", help="Python of HTA's virtual env")
    parser.add_argument("--tools", nargs="+", choices=("popvision", "hta"), default=["popvision", "hta"])
    parser.add_argument("--repeat", type=int, default=3, help="runs per tool at sizes under 1 GB (larger: one)")
    parser.add_argument("--cap-gib", type=float, default=20, help="memory cap of a run (GiB)")
    parser.add_argument("--timeout-min", type=float, default=30, help="time cap of a run (minutes)")
    parser.add_argument("--json", type=Path, help="figures as JSON (default: WORK/results.json)")
    parser.add_argument("--popvision-root", type=Path, default=ROOT,
                        help="checkout whose popvision_py is run (default: this one), e.g. a branch to compare")
    parser.add_argument("--label", default="", help="added to the names of the run's logs and profiles")
    args = parser.parse_args(argv)
    if "hta" in args.tools and not Path(args.hta_python).exists():
        parser.error(f"{args.hta_python} does not exist: python3 -m venv /work/hta-venv && "
                     "/work/hta-venv/bin/pip install HolisticTraceAnalysis (or give --hta-python, or --tools popvision)")
    args.work.mkdir(parents=True, exist_ok=True)
    cap = int(args.cap_gib * 2**30)
    facts = {"machine": machine(), "source": str(args.src), "popvision_root": str(args.popvision_root.resolve()),
             "cap_gib": args.cap_gib, "timeout_min": args.timeout_min,
             "method": "wall time of the whole command; peak of the summed RSS of its process tree, sampled every "
                       f"{SAMPLE_S} s", "sizes": []}
    out_json = args.json or args.work / "results.json"
    for size_mb in sorted(args.sizes):
        folder, grown = traces(args.src, args.work, size_mb)
        repeat = args.repeat if size_mb < 1000 else 1
        runs: dict[str, list[dict]] = {tool: [] for tool in args.tools}
        for n in range(repeat):
            for tool in args.tools:  # alternately, so that both see the same load on the machine
                figures = run_tool(tool, folder, args.work, f"{size_mb}mb_{n}{args.label}", args.hta_python, cap,
                                   args.timeout_min * 60, args.popvision_root.resolve())
                runs[tool].append(figures)
                print(f"{size_label(size_mb):>7} {tool:9} run {n + 1}/{repeat}: {figures['outcome']}, "
                      f"{figures['wall_s']:,.1f} s, peak {figures['peak_mb']:,.0f} MiB (summed RSS "
                      f"of a tree of {figures['processes']} processes; largest process {figures['largest_process_mb']:,.0f} MiB)"
                      + (f"; HTA load {figures['phases']['load_s']:.1f} s, breakdown "
                         f"{figures['phases']['breakdown_s']:.2f} s ({'ok' if figures['phases']['breakdown']['ok'] else figures['phases']['breakdown']['error']})"
                         if "phases" in figures else ""), flush=True)
        facts["sizes"].append({"size_mb": size_mb, "bytes": grown["bytes"], "events": grown["events"],
                               "copies": grown["copies"], "folder": str(folder),
                               "tools": {tool: summarise(r) for tool, r in runs.items()}, "runs": runs})
        out_json.write_text(json.dumps(facts, indent=2))  # after each size: a long run keeps what it measured
    facts["machine"]["load_average_end"] = os.getloadavg()
    out_json.write_text(json.dumps(facts, indent=2))
    print()
    print(table(facts["sizes"]))
    print(f"\nfigures written to {out_json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
