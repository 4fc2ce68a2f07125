"""Fixtures of the popdist tests: poprun and the scripts it launches, as real subprocesses.

Every launch is a real ``poprun`` (``python -m popdist._poprun``) starting real instances, each
importing torch (seconds on this shared machine), so the tests launch few and share them: each
launch below runs once per session and several tests read what it left behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
EXAMPLE = REPO / "examples" / "tutorial_mnist.py"  # the example the README runs


def subprocess_env(**extra: str) -> dict[str, str]:
    """This checkout's packages on the path, one torch thread, and no PopRun, torch.distributed or
    profile settings inherited from the shell. The instances' loading rate is assumed, not measured:
    each instance would measure its own, under this machine's load, and their figures would differ."""
    drop = ("POPDIST_", "OMPI_COMM_WORLD_", "POPVISION_SYSTEM", "POPLAR_ENGINE_OPTIONS", "MASTER_", "RANK",
            "WORLD_SIZE", "LOCAL_RANK")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update({"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "POPVISION_HOST_INPUT": "assumed", **extra})
    return env


@dataclass
class Launched:
    """What a launch left: exit code, output, its folder, its wall time."""

    returncode: int
    stdout: str
    stderr: str
    folder: Path
    seconds: float


def poprun(folder: Path, *args: str, timeout: float = 240, **env: str) -> Launched:
    """``poprun ARGS`` run in ``folder``."""
    return _run([sys.executable, "-m", "popdist._poprun", *args], folder, timeout, env)


def python(folder: Path, *args: str, timeout: float = 240, **env: str) -> Launched:
    """``python ARGS`` run in ``folder``, no poprun."""
    return _run([sys.executable, *args], folder, timeout, env)


def _run(command: list[str], folder: Path, timeout: float, env: dict[str, str]) -> Launched:
    folder.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    done = subprocess.run(command, cwd=folder, env=subprocess_env(**env), capture_output=True, text=True,
                          timeout=timeout)
    return Launched(done.returncode, done.stdout, done.stderr, folder, time.monotonic() - start)


@pytest.fixture(scope="session")
def launches(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("launches")
