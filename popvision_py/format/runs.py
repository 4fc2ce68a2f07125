"""The profiles a run's folder holds, so that commands take the folder as well as a profile.pop.

A run writes its profiles in one of these layouts (docs/poptorch.md):

- ``DIR/profile.pop``: ``popvision run MODEL --profile --profile-dir DIR``, ``popvision import ... -o DIR``;
- ``DIR/MODEL/profile.pop``: a PopTorch script, one folder per compiled model (``training``,
  ``inference`` or its ``modelName``);
- ``DIR/instance-I/MODEL/profile.pop``: a PopDist script under ``poprun``, one folder per instance.

``run_profiles(path)`` names each profile of the run (``instance-0``, ``instance-1``... or the model's
name), training first; a path that is a file is itself.
"""

from __future__ import annotations

import re
from pathlib import Path

from popvision_py.errors import NotAProfileError

PROFILE = "profile.pop"
INSTANCE = re.compile(r"instance-(\d+)$")


def _models(folder: Path) -> list[Path]:
    """``folder/MODEL/profile.pop`` for each model folder, training first, then by name."""
    found = sorted(p for p in folder.glob(f"*/{PROFILE}") if p.is_file())
    return sorted(found, key=lambda p: (p.parent.name != "training", p.parent.name))


def run_profiles(path: str | Path) -> list[tuple[str, Path]]:
    """``[(label, profile path)]`` of the run at ``path`` (one entry for a profile or a one-profile run).

    Instances come in index order, each with its training model's profile (else its first model's).
    A folder with no profile in any layout is one sentence naming the layouts looked for.
    """
    path = Path(path)
    if not path.is_dir():
        return [(path.stem, path)]  # a file (or a missing path: the reader says which)
    if (path / PROFILE).is_file():
        return [(path.name, path / PROFILE)]
    instances = sorted(((int(m.group(1)), p) for p in path.iterdir()
                        if p.is_dir() and (m := INSTANCE.match(p.name))), key=lambda item: item[0])
    runs = [(f"instance-{index}", models[0]) for index, folder in instances if (models := _models(folder))]
    if runs:
        return runs
    models = _models(path)
    if models:
        return [(models[0].parent.name, models[0])]
    raise NotAProfileError(f"{path} is a folder without a profile: no {PROFILE}, MODEL/{PROFILE} or "
                           f"instance-I/MODEL/{PROFILE} in it.")


def run_profile(path: str | Path) -> Path:
    """The one profile a command that reads one takes from ``path``: the run's first (instance 0's training)."""
    return run_profiles(path)[0][1]
