"""Every command's -o follows one rule (issue 34, item 0): a device or FIFO is written into, as `cp`
and `tee` do, never replaced; a directory, socket, block device or symlink to a file is refused in one
sentence; a profile is only ever written to a regular file.

The devices are made by the test (`mknod`, the same device numbers as /dev/null), never /dev/null
itself: before the fix, `export-trace -o DEV` renamed a regular file over DEV.
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[1]
MNIST = ROOT / "sample_profiles" / "mnist_pipelined" / "profile.pop"
GPIPE_TRACES = ROOT / "sample_profiles" / "pytorch_gpipe" / "traces"

# command line before its output path, for every command that writes a file with -o
WRITERS = {
    "export-trace": ["export-trace", str(MNIST), "-q", "-o"],
    "report text": ["report", str(MNIST), "-o"],
    "report json": ["report", str(MNIST), "--format", "json", "-o"],
    "report md": ["report", str(MNIST), "--format", "md", "-o"],
    "sql": ["sql", str(MNIST), "SELECT ipu, count(*) AS n FROM trace GROUP BY ipu ORDER BY ipu", "--format", "csv",
            "-o"],
}
TUNE = ["tune", "mnist", "--max-candidates", "4", "--workers", "1", "--no-profile", "-q", "-o"]  # a few rows to write

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a device needs root")


def popvision(*args: str) -> subprocess.CompletedProcess:
    """The real command in a subprocess (the timeout only guards against a hang)."""
    return subprocess.run([sys.executable, "-m", "popvision_py.cli", *args], capture_output=True, cwd=ROOT,
                          timeout=180, stdin=subprocess.DEVNULL)


def null_device(path: Path) -> Path:
    """A character device node with /dev/null's numbers (1, 3), made here."""
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    return path


def through_fifo(fifo: Path, args: list[str]) -> tuple[subprocess.CompletedProcess, bytes]:
    """Run the command writing into ``fifo`` while a reader drains it; what it ran and what came through."""
    received: list[bytes] = []

    def drain() -> None:
        with open(fifo, "rb") as pipe:  # waits for the writer, as `cat FIFO` would
            received.append(pipe.read())

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    result = popvision(*args, str(fifo))
    reader.join(timeout=30)
    assert not reader.is_alive(), "the command never opened or closed the FIFO"
    return result, received[0]


def one_sentence(result: subprocess.CompletedProcess, starts: str) -> None:
    stderr = result.stderr.decode()
    assert result.returncode == 2, (result.returncode, stderr)
    assert stderr.count("\n") == 1 and stderr.startswith(f"Error: {starts}"), stderr
    assert "Traceback" not in stderr


@needs_root
@pytest.mark.parametrize("command", WRITERS)
def test_a_device_is_written_into_and_stays_a_device(tmp_path: Path, command: str) -> None:
    dev = null_device(tmp_path / "null")
    result = popvision(*WRITERS[command], str(dev))
    assert result.returncode == 0, result.stderr.decode()
    mode = os.lstat(dev)
    assert stat.S_ISCHR(mode.st_mode) and os.major(mode.st_rdev) == 1 and os.minor(mode.st_rdev) == 3
    assert [p.name for p in tmp_path.iterdir()] == ["null"]  # no temporary or partial file left beside it


@pytest.mark.parametrize("command", WRITERS)
def test_a_fifo_receives_what_a_file_would_and_stays_a_fifo(tmp_path: Path, command: str) -> None:
    # GIVEN the output the command writes to a regular file
    regular = tmp_path / "regular"
    assert popvision(*WRITERS[command], str(regular)).returncode == 0
    # WHEN it writes into a FIFO that a reader drains
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    result, received = through_fifo(fifo, WRITERS[command])
    # THEN the reader got the same bytes, and the FIFO is still a FIFO
    assert result.returncode == 0, result.stderr.decode()
    assert received == regular.read_bytes() and len(received) > 30
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@needs_root
def test_tune_writes_its_parquet_into_a_device_and_a_fifo(tmp_path: Path) -> None:
    regular = tmp_path / "tune.parquet"
    assert popvision(*TUNE, str(regular)).returncode == 0
    dev = null_device(tmp_path / "null")
    assert popvision(*TUNE, str(dev)).returncode == 0
    assert stat.S_ISCHR(os.lstat(dev).st_mode)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    result, received = through_fifo(fifo, TUNE)
    assert result.returncode == 0, result.stderr.decode()
    streamed = tmp_path / "streamed.parquet"
    streamed.write_bytes(received)
    assert pq.read_table(streamed).num_rows == pq.read_table(regular).num_rows > 0
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_dev_stdout_is_the_command_s_own_output(tmp_path: Path) -> None:
    # `-o /dev/stdout` into a pipe (capture_output) and into a file the shell opened
    regular = tmp_path / "regular.txt"
    assert popvision(*WRITERS["report text"], str(regular)).returncode == 0
    piped = popvision(*WRITERS["report text"], "/dev/stdout")
    assert piped.returncode == 0 and piped.stdout == regular.read_bytes()
    redirected = tmp_path / "redirected.txt"
    with open(redirected, "wb") as out:
        result = subprocess.run([sys.executable, "-m", "popvision_py.cli", *WRITERS["report text"], "/dev/stdout"],
                                stdout=out, stderr=subprocess.PIPE, cwd=ROOT, timeout=180)
    assert result.returncode == 0 and redirected.read_bytes() == regular.read_bytes()


def refused_targets(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Destinations nothing may replace: path -> (the path, what the sentence calls it)."""
    folder = tmp_path / "folder"
    folder.mkdir()
    (tmp_path / "kept.txt").write_text("keep me\n")
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "kept.txt")
    sock = tmp_path / "sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock))
    server.close()  # the socket file stays
    targets = {"directory": (folder, "it is a directory"), "socket": (sock, "it is a socket"),
               "symlink": (link, "it is a symbolic link to a file")}
    if os.geteuid() == 0:
        block = tmp_path / "block"
        os.mknod(block, 0o600 | stat.S_IFBLK, os.makedev(7, 250))  # a loop device number; never opened
        targets["block device"] = (block, "it is a block device")
    return targets


@pytest.mark.parametrize("command", ["export-trace", "report text", "sql"])
def test_what_cannot_be_written_into_is_refused_and_left_alone(tmp_path: Path, command: str) -> None:
    for name, (path, kind) in refused_targets(tmp_path).items():
        before = os.lstat(path)
        result = popvision(*WRITERS[command], str(path))
        one_sentence(result, f"Cannot write {path}: {kind}")
        after = os.lstat(path)
        assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino), name
    assert (tmp_path / "kept.txt").read_text() == "keep me\n"


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_profile_is_never_written_into_a_fifo_or_device(tmp_path: Path, kind: str) -> None:
    if kind == "device" and os.geteuid() != 0:
        pytest.skip("mknod of a device needs root")
    for args in (["run", "mnist", "--profile", "--profile-dir"], ["import", str(GPIPE_TRACES), "-o"]):
        folder = tmp_path / args[0]
        folder.mkdir()
        target = folder / "profile.pop"
        if kind == "fifo":
            os.mkfifo(target)
        else:
            null_device(target)
        result = popvision(*args, str(folder))  # would block opening a FIFO without a reader
        one_sentence(result, f"Cannot write {target}: it is a")
        assert "a profile is written to a regular file" in result.stderr.decode()
        assert (stat.S_ISFIFO if kind == "fifo" else stat.S_ISCHR)(os.lstat(target).st_mode)
