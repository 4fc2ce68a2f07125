"""The PopTorch convention: `POPLAR_ENGINE_OPTIONS='{"autoReport.all":"true",...}' python script.py`.

A plain Python run of the pipelined example, this checkout's poptorch on the path, writes the same profiles
as `popvision run script.py --profile --profile-dir D`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import popvision_py as pv
from popvision_py.cli import main
from tests.poptorch.conftest import EXAMPLE, accuracy_on_test_set, losses, subprocess_env


@pytest.mark.slow
def test_python_script_under_poplar_engine_options_writes_the_profiles_popvision_run_writes(tmp_path: Path,
                                                                                            monkeypatch) -> None:
    # GIVEN the example, run by Python itself with PopTorch's autoReport options (a relative directory),
    # its loading's rate assumed, not measured (a measured rate varies with this machine's load)
    monkeypatch.setenv("POPVISION_HOST_INPUT", "assumed")
    env = subprocess_env(POPLAR_ENGINE_OPTIONS=json.dumps({"autoReport.all": "true",
                                                           "autoReport.directory": "reports"}),
                         POPVISION_HOST_INPUT="assumed")
    done = subprocess.run([sys.executable, str(EXAMPLE)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    # THEN it trains and writes one profile per model under the directory, relative to where it ran
    assert len(losses(done.stderr)) == 3 and accuracy_on_test_set(done.stdout) > 80.0
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.pop"))
    assert written == ["reports/inference/profile.pop", "reports/training/profile.pop"]
    # AND `popvision run --profile` writes the same profiles (every table but the creation time)
    result = CliRunner().invoke(main, ["run", str(EXAMPLE), "--profile", "--profile-dir", str(tmp_path / "cli")])
    assert result.exit_code == 0, result.output
    for model in ("training", "inference"):
        with pv.open(tmp_path / "reports" / model / "profile.pop") as a, \
                pv.open(tmp_path / "cli" / model / "profile.pop") as b:
            assert a.profile.tables == b.profile.tables
            for table in a.profile.tables:
                pd.testing.assert_frame_equal(a.profile.read_table(table).to_pandas(),
                                              b.profile.read_table(table).to_pandas(), obj=f"{model} {table}")


def test_a_profile_is_written_only_when_autoreport_asks(tmp_path: Path, monkeypatch) -> None:
    # GIVEN a tiny PopTorch script, run where POPLAR_ENGINE_OPTIONS is unset
    script = tmp_path / "tiny.py"
    script.write_text(TINY)
    monkeypatch.chdir(tmp_path)
    plain = CliRunner().invoke(main, ["run", str(script)], env={"POPLAR_ENGINE_OPTIONS": None})
    # THEN the summary is printed and no profile written
    assert plain.exit_code == 0, plain.output
    assert "Linear: training, pipelined over 1 IPU(s)" in plain.stdout and "profile  " not in plain.stdout
    assert not list(tmp_path.rglob("*.pop"))
    # WHEN the variable asks for reports without a directory: the current directory, as Poplar does
    here = CliRunner().invoke(main, ["run", str(script)], env={"POPLAR_ENGINE_OPTIONS": '{"autoReport.all":"true"}'})
    assert here.exit_code == 0, here.output
    assert [p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.pop")] == ["training/profile.pop"]
    # and a value that is not JSON is one sentence
    bad = CliRunner().invoke(main, ["run", str(script)], env={"POPLAR_ENGINE_OPTIONS": "autoReport.all=true"})
    assert bad.exit_code == 2
    assert bad.stderr.startswith("Error: POPLAR_ENGINE_OPTIONS is not JSON: 'autoReport.all=true'; write it as")
    # the same sentence when `popvision run --profile` merges its directory into the variable
    merged = CliRunner().invoke(main, ["run", str(script), "--profile", "--profile-dir", "d"],
                                env={"POPLAR_ENGINE_OPTIONS": "autoReport.all=true"})
    assert (merged.exit_code, merged.stderr) == (bad.exit_code, bad.stderr)


TINY = """
import torch
import poptorch


class Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x, y):
        out = self.fc(x)
        return out, torch.nn.functional.mse_loss(out, y)


model = Linear()
training = poptorch.trainingModel(model, poptorch.Options(), optimizer=poptorch.optim.SGD(model.parameters(), lr=0.1))
out, loss = training(torch.ones(4, 4), torch.zeros(4, 2))
print("loss", float(loss))
"""
