"""The writer's encoding (issue 26): row groups encoded on a thread write the bytes in-line encoding
writes; the trace's cycles (and tile_cycles' tiles and cycles) are delta-encoded without a dictionary; a
run key set before close is checked as the manifest is.

GIVEN a trace of several row groups (the mnist sample's), WHEN ProfileWriter writes it (its encoder thread) and a
TableWriter without an encoder writes it in line, THEN the two Parquet files are byte for byte the
same, read back to the rows given, with the encodings ENCODINGS names.
"""

from __future__ import annotations

import json
import tempfile
import time
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from popvision_py.errors import ProfileWriteError
from popvision_py.format import ProfileWriter, open_profile
from popvision_py.format import schema as S
from popvision_py.format import writer as W

MNIST = Path(__file__).resolve().parents[1] / "sample_profiles" / "mnist_pipelined" / "profile.pop"


@pytest.fixture(scope="module")
def mnist() -> tuple[dict, dict[str, pa.Table]]:
    """The sample's manifest and tables, to write again."""
    with open_profile(MNIST) as profile:
        return profile.manifest, {name: profile.read_table(name) for name in profile.tables}


def test_threaded_encoding_writes_the_in_line_bytes(tmp_path, monkeypatch, mnist):
    monkeypatch.setattr(W, "ROW_GROUP_ROWS", 1000)
    manifest, tables = mnist
    trace = tables["trace"].slice(0, 5000)
    # GIVEN a trace written by ProfileWriter in batches smaller than a row group (its encoder thread)
    with ProfileWriter(tmp_path / "profile.pop", target=manifest["target"], run=manifest["run"]) as writer:
        for name, table in tables.items():
            if name != "trace":
                writer.write_table(name, table)
        with writer.table("trace") as table:
            for batch in trace.to_batches(max_chunksize=300):
                table.write(batch)
    with zipfile.ZipFile(tmp_path / "profile.pop") as archive:
        threaded = archive.read(S.TABLES["trace"].member)
        tile_cycles = pq.ParquetFile(pa.BufferReader(archive.read(S.TABLES["tile_cycles"].member)))
    # AND by a TableWriter encoding in line
    with tempfile.TemporaryFile() as spool:
        in_line = W.TableWriter(S.TABLES["trace"], spool, tmp_path / "x.pop")
        for batch in trace.to_batches(max_chunksize=300):
            in_line.write(batch)
        in_line.close()
        spool.seek(0)
        alone = spool.read()
    # THEN the bytes are the same, and so are the rows read back, in several row groups
    assert threaded == alone
    parquet = pq.ParquetFile(pa.BufferReader(threaded))
    assert parquet.metadata.num_row_groups >= 5
    assert parquet.read().equals(W.conform(trace, S.TABLES["trace"]))
    # AND the cycles are delta-encoded without a dictionary; the other columns keep theirs
    chunks = {parquet.schema_arrow.field(i).name: parquet.metadata.row_group(0).column(i) for i in range(10)}
    for name in ("start_cycle", "end_cycle"):
        assert "DELTA_BINARY_PACKED" in chunks[name].encodings and not chunks[name].has_dictionary_page
    assert chunks["step"].has_dictionary_page and "DELTA_BINARY_PACKED" not in chunks["step"].encodings
    # AND so are tile_cycles' tiles and cycles, read back as written
    tiles = {tile_cycles.schema_arrow.field(i).name: tile_cycles.metadata.row_group(0).column(i) for i in range(4)}
    assert all("DELTA_BINARY_PACKED" in tiles[name].encodings for name in ("tile", "cycles"))
    assert tile_cycles.read().equals(W.conform(tables["tile_cycles"], S.TABLES["tile_cycles"]))


def test_a_run_key_set_before_close_is_in_the_manifest_and_checked(tmp_path, mnist):
    # GIVEN a profile being written
    manifest, tables = mnist
    with ProfileWriter(tmp_path / "profile.pop", target=manifest["target"], run=manifest["run"]) as writer:
        for name, table in tables.items():
            writer.write_table(name, table)
        # WHEN a key is added to its run, THEN a size out of bounds is refused in one sentence
        with pytest.raises(ProfileWriteError, match=r"device_iterations = 0; it must be between 1 and"):
            writer.set_run("device_iterations", 0)
        writer.set_run("prediction", {"fit_verdict": "fits"})
    # AND a good key is in the published manifest
    with zipfile.ZipFile(tmp_path / "profile.pop") as archive:
        manifest = json.loads(archive.read(S.MANIFEST_MEMBER))
    assert manifest["run"]["prediction"] == {"fit_verdict": "fits"}
    assert manifest["run"]["device_iterations"] == mnist[0]["run"]["device_iterations"]


def test_a_row_group_handed_over_but_never_listed_is_encoded_before_the_file_closes(tmp_path, monkeypatch, mnist):
    # (A Ctrl-C between the encoder's `submit` and the writer listing the row group leaves it so; closing
    # the Parquet writer under it was a segmentation fault, issue 34's exit codes.)
    monkeypatch.setattr(W, "ROW_GROUP_ROWS", 1000)
    trace = mnist[1]["trace"].slice(0, 3000)
    encoder = W._encoder()
    # GIVEN the encoder's thread already running before any row group (a Ctrl-C can only cost it idle)
    assert [thread.is_alive() for thread in encoder._threads] == [True]
    with tempfile.TemporaryFile() as spool:
        table = W.TableWriter(S.TABLES["trace"], spool, tmp_path / "x.pop", encoder=encoder)
        # AND, behind a slow task, a row group handed to the encoder that the writer does not know of
        slow = encoder.submit(time.sleep, 0.3)
        encoder.submit(table._encode, trace)
        # WHEN the table is closed
        table.close()
        # THEN the close waited for it: the file is whole and holds its 3,000 rows
        assert slow.done()
        spool.seek(0)
        assert pq.read_table(spool).equals(trace.cast(S.TABLES["trace"].schema))
    encoder.shutdown()
