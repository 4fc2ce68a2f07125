"""Bad input never crashes a command, never loses a result, never leaves a partial file.

Every command that reads profiles is run, as a real subprocess, on every kind of broken profile;
runs are killed while writing; two runs race for one profile directory.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from popvision_py.format import open_profile

from .test_format import BAD_FILES, default_sigint, write_tiny

ROOT = Path(__file__).resolve().parents[1]
MNIST = ROOT / "sample_profiles" / "mnist_pipelined" / "profile.pop"


# Runs a command and writes its peak resident memory (KiB) to the file named first.
_MEASURED = (
    "import resource, subprocess, sys\n"
    "code = subprocess.call(sys.argv[2:])\n"
    "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n"
    "sys.exit(code)\n"
)
MAX_RSS_MB = 600  # a broken profile must never make a command allocate what the file claims


def popvision(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    """The real `popvision` in a subprocess; its peak memory is checked against MAX_RSS_MB."""
    rss = cwd.parent / f"{cwd.name}.rss"
    result = subprocess.run(
        [sys.executable, "-c", _MEASURED, str(rss), sys.executable, "-m", "popvision_py.cli", *args],
        capture_output=True, text=True, timeout=timeout, cwd=cwd,
    )
    peak_mb = int(rss.read_text()) / 1024
    rss.unlink()
    assert peak_mb < MAX_RSS_MB, f"popvision {' '.join(args)} peaked at {peak_mb:.0f} MB"
    return result


# command name -> arguments, with {bad} the broken profile and {out} an output path
READERS = {
    "info": ["info", "{bad}"],
    "report": ["report", "{bad}", "--format", "html", "-o", "{out}"],
    "compare A": ["compare", "{bad}", str(MNIST), "--format", "json", "-o", "{out}"],
    "compare B": ["compare", str(MNIST), "{bad}", "--format", "md", "-o", "{out}"],
    "export-trace": ["export-trace", "{bad}", "-o", "{out}"],
    "sql": ["sql", "{bad}", "SELECT count(*) FROM trace"],
    "dashboard": ["dashboard", "{bad}", "--port", "8765"],
}


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny(tmp_path_factory.mktemp("good") / "profile.pop")


@pytest.fixture(scope="module")
def bad_profiles(good: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("bad")
    profiles = {case: make(folder / f"{i}.pop", good) for i, (case, make, _, _) in enumerate(BAD_FILES)}
    directory = folder / "a-directory.pop"
    directory.mkdir()
    fifo = folder / "a-fifo.pop"
    os.mkfifo(fifo)
    return {**profiles, "directory": directory, "fifo": fifo}


@pytest.mark.parametrize("command", sorted(READERS))
def test_every_reader_refuses_every_bad_profile_in_one_line(command, bad_profiles, tmp_path):
    for case, bad in bad_profiles.items():
        # GIVEN an earlier result at the output path
        out = tmp_path / "out.result"
        out.write_text("earlier result")
        args = [a.format(bad=bad, out=out) for a in READERS[command]]
        # WHEN the command is given the broken profile
        began = time.monotonic()
        result = popvision(*args, cwd=tmp_path, timeout=60)
        # THEN it exits 2 within seconds with one line naming the problem, no traceback
        assert result.returncode == 2, (command, case, result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: "), (command, case, result.stderr)
        assert time.monotonic() - began < 30
        # AND the earlier result is untouched and nothing else was left behind
        assert out.read_text() == "earlier result", (command, case)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out.result"], (command, case)


def _run_mnist(folder: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "popvision_py.cli", "run", "mnist", "--profile", "--profile-dir", str(folder), "-q",
         *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT, preexec_fn=default_sigint,
    )


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
@pytest.mark.parametrize("after", [0.3, 0.6, 0.9])
def test_a_run_killed_at_any_moment_keeps_the_earlier_profile_whole(tmp_path, sig, after):
    # GIVEN an earlier profile in the profile directory
    folder = tmp_path / "profile"
    folder.mkdir()
    (folder / "profile.pop").write_bytes(MNIST.read_bytes())
    earlier = MNIST.read_bytes()
    # WHEN a new run writing there is interrupted part way
    run = _run_mnist(folder, "--strategy", "sharded")
    time.sleep(after)
    run.send_signal(sig)
    run.wait(timeout=60)
    # THEN the folder holds one readable profile: the earlier (pipelined) one byte for byte, or
    # the new sharded run's whole (the signal may land after it was published), never a mix
    assert sorted(p.name for p in folder.iterdir()) == ["profile.pop"]
    with open_profile(folder / "profile.pop") as profile:
        strategy = profile.run["strategy"]
        for table in profile.tables:
            profile.read_table(table)
    if strategy == "pipelined":
        assert (folder / "profile.pop").read_bytes() == earlier
    else:
        assert strategy == "sharded"
    if run.returncode == 0:
        assert strategy == "sharded"


def test_two_runs_racing_for_one_directory_never_interleave(tmp_path):
    # GIVEN two different runs writing the same profile directory at once
    folder = tmp_path / "profile"
    runs = [_run_mnist(folder, "--strategy", "sharded"), _run_mnist(folder, "--strategy", "pipelined")]
    for run in runs:
        run.wait(timeout=120)
        assert run.returncode == 0, run.stderr.read()
    # THEN one whole profile of one of them is there, and no temporary file
    assert sorted(p.name for p in folder.iterdir()) == ["profile.pop"]
    with open_profile(folder / "profile.pop") as profile:
        strategy = profile.run["strategy"]
        assert strategy in ("sharded", "pipelined")
        for table in profile.tables:
            profile.read_table(table)  # every member decodes: nothing was interleaved
