"""Fixtures of the poptorch tests: the pipelined example script, one CPU thread, the CLI in-process.

PyTorch's intra-op threads fight over this machine's two shared cores (a micro-batch of the example
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
EXAMPLE = REPO / "examples" / "mnist_pipeline.py"  # the example the README runs


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
    """The losses the example's progress bar showed ("loss 1.2345"), one per call of its training model, in order."""
    shown = [float(x) for x in re.findall(r"loss (\d+\.\d+)", stderr)]
    return [x for k, x in enumerate(shown) if k == 0 or x != shown[k - 1]]


def accuracy_on_test_set(stdout: str) -> float:
    """The example's last line, "test accuracy: N%"."""
    match = re.search(r"test accuracy: (\d+\.\d+)%", stdout)
    assert match, stdout
    return float(match.group(1))
