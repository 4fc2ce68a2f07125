"""`popvision tune` on Dask: a real scheduler and worker on 127.0.0.1 give the local cluster's table;
resume skips what finished; bad input is one sentence."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest

from popvision_py.format.tunefile import read_tune
from popvision_py.tune.evaluate import RANGE_FIELDS
from popvision_py.tune.search import keep_finished
from tests.tune.conftest import tune

ROOT = Path(__file__).resolve().parents[2]
SEARCH = ("--system", "POD4", "--search", "stages,replicas", "-q", "--no-profile")


def compared(rows: pd.DataFrame) -> pd.DataFrame:
    """A table's rows without wall-clock seconds (the one column a search does not decide)."""
    return rows.drop(columns=["seconds"]).reset_index(drop=True)


RANGES = list(RANGE_FIELDS)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[str]:
    """A Dask scheduler and one worker (one thread), each its own process on 127.0.0.1, importing this tree."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    file = tmp_path / "scheduler.json"
    scheduler = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                                  "--port", "0", "--no-dashboard", "--dashboard-address", "127.0.0.1:0",
                                  "--scheduler-file", str(file)],
                                 env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = None
    try:
        deadline = time.monotonic() + 60
        while not file.exists() or not file.read_text().strip():
            assert time.monotonic() < deadline, "the scheduler did not start"
            time.sleep(0.1)
        worker = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file", str(file),
                                   "--nworkers", "1", "--nthreads", "1", "--no-dashboard"],
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
        yield json.loads(file.read_text())["address"]
    finally:
        for process in (worker, scheduler):
            if process is not None:
                process.terminate()
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()


@pytest.mark.slow
def test_a_scheduler_on_loopback_gives_the_local_clusters_table(uneven: str, cluster: str, tmp_path: Path) -> None:
    # GIVEN the same search on a local cluster of two processes and on a scheduler started apart
    local, remote = tmp_path / "local.parquet", tmp_path / "remote.parquet"
    assert cluster.startswith("tcp://127.0.0.1:")
    first = tune(uneven, *SEARCH, "--workers", "2", "-o", str(local))
    second = tune(uneven, *SEARCH, "--scheduler", cluster, "-o", str(remote))
    assert first.exit_code == 0, first.output
    assert second.exit_code == 0, second.output
    # THEN the tables are the same, row for row (wall-clock seconds aside), and so is the text printed
    a, meta_a = read_tune(local)
    b, meta_b = read_tune(remote)
    assert len(a) > 15 and (a["status"] == "ok").sum() > 0
    pd.testing.assert_frame_equal(compared(a), compared(b))
    assert meta_a == meta_b
    assert first.output.replace(str(local), "OUT") == second.output.replace(str(remote), "OUT")


def test_resume_takes_finished_candidates_and_emulates_only_the_rest(uneven: str, tmp_path: Path) -> None:
    out = tmp_path / "tune.parquet"
    # GIVEN a search stopped after six candidates (the cap)
    capped = tune(uneven, *SEARCH, "--workers", "1", "--max-candidates", "6", "-o", str(out))
    assert capped.exit_code == 0, capped.output
    assert "The search stopped at --max-candidates 6 (" in capped.output
    before, _ = read_tune(out)
    assert len(before) == 6
    # WHEN the whole search resumes from it
    resumed = tune(uneven, *SEARCH, "--workers", "1", "--resume", str(out))
    assert resumed.exit_code == 0, resumed.output
    after, meta = read_tune(out)
    # THEN the six are taken as they were (their seconds unchanged: not emulated again), the rest emulated
    assert f"6 candidates taken from {out}, {len(after) - 6} emulated now." in resumed.output
    assert meta["reused"] == 6 and meta["emulated"] == len(after) - 6
    kept = after.set_index("key").loc[before["key"], "seconds"]
    assert list(kept) == list(before["seconds"])
    # AND the table is the one a search from scratch makes; ranges are the same where both computed them (the
    # resumed result may also keep those of the rows its first part showed)
    fresh = tmp_path / "fresh.parquet"
    assert tune(uneven, *SEARCH, "--workers", "1", "-o", str(fresh)).exit_code == 0
    again = read_tune(fresh)[0]
    pd.testing.assert_frame_equal(compared(after).drop(columns=RANGES), compared(again).drop(columns=RANGES))
    both = after["fit_verdict"].notna() & again["fit_verdict"].notna()
    assert (again["fit_verdict"].notna() <= after["fit_verdict"].notna()).all()
    pd.testing.assert_frame_equal(after.loc[both, RANGES], again.loc[both, RANGES])


def test_a_stop_keeps_the_rows_resume_gave_and_writes_nothing_when_none_finished(uneven: str, tmp_path: Path) -> None:
    # GIVEN the result of a search capped at three candidates
    out = tmp_path / "tune.parquet"
    assert tune(uneven, *SEARCH, "--workers", "1", "--max-candidates", "3", "-o", str(out)).exit_code == 0
    before, meta = read_tune(out)
    assert len(before) == 3
    written = out.read_bytes()
    # WHEN a search resumed from it is stopped before it came to its rows, or having come to one of them
    for finished in (before.iloc[:0], before.iloc[2:3]):
        said = keep_finished(str(out), finished.drop(columns=["rank", "pareto"]), meta, previous=before)
        # THEN the file still holds all three rows, ranked as before
        assert said == (f"Stopped with 3 candidates finished, kept in {out}; run the same command with --resume "
                        f"{out} to go on from them.")
        pd.testing.assert_frame_equal(read_tune(out)[0], before)
    # AND a search stopped before any candidate finished leaves an earlier result at -o byte for byte, and makes
    # no file where there was none
    out.write_bytes(written)
    none = before.iloc[:0].drop(columns=["rank", "pareto"])
    assert keep_finished(str(out), none, meta) == f"Stopped before any candidate finished; {out} was not written."
    assert out.read_bytes() == written
    fresh = tmp_path / "fresh.parquet"
    assert keep_finished(str(fresh), none, meta) == f"Stopped before any candidate finished; {fresh} was not " \
                                                        f"written."
    assert not fresh.exists()


@pytest.mark.parametrize(("args", "sentence"), [
    (("no-such-model", "--system", "POD4"), "Error: Unknown model 'no-such-model'; the zoo has"),
    (("mnist", "--system", "POD17"), "Error: Unknown system 'POD17'; choose one of IPU, IPU-POD4"),
    (("gpt", "--preset", "gpt3-2.7b", "--system", "POD4"),
     "Error: The starting configuration does not run on an IPU-POD4: The run needs 32 IPUs but an "
     "IPU-POD4 has only 4."),
    (("mnist", "-o", "/"), "Error: -o / is a folder; give the path of the .parquet file to write."),
    (("mnist", "--search", "stages,colour"), "Error: --search names 'colour'; choose from stages, sharding"),
    (("mnist", "--scheduler", "127.0.0.1:8786"), "Error: --scheduler takes a Dask scheduler's address as "
                                                 "tcp://HOST:PORT"),
    (("mnist", "--scheduler", "tcp://127.0.0.1:9", "--no-profile"), "Error: No Dask scheduler answers at "
                                                                    "tcp://127.0.0.1:9 ("),
])
def test_bad_input_is_one_sentence(args: tuple[str, ...], sentence: str) -> None:
    result = tune(*args, "-q")
    assert result.exit_code == 2
    assert result.output.startswith(sentence), result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def test_dasks_own_error_lines_print_nothing_once_quieted_whatever_distributed_sets_as_it_loads() -> None:
    # GIVEN a process that quiets Dask as `popvision tune` does and then imports distributed's client, which sets its
    # loggers' levels as it loads (tornado.application at error)
    code = textwrap.dedent("""
        import logging
        from popvision_py.tune.cluster import quiet_dask
        quiet_dask()
        from distributed import Client
        from tornado.ioloop import IOLoop

        def cancel():  # distributed's sync() cancel, run when Ctrl-C comes before its call's future exists
            raise NameError("cannot access free variable 'future'")

        loop = IOLoop(make_current=False)
        loop.add_callback(cancel)
        loop.add_callback(loop.stop)
        loop.start()
        logging.getLogger("distributed.core").error("a task cancelled by Ctrl-C")
        logging.getLogger("distributed.gc").warning("full garbage collections took 30% CPU time recently")
        print("finished")
    """)
    # WHEN a callback of the event loop raises and distributed logs an error
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    # THEN the process goes on and prints nothing on stderr: no traceback, no log line
    assert (done.returncode, done.stdout, done.stderr) == (0, "finished\n", "")


def test_resume_refuses_another_searchs_result(uneven: str, tmp_path: Path) -> None:
    out = tmp_path / "tune.parquet"
    assert tune(uneven, *SEARCH, "--workers", "1", "--max-candidates", "3", "-o", str(out)).exit_code == 0
    result = tune("mnist", *SEARCH, "--workers", "1", "--resume", str(out))
    assert result.exit_code == 2
    assert result.output.startswith(f"Error: {out} is the result of another search (its model is"), result.output
    # AND a search of the same model with another run option (the optimiser) is refused too
    other = tune(uneven, *SEARCH, "--workers", "1", "--optimiser", "sgd", "--resume", str(out))
    assert other.exit_code == 2
    assert other.output.startswith(f"Error: {out} is the result of another search (other run options were given)")


def _read_until(fd: int, done: Callable[[str], bool], timeout: float) -> str:
    """What a terminal's reader sees on ``fd`` until ``done`` says so of it (or ``timeout`` seconds pass, or the
    writer closes it)."""
    import select

    seen = ""
    deadline = time.monotonic() + timeout
    while not done(seen) and time.monotonic() < deadline:
        if select.select([fd], [], [], 1.0)[0]:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the writer closed the terminal (Linux says EIO)
                break
            if not chunk:
                break
            seen += chunk.decode(errors="replace")
    return seen


def _finished(bar: str) -> int:
    """The most candidates a tqdm bar's redraws in ``bar`` counted as finished ("| 12/650 [")."""
    return max((int(n) for n in re.findall(r"\| *([0-9]+)/[0-9]+ \[", bar)), default=0)


def _workers(group: int) -> dict[int, bool]:
    """The Dask worker processes (spawned multiprocessing children) of the process group ``group``, each with
    whether it ignores Ctrl-C (SIGINT's bit in the SigIgn mask Linux shows in /proc/PID/status)."""
    import signal

    found = {}
    for entry in Path("/proc").iterdir():
        try:
            if (entry.name.isdigit() and b"spawn_main" in (entry / "cmdline").read_bytes()
                    and os.getpgid(int(entry.name)) == group):
                ignored = re.search(r"^SigIgn:\s*([0-9a-f]+)$", (entry / "status").read_text(), re.MULTILINE)
                found[int(entry.name)] = bool(ignored and int(ignored[1], 16) >> (signal.SIGINT - 1) & 1)
        except (OSError, ProcessLookupError):  # a process that ended meanwhile
            continue
    return found


@pytest.mark.slow
def test_ctrl_c_keeps_what_finished_and_says_how_to_resume(tmp_path: Path) -> None:
    import fcntl
    import pty
    import signal
    import struct
    import termios

    # GIVEN bert-large's search on an IPU-POD16 (about a minute here), run in a terminal (its progress bar shows)
    # as a program in its own process group
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = tmp_path / "tune.parquet"
    terminal, stderr_end = pty.openpty()
    fcntl.ioctl(stderr_end, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a 120-column terminal
    process = subprocess.Popen(
        [sys.executable, "-m", "popvision_py.cli", "tune", "bert-large", "--system", "POD16", "--workers", "2",
         "--no-profile", "-o", str(out)],
        env=env, stdout=subprocess.PIPE, stderr=stderr_end, text=True, cwd=tmp_path, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    os.close(stderr_end)
    try:
        # and whose workers die mid-search once the bar counts a finished candidate (killed, as a machine out
        # of memory kills them; a loaded machine may take far longer than the few seconds it takes here to start
        # the cluster): the cluster starts others, which finish more candidates
        shown = _read_until(terminal, lambda seen: _finished(seen) > 0, timeout=300)
        assert process.poll() is None, shown
        dead = _workers(process.pid)
        assert len(dead) == 2 and all(dead.values())  # started with Ctrl-C ignored
        for pid in dead:
            os.kill(pid, signal.SIGKILL)
        before = _finished(shown)
        shown = _read_until(terminal, lambda seen: _finished(seen) > before, timeout=300)
        assert process.poll() is None, shown
        # (and once both new workers ignore Ctrl-C: each sets that up as it starts, after Python's own start-up)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            new = _workers(process.pid)
            if len(new) == 2 and not new.keys() & dead.keys() and all(new.values()):
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"the cluster's new workers {new} do not ignore Ctrl-C 60 s after the others died")
        # WHEN Ctrl-C reaches the whole group (the terminal's way)
        os.killpg(process.pid, signal.SIGINT)
        stdout, _ = process.communicate(timeout=120)
        stderr = _read_until(terminal, lambda seen: re.search(r"Interrupted\.\s*$", seen) is not None, timeout=30)
        time.sleep(1)  # what any process of the group (the resource tracker, the new workers) says after it
        stderr += _read_until(terminal, lambda seen: False, timeout=1)
    finally:
        os.close(terminal)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    # THEN it exits 130, keeps the finished candidates in the output and says how to go on, with nothing after
    # it: no traceback, log line or leaked-semaphore warning from a worker, dead or new
    assert process.returncode == 130, stderr
    rows, meta = read_tune(out)
    assert 0 < len(rows) < 650
    # (the terminal ends lines with "\r\n"; the bar draws and wipes itself with "\r")
    said = [line.rsplit("\r", 1)[-1] for line in stderr.replace("\r\n", "\n").split("\n")]
    assert [line for line in said if line.strip()] == [
        f"Stopped with {len(rows):,} candidates finished, kept in {out}; run the same command with --resume {out} "
        f"to go on from them.", "Interrupted."], stderr
    assert stdout == ""
