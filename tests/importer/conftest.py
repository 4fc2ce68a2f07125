"""Real PyTorch profiler traces, recorded once per session (tests/traces/record.py: gloo ranks on the CPU),
and their imports. Each kind has a deliberately heavier stage 2 (pipelines)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from popvision_py.importer import find_traces, import_traces

MICRO_BATCHES = {"gpipe": 6, "1f1b": 6, "interleaved": 4, "loopedbfs": 4}
STEPS = 2
PLAIN_STEPS = 3  # a pipeline's steps timed without the profiler, in its wait phase, written into its traces


class Recorded:
    """A recorded run: its folder, its rank files, its meta.json, its imported profile."""

    def __init__(self, folder: Path, paths: list[Path], profile: Path) -> None:
        self.folder = folder
        self.paths = paths
        self.meta = json.loads((folder / "meta.json").read_text())
        self.profile = profile

    def raw(self, rank: int) -> dict:
        return json.loads(self.paths[rank].read_text())


@pytest.fixture(scope="session")
def recorded(tmp_path_factory):
    """kind -> Recorded, recorded on first use (each kind a few seconds). Without torch, which records
    them, the tests that use it skip."""
    pytest.importorskip("torch")
    from tests.traces.record import record

    root = tmp_path_factory.mktemp("traces")
    made: dict[str, Recorded] = {}

    def get(kind: str) -> Recorded:
        if kind not in made:
            folder = root / kind
            paths = record(kind, folder, micro_batches=MICRO_BATCHES.get(kind, 8), steps=STEPS,
                           plain_steps=PLAIN_STEPS if kind in MICRO_BATCHES else 0)
            profile = root / f"{kind}-profile" / "profile.pop"
            import_traces(find_traces([str(folder)]), profile)
            made[kind] = Recorded(folder, paths, profile)
        return made[kind]

    return get
