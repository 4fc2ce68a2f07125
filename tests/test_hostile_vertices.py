"""The hostile corpus's contract (tests/test_hostile_corpus.py) for ``tile_cycles.vertices``, the column
schema 2 added: a vertex count the schema forbids is refused in one sentence by every reading command,
and a schema-1 profile without the column reads like the same tables."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from popvision_py.format.schema import SCHEMA_VERSION

from .test_checksums_and_values import edited, with_table
from .test_format import tiny_tables, write_tiny
from .test_format_hostile import without_vertices
from .test_hostile_corpus import OUTCOMES, Ran, Unmutated, check, keeps_the_contract, outputs


@pytest.fixture(scope="module")
def tiny_cycles(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Unmutated]:
    """The tiny profile, and each command's output on it with tile_cycles rewritten unchanged (as the
    mutations below rewrite it)."""
    folder = tmp_path_factory.mktemp("tiny-cycles")
    good = write_tiny(folder / "good.pop")
    path = folder / "profile.pop"
    path.write_bytes(with_table(good, "tile_cycles", tiny_tables()["tile_cycles"]))
    originals = outputs(path)
    assert all(got.code == 0 for got in originals.values()), originals
    return good, Unmutated(path, b"", {"tile_cycles": originals})


@pytest.mark.parametrize("value", [0, -7, None])
def test_a_vertex_count_the_schema_forbids_is_refused_or_harmless(tiny_cycles, value) -> None:
    # GIVEN the tiny profile whose tile_cycles (schema 2) says a tile runs no vertex, fewer than none, or null
    good, unmutated = tiny_cycles
    if value is None:
        frame = tiny_tables()["tile_cycles"].astype({"vertices": object})
        frame.loc[1, "vertices"] = None
    else:
        frame = edited("tile_cycles", "vertices", 1, value)
    mutated = with_table(good, "tile_cycles", frame, nullable=value is None)
    # WHEN every reading command reads it THEN each refuses it in one sentence or prints what it printed
    check("vertices", mutated, unmutated.path, unmutated.originals["tile_cycles"], rewritten="tile_cycles")
    assert OUTCOMES["vertices"]["profiles"] >= 1


def test_a_schema_1_profile_without_vertices_reads_like_the_same_tables(tiny_cycles) -> None:
    # GIVEN the tiny profile as schema 1 wrote it: tile_cycles without vertices, the manifest saying 1
    good, unmutated = tiny_cycles
    fresh = without_vertices(good, unmutated.path.with_suffix(".new"), 1)
    os.replace(fresh, unmutated.path)  # where the originals were made: the commands print its path
    # WHEN every reading command reads it THEN each prints what it printed on the current profile (info:
    # but for the version it names)
    for name, got in outputs(unmutated.path).items():
        original = unmutated.originals["tile_cycles"][name]
        if name == "info":
            assert got.code == 0 and "popvision-profile v1," in got.stdout, got.stderr
            original = Ran(original.code, original.stdout.replace(f"popvision-profile v{SCHEMA_VERSION},",
                                                                  "popvision-profile v1,"),
                           original.stderr, original.exported, original.exception)
        assert keeps_the_contract(name, got, original, "tile_cycles") == "identical", name
