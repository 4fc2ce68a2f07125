"""Running a PopTorch script as ``popvision run script.py [--profile --profile-dir D] [-- ARGS]`` does.

The script runs in this process as ``python script.py ARGS`` would (``runpy``, ``__main__``, its
own ``sys.argv``, its directory first on ``sys.path``), importing this ``poptorch``. ``--profile``
is PopTorch's own convention: ``POPLAR_ENGINE_OPTIONS`` gets ``autoReport.all`` and
``autoReport.directory`` for the run (merged into any the environment already sets), so the
script writes exactly what ``POPLAR_ENGINE_OPTIONS=... python script.py`` writes.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import runpy
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from popvision_py.errors import ConfigError, PopvisionError, first_line
from poptorch import _pvti
from poptorch._emulation import engine_options_env


@contextlib.contextmanager
def _engine_options(profile_dir: Path | None) -> Iterator[None]:
    """``POPLAR_ENGINE_OPTIONS`` with the profile directory set, for the ``with`` only."""
    before = os.environ.get("POPLAR_ENGINE_OPTIONS")
    if profile_dir is None:
        yield
        return
    options = engine_options_env()
    options.update({"autoReport.all": "true", "autoReport.directory": str(profile_dir)})
    os.environ["POPLAR_ENGINE_OPTIONS"] = json.dumps(options)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("POPLAR_ENGINE_OPTIONS", None)
        else:
            os.environ["POPLAR_ENGINE_OPTIONS"] = before


def run_script(path: str | os.PathLike[str], args: Sequence[str] = (), profile_dir: Path | None = None) -> int:
    """Run a PopTorch script; its exit code (0 when it ends normally). A popvision error raised in it
    (an unsupported PopTorch call, a configuration the emulator refuses) propagates as itself;
    any other exception is one ConfigError sentence naming the script's line."""
    script = Path(path).resolve()
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [str(path), *args]
    sys.path.insert(0, str(script.parent))
    try:
        with _engine_options(profile_dir):
            runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return int(exc.code or 0)
        print(exc.code, file=sys.stderr)
        return 1
    except (PopvisionError, KeyboardInterrupt):
        raise
    except Exception as exc:  # noqa: BLE001 - the user's code: one sentence, with where it failed
        raise ConfigError(f"Script {path} failed{_where(exc, script)}: {type(exc).__name__}: "
                          f"{first_line(exc)}") from None
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
        _pvti.finish()  # the script's system timeline (PVTI_OPTIONS), published as the script ends
    return 0


def _where(exc: BaseException, script: Path) -> str:
    """`` at line N`` of the script's own innermost frame, if it has one."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == script]
    return f" at line {frames[-1].lineno}" if frames else ""


@dataclass
class ScriptModel:
    """A PopTorch script's model as the emulator sees it: the captured ops, the engine's options
    (from the script's poptorch.Options) and its execution strategy as the engine's ``Layout``, ready for
    ``engine.plan.make_plan``."""

    model: Any
    options: Any
    layout: Any
    training: bool
    generic: dict[str, int]
    # the captured ops as an engine Model under other engine options (the shapes stay the captured ones)
    rebuild: Callable[[Any], Any]


class NothingCaptured(ConfigError):
    """A script ended without calling the model a capture waited for."""


class _Stop(BaseException):
    """Ends a captured script at its model's first call (a BaseException: the script's own
    ``except Exception`` cannot swallow it)."""


def capture_script(path: str | os.PathLike[str], args: Sequence[str] = (), *,
                   training: bool | None = True) -> ScriptModel:
    """Run a PopTorch script up to the first call of its training model (``training=False``: its
    inference model; None: whichever comes first) and return that model captured, without training,
    emulating or writing anything. For tools that emulate a script's model under other options
    (``popvision tune``). NothingCaptured when the script ends without calling such a model; a
    ConfigError with the last line it wrote to stderr when it exits with an error code first."""
    from poptorch import _executor

    found: list[ScriptModel] = []

    def take(captured: Any, layout: Any, is_training: bool, rebuild: Callable[[Any], Any]) -> None:
        if training is None or is_training == training:
            found.append(ScriptModel(captured.model, captured.model.options, layout, is_training,
                                     dict(captured.generic), rebuild))
            raise _Stop

    _executor._CAPTURE_ONLY.append(take)
    engine_options = os.environ.pop("POPLAR_ENGINE_OPTIONS", None)  # a capture writes no profile
    pvti_options = os.environ.pop(_pvti.ENV, None)  # ... and no system timeline
    # What the script prints (its log, its tqdm bar on stderr) is not the capture's to show (a tune
    # would print it once per Dask worker); an exception is its own sentence (run_script), and an
    # early exit is told below with the last line the script wrote to stderr (argparse's error, say).
    err = io.StringIO()
    code = 0
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = run_script(path, args, None)
    except _Stop:
        pass
    finally:
        _executor._CAPTURE_ONLY.remove(take)
        if engine_options is not None:
            os.environ["POPLAR_ENGINE_OPTIONS"] = engine_options
        if pvti_options is not None:
            os.environ[_pvti.ENV] = pvti_options
    if not found:
        kind = {True: "training model", False: "inference model", None: "model"}[training]
        if code:
            said = [line.strip() for line in err.getvalue().splitlines() if line.strip()]
            raise ConfigError(f"Script {path} exited with code {code} before calling a poptorch {kind}"
                              + (f": {said[-1].rstrip('.')}." if said else "."))
        raise NothingCaptured(f"Script {path} ended without calling a poptorch {kind}, so there is nothing to capture.")
    return found[0]


# The captures this process made, by script file, its modification time, arguments and model kind:
# `report --verify` and `tune` emulate one script under many options, and each capture runs the script.
_CAPTURES: dict[tuple[str, int, tuple[str, ...], bool], ScriptModel] = {}


def captured_script(path: str | os.PathLike[str], args: Sequence[str], *, training: bool) -> ScriptModel:
    """``capture_script(path, args, training=training)``, once per process for an unchanged script."""
    script = Path(path).resolve()
    key = (str(script), script.stat().st_mtime_ns, tuple(str(a) for a in args), training)
    if key not in _CAPTURES:
        try:
            _CAPTURES[key] = capture_script(path, args, training=training)
        except NothingCaptured as exc:
            other = "--mode training emulates its training model" if not training else \
                "--mode inference emulates its inference model"
            raise ConfigError(f"{str(exc).rstrip('.')} ({other}, if it has one).") from None
    return _CAPTURES[key]


def script_source(path: str | os.PathLike[str], args: Sequence[str], mode: str) -> Any:
    """A PopTorch script as ``engine.runner``'s model source: its training model (``mode``
    "inference": its inference model) captured once, built under any engine options, the script's
    own poptorch.Options as the defaults. The micro-batch and the precision are the captured
    tensors' and cannot be changed by options: asking for others is one sentence saying where in
    the script they are set."""
    from engine.runner import OPTION_NAMES, ModelSource, location_options

    captured = captured_script(path, args, training=mode != "inference")
    own = captured.options
    defaults: dict[str, Any] = {name: getattr(own, name) for name in OPTION_NAMES}
    defaults.update(location_options(own.tensor_locations))

    def build(options: Any) -> Any:
        if options.micro_batch_size != own.micro_batch_size:
            raise ConfigError(f"--batch-size {options.micro_batch_size} cannot apply to {path}: its micro-batch of "
                              f"{own.micro_batch_size} is the captured inputs' size; change batch_size in the "
                              f"script's poptorch.DataLoader instead.")
        if options.precision != own.precision:
            raise ConfigError(f"--precision {options.precision} cannot apply to {path}: its model runs in "
                              f"{own.precision.upper()}, the precision of its weights; convert the model in the "
                              f"script instead (model.half() for FP16, model.float() for FP32).")
        model = captured.rebuild(options)
        model.set_default_layout(captured.layout)
        return model

    return ModelSource(Path(path).stem, build, defaults, {}, zoo=False, script=True)
