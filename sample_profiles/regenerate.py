"""Regenerate the sample profiles: `python sample_profiles/regenerate.py`.

Each sample is one folder holding a profile.pop, made by the command written beside it: the
emulator's (`popvision run`), and `pytorch_gpipe`, imported from the real PyTorch profiler traces
kept beside it (a 4-rank GPipe run over gloo on the CPU, stage 2 three times as heavy, recorded by
`python -m tests.traces.record gpipe`). They are deterministic: running this again rewrites the same
tables (only the manifest's `created` differs).
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from click.testing import CliRunner

from popvision_py.cli import main

HERE = Path(__file__).resolve().parent

# folder -> `popvision run` arguments
SAMPLES: dict[str, list[str]] = {
    "mnist_pipelined": ["mnist"],
    "mnist_sharded": ["mnist", "--strategy", "sharded"],
    "mnist_offload_optimiser": ["mnist", "--offload-optimiser"],
    "mnist_inference": ["mnist", "--mode", "inference"],
    # BERT-Large with its LAMB state on chip does not fit on 4 IPUs (the blog's mapping keeps it in
    # streaming memory; the default run fits).
    "bert_large_out_of_memory": ["bert-large", "--no-offload-optimiser"],
    "bert_base_pipelined": ["bert-base", "--batch-size", "2", "--layers", "4", "--gradient-accumulation", "9"],
}

# folder -> `popvision import` arguments (traces committed beside the profile)
IMPORTED: dict[str, list[str]] = {
    "pytorch_gpipe": ["sample_profiles/pytorch_gpipe/traces", "--name", "gpipe", "-o", "sample_profiles/pytorch_gpipe"],
}


def main_() -> int:
    runner = CliRunner()
    for folder, args in SAMPLES.items():
        out = HERE / folder
        result = runner.invoke(main, ["run", *args, "--profile", "--profile-dir", str(out), "-q"])
        print(f"popvision run {' '.join(args)} --profile --profile-dir sample_profiles/{folder}")
        print(result.output)
        if result.exit_code != 0:
            return result.exit_code
        (out / "COMMAND").write_text(f"popvision run {' '.join(args)} --profile --profile-dir sample_profiles/{folder}\n")
    for folder, args in IMPORTED.items():
        with contextlib.chdir(HERE.parent):  # the manifest keeps the trace paths as given: relative
            result = runner.invoke(main, ["import", *args, "-q"])
        print(f"popvision import {' '.join(args)}")
        print(result.output)
        if result.exit_code != 0:
            return result.exit_code
        (HERE / folder / "COMMAND").write_text(f"popvision import {' '.join(args)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main_())
