"""`popvision import --scheduler` and `popvision report --section gpu --scheduler` on a Dask cluster of N local
workers, against the same commands on this machine: wall time, the client's peak memory and the workers'; and one
rank reduced alone, the per-worker figures a model of a larger cluster scales from.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_import_cluster.py [--mb 400] [--ranks 8] [--workers 1 2]
        [--work /tmp/popvision-bench-import-cluster] [--json OUT.json]
    PYTHONPATH=. .venv/bin/python benchmarks/bench_import_cluster.py --report-only PROFILE [--workers 1 2]

The traces are synthetic GPU traces of a DistributedDataParallel run (``make_gpu_trace.py``: ``--ranks`` files
totalling ``--mb`` MB, made once in ``--work`` and reused). Each is read once before every import, so that each
starts with them in the page cache. Then, each command in a fresh process, measured as ``bench_import.py``
measures (wall time; CPU time of the command and the processes it waited for; the peak of its process tree's
summed RSS, sampled every 0.1 s, or its largest process's high-water mark where higher):

1. **one rank**: ``importer.cluster.reduce_rank`` on rank 0 in a process of its own, as a worker runs it: the
   rank's JSON bytes, its reduced columns' bytes (the file a worker writes), the task's result pickled (what
   goes back through the scheduler), the reduction's seconds (the interpreter's start and imports aside) and
   the process's peak memory;
2. **here**: ``popvision import FOLDER -o OUT -q``, and its phases in a process of their own (``read_traces``,
   then ``write_import``);
3. **on N workers** for each ``--workers``: a fresh ``dask scheduler`` and ``dask worker --nworkers N
   --nthreads 1`` (one thread a worker process, as the import asks), then ``popvision import FOLDER -o OUT -q
   --scheduler ADDRESS``: the client's figures as above, the workers' peak (each worker process's high-water
   mark, ``VmHWM``, and the peak of their summed RSS, sampled every 0.1 s; the process that runs the nannies
   is left out), whether its profile is the local one's (every member but the manifest's creation time), and
   its phases (``read_on_cluster``, then ``write_import``) in a second run;
4. **the report**: ``popvision report PROFILE --section gpu``, then ``--section all`` (text, as ``bench_import.py``
   runs them) of the local import here, with no cluster running, then with
   ``--scheduler`` on a fresh cluster of N workers for each ``--workers``, measured as above, and whether its
   report is the one made here, byte for byte. ``--report-only PROFILE`` runs this step alone, on a profile
   imported already.

The machine's load average is recorded before each. Figures to ``--json`` (default WORK/results.json).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import bench_import  # noqa: E402  (benchmarks/ is this script's folder)
import make_gpu_trace  # noqa: E402
import make_large_trace  # noqa: E402

CAP = 16 << 30  # a command's memory cap (bench_import.measure's)
SECTIONS = ("gpu", "all")  # the report's sections timed here and on the cluster
TIMEOUT_S = 30 * 60

ONE_RANK = """
import json, os, pickle, sys, time
from popvision_py.importer.cluster import reduce_rank
from popvision_py.version import __version__
path, scratch = sys.argv[1], sys.argv[2]
began, cpu = time.perf_counter(), time.process_time()
result = reduce_rank(path, path, scratch, 0, __version__)
print(json.dumps({"reduce_s": time.perf_counter() - began, "reduce_cpu_s": time.process_time() - cpu,
                  "json_bytes": os.path.getsize(path),
                  "columns_bytes": result["bytes"], "result_bytes": len(pickle.dumps(result))}))
"""
PHASES_HERE = """
import json, sys, time
from pathlib import Path
from popvision_py.importer import find_traces, read_traces, write_import
from popvision_py.importer.spill_files import spill_folder
folder, output = sys.argv[1], Path(sys.argv[2]) / "profile.pop"
began = time.perf_counter()
traces = read_traces(find_traces([folder]), None, spill=spill_folder(output))
read = time.perf_counter()
write_import(traces, output)
print(json.dumps({"read_s": read - began, "write_s": time.perf_counter() - read}))
"""
PHASES_CLUSTER = """
import json, shutil, sys, time
from pathlib import Path
from distributed import Client
from popvision_py.importer import find_traces, write_import
from popvision_py.importer.cluster import read_on_cluster, scratch_folder
from popvision_py.importer.spill_files import spill_folder
folder, output, address = sys.argv[1], Path(sys.argv[2]) / "profile.pop", sys.argv[3]
with Client(address) as client:
    scratch = scratch_folder(output)
    began = time.perf_counter()
    traces = read_on_cluster(client, find_traces([folder]), scratch, spill_folder(output))
    read = time.perf_counter()
    write_import(traces, output)
    done = time.perf_counter()
    traces.clear()
    shutil.rmtree(scratch)
print(json.dumps({"read_s": read - began, "write_s": done - read}))
"""


def traces(work: Path, mb: float, ranks: int) -> tuple[Path, dict]:
    """The GPU traces at ``mb`` MB in ``ranks`` files (made once, then reused while they hold)."""
    folder = work / f"gpu_{mb:g}mb_{ranks}ranks"
    summary_path = make_large_trace.manifest(folder)
    if summary_path.exists():
        summary = json.loads(summary_path.read_text())
        if all(Path(f["file"]).exists() and Path(f["file"]).stat().st_size == f["bytes"] for f in summary["files"]):
            return folder, summary
    print(f"writing synthetic GPU traces of {mb:g} MB ({ranks} ranks) in {folder} ...", flush=True)
    # in a fresh interpreter (bench_import._made): a command forked from a process that made 1,024 traces counted
    # that process's 1.1 GiB in its peak
    return folder, bench_import._made(make_gpu_trace.make, folder, mb, ranks=ranks)


def env() -> dict[str, str]:
    values = dict(os.environ)
    values["PYTHONPATH"] = str(ROOT) + (os.pathsep + values["PYTHONPATH"] if values.get("PYTHONPATH") else "")
    return values


def last_json(log: str) -> dict:
    """The JSON line a script printed last."""
    return json.loads([line for line in Path(log).read_text().splitlines() if line.startswith("{")][-1])


def members(path: Path) -> dict[str, bytes]:
    """A profile's members, its manifest's creation time taken out."""
    with zipfile.ZipFile(path) as z:
        found = {name: z.read(name) for name in z.namelist()}
    manifest = json.loads(found["manifest.json"])
    manifest.pop("created", None)
    found["manifest.json"] = json.dumps(manifest, sort_keys=True).encode()
    return found


class Cluster:
    """A ``dask scheduler`` and ``dask worker --nworkers N --nthreads 1`` on this machine, their worker processes'
    memory sampled while ``sampling``."""

    def __init__(self, work: Path, workers: int) -> None:
        self.file = work / f"scheduler-{workers}.json"
        self.file.unlink(missing_ok=True)
        dask = str(Path(sys.executable).with_name("dask"))
        logs = work / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        quiet = {**env(), "DASK_LOGGING__DISTRIBUTED": "error"}
        self.scheduler = subprocess.Popen([dask, "scheduler", "--scheduler-file", str(self.file), "--port", "0",
                                           "--no-dashboard"], stdout=subprocess.DEVNULL,
                                          stderr=open(logs / f"scheduler-{workers}.log", "wb"), env=quiet)
        while not self.file.exists():
            time.sleep(0.1)
        self.workers = subprocess.Popen([dask, "worker", "--scheduler-file", str(self.file), "--nworkers",
                                         str(workers), "--nthreads", "1", "--no-dashboard"],
                                        stdout=subprocess.DEVNULL,
                                        stderr=open(logs / f"workers-{workers}.log", "wb"), env=quiet)
        from distributed import Client

        with Client(scheduler_file=str(self.file), timeout="60s") as client:
            client.wait_for_workers(workers, timeout=120)
            self.address = client.scheduler.address
        self.peak_sum = 0
        self.hwm: dict[int, int] = {}
        self.stop = threading.Event()
        self.sampler: threading.Thread | None = None

    def processes(self) -> list[int]:
        """The worker processes (the nannies' process, which runs no task, left out)."""
        return [p for p in bench_import.proc_tree(self.workers.pid) if p != self.workers.pid]

    def sample(self) -> None:
        pids = self.processes()  # the worker processes stay those started (a nanny restarts one only if it dies)
        while not self.stop.is_set():
            self.peak_sum = max(self.peak_sum, sum(bench_import.rss_bytes(p) for p in pids))
            for p in pids:
                self.hwm[p] = max(self.hwm.get(p, 0), bench_import.hwm_bytes(p))
            self.stop.wait(bench_import.SAMPLE_S)

    def cpu_s(self) -> float:
        """The worker processes' CPU time so far (user + system, from /proc/PID/stat)."""
        total = 0
        for pid in self.processes():
            try:
                with open(f"/proc/{pid}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            total += sum(int(x) for x in stat[stat.rindex(b")") + 2:].split()[11:13])
        return total / os.sysconf("SC_CLK_TCK")

    def __enter__(self) -> Cluster:
        self.cpu_before = self.cpu_s()
        self.sampler = threading.Thread(target=self.sample, daemon=True)
        self.sampler.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.sampler is not None:
            self.sampler.join()
        for process in (self.workers, self.scheduler):
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def figures(self) -> dict:
        top = sorted(self.hwm.values(), reverse=True)
        return {"workers_cpu_s": round(self.cpu_s() - self.cpu_before, 2),
                "workers_peak_sum_mb": round(self.peak_sum / 2**20, 1),
                "worker_peak_mb": round(top[0] / 2**20, 1) if top else None,
                "worker_processes": len(self.hwm)}


def run(work: Path, mb: float, ranks: int, workers: list[int]) -> dict:
    folder, summary = traces(work, mb, ranks)
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    cli = [sys.executable, "-m", "popvision_py.cli"]
    facts: dict = {"machine": bench_import.machine(), "bytes": summary["bytes"], "ranks": len(summary["files"]),
                   "events": summary["events"], "folder": str(folder), "runs": {}}
    scratch = work / "one-rank"
    scratch.mkdir(exist_ok=True)
    rank0 = sorted(folder.iterdir())[0]
    bench_import.warm(folder)
    load = os.getloadavg()
    one = bench_import.measure([sys.executable, "-c", ONE_RANK, str(rank0), str(scratch)], logs / "one-rank.log",
                               env(), CAP, TIMEOUT_S, ROOT)
    one.update(last_json(one["log"]), load_average=load)
    for p in scratch.iterdir():
        p.unlink()
    facts["one_rank"] = one
    print(f"one rank: {one['json_bytes'] / 1e6:,.1f} MB of JSON -> {one['columns_bytes'] / 1e6:,.2f} MB of columns "
          f"(result {one['result_bytes'] / 1e3:,.1f} kB), reduced in {one['reduce_s']:,.2f} s "
          f"({one['reduce_cpu_s']:,.2f} s CPU), peak {one['peak_mb']:,.0f} MiB (load {load[0]:.1f})", flush=True)

    local = work / "here"
    bench_import.warm(folder)
    load = os.getloadavg()
    here = bench_import.measure([*cli, "import", str(folder), "-o", str(local), "-q"], logs / "here.log", env(),
                                CAP, TIMEOUT_S, ROOT)
    here["load_average"] = load
    phases = bench_import.measure([sys.executable, "-c", PHASES_HERE, str(folder), str(work / "here-phases")],
                                  logs / "here-phases.log", env(), CAP, TIMEOUT_S, ROOT)
    here["phases"] = last_json(phases["log"])
    facts["runs"]["here"] = here
    print(f"here: {here['outcome']}, {here['wall_s']:,.1f} s ({here['cpu_s']:,.1f} s CPU), peak "
          f"{here['peak_mb']:,.0f} MiB; read {here['phases']['read_s']:,.1f} s, write "
          f"{here['phases']['write_s']:,.1f} s (load {load[0]:.1f})", flush=True)
    expected = members(local / "profile.pop")

    for n in workers:
        out = work / f"cluster-{n}"
        with Cluster(work, n) as cluster:
            bench_import.warm(folder)
            load = os.getloadavg()
            figures = bench_import.measure([*cli, "import", str(folder), "-o", str(out), "-q", "--scheduler",
                                            cluster.address], logs / f"cluster-{n}.log", env(), CAP, TIMEOUT_S, ROOT)
            figures.update(cluster.figures(), load_average=load)
            figures["same_profile"] = figures["outcome"] == "ok" and members(out / "profile.pop") == expected
            phases = bench_import.measure([sys.executable, "-c", PHASES_CLUSTER, str(folder),
                                           str(work / f"cluster-{n}-phases"), cluster.address],
                                          logs / f"cluster-{n}-phases.log", env(), CAP, TIMEOUT_S, ROOT)
            figures["phases"] = last_json(phases["log"]) if phases["outcome"] == "ok" else phases["outcome"]
        facts["runs"][f"{n} workers"] = figures
        print(f"{n} worker(s): {figures['outcome']}, {figures['wall_s']:,.1f} s ({figures['cpu_s']:,.1f} s client "
              f"CPU); client peak {figures['peak_mb']:,.0f} MiB; a worker's peak {figures['worker_peak_mb']:,.0f} "
              f"MiB, the workers' {figures['workers_peak_sum_mb']:,.0f} MiB, {figures['workers_cpu_s']:,.1f} CPU-s; "
              f"same profile: {figures['same_profile']}; phases {figures['phases']} (load {load[0]:.1f})", flush=True)
    facts["report"] = reports(work, local / "profile.pop", workers)
    return facts


def warm_profile(profile: Path) -> None:
    """Read the profile and its ranks' CPU timelines once, as ``bench_import.warm`` reads traces."""
    for p in [profile, *sorted((profile.parent / "system").glob("*"))]:
        with open(p, "rb", buffering=0) as f:
            while f.read(1 << 20):
                pass


def reports(work: Path, profile: Path, workers: list[int]) -> dict:
    """``report PROFILE --section gpu`` and ``--section all`` here, then on a fresh cluster of each of ``workers``:
    each command's figures, the workers', and whether the report is the one made here."""
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    runs: dict = {}
    for section in SECTIONS:
        command = [sys.executable, "-m", "popvision_py.cli", "report", str(profile), "--section", section, "-o"]
        mine = work / f"report-{section}-here.txt"
        warm_profile(profile)
        load = os.getloadavg()
        here = bench_import.measure([*command, str(mine)], logs / f"report-{section}-here.log", env(), CAP,
                                    TIMEOUT_S, ROOT)
        here["load_average"] = load
        runs[f"{section} here"] = here
        print(f"report --section {section} here: {here['outcome']}, {here['wall_s']:,.1f} s ({here['cpu_s']:,.1f} s "
              f"CPU), peak {here['peak_mb']:,.0f} MiB (load {load[0]:.1f})", flush=True)
        for n in workers:
            theirs = work / f"report-{section}-cluster-{n}.txt"
            with Cluster(work, n) as cluster:
                warm_profile(profile)
                load = os.getloadavg()
                figures = bench_import.measure([*command, str(theirs), "--scheduler", cluster.address],
                                               logs / f"report-{section}-cluster-{n}.log", env(), CAP, TIMEOUT_S, ROOT)
                figures.update(cluster.figures(), load_average=load)
            figures["same_report"] = figures["outcome"] == "ok" and theirs.read_bytes() == mine.read_bytes()
            runs[f"{section} on {n} workers"] = figures
            print(f"report --section {section} on {n} worker(s): {figures['outcome']}, {figures['wall_s']:,.1f} s "
                  f"({figures['cpu_s']:,.1f} s client CPU); client peak {figures['peak_mb']:,.0f} MiB; a worker's peak "
                  f"{figures['worker_peak_mb']:,.0f} MiB, the workers' {figures['workers_peak_sum_mb']:,.0f} MiB, "
                  f"{figures['workers_cpu_s']:,.1f} CPU-s; same report: {figures['same_report']} (load {load[0]:.1f})",
                  flush=True)
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=400, help="MB of trace JSON, all ranks together (default 400)")
    parser.add_argument("--ranks", type=int, default=8, help="rank files (default 8)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker processes (default 1 2)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/popvision-bench-import-cluster"))
    parser.add_argument("--json", type=Path, help="figures as JSON (default: WORK/results.json)")
    parser.add_argument("--report-only", type=Path, metavar="PROFILE",
                        help="only the report's GPU section, here and on the workers, of this profile.pop")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        facts = {"machine": bench_import.machine(), "profile": str(args.report_only), "runs": {},
                 "report": reports(args.work, args.report_only.resolve(), args.workers)}
    else:
        facts = run(args.work, args.mb, args.ranks, args.workers)
    out = args.json or args.work / "results.json"
    out.write_text(json.dumps(facts, indent=2))
    print(f"figures written to {out}")
    failed = [k for k, r in {**facts["runs"], **{f"report {k}": r for k, r in facts["report"].items()}}.items()
              if r["outcome"] != "ok" or r.get("same_profile") is False or r.get("same_report") is False]
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
