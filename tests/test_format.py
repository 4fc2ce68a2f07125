"""The profile.pop format: round trips, projection, atomic writes and every bad-file case."""

from __future__ import annotations

import io
import json
import signal
import struct
import subprocess
import sys
import textwrap
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from popvision_py import errors as E
from popvision_py.cli import main
from popvision_py.format import ProfileWriter, levels, open_profile
from popvision_py.format import schema as S
from popvision_py.format.spec import tables_markdown

ROOT = Path(__file__).resolve().parents[1]

TARGET = {"arch": "mk2", "num_ipus": 2, "tiles_per_ipu": 4, "bytes_per_tile": 1000, "clock_hz": 1.33e9}
RUN = {
    "model": "tiny",
    "strategy": "sharded",
    "mode": "training",
    "stages": [{"stage": 0, "ipu": 0, "blocks": ["B1"]}, {"stage": 1, "ipu": 1, "blocks": ["B2"]}],
    "micro_batch_size": 2,
    "gradient_accumulation": 1,
    "device_iterations": 1,
    "replication_factor": 1,
}


def tiny_tables() -> dict[str, pd.DataFrame]:
    """A few hand-written rows for every table: two IPUs, one op each, forward only; the trace's levels
    of detail folded from its rows as the writer folds them."""
    tables = _tiny_tables()
    fold = levels.LevelFold()
    fold.add_table(pa.Table.from_pandas(tables["trace"], preserve_index=False))
    tables["trace_levels"] = fold.result().to_pandas()
    return tables


def _tiny_tables() -> dict[str, pd.DataFrame]:
    return {
        "ops": pd.DataFrame({
            "op_id": [0, 1], "name": ["l1/matmul", "l2/matmul"], "kind": ["matmul", "matmul"],
            "block": ["B1", "B2"], "stage": [0, 1], "ipu": [0, 1], "pass": ["forward", "forward"],
            "flops": [4096, 2048], "bytes": [512, 256], "tiles": [4, 2],
        }),
        "programs": pd.DataFrame({
            "ipu": [0, 0, 1, 1], "step": [0, 1, 0, 1],
            "type": ["compute_set", "exchange", "compute_set", "sync"],
            "name": ["l1/fwd", "l1/copy", "l2/fwd", "sync"], "op_id": [0, 0, 1, -1],
            "stage": [0, 0, 1, -1], "pass": ["forward", "forward", "forward", "none"],
            "tiles": [4, 4, 2, 2], "bytes": [0, 128, 0, 0], "cycles": [40, 10, 30, 5],
        }),
        "tile_cycles": pd.DataFrame({
            "ipu": [0, 0, 0, 0, 1, 1], "step": [0, 0, 0, 0, 0, 0], "tile": [0, 1, 2, 3, 0, 1],
            "cycles": [40, 35, 35, 30, 30, 20], "vertices": [6, 6, 6, 5, 2, 1],
        }),
        "tile_memory": pd.DataFrame({
            "ipu": [0, 0, 1], "tile": [0, 0, 0], "category": ["weights", "activations", "weights"],
            "always_live": [True, False, True], "bytes": [600, 300, 100],
        }),
        "variables": pd.DataFrame({
            "var_id": [0, 1], "name": ["l1/weight", "l1/out"], "ipu": [0, 0],
            "category": ["weights", "activations"], "always_live": [True, False], "bytes": [2400, 1200],
            "start_tile": [0, 0], "tiles": [4, 4], "live_from_step": [0, 0], "live_to_step": [1, 1],
            "op_id": [0, 0], "dtype": ["fp16", "fp16"],
        }),
        "liveness": pd.DataFrame({
            "ipu": [0, 0], "step": [0, 1], "always_live_bytes": [2400, 2400],
            "not_always_live_bytes": [1200, 1200], "worst_tile": [0, 0], "worst_tile_bytes": [900, 900],
        }),
        "trace": pd.DataFrame({
            "run": [0, 0, 0, 0], "iteration": [0, 0, 0, 0], "micro_batch": [0, 0, 0, 0],
            "ipu": [0, 0, 1, 1], "stage": [0, 0, -1, 1], "pass": ["forward", "forward", "none", "forward"],
            "step": [0, 1, -1, 0], "phase": ["compute", "exchange", "idle", "compute"],
            "start_cycle": [0, 40, 0, 50], "end_cycle": [40, 50, 50, 80],
        }),
        "kernels": pd.DataFrame({  # schema 5: a GPU's kernels (an imported trace's); the format takes any profile's
            "ipu": [0, 1], "stream": [7, 7], "kind": ["compute", "communication"],
            "name": ["sgemm", "ncclKernel_AllReduce"], "start_cycle": [0, 50], "end_cycle": [40, 80],
            "correlation": [1, 2], "launch_start_cycle": [0, 10], "launch_end_cycle": [5, 12],
            "launch_name": ["cudaLaunchKernel", "cudaLaunchKernel"], "bytes": [0, 4096], "group": ["", "[0, 1]"],
            "op": ["aten::mm", "record_param_comms"], "module": ["nn.Module: Linear_0", ""],
        }),
        "exchanges": pd.DataFrame({
            "ipu": [0], "step": [1], "kind": ["inter_ipu"], "src_ipu": [0], "dst_ipu": [1],
            "bytes": [128], "cycles": [10],
        }),
    }


def write_tiny(path: Path, tables: dict[str, pd.DataFrame] | None = None, **manifest) -> Path:
    with ProfileWriter(path, target=manifest.get("target", TARGET), run=manifest.get("run", RUN)) as writer:
        for name, frame in (tables or tiny_tables()).items():
            writer.write_table(name, frame)
    return path


@pytest.fixture()
def tiny(tmp_path: Path) -> Path:
    return write_tiny(tmp_path / "profile.pop")


def members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {info.filename: archive.read(info) for info in archive.infolist()}


def rezip(path: Path, contents: dict[str, bytes]) -> Path:
    """Write ``contents`` as a stored ZIP at ``path``: a profile with members changed by hand."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, data in contents.items():
            archive.writestr(name, data)
    return path


def parquet_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def run_cli(*args: str):
    return CliRunner().invoke(main, list(args))


# -- round trips ---------------------------------------------------------------------------------


def test_every_table_round_trips_with_its_schema_types(tiny: Path) -> None:
    # GIVEN a profile written from hand-made frames
    # WHEN each table is read back
    with open_profile(tiny) as profile:
        for name, frame in tiny_tables().items():
            table = profile.read_table(name)
            # THEN the types are the schema's and the values are the ones written
            assert table.schema == S.TABLES[name].schema, name
            back = table.to_pandas()
            for column in frame.columns:
                assert back[column].astype(object).tolist() == frame[column].tolist(), (name, column)


def test_tables_never_written_are_stored_empty(tmp_path: Path) -> None:
    path = write_tiny(tmp_path / "p.pop", {"ops": tiny_tables()["ops"]})
    with open_profile(path) as profile:
        assert profile.num_rows("ops") == 2
        assert profile.num_rows("trace") == 0
        assert profile.read_table("trace").schema == S.TABLES["trace"].schema


def test_manifest_records_rows_target_and_run(tiny: Path) -> None:
    with open_profile(tiny) as profile:
        manifest = profile.manifest
    assert manifest["format"] == "popvision-profile"
    assert manifest["schema_version"] == S.SCHEMA_VERSION
    assert manifest["target"] == TARGET
    assert manifest["run"] == RUN
    # the tables written, and the trace's levels of detail the writer folded from the trace
    assert {name: t["rows"] for name, t in manifest["tables"].items()} == {
        name: len(frame) for name, frame in tiny_tables().items()
    } | {"trace_levels": manifest["tables"]["trace_levels"]["rows"]}
    assert manifest["tables"]["trace_levels"]["rows"] > 0


def test_unzipped_members_are_plain_parquet(tiny: Path, tmp_path: Path) -> None:
    # GIVEN a written profile, WHEN unzipped, THEN pyarrow reads each member as plain Parquet
    with zipfile.ZipFile(tiny) as archive:
        names = archive.namelist()
        assert names == ["manifest.json"] + [f"{t}.parquet" for t in S.TABLES]
        assert all(info.compress_type == zipfile.ZIP_STORED for info in archive.infolist())
        archive.extractall(tmp_path / "unzipped")
    trace = pq.read_table(tmp_path / "unzipped" / "trace.parquet")
    assert trace.column("end_cycle").to_pylist() == [40, 50, 50, 80]


def test_batches_of_a_large_table_are_appended_in_order(tmp_path: Path) -> None:
    # GIVEN a trace written in 5 batches of 300,000 rows, one micro-batch each (of 5 the run declares)
    path = tmp_path / "big.pop"
    rows = 300_000
    with ProfileWriter(path, target=TARGET, run={**RUN, "gradient_accumulation": 5}) as writer, \
            writer.table("trace") as trace:
        writer.write_table("programs", tiny_tables()["programs"])
        writer.write_table("ops", tiny_tables()["ops"])
        for batch in range(5):
            start = (np.arange(rows) + batch * rows) * 10
            trace.write({
                "run": np.zeros(rows, np.int32), "iteration": np.zeros(rows, np.int32),
                "micro_batch": np.full(rows, batch, np.int32), "ipu": np.zeros(rows, np.int16),
                "stage": np.zeros(rows, np.int16), "pass": ["forward"] * rows, "step": np.zeros(rows, np.int32),
                "phase": ["compute"] * rows, "start_cycle": start, "end_cycle": start + 10,
            })
    # THEN every row is there, in order, and the last batch's rows carry its micro-batch
    with open_profile(path) as profile:
        assert profile.num_rows("trace") == 5 * rows
        ends = profile.read_table("trace", ["end_cycle"]).column("end_cycle").to_numpy()
        assert (np.diff(ends) == 10).all() and ends[-1] == 5 * rows * 10
        assert profile.read_table("trace", ["micro_batch"]).column("micro_batch")[-1].as_py() == 4


def test_column_projection_decodes_only_the_columns_asked(tmp_path: Path) -> None:
    path = tmp_path / "p.pop"
    rows = 200_000
    frame = pd.DataFrame({
        "ipu": np.zeros(rows, np.int16), "tile": np.arange(rows, dtype=np.int32) % TARGET["tiles_per_ipu"],
        "category": pd.Categorical(["weights"] * rows), "always_live": np.ones(rows, bool),
        "bytes": np.arange(rows, dtype=np.int64),
    })
    write_tiny(path, {"tile_memory": frame})
    with open_profile(path) as profile:
        table = profile.read_table("tile_memory", ["bytes"])
        whole = profile.read_table("tile_memory")
    assert table.schema.names == ["bytes"]
    assert table.column("bytes").to_pylist()[-1] == rows - 1
    # 8 bytes a row for the one int64 column asked for, against 18 for the whole row
    assert table.nbytes == rows * 8
    assert whole.nbytes >= rows * 18


def test_writer_names_a_missing_column(tmp_path: Path) -> None:
    ops = tiny_tables()["ops"].drop(columns=["flops"])
    with pytest.raises(E.ProfileWriteError, match="Table ops lacks column\\(s\\) flops"):
        write_tiny(tmp_path / "p.pop", {"ops": ops})
    assert list(tmp_path.iterdir()) == []


def test_writer_rejects_values_that_do_not_fit(tmp_path: Path) -> None:
    ops = tiny_tables()["ops"].assign(stage=[0, 70_000])
    with pytest.raises(E.ProfileWriteError, match="ops.stage"):
        write_tiny(tmp_path / "p.pop", {"ops": ops})


# -- bad files -------------------------------------------------------------------------------------


def _not_zip(path: Path, good: Path) -> Path:
    path.write_text("step,cycles\n0,10\n")
    return path


def _empty(path: Path, good: Path) -> Path:
    path.write_bytes(b"")
    return path


def _truncated(path: Path, good: Path) -> Path:
    data = good.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def _corrupt_member(path: Path, good: Path) -> Path:
    contents = members(good)
    trace = bytearray(contents["trace.parquet"])
    trace[-30:-8] = b"\xff" * 22  # clobber the Parquet footer's metadata
    contents["trace.parquet"] = bytes(trace)
    return rezip(path, contents)


def _manifest_edit(**changes):
    def make(path: Path, good: Path) -> Path:
        contents = members(good)
        manifest = json.loads(contents["manifest.json"])
        for key, value in changes.items():
            if value is None:
                del manifest[key]
            else:
                manifest[key] = value
        contents["manifest.json"] = json.dumps(manifest).encode()
        return rezip(path, contents)
    return make


def _missing_table(path: Path, good: Path) -> Path:
    contents = members(good)
    del contents["trace.parquet"]
    return rezip(path, contents)


def _restamp(contents: dict[str, bytes], table: str) -> None:
    """The manifest's footer checksum of a table replaced by hand, as its writer would have stamped it."""
    data = contents[table + ".parquet"]
    length = int.from_bytes(data[-8:-4], "little")
    manifest = json.loads(contents["manifest.json"])
    manifest["tables"][table]["footer_crc32"] = zlib.crc32(data[-8 - length:])
    contents["manifest.json"] = json.dumps(manifest).encode()


def _missing_column(path: Path, good: Path) -> Path:
    contents = members(good)
    trace = pq.read_table(io.BytesIO(contents["trace.parquet"])).drop_columns(["end_cycle"])
    contents["trace.parquet"] = parquet_bytes(trace)
    _restamp(contents, "trace")
    return rezip(path, contents)


def _wrong_type(path: Path, good: Path) -> Path:
    contents = members(good)
    trace = pq.read_table(io.BytesIO(contents["trace.parquet"]))
    index = trace.schema.get_field_index("step")
    trace = trace.set_column(index, "step", trace.column("step").cast(pa.string()))
    contents["trace.parquet"] = parquet_bytes(trace)
    _restamp(contents, "trace")
    return rezip(path, contents)


def _path_member(path: Path, good: Path) -> Path:
    contents = members(good)
    contents["../evil.parquet"] = b"x"
    return rezip(path, contents)


def _huge_member(path: Path, good: Path) -> Path:
    # Claim in the central directory that trace.parquet is 1 TiB long (sizes live in ZIP64 extras).
    data = bytearray(good.read_bytes())
    name = b"trace.parquet"
    central = data.rfind(b"PK\x01\x02", 0, data.rfind(name))
    name_length, extra_length = struct.unpack_from("<HH", data, central + 28)
    extra = central + 46 + name_length
    end = extra + extra_length
    while extra < end:
        tag, size = struct.unpack_from("<HH", data, extra)
        if tag == 0x0001:
            struct.pack_into("<QQ", data, extra + 4, 1 << 40, 1 << 40)
            break
        extra += 4 + size
    else:
        struct.pack_into("<II", data, central + 20, 0xFFFFFFF0, 0xFFFFFFF0)
    path.write_bytes(bytes(data))
    return path


BAD_FILES = [
    ("not a zip", _not_zip, E.NotAProfileError, "is not a profile.pop"),
    ("empty", _empty, E.EmptyProfileError, "is empty"),
    ("truncated", _truncated, E.EmptyProfileError, "is truncated"),
    ("corrupt member", _corrupt_member, E.CorruptProfileError, "Table trace of .* is corrupt"),
    ("unknown format", _manifest_edit(format="chrome-trace"), E.UnknownFormatError, "format 'chrome-trace'"),
    ("newer schema", _manifest_edit(schema_version=S.SCHEMA_VERSION + 1), E.NewerSchemaError,
     f"schema version {S.SCHEMA_VERSION + 1}, newer than version {S.SCHEMA_VERSION}"),
    ("manifest lacks a key", _manifest_edit(target=None), E.ManifestError, "lacks the key 'target'"),
    ("manifest key of wrong type", _manifest_edit(schema_version="1"), E.ManifestError, "'schema_version' of type str"),
    ("missing table", _missing_table, E.MissingTableError, "has no trace table"),
    ("missing column", _missing_column, E.MissingColumnError, "has no column end_cycle"),
    ("wrong column type", _wrong_type, E.ColumnTypeError, "trace.step .* is string, expected int32"),
    ("path-like member", _path_member, E.UnexpectedMemberError, "unexpected member '../evil.parquet'"),
    ("member larger than the file", _huge_member, E.MemberSizeError, "trace.parquet"),
]


@pytest.mark.parametrize("case, make, error, sentence", BAD_FILES, ids=[c[0] for c in BAD_FILES])
def test_bad_file_raises_its_class_and_the_cli_says_one_line(tiny, tmp_path, case, make, error, sentence):
    # GIVEN a broken profile
    bad = make(tmp_path / "bad.pop", tiny)
    # WHEN it is opened, THEN the specific class is raised with its sentence
    with pytest.raises(error, match=sentence):
        open_profile(bad)
    # AND `popvision info` prints that one sentence on stderr and exits 2, without a traceback
    result = run_cli("info", str(bad))
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ")
    assert "Traceback" not in result.output


def test_a_directory_is_not_a_profile(tmp_path: Path) -> None:
    with pytest.raises(E.NotAProfileError, match="is a directory"):
        open_profile(tmp_path)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    result = run_cli("info", str(tmp_path / "nowhere.pop"))
    assert result.exit_code == 2
    assert "nowhere.pop does not exist" in result.stderr


# -- atomic writes -------------------------------------------------------------------------------

_SLOW_WRITER = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    from popvision_py.format import ProfileWriter
    sys.path.insert(0, {tests!r})
    from test_format import TARGET, RUN
    with ProfileWriter({path!r}, target=TARGET, run=RUN) as writer, writer.table("tile_cycles") as t:
        for i in range(10_000):
            n = 50_000
            t.write({{"ipu": np.zeros(n, np.int16), "step": np.full(n, i, np.int32),
                      "tile": np.arange(n, dtype=np.int32) % 4, "cycles": np.ones(n, np.int64),
                      "vertices": np.ones(n, np.int32)}})
            if i == 3:
                print("writing", flush=True)
    """
)


def default_sigint() -> None:
    """Give a child the SIGINT a terminal gives it (Python then raises KeyboardInterrupt).

    A shell starts background jobs (``cmd &``, nohup) with SIGINT ignored and children inherit
    that; without this the child would not see the test's SIGINT at all.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT, signal.SIGTERM], ids=["SIGKILL", "SIGINT", "SIGTERM"])
def test_an_interrupted_write_keeps_the_earlier_profile_and_leaves_no_temporary_file(tmp_path, tiny, sig):
    # GIVEN an earlier profile at the destination
    folder = tmp_path / "out"
    folder.mkdir()
    destination = folder / "profile.pop"
    destination.write_bytes(tiny.read_bytes())
    before = destination.read_bytes()
    # WHEN a writer of a large profile is killed mid-way
    script = _SLOW_WRITER.format(tests=str(Path(__file__).parent), path=str(destination))
    writer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, cwd=ROOT,
                              preexec_fn=default_sigint)
    assert writer.stdout.readline().strip() == b"writing"
    writer.send_signal(sig)
    writer.wait(timeout=30)
    # THEN the earlier profile is intact and readable, and nothing else is in the folder
    assert destination.read_bytes() == before
    assert sorted(p.name for p in folder.iterdir()) == ["profile.pop"]
    with open_profile(destination) as profile:
        assert profile.num_rows("trace") == 4


def test_an_exception_while_writing_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError):
        with ProfileWriter(tmp_path / "profile.pop", target=TARGET, run=RUN) as writer:
            writer.write_table("ops", tiny_tables()["ops"])
            raise RuntimeError("emulator failed")
    assert list(tmp_path.iterdir()) == []


# -- the CLI and the docs --------------------------------------------------------------------------


def test_info_describes_what_was_written(tiny: Path) -> None:
    result = run_cli("info", str(tiny))
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert f"popvision-profile v{S.SCHEMA_VERSION}" in out
    assert "tiles_per_ipu" in out and "1472" not in out and " 4" in out
    # each target figure on its own line, with the value written (tiles_per_ipu 4, not the Mk2's 1472)
    for key, value in TARGET.items():
        assert [key, str(value)] in [line.split() for line in out.splitlines()], key
    assert '"blocks": ["B1"]' in out
    for name, frame in tiny_tables().items():
        assert any(line.split()[:2] == [name, str(len(frame))] for line in out.splitlines()), name


def test_info_json_lists_rows_and_bytes(tiny: Path) -> None:
    result = run_cli("info", str(tiny), "--json")
    facts = json.loads(result.stdout)
    assert facts["tables"]["trace"]["rows"] == 4
    assert facts["tables"]["trace"]["bytes"] == zipfile.ZipFile(tiny).getinfo("trace.parquet").file_size


def test_version() -> None:
    result = run_cli("--version")
    assert result.exit_code == 0 and "popvision, version 0.1.0" in result.stdout


def test_the_format_doc_holds_the_schema() -> None:
    doc = (ROOT / "docs" / "profile-format.md").read_text()
    assert tables_markdown() in doc, "regenerate with: python -m popvision_py.format.spec"


def test_a_table_of_no_row_group_reads_as_its_empty_table():
    # GIVEN a Parquet file a writer closed without a row (no row group at all, as an empty table is written)
    from popvision_py.format.span import read_whole

    sink = io.BytesIO()
    pq.ParquetWriter(sink, pa.schema([("op_id", pa.int32()), ("name", pa.string())])).close()
    parquet = pq.ParquetFile(io.BytesIO(sink.getvalue()))
    assert parquet.metadata.num_row_groups == 0
    # WHEN it is read whole, or one column of it (pyarrow 18.0's own read() fails on it)
    # THEN it is the schema's empty table
    assert read_whole(parquet).schema.names == ["op_id", "name"] and read_whole(parquet).num_rows == 0
    assert read_whole(parquet, ["name"]).schema.names == ["name"]
