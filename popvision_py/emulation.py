"""Emulating a run as `popvision run` states it: the run's options read into an ``engine.runner.RunRequest``,
the profile folder held while it is written, and a request's fields run into a profile.

`popvision run` and `popvision tune` build their requests here; `report --verify`, `tune` and the
dashboard's "Verify" and "Emulate and compare" actions run one through ``run_fields`` (the CLI
hands it to the analysis and the dashboard, which never import the engine). The engine is imported
only when a request is built or run, so reading this module costs nothing.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from popvision_py.analysis.verify import PARAMS
from popvision_py.errors import ConfigError, PopvisionError, first_line

if TYPE_CHECKING:
    from engine.runner import RunRequest

# `popvision run`'s options that are fields of the request itself; PARAMS are the model's parameters,
# and every other option (micro_batch_size, system, mode...) is one of the request's ``options``.
REQUEST_FIELDS = ("strategy", "stages", "offload_optimiser", "offload_weights", "offload_activations",
                  "replicated_tensor_sharding")


class EmulationError(PopvisionError):
    """The emulator failed on a run the planner accepted."""


def parse_assumptions(values: Sequence[str]) -> dict[str, float]:
    """``NAME=VALUE`` (or ``NAME.OPTIMISER=VALUE``) pairs as numbers (`--assume`); the engine checks names and
    ranges. A pair without ``=`` or a value that is no number is a ConfigError."""
    out = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--assume takes NAME=VALUE, not {item!r}.")
        try:
            out[name.strip()] = float(value) if any(c in value for c in ".eE") else int(value)
        except ValueError:
            raise ConfigError(f"--assume {name.strip()}: {value.strip()!r} is not a number.") from None
    return out


def parse_proportions(value: str | None) -> float | tuple[float, ...] | None:
    """``0.15`` or ``0.1,0.3,0.3,0.3`` (`--available-memory-proportion`, one per IPU) as a number or a
    tuple; None stays None. Text that is no number is a ConfigError; the engine checks the range and the count."""
    if value is None:
        return None
    try:
        values = tuple(float(v) for v in value.split(","))
    except ValueError:
        raise ConfigError(f"--available-memory-proportion takes a number or a comma list of numbers (one per "
                          f"IPU), not {value!r}.") from None
    return values[0] if len(values) == 1 else values


def parse_checkpoints(value: str | None) -> str | int | None:
    """``blocks``, ``stage`` or a whole number of blocks (`--recompute-checkpoints`), lower-cased or as an
    int; None stays None. The engine checks the value."""
    if value is None:
        return None
    text = value.strip().lower()
    return int(text) if text.lstrip("-").isdigit() else text


def _gib_bytes(gib: float) -> int:
    """`--max-memory-gb` in bytes, clamped to 0 .. 2**62 GiB."""
    return int(min(max(gib, 0.0), 2.0**62) * 2**30)


def run_request(model: str, values: Mapping[str, Any], *, script_args: Sequence[str] | None = None,
                **fields: Any) -> RunRequest:
    """The ``RunRequest`` `popvision run MODEL` states from its options' values.

    ``values`` maps `popvision run`'s option names (its click parameter names: ``micro_batch_size``,
    ``strategy``, ``layers``, ``assume``, ``max_memory_gb``...) to their values as the command parses them
    (None: unset, the model's default). The model's parameters (``PARAMS``) become ``params``,
    ``REQUEST_FIELDS`` the request's own fields, ``assume`` (NAME=VALUE strings) its assumptions,
    ``max_trace_rows`` and ``max_memory_gb`` its bounds (the engine's defaults when absent), and every other
    value that is set one of its ``options``. ``script_args``: a PopTorch script's arguments, its model
    emulated without running its loop. ``fields``: further RunRequest fields (``profile``, ``progress``,
    ``ranges``, ``figures``). A malformed ``assume`` is a ConfigError; the engine checks the rest when it runs.
    """
    from engine.runner import MAX_MEMORY_BYTES, MAX_TRACE_ROWS, RunRequest

    values = dict(values)
    params = {name: values.pop(name, None) for name in PARAMS}
    own = {name: values.pop(name, None) for name in REQUEST_FIELDS}
    assume = values.pop("assume", ())
    max_trace_rows = values.pop("max_trace_rows", MAX_TRACE_ROWS)
    max_memory_gb = values.pop("max_memory_gb", None)
    return RunRequest(model=model, options={k: v for k, v in values.items() if v is not None}, params=params,
                      assumptions=parse_assumptions(assume), max_trace_rows=max_trace_rows,
                      max_memory_bytes=MAX_MEMORY_BYTES if max_memory_gb is None else _gib_bytes(max_memory_gb),
                      script_args=tuple(script_args) if script_args is not None else None, **own, **fields)


def _say_waiting(folder: Path) -> None:
    print(f"Another popvision run is writing into {folder}; waiting for it to finish.", file=sys.stderr, flush=True)


def profile_folder(folder: str | Path | None,
                   on_wait: Callable[[], None] | None = None) -> contextlib.AbstractContextManager:
    """Hold the profile folder's writer lock for the whole run, after checking that a file can be written
    there: a bad folder fails (a ProfileWriteError or ConfigError sentence) before the emulation, not after.

    A second run into the folder waits for the first, calling ``on_wait`` once first (by default it says
    so on stderr). ``folder`` None: nothing to hold.
    """
    from popvision_py.format.atomic import check_writable, folder_lock, output_target

    if folder is None:
        return contextlib.nullcontext()
    folder = Path(folder)
    check_writable(folder)
    output_target(folder / "profile.pop", streams=False)  # a FIFO or device there is refused, not replaced
    return folder_lock(folder, on_wait=on_wait or (lambda: _say_waiting(folder)))


def run_fields(fields: dict[str, Any], profile: Path) -> None:
    """Emulate ``engine.runner.RunRequest(**fields)`` into ``profile`` (its folder made if needed).

    The planner's refusals are its ``ConfigError`` sentences; anything else the emulator raises
    becomes one ``EmulationError`` sentence, so a caller running many fixes never crashes on one.
    """
    from engine.runner import RunRequest, emulate
    from popvision_py.scripts import load_script

    fields = dict(fields)
    # JSON has no tuples: one available memory proportion per IPU comes back as a list
    options = {k: tuple(v) if isinstance(v, list) else v for k, v in (fields.pop("options", None) or {}).items()}
    fields.pop("profile", None)
    fields.pop("progress", None)
    try:
        request = RunRequest(**fields, options=options, profile=Path(profile), progress=False)
    except TypeError as exc:
        raise EmulationError(f"The run's request is not one popvision run makes ({exc}).") from None
    Path(profile).parent.mkdir(parents=True, exist_ok=True)
    try:
        emulate(request, load_script)
    except PopvisionError:
        raise
    except Exception as exc:  # noqa: BLE001 - one failed run is a row, never a crash of the others
        raise EmulationError(f"The emulator failed: {type(exc).__name__}: {first_line(exc)}.") from None
