"""The floors pyproject.toml declares are the versions the lowest environments of `make test-matrix` and
`make smoke-oldest` install (constraints-lowest.txt), so the floors are the versions tested."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENT = re.compile(r'"([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?>=([0-9][0-9.]*)(?:,<[0-9.]+)?"')  # a ceiling kept apart
PIN = re.compile(r'([A-Za-z0-9_.-]+)==([0-9][0-9.]*)\s*(?:;\s*python_version\s*([<>=]+)\s*"([0-9.]+)")?')
NOT_IN_THE_MATRIX = {"torch"}  # gigabytes of CUDA wheels off this machine's CPU wheel: its tests skip there


def release(version: str) -> tuple[int, ...]:
    parts = [int(p) for p in version.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


def floors() -> dict[str, tuple[int, ...]]:
    """Each requirement's floor, from the dependencies and the extras of pyproject.toml."""
    text = (ROOT / "pyproject.toml").read_text()
    declared = text[text.index("dependencies = ["): text.index("[project.scripts]")]
    return {name.lower(): release(v) for name, v in REQUIREMENT.findall(declared)}


def pins() -> dict[str, list[tuple[tuple[int, ...], str | None]]]:
    """Each pinned package's versions, with the Python they are for ('<3.13', '>=3.13', or None: any)."""
    found: dict[str, list[tuple[tuple[int, ...], str | None]]] = {}
    for line in (ROOT / "constraints-lowest.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            match = PIN.fullmatch(line)
            assert match, f"constraints-lowest.txt: {line!r} is not NAME==VERSION[; python_version OP \"X.Y\"]"
            name, version, op, python = match.groups()
            found.setdefault(name.lower(), []).append((release(version), op and f"{op}{python}"))
    return found


def test_every_floor_is_the_version_the_oldest_python_installs():
    # GIVEN the floors pyproject.toml declares and the pins of the lowest environments
    declared, pinned = floors(), pins()
    assert {"numpy", "pandas", "pyarrow", "click", "dash", "duckdb", "pytest"} <= set(declared)
    for name, floor in declared.items():
        if name in NOT_IN_THE_MATRIX:
            continue
        # THEN each is pinned: at the floor itself for Python 3.10, and where Python 3.13 has a pin of
        # its own (the floor has no wheel there), at a version above the floor
        assert name in pinned, f"{name} >= {floor} is not pinned in constraints-lowest.txt"
        for version, python in pinned[name]:
            if python in (None, "<3.13"):
                assert version == floor, f"{name}: pinned at {version} for {python or 'every Python'}, floor {floor}"
            else:
                assert python == ">=3.13" and version > floor, (name, version, python)
        assert any(python in (None, "<3.13") for _, python in pinned[name]), f"{name}: no pin for Python 3.10"
