"""Running a ``RunRequest``'s fields into a profile: what `report --verify` and the dashboard's
"Verify" and "Emulate and compare" actions call (the analysis and the dashboard never import the engine)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from popvision_py.errors import PopvisionError, first_line


class EmulationError(PopvisionError):
    """The emulator failed on a run the planner accepted."""


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
