"""A small model whose best split is not obvious, and `popvision tune` run through the real CLI."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from popvision_py.cli import main

# Five blocks of unequal widths: pipelines of one to four IPUs whose speed depends on where the cuts fall.
UNEVEN_MODEL = textwrap.dedent(
    """
    from engine import Model, ModelBlock

    DEFAULTS = {"micro_batch_size": 16, "gradient_accumulation": 8}
    WIDTHS = (512, 2048, 1024, 256, 1536)


    def build(options):
        m = Model("uneven", options)
        x = m.input((512,))
        for b, width in enumerate(WIDTHS):
            with ModelBlock(f"B{b}"):
                for k in range(2):
                    x = m.linear(x, width, name=f"layer{b}/linear{k}")
                x = m.relu(x, name=f"layer{b}/relu")
        return m
    """
)
BLOCKS = ["B0", "B1", "B2", "B3", "B4"]


@pytest.fixture
def uneven(tmp_path: Path) -> str:
    path = tmp_path / "uneven.py"
    path.write_text(UNEVEN_MODEL)
    return str(path)


def tune(*args: str):
    """`popvision tune ARGS...` in-process (its Dask workers are real processes); returns click's Result."""
    return CliRunner().invoke(main, ["tune", *args], catch_exceptions=False)
