"""GPU traces beside Holistic Trace Analysis: the same figures from HTA 0.5, from the raw JSON, and from popvision.

    .venv/bin/python benchmarks/gpu_vs_hta.py DIR... [--hta-python PATH] [--hta-figures DIR] [--json OUT]

For each folder of PyTorch profiler traces (one file per rank, as HTA reads a folder), three columns:

- **HTA 0.5**: ``benchmarks/_hta_side.py`` in HTA's own interpreter (``--hta-python``, default the
  ``HTA_PYTHON`` environment variable), a subprocess, so popvision never depends on HTA. With
  ``--hta-figures DIR``, the figures a run saved there (``DIR/<name>.json``, ``<name>.time``) are read
  instead, and a missing one is measured and saved.
- **raw**: the trace's kernel events read straight from its JSON (``kernel``, ``gpu_memcpy``,
  ``gpu_memset``, or PyTorch 1.8's ``Kernel``, ``Memcpy``, ``Memset``) and their runtime calls by
  correlation, with HTA's rules applied as HTA applies them (its rounding of a trace's fractional
  microseconds, the kernels launched before the last ``ProfilerStep``), then popvision's analyzers
  (``analysis.imported.gpu``). HTA against raw checks the analyzers' definitions; raw against
  popvision checks the import.
- **popvision**: ``popvision import DIR`` then ``popvision_py.open``'s ``report.gpu`` (the same twins,
  over the imported ``kernels`` table), each in its own process.

Each side's wall time and peak memory (the largest RSS of its processes, from ``wait4``) are printed
beside. Rows: per rank, the temporal breakdown (idle / compute / non-compute %), the communication-
computation overlap, the launch delays, and popvision's own idle within the profiled steps; over all
ranks, the kernel type breakdown with overlaps and each rank's top kernels. A figure within 1 point of
HTA's (or 1 us, or 1 %) is marked ``=``; one further off ``!``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))  # popvision_py from this checkout, in every process this script starts
KERNEL_CATEGORIES = {"kernel": "compute", "Kernel": "compute", "gpu_memcpy": "memcpy", "Memcpy": "memcpy",
                     "gpu_memset": "memset", "Memset": "memset"}
RUNTIME_CATEGORIES = ("cuda_runtime", "Runtime", "cuda_driver")  # the calls that launch them, by correlation
TOLERANCE = {"pct": 1.0, "us": 1.0, "rel": 0.01}  # points, microseconds, a share of the value


# -- running a side in its own process ------------------------------------------------------------------

@dataclass
class Measured:
    """A subprocess's wall time (s), peak RSS (bytes, its largest process's) and exit status."""

    seconds: float
    peak_bytes: int
    code: int
    output: str = ""


# Linux counts a child's peak RSS from its parent's at fork (the hiwater mark survives the exec), so a child
# forked from this process, grown by the raw traces it read, would be charged for them. The children are
# started by a launcher of its own instead, started first while this process is small (about 15 MB, the
# launcher's interpreter, is then in every figure).
_LAUNCHER = r"""
import json, os, subprocess, sys, time
for line in sys.stdin:
    job = json.loads(line)
    t0 = time.perf_counter()
    p = subprocess.Popen(job["command"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=job["env"],
                         cwd=job["cwd"])
    out = p.stdout.read().decode(errors="replace")
    _, status, usage = os.wait4(p.pid, 0)
    print(json.dumps({"seconds": time.perf_counter() - t0, "peak": usage.ru_maxrss * 1024,
                      "rc": os.waitstatus_to_exitcode(status), "output": out[-2000:]}), flush=True)
"""
_launcher: subprocess.Popen | None = None


def start_launcher() -> None:
    """The launcher of the measured commands (see ``_LAUNCHER``): call it before reading any trace."""
    global _launcher
    if _launcher is None:
        _launcher = subprocess.Popen([sys.executable, "-c", _LAUNCHER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)


def measured(command: list[str], env: dict[str, str] | None = None) -> Measured:
    """Run ``command`` through the launcher and measure it: ``wait4`` gives this child's own rusage (its
    largest RSS, the children it waited for included), not every child's so far as ``RUSAGE_CHILDREN`` would."""
    start_launcher()
    assert _launcher is not None and _launcher.stdin is not None and _launcher.stdout is not None
    _launcher.stdin.write(json.dumps({"command": command, "env": env or dict(os.environ), "cwd": str(ROOT)}) + "\n")
    _launcher.stdin.flush()
    done = json.loads(_launcher.stdout.readline())
    return Measured(done["seconds"], int(done["peak"]), done["rc"], done["output"])


def hta_figures(folder: Path, hta_python: str, saved: Path | None) -> tuple[dict[str, Any], Measured | None]:
    """HTA's figures of ``folder`` and how long they took: read from ``saved`` when it holds them."""
    name = label(folder)
    if saved is not None and (saved / f"{name}.json").exists():
        timing = None
        if (saved / f"{name}.time").exists():  # /usr/bin/time -f "%e %M": seconds, KiB
            seconds, kib = (saved / f"{name}.time").read_text().split()[-2:]
            timing = Measured(float(seconds), int(kib) * 1024, 0)
        return json.loads((saved / f"{name}.json").read_text()), timing
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "hta.json"
        run = measured([hta_python, str(HERE / "_hta_side.py"), str(folder), str(out)])
        if run.code != 0 or not out.exists():
            raise SystemExit(f"HTA failed on {folder} (exit {run.code}): {run.output.strip().splitlines()[-1:]}")
        found = json.loads(out.read_text())
    if saved is not None:
        saved.mkdir(parents=True, exist_ok=True)
        (saved / f"{name}.json").write_text(json.dumps(found, indent=1))
        (saved / f"{name}.time").write_text(f"{run.seconds:.2f} {run.peak_bytes // 1024}\n")
    return found, run


def label(folder: Path) -> str:
    """A trace folder's name for the table: its path under HTA's tests/data, ``/`` as ``_``."""
    parts = folder.resolve().parts
    tail = parts[parts.index("data") + 1:] if "data" in parts else parts[-1:]
    return "_".join(tail)


# -- the raw JSON, read directly --------------------------------------------------------------------------

def trace_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and (p.name.endswith(".json") or
                                                                    p.name.endswith(".json.gz")))


def _stream(value: Any) -> int:
    """HTA's ``normalize_gpu_stream_numbers``: an int, or -1 where it is not one (ROCm's "0x0" strings)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1


def _ns(us: int | float) -> int:
    """Microseconds as whole ns, exactly for a whole number (an epoch's microseconds times 1000 is past
    what a float holds exactly)."""
    if isinstance(us, int):
        return us * 1000
    whole = math.floor(us)
    return int(whole) * 1000 + round((us - whole) * 1000)


def read_raw(folder: Path, hta_rules: bool = True) -> dict[str, Any]:
    """Every rank's kernels, copies and sets with their runtime calls, from the JSON (no popvision import).

    ``hta_rules``: a trace whose timestamps hold fractions of a microsecond is rounded as HTA rounds it
    (each event's start up, its end down, to whole microseconds), and ``last_step_start`` is given for
    HTA's selection. Times are ns from the earliest event of every rank (HTA's alignment)."""
    ranks: list[int] = []
    rows: dict[str, list[Any]] = {c: [] for c in ("ipu", "stream", "kind", "name", "start", "end", "correlation",
                                                  "launch_start", "launch_end", "launch_name")}
    steps: list[list[tuple[int, int]]] = []
    origin = math.inf
    per_rank = []
    for position, path in enumerate(trace_files(folder)):
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt") as fh:
            doc = json.load(fh)
        events = [e for e in doc.get("traceEvents", []) if e.get("ph") == "X" and isinstance(e.get("ts"), (int, float))
                  and isinstance(e.get("dur"), (int, float))]
        fractional = any(isinstance(e["ts"], float) and not float(e["ts"]).is_integer() for e in events)
        rounding = hta_rules and fractional

        def span(e: dict[str, Any]) -> tuple[int, int]:
            if rounding:  # HTA's round_down_time_stamps: the start up, the end (start + duration) down
                return math.ceil(e["ts"]) * 1000, math.floor(e["ts"] + e["dur"]) * 1000
            return _ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])

        rank = (doc.get("distributedInfo") or {}).get("rank", 0)
        ranks.append(int(rank) if isinstance(rank, int) else position)
        launches: dict[int, tuple[int, int, str]] = {}
        mine: list[tuple[int, int]] = []
        kernels = []
        for e in events:
            args = e.get("args") or {}
            start, end = span(e)
            origin = min(origin, start)
            cat = e.get("cat")
            if cat in KERNEL_CATEGORIES and _stream(args.get("stream")) >= 0:
                kernels.append((e, start, end))
            elif isinstance(args.get("correlation"), int) and cat in RUNTIME_CATEGORIES:
                launches.setdefault(int(args["correlation"]), (start, end, str(e.get("name", ""))))  # runtime or driver
            if str(e.get("name", "")).startswith("ProfilerStep#"):
                mine.append((start, end))
        steps.append(mine)
        per_rank.append((kernels, launches))
    for position, (kernels, launches) in enumerate(per_rank):
        for e, start, end in kernels:
            args = e.get("args") or {}
            correlation = int(args["correlation"]) if isinstance(args.get("correlation"), int) else -1
            call = launches.get(correlation, (-1, -1, ""))
            name = str(e.get("name", ""))
            kind = KERNEL_CATEGORIES[e["cat"]]
            if kind == "compute" and "nccl" in name.lower():
                kind = "communication"
            for column, value in zip(rows, (position, _stream(args.get("stream")), kind, name, start, end, correlation,
                                            *call)):
                rows[column].append(value)
    origin = 0 if origin == math.inf else int(origin)
    for c in ("start", "end"):
        rows[c] = [v - origin for v in rows[c]]
    for c in ("launch_start", "launch_end"):
        rows[c] = [v - origin if v >= 0 else -1 for v in rows[c]]
    # HTA counts ProfilerStep symbols over all ranks; two or more, and each rank's kernels launched before its last
    names = max((len(s) for s in steps), default=0)
    last = [max(a for a, _ in s) - origin if s else -1 for s in steps] if hta_rules and names >= 2 else None
    everyone = all(steps)
    window = ((min(a for s in steps for a, _ in s) - origin, max(b for s in steps for _, b in s) - origin)
              if everyone else (0, max(rows["end"], default=0)))
    return {"ranks": ranks, "rows": rows, "last_step_start": last, "window": window}


def raw_kernels(raw: dict[str, Any]) -> Any:
    from popvision_py.analysis.imported.gpu import Kernels

    r = raw["rows"]
    return Kernels.build(r["ipu"], r["stream"], r["kind"], r["name"], r["start"], r["end"], r["launch_start"],
                         r["launch_end"], r["correlation"], ranks=raw["ranks"], launch_name=r["launch_name"])


# -- the figures, one shape for the three sides ----------------------------------------------------------

def figures_of(kernels: Any, last_step_start: Any, window: tuple[Any, Any]) -> dict[str, Any]:
    """The figures HTA gives, and popvision's own within ``window``, from a ``gpu.Kernels`` (times in us)."""
    import numpy as np

    from popvision_py.analysis.imported import gpu

    hta = kernels.take(gpu.hta_selection(kernels, None if last_step_start is None else np.asarray(last_step_start)))
    us = lambda v: float(v) / 1000.0  # noqa: E731
    rows = lambda t: [dict(zip(t.names, values)) for values in zip(*(t[c].tolist() for c in t.names))]  # noqa: E731
    out: dict[str, Any] = {"temporal": [
        {"rank": r["rank"], "kernel_us": us(r["kernel_ns"]), "idle_us": us(r["idle_ns"]), "idle_pct": r["idle_pct"],
         "compute_pct": r["compute_pct"], "non_compute_pct": r["non_compute_pct"]} for r in rows(gpu.temporal(hta))]}
    out["kernel_types"] = [{"kernel_type": r["kernel_type"], "time_us": us(r["time_ns"]), "pct": r["pct"]}
                           for r in rows(gpu.kernel_types(hta))]
    out["overlap"] = [{"rank": r["rank"], "comm_comp_overlap_pct": r["comm_comp_overlap_pct"]}
                      for r in rows(gpu.comm_comp_overlap(hta))]
    out["top_kernels"] = [{"rank": r["rank"], "kernel_type": r["kernel_type"], "name": r["name"],
                           "sum_us": us(r["sum_ns"])} for r in rows(gpu.top_kernels(hta))]
    out["launch"] = [{"rank": r["rank"], "kernels": r["kernels"],
                      "launch_delay_median_us": us(r["launch_delay_median_ns"]),
                      "launch_delay_p95_us": us(r["launch_delay_p95_ns"]), "cpu_longer_pct": r["cpu_longer_pct"]}
                     for r in rows(gpu.launch_summary(hta))]
    n = kernels.num_ranks
    span = (np.full(n, window[0], np.int64), np.full(n, window[1], np.int64))
    out["steps"] = [{"rank": r["rank"], "idle_pct": r["idle_pct"], "compute_pct": r["compute_pct"],
                     "non_compute_pct": r["non_compute_pct"], "comm_comp_overlap_pct": r["comm_comp_overlap_pct"]}
                    for r in rows(gpu.by_rank(kernels, span))]
    return out


def popvision_side(profile: str, out: str) -> int:
    """In its own process: open the imported profile and write ``figures_of`` its ``report.gpu``."""
    import popvision_py

    with popvision_py.open(profile) as report:
        view = report.gpu
        kernels = view.kernels()
        window = view.window()
        found = figures_of(kernels, view.last_step_starts(), (int(window[0][0]), int(window[1][0])) if len(
            window[0]) else (0, 0))
        found["missing"] = view.missing()
    Path(out).write_text(json.dumps(found, default=float))
    return 0


def popvision_figures(folder: Path, tmp: Path) -> tuple[dict[str, Any] | None, Measured, Measured | None]:
    """``popvision import`` then the analysis, each measured; None and the import's failure if it fails."""
    profile = tmp / label(folder) / "profile.pop"  # `popvision import -o` names the folder
    imported = measured([sys.executable, "-m", "popvision_py.cli", "import", str(folder), "-o", str(profile.parent)])
    if imported.code != 0:
        return None, imported, None
    out = tmp / f"{label(folder)}.json"
    analysed = measured([sys.executable, str(Path(__file__).resolve()), "--popvision-side", str(profile), str(out)])
    if analysed.code != 0:
        return None, imported, analysed
    return json.loads(out.read_text()), imported, analysed


# -- the comparison ------------------------------------------------------------------------------------

@dataclass
class Row:
    """One figure of one trace, as each side gives it (None: that side has no such figure)."""

    trace: str
    figure: str
    hta: float | None
    raw: float | None
    popvision: float | None
    unit: str = "pct"

    def agrees(self, value: float | None) -> bool | None:
        """Whether ``value`` is within the tolerance of HTA's (None where either is missing)."""
        if value is None or self.hta is None or _nan(value) or _nan(self.hta):
            return None if (value is None or self.hta is None) else (_nan(value) and _nan(self.hta))
        off = abs(value - self.hta)
        return off <= TOLERANCE[self.unit] or off <= TOLERANCE["rel"] * abs(self.hta)


def _nan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


def _by(rows: list[dict[str, Any]] | None, *keys: str) -> dict[tuple, dict[str, Any]]:
    return {tuple(r[k] for k in keys): r for r in rows or []}


def _get(found: dict[str, Any] | None, part: str, key: tuple, figure: str, *keys: str) -> float | None:
    if found is None:
        return None
    row = _by(found.get(part), *keys).get(key)
    if row is None or figure not in row:
        return None
    value = row[figure]
    return float("nan") if value is None else float(value)  # JSON's null is a NaN


def compare(trace: str, hta: dict[str, Any], raw: dict[str, Any] | None, pv: dict[str, Any] | None,
            top: int = 3) -> list[Row]:
    """The rows of one trace: each figure HTA gives, beside raw's and popvision's; popvision's own figure
    within the profiled steps after (no HTA value)."""
    sides = (hta, raw, pv)
    out: list[Row] = []
    ranks = sorted({r["rank"] for side in sides if side for r in side.get("temporal") or []})
    for rank in ranks:
        for figure, name in (("idle_pct", "idle %"), ("compute_pct", "compute %"),
                             ("non_compute_pct", "non-compute %")):
            out.append(Row(trace, f"rank {rank} {name}",
                           *(_get(s, "temporal", (rank,), figure, "rank") for s in sides)))
        out.append(Row(trace, f"rank {rank} comm-comp overlap %",
                       *(_get(s, "overlap", (rank,), "comm_comp_overlap_pct", "rank") for s in sides)))
        for figure, name in (("launch_delay_median_us", "launch delay median us"),
                             ("launch_delay_p95_us", "launch delay p95 us")):
            out.append(Row(trace, f"rank {rank} {name}", *(_get(s, "launch", (rank,), figure, "rank") for s in sides),
                           unit="us"))
        out.append(Row(trace, f"rank {rank} idle % within the profiled steps", None,
                       *(_get(s, "steps", (rank,), "idle_pct", "rank") for s in (raw, pv))))
    types = [r["kernel_type"] for r in hta.get("kernel_types") or []]
    for kind in types:
        out.append(Row(trace, f"{kind} % of kernel time",
                       *(_get(s, "kernel_types", (kind,), "pct", "kernel_type") for s in sides)))
    kernels = [r for r in hta.get("top_kernels") or [] if r.get("name") != "others"]
    for r in sorted(kernels, key=lambda r: -float(r["sum_us"]))[:top]:
        key = (r["rank"], r["kernel_type"], r["name"])
        short = str(r["name"])[:40]
        out.append(Row(trace, f"rank {r['rank']} {short} us", *(
            _get(s, "top_kernels", key, "sum_us", "rank", "kernel_type", "name") for s in sides), unit="us"))
    return out


def markdown(rows: list[Row]) -> list[str]:
    """The rows as a Markdown table, each popvision-side value marked ``=`` (within tolerance of HTA's) or ``!``."""
    def cell(row: Row, value: float | None, mark: bool) -> str:
        if value is None:
            return ""
        shown = "NaN" if _nan(value) else (f"{value:,.2f}" if row.unit == "pct" else f"{value:,.1f}")
        agrees = row.agrees(value) if mark else None
        return shown + {True: " =", False: " !", None: ""}[agrees]

    lines = ["| trace | figure | HTA 0.5 | raw JSON | popvision |", "| --- | --- | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r.trace} | {r.figure} | {cell(r, r.hta, False)} | {cell(r, r.raw, True)} | "
                     f"{cell(r, r.popvision, True)} |")
    return lines


def _cost(m: Measured | None) -> str:
    return "" if m is None else f"{m.seconds:.2f} s, {m.peak_bytes / 2**20:,.0f} MiB"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--popvision-side"]:
        return popvision_side(*args[1:3])
    start_launcher()  # before any trace is read, while this process is small: see _LAUNCHER
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="trace folders (one trace file per rank)")
    parser.add_argument("--hta-python", default=os.environ.get("HTA_PYTHON"),
                        help="the interpreter HTA 0.5 is installed in [default: $HTA_PYTHON]")
    parser.add_argument("--hta-figures", type=Path, default=None, help="read (and save) HTA's figures here")
    parser.add_argument("--no-popvision", action="store_true", help="HTA and the raw JSON only (no import)")
    parser.add_argument("--json", type=Path, default=None, help="write every figure here")
    opts = parser.parse_args(args)
    if opts.hta_python is None and opts.hta_figures is None:
        parser.error("give --hta-python (or set HTA_PYTHON), or --hta-figures with HTA's saved figures")
    everything: dict[str, Any] = {}
    all_rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        for folder in opts.folders:
            name = label(folder)
            hta, hta_run = hta_figures(folder, opts.hta_python, opts.hta_figures)
            raw = read_raw(folder)
            raw_figures = figures_of(raw_kernels(raw), raw["last_step_start"], raw["window"])
            pv, imported, analysed = (None, None, None) if opts.no_popvision else popvision_figures(folder, Path(tmp))
            failed = next((m for m in (imported, analysed) if m is not None and m.code != 0), None)
            if failed is not None:  # the import refused the traces, or the analysis failed: its last line
                lines = failed.output.strip().splitlines()
                print(f"\n{name}: popvision failed (exit {failed.code}): {lines[-1] if lines else ''}")
            rows = compare(name, hta, raw_figures, pv)
            all_rows += rows
            everything[name] = {"hta": hta, "raw": raw_figures, "popvision": pv, "hta_cost": _cost(hta_run),
                                "import_cost": _cost(imported), "analysis_cost": _cost(analysed)}
            print(f"\n{name}: HTA {_cost(hta_run) or '(saved figures, not timed)'}; popvision import "
                  f"{_cost(imported) or '-'}, analysis {_cost(analysed) or '-'}"
                  + (f"; HTA errors: {hta['errors']}" if hta.get("errors") else "")
                  + (f"; popvision: {pv['missing']}" if pv and pv.get("missing") else ""))
            print("\n".join(markdown(rows)))
    if opts.json is not None:
        opts.json.write_text(json.dumps(everything, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
