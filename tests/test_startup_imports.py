"""Each command imports only what it uses (issue 35, item 3): a light command on a real profile never
loads pandas, plotting, the dashboard, the emulator or a distributed engine, and `popvision report`
loads of the emulator only the planner's rules its fixes are checked against (issue 36).

Each command runs as a user runs it, `python -m popvision_py.cli ...` in a fresh process, under a
wrapper that prints the names in ``sys.modules`` as the process leaves. The CLI leaves through
``os._exit`` (``popvision_py.cli.leave``), which skips atexit handlers, so the wrapper prints from
there. `popvision import` parses in worker processes forked from it, which leave through os._exit too:
their lists count as well.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from popvision_py.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
MNIST = ROOT / "sample_profiles" / "mnist_pipelined" / "profile.pop"
QUERY = "SELECT ipu, sum(end_cycle - start_cycle) AS cycles FROM trace GROUP BY ipu ORDER BY ipu"
HEAVY = ("pandas", "plotly", "dash", "matplotlib", "torch", "dask", "distributed", "engine")
MARK = "popvision-modules:"

# Runs the CLI as `python -m popvision_py.cli ARGS` would, and prints sys.modules (one JSON line on
# stderr) wherever the process leaves: through os._exit (the CLI's leave) or a normal exit.
WRAPPER = f"""
import atexit, json, os, runpy, sys
def modules():
    sys.stderr.write({MARK!r} + json.dumps(sorted(sys.modules)) + "\\n")
    sys.stderr.flush()
exit_now = os._exit
def leave(code):
    modules()
    exit_now(code)
os._exit = leave
atexit.register(modules)
sys.argv = ["-m", *sys.argv[1:]]  # as `python -m` has it while the package is imported
runpy.run_module("popvision_py.cli", run_name="__main__")
"""


def loaded(*args: str, cwd: Path = ROOT) -> tuple[subprocess.CompletedProcess, set[str]]:
    """The finished command and the modules it had imported when it left, in any of its processes (a
    worker forked from it leaves through os._exit too, and prints its own list)."""
    done = subprocess.run([sys.executable, "-c", WRAPPER, *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)
    lines = [line for line in done.stderr.splitlines() if line.startswith(MARK)]
    assert lines, f"the wrapper saw no exit: {done.stderr[-2000:]}"
    return done, {name for line in lines for name in json.loads(line[len(MARK):])}


def heavy(modules: set[str], *more: str) -> list[str]:
    """The heavy modules (and ``more``) that ``modules`` come from."""
    return sorted({name.split(".")[0] for name in modules} & {*HEAVY, *more})


def test_the_wrapper_sees_a_heavy_import():
    # GIVEN a command that builds a report (pandas answers), THEN the wrapper lists pandas: the check
    # below can fail
    done, modules = loaded("report", str(MNIST), "--section", "memory")
    assert done.returncode == 0, done.stderr
    assert "pandas" in modules and "popvision_py.cli.report" in modules


def test_report_loads_the_planners_rules_and_nothing_else_of_the_engine():
    # WHEN a report is built: its fixes are checked against the planner's rules, which popvision_py.open
    # hands the analysis
    done, modules = loaded("report", str(MNIST), "--section", "summary")
    # THEN the fixes are shown, and of the engine only the package (its public names load lazily) and the
    # rules were imported: not the compiler, the scheduler or the zoo
    assert done.returncode == 0, done.stderr
    assert "popvision run mnist" in done.stdout
    assert sorted(name for name in modules if name.split(".")[0] == "engine") == ["engine", "engine.rules"]


def test_help_lists_every_command_without_importing_one():
    # WHEN a user asks for the list of commands
    done, modules = loaded("--help")
    # THEN every command is listed with its line, and no command's module (nor numpy, pyarrow) is imported
    assert done.returncode == 0, done.stderr
    for name, (_, line) in COMMANDS.items():
        assert f"  {name}" in done.stdout and line in done.stdout
    assert not heavy(modules, "numpy", "pyarrow", "duckdb"), heavy(modules, "numpy", "pyarrow", "duckdb")
    commands = {f"popvision_py.cli.{module}" for module, _ in COMMANDS.values()}
    assert not [name for name in modules if name in commands]
    assert "popvision_py.cli.run" in commands  # the names are the modules' (a test that can fail)


@pytest.mark.parametrize("args", [
    ["info", str(MNIST)],
    ["info", str(MNIST), "--json"],
    ["sql", str(MNIST), QUERY],
    ["sql", str(MNIST), QUERY, "--format", "csv"],
    ["sql", str(MNIST), QUERY, "--format", "json"],
], ids=["info", "info-json", "sql-text", "sql-csv", "sql-json"])
def test_reading_commands_import_no_heavy_module(args):
    # WHEN a command that reads a profile runs on a real one
    done, modules = loaded(*args)
    # THEN it succeeds without pandas, plotting, the dashboard or the emulator
    assert done.returncode == 0, done.stderr
    assert not heavy(modules), heavy(modules)
    # AND without pyarrow: the profile's small footers are parsed by popvision (format.opening), DuckDB reads the
    # members, and the answer is rendered from NumPy arrays
    assert not heavy(modules, "pyarrow"), heavy(modules, "pyarrow")
    if args[0] == "info":
        assert not heavy(modules, "duckdb", "numpy")  # only sql queries, and info computes nothing
    else:
        assert done.stdout.strip()  # the result was rendered (text, CSV or JSON) without pandas
    # nor Arrow's compute functions (about 40 ms to import: their docs are parsed), which neither uses
    assert "pyarrow.compute" not in modules


def test_sql_renders_the_figures_pyarrow_reads(tmp_path):
    # GIVEN the trace read by pyarrow straight from the profile's member
    import io
    import zipfile

    import pyarrow.parquet as pq

    with zipfile.ZipFile(MNIST) as archive:
        trace = pq.read_table(io.BytesIO(archive.read("trace.parquet")), columns=["ipu", "start_cycle", "end_cycle"])
    ipu, cycles = trace["ipu"].to_pylist(), [e - s for s, e in zip(trace["start_cycle"].to_pylist(),
                                                                      trace["end_cycle"].to_pylist())]
    expected = {i: sum(c for j, c in zip(ipu, cycles) if j == i) for i in sorted(set(ipu))}
    # WHEN sql renders the sums as CSV, pandas-free
    done, modules = loaded("sql", str(MNIST), QUERY, "--format", "csv")
    # THEN each IPU's line holds its sum (DuckDB's sum of integers is a HUGEINT, shown as a float)
    lines = done.stdout.splitlines()
    assert lines[0] == "ipu,cycles" and not heavy(modules)
    assert {int(i): float(c) for i, c in (line.split(",") for line in lines[1:])} == expected


@pytest.mark.parametrize("window", [[], ["--iterations", "1:3", "--ipu", "1"]], ids=["whole", "window"])
def test_export_trace_imports_no_heavy_module(tmp_path, window):
    # WHEN the execution trace is exported
    out = tmp_path / "trace.json"
    done, modules = loaded("export-trace", str(MNIST), "-o", str(out), "-q", *window)
    # THEN the file is written without pandas, plotting or the emulator
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["traceEvents"]
    assert not heavy(modules), heavy(modules)


def test_import_parses_and_writes_without_pandas(tmp_path):
    # GIVEN a Kineto trace of two ranks, in PyTorch's own layout (a real recording's events, made small)
    traces = tmp_path / "traces"
    traces.mkdir()
    for rank in (0, 1):
        events = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": rank, "tid": 1,
                   "ts": 1000 * step, "dur": 900} for step in (1, 2)]
        events += [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": rank, "tid": 1, "ts": 1000 * step + 10,
                    "dur": 500, "args": {"External id": step}} for step in (1, 2)]
        header = {"schemaVersion": 1, "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": 2}}
        (traces / f"rank{rank}.json").write_text(json.dumps({**header, "traceEvents": events}))
    # WHEN it is imported, parsing in this process (--jobs 1) and in worker processes (--jobs 2)
    for jobs in ("1", "2"):
        done, modules = loaded("import", str(traces), "-o", str(tmp_path / f"out{jobs}"), "-q", "--jobs", jobs)
        # THEN the profile is written, and neither pandas nor the emulator was loaded
        assert done.returncode == 0, done.stderr + done.stdout
        assert (tmp_path / f"out{jobs}" / "profile.pop").is_file()
        assert not heavy(modules), heavy(modules)
