"""Hostile and broken profiles: every one is refused with the project's own error, quickly."""

from __future__ import annotations

import io
import json
import os
import time
import warnings
import zipfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from popvision_py import errors as E
from popvision_py.format import open_profile
from popvision_py.format import schema as S

from .test_format import _restamp, members, parquet_bytes, rezip, run_cli, write_tiny


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny(tmp_path_factory.mktemp("good") / "profile.pop")


def read_everything(path: Path) -> None:
    """Open a profile and decode every table, as a report over all sections would."""
    with open_profile(path) as profile:
        for name in S.TABLES:
            profile.read_table(name)


def test_duplicate_members_are_refused(good: Path, tmp_path: Path) -> None:
    contents = members(good)
    bad = tmp_path / "dup.pop"
    with zipfile.ZipFile(bad, "w") as archive, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate we write on purpose
        for name, data in contents.items():
            archive.writestr(name, data)
        archive.writestr("trace.parquet", contents["trace.parquet"])
    with pytest.raises(E.UnexpectedMemberError, match="'trace.parquet' more than once"):
        open_profile(bad)


@pytest.mark.parametrize("member", ["/etc/passwd", "../../x.parquet", "notes.txt", "tables/trace.parquet"])
def test_members_other_than_the_schema_tables_are_refused(good: Path, tmp_path: Path, member: str) -> None:
    bad = rezip(tmp_path / "extra.pop", {**members(good), member: b"hello"})
    with pytest.raises(E.UnexpectedMemberError, match="unexpected member"):
        open_profile(bad)


def test_a_compressed_member_is_refused(good: Path, tmp_path: Path) -> None:
    bad = tmp_path / "deflated.pop"
    with zipfile.ZipFile(bad, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members(good).items():
            archive.writestr(name, data)
    with pytest.raises(E.CorruptProfileError, match="ZIP-compressed"):
        open_profile(bad)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "profile.pop"
    os.mkfifo(fifo)
    began = time.monotonic()
    with pytest.raises(E.NotAProfileError, match="not a regular file"):
        open_profile(fifo)
    assert time.monotonic() - began < 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permissions")
def test_an_unreadable_file_is_named(good: Path, tmp_path: Path) -> None:
    locked = tmp_path / "locked.pop"
    locked.write_bytes(good.read_bytes())
    locked.chmod(0)
    with pytest.raises(E.NotAProfileError, match="permission denied"):
        open_profile(locked)


def test_manifest_rows_that_disagree_with_a_table_are_corruption(good: Path, tmp_path: Path) -> None:
    import json

    contents = members(good)
    manifest = json.loads(contents["manifest.json"])
    manifest["tables"]["trace"]["rows"] = 5
    contents["manifest.json"] = json.dumps(manifest).encode()
    with pytest.raises(E.CorruptProfileError, match="holds 4 rows but the manifest says 5"):
        open_profile(rezip(tmp_path / "rows.pop", contents))


def test_a_directory_asking_for_a_zip_version_zipfile_cannot_read_is_corruption(good: Path, tmp_path: Path) -> None:
    # GIVEN the profile with its first directory entry's "version needed to extract" made 6.4 (byte 6 of the
    # entry: 64), as one flipped byte made it
    data = bytearray(good.read_bytes())
    entry = data.find(b"PK\x01\x02")
    data[entry + 6] = 64
    damaged = tmp_path / "version.pop"
    damaged.write_bytes(bytes(data))
    # THEN it is a corrupt profile, said in one sentence with exit code 2
    with pytest.raises(E.CorruptProfileError, match="corrupt ZIP directory"):
        open_profile(damaged)
    result = run_cli("info", str(damaged))
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.parametrize("sixteenths", range(16))
def test_truncated_at_every_sixteenth_is_refused(good: Path, tmp_path: Path, sixteenths: int) -> None:
    data = good.read_bytes()
    cut = tmp_path / "cut.pop"
    cut.write_bytes(data[: len(data) * sixteenths // 16])
    began = time.monotonic()
    with pytest.raises((E.EmptyProfileError, E.NotAProfileError)):
        open_profile(cut)
    assert time.monotonic() - began < 1
    result = run_cli("info", str(cut))
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_flipped_bytes_never_escape_as_anything_but_a_profile_error(good: Path, tmp_path: Path, data) -> None:
    # GIVEN a valid profile with a few random bytes replaced
    raw = bytearray(good.read_bytes())
    for _ in range(data.draw(st.integers(1, 8), label="flips")):
        position = data.draw(st.integers(0, len(raw) - 1), label="position")
        raw[position] = data.draw(st.integers(0, 255).filter(lambda b: b != raw[position]), label="byte")
    bad = tmp_path / "flipped.pop"
    bad.write_bytes(bytes(raw))
    # WHEN it is read whole, THEN it either reads (the flip hit bytes nobody uses) or raises a
    # ProfileError: never another exception
    try:
        read_everything(bad)
    except E.ProfileError:
        pass


def without_vertices(good: Path, path: Path, schema_version: int) -> Path:
    """``good`` with tile_cycles rewritten without its ``vertices`` column (added in schema 2) and the
    manifest stating ``schema_version``: a profile an older popvision wrote, or a broken new one."""
    contents = members(good)
    table = pq.read_table(io.BytesIO(contents["tile_cycles.parquet"])).drop_columns(["vertices"])
    contents["tile_cycles.parquet"] = parquet_bytes(table)
    _restamp(contents, "tile_cycles")
    manifest = json.loads(contents["manifest.json"])
    manifest["schema_version"] = schema_version
    contents["manifest.json"] = json.dumps(manifest).encode()
    return rezip(path, contents)


def as_schema_1(good: Path, path: Path) -> Path:
    """``good`` as popvision wrote it in schema 1: without the columns schema 2 added (``tile_cycles.vertices``,
    ``variables.dtype``), its manifest stating version 1."""
    contents = members(good)
    for table, column in (("tile_cycles", "vertices"), ("variables", "dtype")):
        member = f"{table}.parquet"
        contents[member] = parquet_bytes(pq.read_table(io.BytesIO(contents[member])).drop_columns([column]))
        _restamp(contents, table)
    manifest = json.loads(contents["manifest.json"])
    manifest["schema_version"] = 1
    contents["manifest.json"] = json.dumps(manifest).encode()
    return rezip(path, contents)


def test_a_schema_1_profile_without_vertices_still_opens(good: Path, tmp_path: Path) -> None:
    # GIVEN a schema-1 profile: its tile_cycles has no vertices column
    old = without_vertices(good, tmp_path / "v1.pop", 1)
    # WHEN it is read whole, THEN every table decodes and tile_cycles has the other columns
    read_everything(old)
    with open_profile(old) as profile:
        assert profile.read_table("tile_cycles").column_names == ["ipu", "step", "tile", "cycles"]
    assert run_cli("report", str(old), "--section", "memory").exit_code == 0


def test_a_schema_2_profile_without_vertices_is_refused(good: Path, tmp_path: Path) -> None:
    # GIVEN a profile that says schema 2 but lacks the column schema 2 added
    bad = without_vertices(good, tmp_path / "v2.pop", 2)
    # WHEN it is opened, THEN one sentence names the table and the column
    with pytest.raises(E.MissingColumnError, match="Table tile_cycles of .* has no column vertices"):
        open_profile(bad)
    result = run_cli("info", str(bad))
    assert result.exit_code == 2 and "has no column vertices" in result.stderr
