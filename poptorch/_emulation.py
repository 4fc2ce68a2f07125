"""A compiled model's emulation: the captured ops under the script's options, its summary and profile.

Where the profile goes follows PopTorch and Poplar: ``POPLAR_ENGINE_OPTIONS`` with
``autoReport.all`` (or any ``autoReport.output*``) set to true writes under
``autoReport.directory`` (the current directory by default), else ``Options.enableProfiling(dir)``;
each compiled model writes ``<directory>/<model name>/profile.pop``, the model name being
PopTorch's default ``training`` or ``inference`` unless ``Options.modelName`` sets one. An
instance that poprun started writes under ``<directory>/instance-<I>/`` instead (I its index), so
that the instances of one launch do not overwrite each other's profiles; the emulation is of the
whole launch (every instance's replicas, poprun's ``--system``). While popvision captures a script
(``poptorch._script.capture_script``) nothing is written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.instrument import RunSummary
from engine.plan import make_plan
from engine.runner import RunRequest, emulate_plan
from engine.layout import Layout
from engine.torch_capture import Captured, OpRecord, micro_batch_size, model_precision, to_model
from popdist._env import instance_directory, poprun_instance
from popvision_py.errors import ConfigError
from poptorch import _dataloader
from poptorch._errors import Error
from poptorch._options import Options, PipelinedExecution


class GenericOpsWarning(UserWarning):
    """Ops the emulator knows only by their FLOPs and bytes."""


@dataclass
class EmulatedModel:
    """What compiling (capturing and emulating) one model gave."""

    captured: Captured
    summary: RunSummary
    text: str
    profile: Path | None


def engine_options_env() -> dict:
    """``POPLAR_ENGINE_OPTIONS`` as a dict (empty when unset or blank); one sentence when it is not a
    JSON object."""
    text = os.environ.get("POPLAR_ENGINE_OPTIONS", "").strip()
    if not text:
        return {}
    try:
        engine = json.loads(text)
    except ValueError:
        raise Error(f"POPLAR_ENGINE_OPTIONS is not JSON: {text[:80]!r}; write it as "
                    f"'{{\"autoReport.all\":\"true\",\"autoReport.directory\":\"profile\"}}'.") from None
    if not isinstance(engine, dict):
        raise Error("POPLAR_ENGINE_OPTIONS must be a JSON object, such as {\"autoReport.all\":\"true\"}.")
    return engine


def report_directory(options: Options) -> Path | None:
    """The directory profiles go to, or None: ``POPLAR_ENGINE_OPTIONS`` first, then ``enableProfiling``."""
    engine = engine_options_env()
    wanted = {str(k): str(v).strip().lower() == "true" for k, v in engine.items()}
    if wanted.get("autoReport.all") or any(v for k, v in wanted.items() if k.startswith("autoReport.output")):
        return Path(str(engine.get("autoReport.directory", ".")))
    if options.profile_dir is not None:
        return Path(options.profile_dir)
    return None


_OURS = (str(Path(__file__).resolve().parent), contextlib.__file__)


def _callers_level() -> int:
    """The ``stacklevel`` of the script's own line that called the model (past poptorch's frames)."""
    level, frame = 2, sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_OURS):
        level, frame = level + 1, frame.f_back
    return level


def capture_model(records: Sequence[OpRecord], inputs: Sequence[torch.Tensor], root: torch.nn.Module,
                  options: Options, *, training: bool, optimiser: dict, recompute: bool, name: str) -> Captured:
    """The engine model of a recorded first forward, with the engine's options from ``options``."""
    engine_options = options.engine_options(training=training, micro_batch_size=micro_batch_size(inputs),
                                            precision=model_precision(root), optimiser=optimiser, recompute=recompute)
    instance = poprun_instance()
    if instance is not None and instance.system:
        engine_options.system = instance.system
    loaded = _dataloader.measured()
    if loaded is not None:  # the script's loader: its workers on the IPU system's host
        engine_options.loader_workers = max(1, loaded.workers)
        engine_options.persistent_workers = loaded.persistent
    captured = to_model(records, inputs, root, name, engine_options)
    if captured.generic:
        listed = ", ".join(f"{op} ({n})" for op, n in captured.generic.most_common())
        warnings.warn(f"popvision emulates {sum(captured.generic.values())} op(s) of {name} as generic work by their "
                      f"FLOPs and bytes: {listed}.", GenericOpsWarning, stacklevel=_callers_level())
    return captured


# The planner's sentences name popvision run's flags; a script sets the same in poptorch.Options.
_FLAGS = ((re.compile(r"--gradient-accumulation (\d+)"), r"Training.gradientAccumulation(\1)"),
          (re.compile(r"--device-iterations (\d+)"), r"deviceIterations(\1)"),
          (re.compile(r"--host-processes (\d+)"), r"Distributed.configureProcessId(id, \1)"),
          (re.compile(r"more --replicas"), "a larger replicationFactor"))


def _in_poptorch_words(sentence: str) -> str:
    for flag, option in _FLAGS:
        sentence = flag.sub(option, sentence)
    return sentence


def engine_layout(captured: Captured, options: Options) -> Layout:
    """The options' execution strategy over the captured blocks, as the engine's ``Layout``; PopTorch's
    default without one (pipelined, a stage per IPU the blocks name: ``AutoStage.SameAsIpu``)."""
    strategy = options.execution_strategy or PipelinedExecution()
    return strategy.layout(list(captured.model.blocks), captured.block_ipus)


def emulate(captured: Captured, options: Options, *, training: bool, write: bool = True) -> EmulatedModel:
    """Emulate the captured model with the script's strategy; write its profile where PopTorch
    users look for it (unless ``write`` is false), and return the summary ``popvision run`` prints."""
    from popvision_py.render.run_summary import summary_text
    from popvision_py.run_figures import summary_figures
    from popvision_py.format.atomic import check_writable, folder_lock

    model = captured.model
    loaded = _dataloader.measured()
    if loaded is not None and loaded.dataset:
        model.dataset_samples = {model.options.mode: loaded.dataset}
    try:
        plan = make_plan(model, model.options, engine_layout(captured, options))
    except ConfigError as exc:
        raise Error(f"Compiling {model.name}: {_in_poptorch_words(str(exc))}") from None
    plan = dataclasses.replace(plan, request=script_request(training))
    kind = model.options.host_input or model.input_kind
    if loaded is not None and kind != "synthetic" and loaded.samples_per_s > 0:
        # The host work happened here, for real: its measured rate replaces the assumed one, and the
        # profile's request says it was measured and how.
        rate = {f"host_{kind}_samples_per_s_per_core": loaded.samples_per_s}
        plan = dataclasses.replace(plan, target=plan.target.with_assumptions(**rate),
                                   request={**plan.request, "host_measured": loaded.as_json()})
    instance = poprun_instance()
    if instance is not None and plan.num_ipus * plan.tensor_sharding != instance.ipus_per_replica:
        raise Error(f"Compiling {model.name}: its replica takes {plan.num_ipus * plan.tensor_sharding} IPU(s) but "
                    f"poprun was given --ipus-per-replica {instance.ipus_per_replica}; launch it with "
                    f"--ipus-per-replica {plan.num_ipus * plan.tensor_sharding}.")
    directory = report_directory(options) if write else None
    if directory is not None:
        directory = instance_directory(directory)
    folder = directory / (options.model_name or ("training" if training else "inference")) if directory else None
    with tempfile.TemporaryDirectory(prefix="popvision-poptorch-") as scratch:
        target = (folder or Path(scratch)) / "profile.pop"
        if folder is not None:
            check_writable(folder)
        with folder_lock(target.parent):
            summary = emulate_plan(plan, RunRequest(model=model.name, profile=target, progress=False))
        summary.set_figures(summary_figures(target))
    summary.profile = str(target) if folder is not None else None
    return EmulatedModel(captured, summary, summary_text(summary), target if folder is not None else None)


def script_request(training: bool) -> dict:
    """The request that re-emulates this model, for the profile's manifest: ``popvision run SCRIPT
    --emulate-only [--mode inference] -- ARGS`` with the running script (``sys.argv``, as both
    ``popvision run script.py`` and ``python script.py`` set it), so the reports' fixes are commands
    that run; empty (every setting spelled out) when no PopTorch script is running (an interpreter)."""
    from engine.runner import is_poptorch_script, script_record

    script = sys.argv[0] if sys.argv else ""
    if not script or not is_poptorch_script(script):
        return {}
    return script_record(script, sys.argv[1:], {} if training else {"mode": "inference"})


def announce(compiled: EmulatedModel) -> None:
    """Print the summary, as ``popvision run`` does, when a model is compiled."""
    print(compiled.text, file=sys.stdout, flush=True)
