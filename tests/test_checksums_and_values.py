"""Nothing trusted unchecked: a flipped byte in a profile is refused or harmless, never a new figure.

Pages carry Parquet page checksums, each footer a CRC-32 in the manifest (itself under the ZIP's
CRC-32); the readers check both, and the figures come from the data, or from footers so checked.
"""

from __future__ import annotations

import io
import json
import shutil
import zipfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from popvision_py.cli import main
from popvision_py.format import open_profile
from popvision_py.format import schema as S

from .test_format import members, rezip

SAMPLE = Path(__file__).resolve().parent.parent / "sample_profiles" / "mnist_inference" / "profile.pop"
COMMANDS = {
    "info": lambda path: ["info", str(path)],
    "report": lambda path: ["report", str(path), "--section", "all", "--format", "json"],
}


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def largest_chunk(table: str) -> tuple[int, int]:
    """(offset in the container, bytes) of the table's largest column chunk: its pages."""
    with open_profile(SAMPLE) as profile:
        offset, _ = profile.member_span(table)
        footer = profile.metadata(table)
    chunks = [footer.row_group(g).column(c) for g in range(footer.num_row_groups) for c in range(footer.num_columns)]
    chunk = max(chunks, key=lambda c: c.total_compressed_size)
    first = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
    return offset + first, chunk.total_compressed_size


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


@pytest.mark.parametrize("table", list(S.TABLES))
@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_a_flipped_byte_in_a_tables_pages_is_refused_or_harmless(
        tmp_path: Path, originals: dict[str, str], table: str, where: str) -> None:
    # GIVEN the sample with one byte flipped in the pages of a table's largest column chunk
    first, size = largest_chunk(table)
    position = {"start": first + size // 4, "middle": first + size // 2, "end": first + size - 2}[where]
    bad = flipped(tmp_path, position)
    for name, args in COMMANDS.items():
        # WHEN info and report read it
        result = run(*args(bad))
        # THEN each refuses it in one sentence naming the table, or prints the original's figures
        refused_or_identical(result, originals[name], tmp_path, table)


@pytest.mark.parametrize("table", list(S.TABLES))
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
    # GIVEN every byte of the trace's footer flipped in turn (the statistics the summary's bounds use)
    with open_profile(SAMPLE) as profile:
        offset, size = profile.member_span("trace")
        footer = profile.footer_bytes("trace")
    outcomes = set()
    for position in range(offset + size - footer, offset + size, 7):
        bad = flipped(tmp_path, position)
        # WHEN a report reads it THEN the report is refused or identical
        outcomes.add(refused_or_identical(run(*COMMANDS["report"](bad)), originals["report"], tmp_path, "trace"))
    assert outcomes == {"refused"}


def test_sql_checks_the_page_checksums_duckdb_skips(tmp_path: Path) -> None:
    # GIVEN the sample with a byte flipped in the trace's pages
    first, size = largest_chunk("trace")
    bad = flipped(tmp_path, first + size // 2)
    # WHEN a query reads the trace THEN it is refused in one sentence naming the table
    result = run("sql", str(bad), "SELECT sum(end_cycle - start_cycle) AS cycles, count(*) AS n FROM trace")
    assert result.exit_code == 2
    assert result.output.startswith(f"Error: Table trace of {bad} is corrupt")
    assert len(result.output.strip().splitlines()) == 1


def without_checksums(tmp_path: Path) -> Path:
    """The sample as an older writer left it: no page checksums, no footer checksums in the manifest."""
    contents = members(SAMPLE)
    manifest = json.loads(contents[S.MANIFEST_MEMBER])
    for name, spec in S.TABLES.items():
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
