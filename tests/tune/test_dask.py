"""`popvision tune` on Dask: a real scheduler and worker on 127.0.0.1 give the local cluster's table;
resume skips what finished; bad input is one sentence."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from popvision_py.format.tunefile import read_tune
from popvision_py.tune.evaluate import RANGE_FIELDS
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


@pytest.mark.slow
def test_ctrl_c_keeps_what_finished_and_says_how_to_resume(tmp_path: Path) -> None:
    import signal

    # GIVEN bert-large's search on an IPU-POD16 (about a minute here), run as a program in its own process group
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = tmp_path / "tune.parquet"
    process = subprocess.Popen(
        [sys.executable, "-m", "popvision_py.cli", "tune", "bert-large", "--system", "POD16", "--workers", "2",
         "--no-profile", "-o", str(out)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    # WHEN Ctrl-C reaches the whole group (the terminal's way) a few seconds in
    time.sleep(10)
    os.killpg(process.pid, signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    # THEN it exits 130, keeps the finished candidates in the output and says how to go on, without a traceback
    assert process.returncode == 130, stderr
    rows, meta = read_tune(out)
    assert 0 < len(rows) < 650
    assert stderr.splitlines() == [f"Stopped with {len(rows):,} candidates finished, kept in {out}; run the same "
                                   f"command with --resume {out} to go on from them.", "Interrupted."]
    assert stdout == ""
