"""Nothing trusted unchecked: a flipped byte in a profile is refused or harmless, never a new figure.

Pages carry Parquet page checksums, each footer a CRC-32 in the manifest (itself under the ZIP's
CRC-32); the readers check both, and the figures come from the data, or from footers so checked.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from popvision_py import errors as E
from popvision_py.cli import main
from popvision_py.format import open_profile
from popvision_py.format import schema as S

from .test_format import _restamp, members, rezip, tiny_tables, write_tiny

SAMPLE = Path(__file__).resolve().parent.parent / "sample_profiles" / "mnist_inference" / "profile.pop"
# the tables the sample holds: those of its schema version (a later version's tables are absent)
SAMPLE_TABLES = [name for name, spec in S.TABLES.items()
                 if spec.since <= json.loads(zipfile.ZipFile(SAMPLE).read(S.MANIFEST_MEMBER))["schema_version"]]
COMMANDS = {
    "info": lambda path: ["info", str(path)],
    "report": lambda path: ["report", str(path), "--section", "all", "--format", "json"],
}


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def largest_chunk(table: str) -> tuple[int, int, str]:
    """(offset in the container, bytes, column) of the table's largest column chunk: its pages."""
    with open_profile(SAMPLE) as profile:
        offset, _ = profile.member_span(table)
        footer = profile.metadata(table)
    chunks = [footer.row_group(g).column(c) for g in range(footer.num_row_groups) for c in range(footer.num_columns)]
    chunk = max(chunks, key=lambda c: c.total_compressed_size)
    first = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
    return offset + first, chunk.total_compressed_size, chunk.path_in_schema


def flipped(tmp_path: Path, position: int) -> Path:
    """A copy of the sample, at the same path each time, with one byte at ``position`` flipped."""
    data = bytearray(SAMPLE.read_bytes())
    data[position] ^= 0x20
    out = tmp_path / "profile.pop"
    out.write_bytes(bytes(data))
    return out


@pytest.fixture(scope="module")
def originals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Each command's output on the unflipped sample, copied to the path the flipped copies use."""
    folder = tmp_path_factory.mktemp("original")
    copy = folder / "profile.pop"
    shutil.copy(SAMPLE, copy)
    out = {}
    for name, args in COMMANDS.items():
        result = run(*args(copy))
        assert result.exit_code == 0, result.output
        out[name] = result.output.replace(str(folder), "<dir>")
    return out


def refused_or_identical(result, original: str, folder: Path, table: str) -> str:
    if result.exit_code == 0:
        assert result.output.replace(str(folder), "<dir>") == original
        return "identical"
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert f"Table {table} " in lines[0], lines[0]
    return "refused"


@pytest.mark.parametrize("table", SAMPLE_TABLES)
@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_a_flipped_byte_in_a_tables_pages_is_refused_or_harmless(
        tmp_path: Path, originals: dict[str, str], table: str, where: str) -> None:
    # GIVEN the sample with one byte flipped in the pages of a table's largest column chunk
    first, size, _ = largest_chunk(table)
    position = {"start": first + size // 4, "middle": first + size // 2, "end": first + size - 2}[where]
    bad = flipped(tmp_path, position)
    for name, args in COMMANDS.items():
        # WHEN info and report read it
        result = run(*args(bad))
        # THEN each refuses it in one sentence naming the table, or prints the original's figures
        refused_or_identical(result, originals[name], tmp_path, table)


@pytest.mark.parametrize("table", SAMPLE_TABLES)
def test_a_flipped_byte_in_a_footer_is_refused_at_open(tmp_path: Path, table: str) -> None:
    # GIVEN the sample with one byte of a table's footer flipped (its statistics and offsets)
    with open_profile(SAMPLE) as profile:
        offset, size = profile.member_span(table)
        footer = profile.footer_bytes(table)
    bad = flipped(tmp_path, offset + size - footer + footer // 2)
    # WHEN info opens it THEN it is refused before pyarrow parses the footer
    result = run("info", str(bad))
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"Error: Table {table} of {bad} is corrupt (its footer does not match the checksum in the manifest)."
    )


def test_total_cycles_never_come_from_a_flipped_statistic(tmp_path: Path, originals: dict[str, str]) -> None:
    # GIVEN every 23rd byte of the trace's footer flipped in turn (90 of its 2,076 bytes: the statistics the
    # summary's bounds use among them, as well as the schema and the row groups' offsets)
    with open_profile(SAMPLE) as profile:
        offset, size = profile.member_span("trace")
        footer = profile.footer_bytes("trace")
    outcomes = set()
    for position in range(offset + size - footer, offset + size, 23):
        bad = flipped(tmp_path, position)
        # WHEN a report reads it THEN the report is refused or identical
        outcomes.add(refused_or_identical(run(*COMMANDS["report"](bad)), originals["report"], tmp_path, "trace"))
    assert outcomes == {"refused"}


def test_sql_checks_the_page_checksums_duckdb_skips(tmp_path: Path) -> None:
    # GIVEN the sample with a byte flipped in the trace's pages
    first, size, column = largest_chunk("trace")
    bad = flipped(tmp_path, first + size // 2)
    # WHEN a query reads that column (it must name it: DuckDB 1.2 reads no column a query leaves out)
    # THEN it is refused in one sentence naming the table
    result = run("sql", str(bad), f"SELECT sum(end_cycle - start_cycle) AS cycles, count(*) AS n, max({column}) AS m "
                                  "FROM trace")
    assert result.exit_code == 2
    assert result.output.startswith(f"Error: Table trace of {bad} is corrupt")
    assert len(result.output.strip().splitlines()) == 1


def without_checksums(tmp_path: Path) -> Path:
    """The sample as an older writer left it: no page checksums, no footer checksums in the manifest."""
    contents = members(SAMPLE)
    manifest = json.loads(contents[S.MANIFEST_MEMBER])
    for name, spec in S.TABLES.items():
        if spec.member not in contents:  # a table of a later schema version than the sample's
            continue
        table = pq.read_table(io.BytesIO(contents[spec.member]))
        sink = io.BytesIO()
        pq.write_table(table, sink, compression="zstd")
        contents[spec.member] = sink.getvalue()
        manifest["tables"][name].pop("footer_crc32")
        manifest["tables"][name]["bytes"] = len(contents[spec.member])
    contents[S.MANIFEST_MEMBER] = json.dumps(manifest, indent=2, sort_keys=True).encode()
    return rezip(tmp_path / "profile.pop", contents)


def test_a_profile_without_checksums_still_opens_with_the_same_figures(tmp_path: Path) -> None:
    # GIVEN the sample rewritten without page or footer checksums
    old = without_checksums(tmp_path)
    with zipfile.ZipFile(old) as archive:
        footer = pq.ParquetFile(io.BytesIO(archive.read("trace.parquet"))).metadata
    assert footer.row_group(0).column(0).statistics is not None
    # WHEN a report reads it, and the sample's report
    result = run(*COMMANDS["report"](old))
    sample = run(*COMMANDS["report"](SAMPLE))
    # THEN it opens and its figures are the sample's
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["sections"] == json.loads(sample.output)["sections"]


def test_a_small_profile_without_checksums_is_checked_against_the_zip_crc(tmp_path: Path) -> None:
    # GIVEN an old profile (no footer checksums) with a byte of the trace's footer flipped
    old = without_checksums(tmp_path)
    with open_profile(old) as profile:
        offset, size = profile.member_span("trace")
        footer = profile.footer_bytes("trace")
    data = bytearray(old.read_bytes())
    data[offset + size - footer + 40] ^= 0x01
    old.write_bytes(bytes(data))
    # WHEN a report reads it THEN the member's ZIP CRC-32 refuses it
    result = run(*COMMANDS["report"](old))
    assert result.exit_code == 2
    assert result.output.strip() == f"Error: Table trace of {old} is corrupt (its checksum does not match)."


# -- values ------------------------------------------------------------------------------------


def with_table(good: Path, table: str, frame: pd.DataFrame, nullable: bool = False) -> bytes:
    """The profile ``good`` with ``table`` rewritten by pyarrow from ``frame`` (as another writer
    would, its footer checksum stamped): everything else, the manifest's creation time included, as it was."""
    contents = members(good)
    schema = S.TABLES[table].schema
    if nullable:
        schema = pa.schema([field.with_nullable(True) for field in schema])
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pandas(frame, schema=schema, preserve_index=False), sink)
    contents[S.TABLES[table].member] = sink.getvalue()
    _restamp(contents, table)
    out = io.BytesIO()
    rezip(out, contents)
    return out.getvalue()


def by_hand(tmp_path: Path, table: str, frame: pd.DataFrame, nullable: bool = False) -> Path:
    """The tiny profile with ``table`` replaced by ``frame``, written with pyarrow as another writer
    would (its footer checksum stamped, so only the values are wrong)."""
    path = tmp_path / "profile.pop"
    path.write_bytes(with_table(write_tiny(tmp_path / "good.pop"), table, frame, nullable))
    return path


def edited(table: str, column: str, row: int, value) -> pd.DataFrame:
    frame = tiny_tables()[table]
    frame[column] = frame[column].astype(object)
    frame.loc[row, column] = value
    return frame


VIOLATIONS = [
    # (table, column, row, value, the sentence after "Column <table>.<column> of <path> ")
    ("trace", "ipu", 2, 2, "holds 2 at row 2, above its largest value 1 (the target's num_ipus is 2)."),
    ("trace", "ipu", 1, -1, "holds -1 at row 1, below its least value 0."),
    ("trace", "start_cycle", 0, -5, "holds -5 at row 0, below its least value 0."),
    ("trace", "end_cycle", 3, 45, "holds 45 at row 3, less than its start_cycle 50."),
    ("trace", "phase", 1, "warp", "holds the unknown value 'warp' at row 1; it may hold compute, sync, "
                                  "exchange, stream, idle."),
    ("trace", "pass", 3, "sideways", "holds the unknown value 'sideways' at row 3; it may hold forward, "
                                     "backward, update, none."),
    ("trace", "micro_batch", 0, -2, "holds -2 at row 0, below its least value -1."),
    ("tile_memory", "tile", 2, 4, "holds 4 at row 2, above its largest value 3 (the target's tiles_per_ipu is 4)."),
    ("tile_memory", "bytes", 1, -300, "holds -300 at row 1, below its least value 0."),
    ("tile_cycles", "cycles", 5, -1, "holds -1 at row 5, below its least value 0."),
    ("tile_cycles", "vertices", 2, 0, "holds 0 at row 2, below its least value 1."),
    ("programs", "cycles", 0, 2**62, f"holds {2**62:,} at row 0, above its largest value {2**53 - 1:,}."),
    ("ops", "ipu", 1, 7, "holds 7 at row 1, above its largest value 1 (the target's num_ipus is 2)."),
    ("variables", "live_to_step", 1, -1, "holds -1 at row 1, below its least value 0."),
    ("variables", "live_from_step", 0, 3, None),
    ("variables", "dtype", 1, "fp8", "holds the unknown value 'fp8' at row 1; it may hold fp16, fp32, int32, mixed."),
    ("liveness", "worst_tile", 1, 9, "holds 9 at row 1, above its largest value 3 (the target's tiles_per_ipu is 4)."),
    ("exchanges", "src_ipu", 0, -3, "holds -3 at row 0, below its least value -2."),
    ("exchanges", "kind", 0, "teleport", "holds the unknown value 'teleport' at row 0; it may hold internal, "
                                         "inter_ipu, host, remote_buffer, all_reduce."),
]


@pytest.mark.parametrize("table, column, row, value, sentence", VIOLATIONS,
                         ids=[f"{t}.{c}={v}" for t, c, _, v, _ in VIOLATIONS])
def test_each_constraint_violated_is_one_sentence_naming_table_column_and_row(
        tmp_path: Path, table: str, column: str, row: int, value, sentence: str | None) -> None:
    # GIVEN a profile written by hand with one value its schema does not allow
    bad = by_hand(tmp_path, table, edited(table, column, row, value))
    named = column
    if sentence is None:  # live_from_step after live_to_step: the later column is named
        sentence, named = "holds 1 at row 0, less than its live_from_step 3.", "live_to_step"
    expected = f"Column {table}.{named} of {bad} {sentence}"
    # WHEN the table is read THEN the reader refuses it with that sentence (at open, where the footer's
    # statistics show the value, before anything is sized from them)
    with pytest.raises(E.ValueRangeError) as caught, open_profile(bad) as profile:
        profile.read_table(table)
    assert str(caught.value) == expected
    # AND the writer refuses to write it, with the same words
    with pytest.raises(E.ProfileWriteError, match=re.escape(sentence)):
        write_tiny(tmp_path / "written.pop", {**tiny_tables(), table: edited(table, column, row, value)})


def test_a_null_is_named_with_its_row(tmp_path: Path) -> None:
    # GIVEN a trace whose step column holds a null (another writer left the field nullable)
    frame = tiny_tables()["trace"]
    frame["step"] = pd.array([0, 1, None, 0], dtype="Int32")
    bad = by_hand(tmp_path, "trace", frame, nullable=True)
    # WHEN a report reads it THEN one sentence names the table, column and row, exit 2
    result = run(*COMMANDS["report"](bad))
    assert result.exit_code == 2
    assert result.output.strip() == f"Error: Column trace.step of {bad} is null at row 2; it may not be null."


def test_a_repeated_program_step_is_refused(tmp_path: Path) -> None:
    # GIVEN programs holding IPU 1's step 0 twice
    frame = edited("programs", "step", 3, 0)
    bad = by_hand(tmp_path, "programs", frame)
    # WHEN a report reads it THEN one sentence names the table, the repeated key and its row
    result = run(*COMMANDS["report"](bad))
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"Error: Table programs of {bad} repeats its row for ipu 1, step 0 at row 3; ipu and step identify a row.")


@pytest.mark.parametrize("block", [1, 2, 3, 1 << 16])
def test_rows_count_as_ascending_only_when_each_is_below_the_next_as_a_tuple(monkeypatch: pytest.MonkeyPatch,
                                                                             block: int) -> None:
    # GIVEN (ipu, step) columns in their own types: ascending, with one row repeated, one swapped, a tie broken by
    # the step the other way, and random ones, compared `block` rows at a time
    from popvision_py.format import arrays
    monkeypatch.setattr(arrays, "KEY_BLOCK", block)
    ascending = (np.array([0, 0, 0, 1, 1, 2], np.int16), np.array([0, 1, 5, 0, 2, 0], np.int32))
    cases = [ascending, (ascending[0], np.array([0, 1, 5, 0, 0, 0], np.int32)),
             (ascending[0], np.array([0, 5, 1, 0, 2, 0], np.int32)), (ascending[0][::-1].copy(), ascending[1])]
    rng = np.random.default_rng(7)
    for _ in range(20):
        ipu = np.sort(rng.integers(0, 3, 9)).astype(np.int16)
        cases.append((ipu, rng.integers(0, 4, 9).astype(np.int32)))
    for ipu, step in cases:
        rows = list(zip(ipu.tolist(), step.tolist()))
        # THEN it says ascending exactly when every row is less than the next, compared as tuples
        assert arrays.ascending([ipu, step]) == all(x < y for x, y in zip(rows, rows[1:])), rows
        assert arrays.ascending([ipu, step], strict=False) == all(x <= y for x, y in zip(rows, rows[1:])), rows
        assert arrays.ascending([ipu], strict=False) == all(x <= y for x, y in zip(ipu, ipu[1:]))


def test_a_repeated_step_out_of_order_is_refused_with_its_later_row(tmp_path: Path) -> None:
    # GIVEN programs whose rows are out of (ipu, step) order, and IPU 1's step 0 twice apart
    frame = edited("programs", "step", 3, 0)
    frame = pd.concat([frame.iloc[[3]], frame.drop(index=3)], ignore_index=True)
    bad = by_hand(tmp_path, "programs", frame)
    # WHEN a report reads it THEN the sort finds the repeat: one sentence naming the later of the two rows
    later = int(np.flatnonzero((frame["ipu"] == 1) & (frame["step"] == 0))[1])
    result = run(*COMMANDS["report"](bad))
    assert result.exit_code == 2
    assert result.output.strip() == (f"Error: Table programs of {bad} repeats its row for ipu 1, step 0 at row "
                                     f"{later}; ipu and step identify a row.")


def test_a_violation_in_the_trace_stops_the_report_in_one_sentence(tmp_path: Path) -> None:
    # GIVEN a trace with an IPU beyond the target's
    bad = by_hand(tmp_path, "trace", edited("trace", "ipu", 2, 5))
    # WHEN report, export-trace read it THEN one line each, exit 2, no traceback
    for args in (COMMANDS["report"](bad), ["export-trace", str(bad), "-o", str(tmp_path / "t.json")]):
        result = run(*args)
        assert result.exit_code == 2, result.output
        assert result.output.strip() == (
            f"Error: Column trace.ipu of {bad} holds 5 at row 2, above its largest value 1 "
            f"(the target's num_ipus is 2).")


# -- the manifest --------------------------------------------------------------------------------


def with_manifest(tmp_path: Path, edit) -> Path:
    good = write_tiny(tmp_path / "good.pop")
    contents = members(good)
    text = edit(json.loads(contents[S.MANIFEST_MEMBER]))
    contents[S.MANIFEST_MEMBER] = text.encode() if isinstance(text, str) else json.dumps(text).encode()
    return rezip(tmp_path / "profile.pop", contents)


def test_a_deeply_nested_manifest_is_one_sentence(tmp_path: Path) -> None:
    # GIVEN a manifest nesting 100,000 lists (json.loads alone raises RecursionError)
    bad = with_manifest(tmp_path, lambda m: json.dumps(m)[:-1] + ', "deep": ' + "[" * 100_000 + "]" * 100_000 + "}")
    for command in ("info", "report"):
        # WHEN info and report open it THEN one sentence, exit 2
        result = run(*COMMANDS[command](bad))
        assert result.exit_code == 2, result.output
        assert result.output.strip() == f"Error: The manifest of {bad} nests objects more than 32 levels deep."
    # AND a manifest 40 levels deep (no RecursionError) is refused the same way
    bad = with_manifest(tmp_path, lambda m: json.dumps(m)[:-1] + ', "deep": ' + "[" * 40 + "]" * 40 + "}")
    assert "more than 32 levels deep" in run("info", str(bad)).output


@pytest.mark.parametrize("where, key, value, sentence", [
    ("target", "num_ipus", 0, "The target in the manifest of {bad} has num_ipus = 0; it must be between 1 and 32,767."),
    ("target", "tiles_per_ipu", -4, "The target in the manifest of {bad} has tiles_per_ipu = -4; it must be between 1 "
                                    "and 2,147,483,647."),
    ("target", "bytes_per_tile", 0, "The target in the manifest of {bad} has bytes_per_tile = 0; it must be between 1 "
                                    "and 1,099,511,627,776."),
    ("target", "clock_hz", 1e30, "The target in the manifest of {bad} has clock_hz = 1e+30; it must be a finite "
                                 "frequency above 0 and at most 1e+12 Hz."),
    ("target", "clock_hz", -1.0, "The target in the manifest of {bad} has clock_hz = -1.0; it must be a finite "
                                 "frequency above 0 and at most 1e+12 Hz."),
    ("run", "micro_batch_size", 0, "The run configuration in the manifest of {bad} has micro_batch_size = 0; it must "
                                   "be between 1 and 2,147,483,647."),
    ("run", "device_iterations", 2**70, "The run configuration in the manifest of {bad} has device_iterations = "
                                        "1180591620717411303424; it must be between 1 and 2,147,483,647."),
])
def test_manifest_sizes_are_checked_field_by_field(tmp_path: Path, where: str, key: str, value, sentence: str) -> None:
    # GIVEN a manifest with one size out of range
    def edit(manifest):
        manifest[where][key] = value
        return manifest
    bad = with_manifest(tmp_path, edit)
    # WHEN info opens it THEN one sentence names the field and the allowed range
    result = run("info", str(bad))
    assert result.exit_code == 2
    assert result.output.strip() == "Error: " + sentence.format(bad=bad)


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_a_clock_of_nan_or_infinity_is_not_json(tmp_path: Path, constant: str) -> None:
    # GIVEN a manifest whose clock is NaN or Infinity (Python's json would take them)
    bad = with_manifest(tmp_path,
                        lambda m: json.dumps(m).replace('"clock_hz": 1330000000.0', f'"clock_hz": {constant}'))
    # WHEN info opens it THEN one sentence, exit 2
    result = run("info", str(bad))
    assert result.exit_code == 2
    assert result.output.strip() == f"Error: The manifest of {bad} is not valid JSON ({constant} is not a JSON number)."


# -- sums beyond int64 ---------------------------------------------------------------------------


def long_trace(rows: int, duration: int) -> pd.DataFrame:
    """``rows`` executions of IPU 0's step 0, one after another, each ``duration`` cycles."""
    start = np.arange(rows, dtype=np.int64) * 0  # all from cycle 0: a hostile file's overlap
    return pd.DataFrame({
        "run": np.zeros(rows, np.int32), "iteration": np.zeros(rows, np.int32), "micro_batch": np.zeros(rows, np.int32),
        "ipu": np.zeros(rows, np.int16), "stage": np.zeros(rows, np.int16), "pass": ["forward"] * rows,
        "step": np.zeros(rows, np.int32), "phase": ["compute"] * rows, "start_cycle": start,
        "end_cycle": start + duration,
    })


def test_durations_that_would_wrap_int64_are_refused(tmp_path: Path) -> None:
    # GIVEN 2,048 trace rows of 2**53 - 1 cycles each, all on IPU 0 (their sum is 2**64: int64 wraps)
    path = write_tiny(tmp_path / "profile.pop", {**tiny_tables(), "trace": long_trace(2048, 2**53 - 1)})
    # WHEN a report sums them THEN one sentence says so, exit 2
    result = run(*COMMANDS["report"](path))
    assert result.exit_code == 2, result.output
    assert result.output.strip() == ("Error: The trace's durations sum to 1.84e+19 cycles, beyond what 64-bit "
                                     "integers hold.")


def test_total_flops_beyond_int64_are_exact(tmp_path: Path) -> None:
    # GIVEN op 0 of 2**53 - 1 FLOPs, run 2,048 times (its step 0 on IPU 0 has 2,048 trace rows)
    tables = tiny_tables()
    tables["ops"].loc[0, "flops"] = 2**53 - 1
    trace = long_trace(2048, 1)
    trace["start_cycle"], trace["end_cycle"] = np.arange(2048), np.arange(2048) + 1
    path = write_tiny(tmp_path / "profile.pop", {**tables, "trace": trace})
    # WHEN a report gives total FLOPs THEN it is (2**53 - 1) x 2,048 exactly (op 1 never runs), not int64's wrap
    result = run(*COMMANDS["report"](path))
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["sections"]["summary"]["figures"]["total_flops"] == (2**53 - 1) * 2048
