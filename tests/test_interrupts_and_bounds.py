"""Ctrl-C, the disk, concurrent writers and run bounds: each is one sentence, never a traceback.

Every test drives the real `popvision` (a subprocess, as a user's shell would) on real files; the
disk cases use real file systems (a 64 KiB tmpfs, a read-only tmpfs) when the suite may mount them.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from popvision_py.format import open_profile
from popvision_py.format.atomic import remove_stale_partials

ROOT = Path(__file__).resolve().parents[1]
MNIST = ROOT / "sample_profiles" / "mnist_pipelined" / "profile.pop"
BERT = ROOT / "sample_profiles" / "bert_base_pipelined" / "profile.pop"


def default_sigint() -> None:
    """Give the child the SIGINT a terminal gives it (a background shell starts it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def popvision(*args: str, cwd: Path = ROOT, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "popvision_py.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT)})


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "popvision_py.cli", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, preexec_fn=default_sigint,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


def one_sentence(result: subprocess.CompletedProcess, starts: str = "Error: ") -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert len(lines) == 1 and lines[0].startswith(starts), result.stderr
    return lines[0]


def wait_until(predicate, process: subprocess.Popen, what: str) -> None:
    """Poll (no timing assertion: the deadline only stops a hung test)."""
    deadline = time.monotonic() + 120
    while not predicate():
        assert process.poll() is None, f"the process ended before {what}: {process.stderr.read()}"
        assert time.monotonic() < deadline, f"never saw {what}"
        time.sleep(0.005)


def writing_into(pid: int, folder: Path) -> bool:
    """The process has a file open in ``folder`` (its anonymous spools and output: the write has begun)."""
    return any(link.startswith(f"{folder}/") for link in _open_files(pid))


# -- Ctrl-C --------------------------------------------------------------------------------------


SLOW_MODEL = '''
import time
from pathlib import Path
from engine.zoo import zoo_entry
DEFAULTS = dict(zoo_entry("mnist").defaults)
def build(options):
    Path(__file__).with_suffix(".building").touch()
    time.sleep(600)
'''


def test_ctrl_c_before_the_write_is_interrupted_and_keeps_the_old_profile(tmp_path):
    # GIVEN an earlier profile, and a run whose model is still being built
    folder = tmp_path / "profile"
    folder.mkdir()
    shutil.copy(MNIST, folder / "profile.pop")
    model = tmp_path / "slow.py"
    model.write_text(SLOW_MODEL)
    run = start("run", str(model), "--profile", "--profile-dir", str(folder), "-q")
    wait_until(lambda: model.with_suffix(".building").exists(), run, "the model being built")
    # WHEN the user presses Ctrl-C
    run.send_signal(signal.SIGINT)
    run.wait(timeout=60)
    # THEN "Interrupted.", exit 130, and the earlier profile byte for byte
    assert (run.returncode, run.stderr.read().strip()) == (130, "Interrupted.")
    assert sorted(p.name for p in folder.iterdir()) == ["profile.pop"]
    assert (folder / "profile.pop").read_bytes() == MNIST.read_bytes()


@pytest.mark.parametrize("extra_delay", [0.0, 0.05, 0.15])
def test_ctrl_c_during_the_write_is_interrupted_and_keeps_the_old_profile(tmp_path, extra_delay):
    # GIVEN an earlier profile, and a run that has begun writing its profile (its files are open there)
    folder = tmp_path / "profile"
    folder.mkdir()
    shutil.copy(MNIST, folder / "profile.pop")
    run = start("run", "resnet50", "--profile", "--profile-dir", str(folder), "-q")
    wait_until(lambda: writing_into(run.pid, folder), run, "the write begin")
    time.sleep(extra_delay)
    # WHEN the user presses Ctrl-C
    run.send_signal(signal.SIGINT)
    run.wait(timeout=60)
    err = run.stderr.read()
    # THEN "Interrupted." and exit 130 with the earlier profile intact, or (the write won the race) the
    # new profile whole; never a traceback, never a temporary file
    assert "Traceback" not in err
    assert sorted(p.name for p in folder.iterdir()) == ["profile.pop"]
    with open_profile(folder / "profile.pop") as profile:
        profile.read_table("trace")  # whole
    if run.returncode == 130:
        assert err.strip() == "Interrupted."
        assert (folder / "profile.pop").read_bytes() == MNIST.read_bytes()
    else:
        assert run.returncode == 0, (run.returncode, err)


@pytest.mark.parametrize("command", [
    ["report", str(BERT), "--section", "all", "--format", "json"],
    ["export-trace", str(BERT), "-o", "{out}"],
    ["sql", str(BERT), "SELECT ipu, count(*) FROM trace GROUP BY ipu"],
    ["compare", str(BERT), str(MNIST)],
], ids=["report", "export-trace", "sql", "compare"])
def test_ctrl_c_in_a_reading_command_is_interrupted(tmp_path, command):
    # GIVEN a reading command under way (its Python is up: it has opened the profile)
    out = tmp_path / "trace.json"
    out.write_text("earlier")
    run = start(*[a.format(out=out) for a in command])
    deadline = time.monotonic() + 120
    while str(BERT) not in _open_files(run.pid) and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    # WHEN the user presses Ctrl-C (unless the command was quicker than this test's polling)
    if run.poll() is None:
        run.send_signal(signal.SIGINT)
    run.wait(timeout=60)
    err = run.stderr.read()
    # THEN "Interrupted." and 130 (or it had already finished: 0); the earlier output stays whole
    assert "Traceback" not in err
    assert (run.returncode, err.strip()) == (130, "Interrupted.") or run.returncode == 0, (run.returncode, err)
    if run.returncode == 130:
        assert out.read_text() == "earlier"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.json"]


DEFERRED = """
import signal
from popvision_py.cli.interrupts import _interrupt, deferred
signal.signal(signal.SIGINT, _interrupt)
try:
    with deferred():
        signal.raise_signal(signal.SIGINT)
        print("the block ran on")
        with deferred():
            signal.raise_signal(signal.SIGINT)
        print("the inner block ended")
        import duckdb
        print("duckdb", bool(duckdb.__version__))
except KeyboardInterrupt:
    print("raised as the outer block ended")
"""


def test_a_ctrl_c_inside_a_deferred_block_is_raised_as_the_block_ends():
    # GIVEN the CLI's Ctrl-C handler, and Ctrl-Cs landing inside a deferred block (the sql command's DuckDB import:
    # a KeyboardInterrupt inside DuckDB's module set-up aborts the process) and inside one nested in it
    result = subprocess.run([sys.executable, "-c", DEFERRED], capture_output=True, text=True, cwd=ROOT, timeout=120,
                            preexec_fn=default_sigint, env={**os.environ, "PYTHONPATH": str(ROOT)})
    # THEN the blocks run to their ends, and the KeyboardInterrupt comes once, as the outermost one ends
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines() == ["the block ran on", "the inner block ended", "duckdb True",
                                          "raised as the outer block ended"]


def _open_files(pid: int) -> list[str]:
    links = []
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return links
    for fd in fds:
        try:
            links.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass  # closed meanwhile
    return links


# -- the disk ------------------------------------------------------------------------------------


@pytest.fixture
def tiny_tmpfs(tmp_path):
    mount = tmp_path / "tiny"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True)
    if made.returncode:
        pytest.skip(f"cannot mount a tmpfs here ({made.stderr.decode().strip() or made.returncode})")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


def test_a_full_disk_is_one_sentence(tiny_tmpfs):
    # GIVEN a 64 KiB file system holding an earlier 20 KiB file
    earlier = tiny_tmpfs / "profile" / "profile.pop"
    earlier.parent.mkdir()
    earlier.write_bytes(b"x" * 20_000)
    # WHEN a run writes its (larger) profile there, and an export writes its (larger) trace there
    run = popvision("run", "mnist", "--profile", "--profile-dir", str(earlier.parent), "-q")
    export = popvision("export-trace", str(BERT), "-o", str(tiny_tmpfs / "trace.json"))
    # THEN each is one sentence naming the full disk, exit 2, and the earlier file is untouched
    for result, path in ((run, earlier), (export, tiny_tmpfs / "trace.json")):
        line = one_sentence(result)
        assert "No space left on device" in line and str(path) in line, line
    assert earlier.read_bytes() == b"x" * 20_000
    assert sorted(p.name for p in earlier.parent.iterdir()) == ["profile.pop"]
    assert sorted(p.name for p in tiny_tmpfs.iterdir()) == ["profile"]


def test_a_read_only_file_system_is_one_sentence(tiny_tmpfs):
    # GIVEN an earlier profile on a file system remounted read-only
    folder = tiny_tmpfs / "profile"
    folder.mkdir()
    (folder / "old").write_bytes(b"earlier")
    remount = subprocess.run(["mount", "-o", "remount,ro", str(tiny_tmpfs)], capture_output=True)
    if remount.returncode:
        pytest.skip(f"cannot remount read-only ({remount.stderr.decode().strip()})")
    # WHEN a run, a report and an export write there
    results = [popvision("run", "mnist", "--profile", "--profile-dir", str(folder), "-q"),
               popvision("report", str(MNIST), "-o", str(folder / "report.txt")),
               popvision("export-trace", str(MNIST), "-o", str(folder / "trace.json"))]
    # THEN each is one sentence naming the read-only file system, exit 2
    for result in results:
        assert "Read-only file system" in one_sentence(result)
    assert sorted(p.name for p in folder.iterdir()) == ["old"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into any folder")
def test_a_folder_without_write_permission_is_one_sentence(tmp_path):
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        for result in (popvision("run", "mnist", "--profile", "--profile-dir", str(folder), "-q"),
                       popvision("report", str(MNIST), "-o", str(folder / "report.txt"))):
            assert "Permission denied" in one_sentence(result)
    finally:
        folder.chmod(0o700)


@pytest.mark.parametrize("where", ["/proc/self", "{file}", "{file}/below"])
def test_a_bad_profile_folder_is_one_sentence_before_emulating(tmp_path, where):
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    folder = where.format(file=a_file)
    line = one_sentence(popvision("run", "mnist", "--profile", "--profile-dir", folder, "-q"))
    assert line.startswith(f"Error: Cannot write into {folder}: "), line
    assert a_file.read_text() == "not a folder"


def test_report_output_under_a_file_is_one_sentence(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    line = one_sentence(popvision("report", str(MNIST), "-o", str(a_file / "report.txt")))
    assert f"{a_file} is a file, not a directory" in line


# -- stale partial files and concurrent writers ----------------------------------------------------


def test_a_killed_writers_partial_file_is_removed_by_the_next_write(tmp_path):
    # GIVEN the partial file a writer killed between naming its output and renaming it leaves
    folder = tmp_path / "profile"
    folder.mkdir()
    stale = folder / ".0123456789abcdef.partial"
    stale.write_bytes(b"half a profile")
    # WHEN the next run writes into that folder
    result = popvision("run", "mnist", "--profile", "--profile-dir", str(folder), "-q")
    # THEN the stale file is gone and the new profile is there
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["profile.pop"]


def test_a_live_writers_partial_file_is_kept(tmp_path):
    # GIVEN a partial file another live process holds locked (as a writer does while it writes)
    import fcntl

    stale = tmp_path / ".fedcba9876543210.partial"
    stale.write_bytes(b"being written")
    with open(stale, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        holder = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                                  pass_fds=(held.fileno(),))
    try:
        # WHEN stale partial files are cleaned up
        removed = remove_stale_partials(tmp_path)
        # THEN the live one stays
        assert removed == [] and stale.exists()
    finally:
        holder.communicate(b"")
    # AND once its holder is gone, it is stale and goes
    assert remove_stale_partials(tmp_path) == [stale] and not stale.exists()


def test_a_second_run_into_the_same_folder_waits_for_the_first_and_says_so(tmp_path):
    # GIVEN a run writing into a folder, held in its model's build (it has the folder's lock)
    folder = tmp_path / "profile"
    model = tmp_path / "slow.py"
    model.write_text(SLOW_MODEL.replace("time.sleep(600)", "import os\n    while os.path.exists(Path(__file__)"
                                        ".with_suffix('.hold')): time.sleep(0.01)\n    return zoo_entry('mnist')"
                                        ".build(options)"))
    model.with_suffix(".hold").touch()
    first = start("run", str(model), "--profile", "--profile-dir", str(folder), "-q")
    wait_until(lambda: model.with_suffix(".building").exists(), first, "the first run building")
    # WHEN a second run into the same folder starts
    second = start("run", "mnist", "--strategy", "sharded", "--profile", "--profile-dir", str(folder), "-q")
    waiting = []
    wait_until(lambda: waiting.append(second.stderr.readline()) or "waiting" in waiting[-1], second,
               "the second run say it waits")
    # THEN it says in one sentence that it waits; released, both finish and one whole profile remains
    assert waiting[-1].strip() == f"Another popvision run is writing into {folder}; waiting for it to finish."
    model.with_suffix(".hold").unlink()
    assert first.wait(timeout=120) == 0, first.stderr.read()
    assert second.wait(timeout=120) == 0, second.stderr.read()
    assert sorted(p.name for p in folder.iterdir()) == ["profile.pop"]
    with open_profile(folder / "profile.pop") as profile:
        assert profile.run["strategy"] == "sharded"  # the second, which waited, wrote last


# -- bounds ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("args, says", [
    (["bert-base", "--gradient-accumulation", "1000000000"], "--max-trace-rows"),
    (["mnist", "--device-iterations", "1000000000"], "--max-trace-rows"),
    (["mnist", "--runs", "1000000000"], "--max-trace-rows"),
    (["bert-base", "--layers", "100000"], "--max-memory-gb"),
    (["mnist", "--batch-size", "9223372036854775808"], "beyond 64-bit integers"),
    (["mnist", "--gradient-accumulation", "-9223372036854775809"], "beyond 64-bit integers"),
    (["mnist", "--batch-size", "4611686018427387904"], "overflow 64-bit arithmetic"),
], ids=["accumulation", "iterations", "runs", "layers", "batch>int64", "accumulation<int64", "batch-overflow"])
def test_a_run_beyond_the_bounds_is_one_sentence(args, says, tmp_path):
    # WHEN a run is asked for far more than a machine can emulate
    result = popvision("run", *args, "--profile", "--profile-dir", str(tmp_path / "p"), "-q", timeout=60)
    # THEN it is refused in one sentence naming the estimate or the problem and how to lift the limit
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and says in result.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "p" / "profile.pop").exists()


def test_the_flag_in_the_sentence_lifts_the_bound(tmp_path):
    # GIVEN a run refused under a low limit
    refused = popvision("run", "mnist", "--max-trace-rows", "1000", "-q")
    line = one_sentence(refused)
    assert "about 12,000 trace rows" in line and "--max-trace-rows" in line
    # WHEN the limit is raised
    lifted = popvision("run", "mnist", "--max-trace-rows", "100000", "-q")
    # THEN it runs
    assert lifted.returncode == 0, lifted.stderr


def trace_rows(rows: int) -> dict:
    import numpy as np

    start = np.arange(rows) * 10
    return {"run": np.zeros(rows, np.int32), "iteration": np.zeros(rows, np.int32),
            "micro_batch": np.zeros(rows, np.int32), "ipu": np.zeros(rows, np.int16),
            "stage": np.zeros(rows, np.int16), "pass": ["forward"] * rows,
            "step": np.zeros(rows, np.int32), "phase": ["compute"] * rows,
            "start_cycle": start, "end_cycle": start + 10}


def abandoned_write_failures(tmp_path: Path, interrupt) -> list:
    """What Python reports as 'Exception ignored' once a profile write cut short by ``interrupt`` is gone."""
    import gc

    from popvision_py.format.writer import ProfileWriter
    from tests.test_format import RUN, TARGET

    failures = []
    hook, sys.unraisablehook = sys.unraisablehook, failures.append
    try:
        with pytest.raises(KeyboardInterrupt):
            with ProfileWriter(tmp_path / "profile.pop", target=TARGET, run=RUN) as writer:
                interrupt(writer)
        del writer
        gc.collect()
    finally:
        sys.unraisablehook = hook
    return failures


# The races behind the Ctrl-C-during-the-write case, made deterministic: a profile abandoned while a
# table is open, or while a table's last row group is being written, must not leave a Parquet writer
# that the garbage collector later closes into its closed spool (Python prints that failure as
# "Exception ignored in ... Traceback", after "Interrupted.").


def test_a_write_abandoned_mid_table_leaves_nothing_to_fail_at_exit(tmp_path):
    def interrupt(writer):
        writer.table("trace").write(trace_rows(1000))
        raise KeyboardInterrupt

    assert abandoned_write_failures(tmp_path, interrupt) == []
    assert list(tmp_path.iterdir()) == []  # nothing published, no temporary file left


def test_a_write_abandoned_while_a_table_closes_leaves_nothing_to_fail_at_exit(tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    def ctrl_c(*args, **kwargs):  # the Ctrl-C lands while the table's rows are written, inside its close
        raise KeyboardInterrupt

    def interrupt(writer):
        monkeypatch.setattr(pq.ParquetWriter, "write_table", ctrl_c)
        writer.write_table("trace", trace_rows(1000))

    assert abandoned_write_failures(tmp_path, interrupt) == []
    assert list(tmp_path.iterdir()) == []


# -- requests the emulator would quietly change --------------------------------------------------------


@pytest.mark.parametrize("args, sentence", [
    (["bert-base", "--ipus", "10000"],
     "Error: --ipus 10,000 asks for more IPUs than bert-base's 14 blocks can be split over; its partition uses at "
     "most 13, so ask for --ipus 13 or fewer."),
    (["mnist", "--profile", "--profile-dir", ""],
     "Error: --profile-dir is empty; name the folder to write profile.pop into, e.g. --profile-dir profile."),
    (["bad_defaults.py"],
     "Error: Model file bad_defaults.py sets DEFAULTS to a list; it must be a dict of option names to values, "
     "e.g. {\"micro_batch_size\": 8}."),
], ids=["more-ipus-than-blocks", "empty-profile-dir", "defaults-not-a-mapping"])
def test_a_request_the_emulator_would_change_is_one_sentence(args, sentence, tmp_path):
    # GIVEN a folder holding an earlier profile and a model file whose DEFAULTS is a list, not a dict
    (tmp_path / "profile.pop").write_bytes(MNIST.read_bytes())
    (tmp_path / "bad_defaults.py").write_text(
        "from engine.zoo import zoo_entry\nDEFAULTS = [1, 2]\n\n\ndef build(options):\n"
        "    return zoo_entry('mnist').build(options)\n")
    # WHEN the run asks for what the emulator would quietly change (more IPUs than the model's blocks,
    # an empty profile folder, which is the current one) or what it cannot read
    result = popvision("run", *args, "-q", cwd=tmp_path, timeout=120)
    # THEN it is refused in one sentence, exit 2, and the earlier profile is as it was
    assert (result.returncode, one_sentence(result)) == (2, sentence)
    assert (tmp_path / "profile.pop").read_bytes() == MNIST.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad_defaults.py", "profile.pop"]
