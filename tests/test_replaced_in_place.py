"""A profile overwritten in place while a reader has it open (`cp other.pop open.pop`: the same
inode, truncated and rewritten) never kills the reader. It used to: the reader memory-mapped the
file, and touching a page past the new end is SIGBUS ("Bus error" from export-trace, a dashboard
that silently died). Now the reader reads with pread and checks the file after each read: it
answers from the file as it was opened, or says in one sentence that it changed, exit 2.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

import popvision_py as pv
from popvision_py.cli import main
from popvision_py.errors import ProfileChangedError, ProfileError
from popvision_py.format import open_profile

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_profiles"
BERT_LARGE = SAMPLES / "bert_large_out_of_memory" / "profile.pop"
SMALL = SAMPLES / "mnist_inference" / "profile.pop"  # what is copied over the open profile


def overwrite(path: Path, source: Path) -> None:
    """What `cp source path` does: open the existing file with O_TRUNC and write the new bytes into
    the same inode (checked), so a reader's open handle sees the new, shorter file."""
    inode = path.stat().st_ino
    shutil.copyfile(source, path)
    assert path.stat().st_ino == inode


def changed(path: Path) -> str:
    return f"The profile {path} changed while it was being read; open it again."


@pytest.fixture()
def opened_copy(tmp_path: Path) -> Path:
    """A copy of bert-large's profile, last written an hour ago (as a profile someone opens is)."""
    path = tmp_path / "profile.pop"
    shutil.copyfile(BERT_LARGE, path)
    hour_ago = path.stat().st_mtime - 3600
    os.utime(path, (hour_ago, hour_ago))
    return path


@pytest.fixture(scope="module")
def big_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bert-large over 40 device iterations: a trace export-trace takes a while to stream."""
    folder = tmp_path_factory.mktemp("big")
    result = CliRunner().invoke(main, ["run", "bert-large", "--device-iterations", "40", "--profile",
                                       "--profile-dir", str(folder), "-q"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return folder / "profile.pop"


# -- the reader object ---------------------------------------------------------------------------


def test_a_table_read_after_an_overwrite_is_one_sentence(opened_copy):
    # GIVEN bert-large's profile, opened, its trace read once
    with open_profile(BERT_LARGE) as original:
        expected = original.read_table("trace")
    profile = open_profile(opened_copy)
    assert profile.read_table("trace").equals(expected)
    # WHEN mnist's (smaller) profile is copied over it in place
    overwrite(opened_copy, SMALL)
    # THEN every read of a table is refused with the one sentence: never a SIGBUS, never mnist's rows
    for read in (lambda: profile.read_table("trace"), lambda: profile.read_table("ops", ["name"]),
                 lambda: list(profile.iter_batches("trace", batch_size=1000))):
        with pytest.raises(ProfileChangedError) as error:
            read()
        assert str(error.value) == changed(opened_copy)
    # AND it is a ProfileError (exit 2 from the CLI), and closing is fine
    assert isinstance(error.value, ProfileError) and error.value.exit_code == 2
    profile.close()


def test_a_same_size_rewrite_is_noticed_too(opened_copy):
    # GIVEN the profile opened WHEN the very same bytes are copied over it (a same-size rewrite
    # cannot be told apart from one that changed some pages: both change its modification time)
    with open_profile(opened_copy) as profile:
        overwrite(opened_copy, BERT_LARGE)
        assert opened_copy.stat().st_size == BERT_LARGE.stat().st_size
        # THEN a read says so
        with pytest.raises(ProfileChangedError, match="changed while it was being read; open it again"):
            profile.read_table("tile_memory")


def test_a_report_on_an_overwritten_profile_is_one_sentence(opened_copy):
    # GIVEN a Report (pv.open) on the profile WHEN mnist's is copied over it before anything is read
    with pv.open(opened_copy) as report:
        overwrite(opened_copy, SMALL)
        # THEN a section that reads tables raises the one sentence
        with pytest.raises(ProfileChangedError) as error:
            report.summary.figures()
    assert str(error.value) == changed(opened_copy)


def test_a_profile_replaced_by_a_rename_is_still_read_whole_from_the_old_file(opened_copy, tmp_path):
    # GIVEN the profile opened (its trace as bert-large's)
    with open_profile(BERT_LARGE) as original:
        expected = original.read_table("trace")
    with open_profile(opened_copy) as profile:
        # WHEN another profile is published over its path as the writer does (write aside, rename)
        aside = tmp_path / "aside.pop"
        shutil.copyfile(SMALL, aside)
        os.replace(aside, opened_copy)
        # THEN the open profile is the old file, intact: its trace reads as bert-large's
        assert profile.read_table("trace").equals(expected)
    # AND a new open reads the new profile
    with open_profile(opened_copy) as fresh, open_profile(SMALL) as small:
        assert fresh.num_rows("trace") == small.num_rows("trace")


def test_the_cli_says_the_sentence_when_the_profile_changes_after_open(opened_copy, tmp_path, monkeypatch):
    # GIVEN `popvision info`, with the profile overwritten right after the reader opened it
    from popvision_py.format import reader

    opened = reader.Profile.__init__

    def open_then_overwrite(self, path):
        opened(self, path)
        overwrite(Path(path), SMALL)

    monkeypatch.setattr(reader.Profile, "__init__", open_then_overwrite)
    # WHEN export-trace reads it THEN one sentence, exit 2, no output left
    out = tmp_path / "trace.json"
    result = CliRunner().invoke(main, ["export-trace", str(opened_copy), "-o", str(out), "-q"])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [f"Error: {changed(opened_copy)}"]
    assert not out.exists()


def test_duckdbs_reads_of_an_overwritten_profile_keep_the_sentence_for_sql(opened_copy):
    from popvision_py.format.memberfs import MemberFileSystem

    # GIVEN the profile opened and its tables shown to DuckDB as files (what `popvision sql` does)
    with open_profile(opened_copy) as profile, MemberFileSystem(profile) as members:
        with members.open("trace.parquet") as member:
            head = member.read(4)
        # WHEN mnist's profile is copied over it, and DuckDB reads a member again
        overwrite(opened_copy, SMALL)
        with members.open("trace.parquet") as member, pytest.raises(OSError):
            member.read(4)
    # THEN the read fails, and the sentence `sql` reports is kept (DuckDB wraps the OSError in its own)
    assert head == b"PAR1"
    assert isinstance(members.corrupt, ProfileChangedError) and str(members.corrupt) == changed(opened_copy)


# -- a real export-trace process -----------------------------------------------------------------


def overwrite_while_stopped(process: subprocess.Popen, ready: Callable[[], bool], path: Path) -> None:
    """Once ``ready()`` (or the process has ended), stop the process, copy mnist's profile over ``path``
    in place, and let it go on."""
    while process.poll() is None and not ready():
        threading.Event().wait(0.005)
    running = process.poll() is None
    if running:
        os.kill(process.pid, signal.SIGSTOP)
    overwrite(path, SMALL)
    if running:
        os.kill(process.pid, signal.SIGCONT)


def _writing_into(pid: int, folder: Path) -> bool:
    """Whether process ``pid`` has written bytes into a file in ``folder``: its output, still an
    anonymous file (O_TMPFILE) until it is whole, so seen only among the process's descriptors."""
    for descriptor in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target, size = os.readlink(descriptor), descriptor.stat().st_size
        except OSError:  # closed meanwhile, or the process ended
            continue
        if target.startswith(f"{folder}/") and size > 0:
            return True
    return False


def _x_events(document: dict) -> int:
    return sum(1 for event in document["traceEvents"] if event.get("ph") == "X")


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs Linux's /proc/PID/fd")
def test_export_trace_overwritten_midway_exits_0_or_2_never_by_a_signal(big_profile, tmp_path):
    # GIVEN a copy of the big profile, and export-trace streaming its trace in a real process
    path = tmp_path / "profile.pop"
    shutil.copyfile(big_profile, path)
    with open_profile(path) as profile:
        rows = profile.num_rows("trace")
    folder = tmp_path / "out"
    folder.mkdir()
    out = folder / "trace.json"
    process = subprocess.Popen([sys.executable, "-m", "popvision_py.cli", "export-trace", str(path), "-o", str(out),
                                "-q"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    # WHEN its output has begun (it has opened the profile and is streaming the trace), it is
    # stopped, mnist's profile is copied over the file in place, and it is let go on
    overwrite_while_stopped(process, lambda: _writing_into(process.pid, folder), path)
    _, stderr = process.communicate(timeout=600)
    # THEN it ends with 2 and the one sentence (nothing written), or 0 with the whole trace: never
    # killed by a signal (SIGBUS was -7)
    assert process.returncode in (0, 2), f"export-trace ended with {process.returncode}: {stderr[-2000:]}"
    if process.returncode == 2:
        assert stderr == f"Error: {changed(path)}\n"
        assert not out.exists() and list(folder.iterdir()) == []
    else:
        assert _x_events(json.loads(out.read_text())) == rows


# -- the dashboard -------------------------------------------------------------------------------


def test_the_dashboard_data_layer_says_the_sentence_and_goes_on(opened_copy):
    pytest.importorskip("dash")
    from dashboards.data import Profiles

    # GIVEN the dashboard's data layer, its profile checked and its first page's answers computed
    profiles = Profiles([str(opened_copy)])
    profiles.check()
    figures = profiles.report("a").summary.figures()
    # WHEN mnist's profile is copied over the file in place
    overwrite(opened_copy, SMALL)
    # THEN what was computed is still served, and what needs a read is the one sentence
    assert profiles.report("a").summary.figures() is figures
    with pytest.raises(ProfileChangedError) as error:
        profiles.check()
    assert str(error.value) == changed(opened_copy)


def test_a_dashboard_server_survives_its_profile_overwritten(opened_copy):
    pytest.importorskip("dash")
    from .dashboard.test_security import tile_map_request
    from .dashboard.test_server_limits import Server

    # GIVEN a real `popvision dashboard` serving the profile (its warm-up reading tables in the background)
    server = Server(str(opened_copy))
    try:
        # WHEN mnist's profile is copied over the file in place, at once
        overwrite(opened_copy, SMALL)
        # THEN it goes on answering: pages, and callbacks (from its cache, or 500 and one log line)
        assert server.request("/")[0] == 200
        statuses = [server.request("/_dash-update-component", tile_map_request(ipu, "a").encode())[0]
                    for ipu in range(2)]
        assert set(statuses) <= {200, 500}, statuses
        assert server.request("/memory")[0] == 200
        assert server.process.poll() is None, server.lines
        if 500 in statuses:
            assert any(changed(opened_copy).rstrip(".") in line for line in server.lines), server.lines
        assert not any("Traceback" in line for line in server.lines), server.lines
    finally:
        server.stop()


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs Linux's /proc/PID/fd")
def test_a_dashboard_whose_profile_is_overwritten_while_it_checks_it_says_so(big_profile, tmp_path):
    pytest.importorskip("dash")
    # GIVEN `popvision dashboard` starting on a copy of the big profile (its start-up check reads
    # every table through, the trace too)
    path = tmp_path / "profile.pop"
    shutil.copyfile(big_profile, path)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-m", "popvision_py.cli", "dashboard", str(path), "--port", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    # WHEN, as soon as it has the profile open, it is stopped, mnist's profile is copied over the
    # file in place, and it is let go on
    overwrite_while_stopped(process, lambda: _holding(process.pid, path), path)
    try:
        _, stderr = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:  # its check read everything before the copy: it serves
        process.terminate()
        _, stderr = process.communicate(timeout=30)
        assert "popvision dashboard on" in stderr, stderr
        return
    # THEN it refuses to serve in one sentence, exit 2: never killed by a signal (SIGBUS was -7)
    assert process.returncode == 2, f"the dashboard ended with {process.returncode}: {stderr[-2000:]}"
    assert stderr.strip().splitlines()[-1] == f"Error: {changed(path)}", stderr


def _holding(pid: int, path: Path) -> bool:
    """Whether process ``pid`` has ``path`` open."""
    for descriptor in Path(f"/proc/{pid}/fd").iterdir():
        try:
            if os.readlink(descriptor) == str(path):
                return True
        except OSError:
            continue
    return False
