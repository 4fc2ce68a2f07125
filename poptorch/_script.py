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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from popvision_py.errors import ConfigError, PopvisionError


@contextlib.contextmanager
def _engine_options(profile_dir: Path | None) -> Iterator[None]:
    """``POPLAR_ENGINE_OPTIONS`` with the profile directory set, for the ``with`` only."""
    before = os.environ.get("POPLAR_ENGINE_OPTIONS")
    if profile_dir is None:
        yield
        return
    try:
        options = json.loads(before) if before and before.strip() else {}
    except ValueError:
        raise ConfigError(f"POPLAR_ENGINE_OPTIONS is not JSON: {before[:80]!r}.") from None
    if not isinstance(options, dict):
        raise ConfigError("POPLAR_ENGINE_OPTIONS must be a JSON object, such as {\"autoReport.all\":\"true\"}.")
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
                          f"{_first_line(exc)}") from None
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
    return 0


def _where(exc: BaseException, script: Path) -> str:
    """`` at line N`` of the script's own innermost frame, if it has one."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == script]
    return f" at line {frames[-1].lineno}" if frames else ""


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else "no message"


@dataclass
class ScriptModel:
    """A PopTorch script's model as the emulator sees it: the captured ops, the engine's options
    (from the script's poptorch.Options) and its execution strategy, ready for ``engine.plan.make_plan``."""

    model: Any
    options: Any
    strategy: Any
    training: bool
    generic: dict[str, int]


class _Stop(BaseException):
    """Ends a captured script at its model's first call (a BaseException: the script's own
    ``except Exception`` cannot swallow it)."""


def capture_script(path: str | os.PathLike[str], args: Sequence[str] = (), *, training: bool | None = True) -> ScriptModel:
    """Run a PopTorch script up to the first call of its training model (``training=False``: its
    inference model; None: whichever comes first) and return that model captured, without training,
    emulating or writing anything. For tools that emulate a script's model under other options
    (``popvision tune``). ConfigError when the script ends without calling such a model."""
    from poptorch import _executor

    found: list[ScriptModel] = []

    def take(captured: Any, strategy: Any, is_training: bool) -> None:
        if training is None or is_training == training:
            found.append(ScriptModel(captured.model, captured.model.options, strategy, is_training,
                                     dict(captured.generic)))
            raise _Stop

    _executor._CAPTURE_ONLY.append(take)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            run_script(path, args, None)
    except _Stop:
        pass
    finally:
        _executor._CAPTURE_ONLY.remove(take)
    if not found:
        kind = {True: "training model", False: "inference model", None: "model"}[training]
        raise ConfigError(f"Script {path} ended without calling a poptorch {kind}, so there is nothing to capture.")
    return found[0]
