"""Loading a PopTorch script's model for the engine: ``load_script`` is what ``popvision run``, ``tune``,
``report --verify`` and the dashboard pass to ``engine.runner.emulate`` so that a request naming a
script runs it with popvision's ``poptorch``. It sits beside ``poptorch`` (above the engine), so the
engine never imports the PopTorch layer."""

from __future__ import annotations

from collections.abc import Sequence

from engine.runner import ModelSource
from popvision_py.errors import ConfigError


def load_script(path: str, args: Sequence[str], mode: str) -> ModelSource:
    """The model a PopTorch script compiles in ``mode`` (training or inference), its arguments ``args``."""
    try:
        from poptorch._script import script_source
    except ImportError as exc:  # torch missing: the shim's own sentence
        raise ConfigError(str(exc)) from None
    return script_source(path, args, mode)
