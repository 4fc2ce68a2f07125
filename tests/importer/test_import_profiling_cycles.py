"""A folder written by ``torch.profiler.tensorboard_trace_handler``: one trace per worker per profiling cycle,
named ``<worker>.<ms>.pt.trace.json``. ``popvision import DIR`` takes the newest cycle and says so;
``--cycle K`` takes the K-th (1 the oldest) or ``latest``; a bad value, or workers holding different numbers
of cycles, is one sentence and exit code 2."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from popvision_py.cli import main
from popvision_py.format import open_profile

BASE_NS = 1_700_000_000_000_000_000
# each cycle's traces: written at these milliseconds (by worker), the cycle's kernel this many µs long.
# The first cycle's names have 3 digits, the others 4: ordered as text, cycle 1 would come last.
CYCLES = [({"rank0": 999, "rank1": 998}, 100), ({"rank0": 5000, "rank1": 5001}, 200),
          ({"rank0": 9000, "rank1": 9002}, 300)]


def cycle_trace(rank: int, cycle: int, kernel_us: int) -> dict:
    """One worker's trace of one cycle: a profiler step of 1 ms starting at ``cycle`` seconds, holding one kernel
    of ``kernel_us`` (which tells the cycles apart)."""
    t = cycle * 1_000_000.0
    events = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{cycle}", "pid": 1, "tid": 1, "ts": t,
               "dur": 1000.0},
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t + 10, "dur": 5.0},
              {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": t + 100, "dur": float(kernel_us)}]
    return {"schemaVersion": 1, "distributedInfo": {"rank": rank, "world_size": 2}, "baseTimeNanoseconds": BASE_NS,
            "traceEvents": events}


def handler_folder(folder: Path, cycles=CYCLES, gz: bool = False) -> Path:
    """What tensorboard_trace_handler(folder, worker_name=f"rank{r}") writes over ``cycles``."""
    folder.mkdir()
    for k, (written, kernel_us) in enumerate(cycles, start=1):
        for worker, ms in written.items():
            data = json.dumps(cycle_trace(int(worker[-1]), k, kernel_us)).encode()
            name = f"{worker}.{ms}.pt.trace.json" + (".gz" if gz else "")
            (folder / name).write_bytes(gzip.compress(data) if gz else data)
    return folder


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def imported(out: Path) -> tuple[list[str], int]:
    """The files a profile was imported from, and its rank 0's busy time (its kernel) in ns."""
    with open_profile(out / "profile.pop") as profile:
        files = [Path(f).name for f in profile.run["import"]["files"]]
        trace = profile.read_pandas("trace")
    busy = trace[(trace["ipu"] == 0) & (trace["phase"] != "idle")]
    return files, int((busy["end_cycle"] - busy["start_cycle"]).sum())


@pytest.mark.parametrize("gz", [False, True])
def test_a_handler_folder_imports_its_newest_cycle_and_says_so(gz, tmp_path):
    # GIVEN a folder of 3 profiling cycles of 2 workers
    folder = handler_folder(tmp_path / "tb", gz=gz)
    # WHEN it is imported as it is
    result = invoke("import", folder, "-o", tmp_path / "out")
    # THEN the newest cycle's two traces are imported (its kernel: 300 µs), and one line says so
    assert result.exit_code == 0, result.output
    suffix = ".gz" if gz else ""
    assert imported(tmp_path / "out") == ([f"rank0.9000.pt.trace.json{suffix}", f"rank1.9002.pt.trace.json{suffix}"],
                                          300_000)
    note = (f"3 profiling cycles in {folder.absolute()} (tensorboard_trace_handler); imported the newest, cycle 3: "
            f"--cycle N picks another")
    assert note in result.output.splitlines()
    assert "Imported 2 trace(s)" in result.output


@pytest.mark.parametrize("cycle, files, kernel_ns", [
    ("1", ["rank0.999.pt.trace.json", "rank1.998.pt.trace.json"], 100_000),
    ("2", ["rank0.5000.pt.trace.json", "rank1.5001.pt.trace.json"], 200_000),
    ("latest", ["rank0.9000.pt.trace.json", "rank1.9002.pt.trace.json"], 300_000),
])
def test_cycle_picks_a_cycle_by_the_times_in_the_names(cycle, files, kernel_ns, tmp_path):
    # GIVEN the folder of 3 cycles, the first named with 3 digits of milliseconds
    folder = handler_folder(tmp_path / "tb")
    # WHEN one cycle is asked for
    result = invoke("import", folder, "-o", tmp_path / "out", "--cycle", cycle)
    # THEN that cycle's traces are imported: the K-th of each worker by time, not by the names' order as text
    assert result.exit_code == 0, result.output
    assert imported(tmp_path / "out") == (files, kernel_ns)
    which = "the newest, cycle 3" if cycle == "latest" else f"cycle {cycle}"
    assert f"3 profiling cycles in {folder.absolute()} (tensorboard_trace_handler); imported {which}:" in result.output


@pytest.mark.parametrize("cycle, sentence", [
    ("4", "--cycle 4 is not a profiling cycle of the traces: {folder} holds 3 profiling cycles (1 to 3); give "
          "--cycle from 1 (the oldest) to 3, or latest."),
    ("0", "--cycle 0 is not a profiling cycle; give its number from 1 (the oldest), or latest."),
    ("-1", "--cycle -1 is not a profiling cycle; give its number from 1 (the oldest), or latest."),
    ("newest", "--cycle newest is not a profiling cycle; give its number from 1 (the oldest), or latest."),
])
def test_a_bad_cycle_is_one_sentence(cycle, sentence, tmp_path):
    # GIVEN the folder of 3 cycles
    folder = handler_folder(tmp_path / "tb")
    # WHEN a cycle it does not hold is asked for
    result = invoke("import", folder, "-o", tmp_path / "out", "--cycle", cycle)
    # THEN one sentence, exit code 2, nothing written
    assert result.exit_code == 2, result.output
    assert result.output.strip() == "Error: " + sentence.format(folder=folder.absolute())
    assert not (tmp_path / "out").exists()


def test_workers_with_different_numbers_of_cycles_are_one_sentence(tmp_path):
    # GIVEN the folder of 3 cycles, rank 1's last trace missing
    folder = handler_folder(tmp_path / "tb")
    (folder / "rank1.9002.pt.trace.json").unlink()
    # WHEN it is imported
    result = invoke("import", folder, "-o", tmp_path / "out")
    # THEN one sentence names the workers and their cycles
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (
        f"Error: {folder.absolute()} holds 3 profiling cycles of worker rank0 and 2 of worker rank1 "
        f"(tensorboard_trace_handler writes one trace a worker each cycle): a cycle's traces are missing; give the "
        f"traces of whole cycles.")


def test_one_cycle_and_traces_named_otherwise_import_as_before(tmp_path):
    # GIVEN a handler's folder of one cycle, and a folder of traces named otherwise
    one = handler_folder(tmp_path / "one", cycles=CYCLES[:1])
    plain = tmp_path / "plain"
    plain.mkdir()
    for rank in (0, 1):
        (plain / f"trace_rank{rank}.json").write_text(json.dumps(cycle_trace(rank, 1, 100)))
    # WHEN each is imported (the first with --cycle 1, which it holds)
    a = invoke("import", one, "-o", tmp_path / "a", "--cycle", "1")
    b = invoke("import", plain, "-o", tmp_path / "b")
    c = invoke("import", plain, "-o", tmp_path / "c", "--cycle", "2")
    # THEN both import without a word on cycles; a cycle beyond the one there is is one sentence
    assert a.exit_code == 0 and b.exit_code == 0, a.output + b.output
    assert "profiling cycles" not in a.output + b.output
    assert imported(tmp_path / "a")[1] == imported(tmp_path / "b")[1] == 100_000
    assert c.exit_code == 2 and "holds one profiling cycle" in c.output
