"""Fixtures of the poptorch tests: the tutorial script, one CPU thread, the CLI in-process.

PyTorch's intra-op threads fight over this machine's two shared cores (a micro-batch of the tutorial
takes 20 times longer with two threads than with one here), so the tests run torch on one thread,
in-process and in the subprocesses they start.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TUTORIAL = REPO / "examples" / "mnist_pipeline.py"  # the example the README runs


@pytest.fixture(autouse=True, scope="session")
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment of a `python script.py` run: this checkout's poptorch on the path, one thread."""
    env = {k: v for k, v in os.environ.items() if k != "POPLAR_ENGINE_OPTIONS"}
    env.update({"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", **extra})
    return env


def losses(stderr: str) -> list[float]:
    """The losses the tutorial's progress bar showed, one per training step, in order."""
    shown = [float(x) for x in re.findall(r"Loss:(\d+\.\d+)", stderr)]
    return [x for k, x in enumerate(shown) if k == 0 or x != shown[k - 1]]


def accuracy_on_test_set(stdout: str) -> float:
    """The tutorial's "Accuracy on test set: N%"."""
    match = re.search(r"Accuracy on test set: (\d+\.\d+)%", stdout)
    assert match, stdout
    return float(match.group(1))
