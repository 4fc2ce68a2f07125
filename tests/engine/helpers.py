"""Running the real CLI in tests and reading what it wrote."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pandas as pd
from click.testing import CliRunner

from popvision_py.cli import main
from popvision_py.format import open_profile

# Four identical blocks (three 1024 x 1024 linears and a ReLU each): a balanced pipeline by
# construction, with compute large against the copies that feed each stage.
BALANCED_MODEL = textwrap.dedent(
    """
    from engine import Layout, Model, ModelBlock

    DEFAULTS = {"micro_batch_size": 16, "gradient_accumulation": 8}

    def build(options):
        m = Model("balanced", options)
        x = m.input((1024,))
        for b in range(4):
            with ModelBlock(f"B{b}"):
                for k in range(3):
                    x = m.linear(x, 1024, name=f"layer{b}/linear{k}")
                x = m.relu(x, name=f"layer{b}/relu")
        return m.set_default_layout(Layout.of("pipelined", "B0", "B1", "B2", "B3"))
    """
)


def write_model(tmp_path: Path, source: str, name: str = "model.py") -> str:
    path = tmp_path / name
    path.write_text(source)
    return str(path)


def run_cli(*args: str):
    """Invoke `popvision ARGS...` in-process; returns click's Result."""
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def profile_path(folder: Path, model: str, *args: str, name: str = "p") -> Path:
    """`popvision run MODEL ARGS --profile` into folder/name (it must succeed); the profile's path."""
    out = folder / name
    result = run_cli("run", model, "--profile", "--profile-dir", str(out), "-q", *args)
    assert result.exit_code == 0, result.output
    return out / "profile.pop"


def run_profile(tmp_path: Path, model: str, *args: str, name: str = "p") -> dict[str, pd.DataFrame]:
    """`popvision run MODEL --profile` into tmp_path/name; returns every table plus the manifest."""
    with open_profile(profile_path(tmp_path, model, *args, name=name)) as profile:
        tables = {t: profile.read_pandas(t) for t in profile.tables}
        tables["manifest"] = profile.manifest  # type: ignore[assignment]
    return tables


def busy_rows(trace: pd.DataFrame) -> pd.DataFrame:
    """Rows where an IPU works on a micro-batch (not idle, not the superstep sync, not the update)."""
    p = trace["pass"].astype(str)
    return trace[p.isin(["forward", "backward"])]
