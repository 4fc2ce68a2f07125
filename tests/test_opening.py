"""Opening a profile without pyarrow (``opening.ProfileFile``, what `popvision sql` and `info` open) checks
what the reader checks, with footers of its own parsing (``footer.parse_footer``) where they are small.

Every committed sample is opened both ways and must give the same tables, rows, bounds and column
chunks; a profile the reader refuses at open is refused in the same sentence; a footer above the size
the own parser takes is handed to pyarrow, and gives the same answers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from popvision_py import errors as E
from popvision_py.format import open_profile, open_profile_file, opening
from popvision_py.format import schema as S
from popvision_py.format.footer import Footer
from popvision_py.format.memberfs import MemberFileSystem
from popvision_py.format.opening import ProfileFile
from popvision_py.format.values import statistics
from popvision_py.sql import run_query

from .test_checksums_and_values import VIOLATIONS, by_hand, edited

SAMPLES = sorted((Path(__file__).resolve().parents[1] / "sample_profiles").glob("*/profile.pop"))
QUERY = "SELECT ipu, count(*) AS rows, sum(end_cycle - start_cycle) AS cycles FROM trace GROUP BY ipu ORDER BY ipu"


def same_opening(light: ProfileFile, reader: ProfileFile) -> None:
    """Assert that two opened profiles agree on everything a reader of footers uses."""
    assert light.tables == reader.tables
    assert light.declared == reader.declared
    for table in reader.tables:
        assert light.num_rows(table) == reader.num_rows(table)
        assert light.member_span(table) == reader.member_span(table)
        assert light.footer_bytes(table) == reader.footer_bytes(table)
        assert light.footer_verified(table) == reader.footer_verified(table)
        assert light.metadata(table).schema.names == reader.metadata(table).schema.names
        for column in S.TABLES[table].columns:
            assert light.has_column(table, column.name) == reader.has_column(table, column.name)
            for group in range(reader.metadata(table).num_row_groups):
                assert (statistics(light.metadata(table), group, column.name)
                        == statistics(reader.metadata(table), group, column.name))
    # the column chunks DuckDB's reads are checked against, chunk by chunk
    ours, theirs = MemberFileSystem(light), MemberFileSystem(reader)
    for table in reader.tables:
        a, b = ours._chunks(S.TABLES[table].member), theirs._chunks(S.TABLES[table].member)
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
        assert [(g, str(c)) for g, c, _ in a[2]] == [(g, str(c)) for g, c, _ in b[2]]


@pytest.mark.parametrize("path", SAMPLES, ids=[p.parent.name for p in SAMPLES])
def test_every_sample_opens_the_same_without_pyarrow(path: Path) -> None:
    # WHEN a sample is opened for its footers only, and by the reader
    with open_profile_file(path) as light, open_profile(path) as reader:
        # THEN its small footers were parsed by popvision's own parser, the reader's by pyarrow
        assert all(isinstance(light.metadata(t), Footer) for t in light.tables)
        assert not any(isinstance(reader.metadata(t), Footer) for t in reader.tables)
        # AND both say the same of every table, column, bound and column chunk
        same_opening(light, reader)


def test_a_footer_above_the_own_parsers_size_is_parsed_by_pyarrow(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a threshold that every footer is above
    sample = SAMPLES[0]
    expected = run_query(str(sample), QUERY)
    own = open_profile_file(sample)
    monkeypatch.setattr(opening, "OWN_PARSER_BYTES", 0)
    # WHEN the profile is opened for its footers THEN pyarrow parsed them, with the same answers
    with own, open_profile_file(sample) as light, open_profile(sample) as reader:
        assert not any(isinstance(light.metadata(t), Footer) for t in light.tables)
        same_opening(light, reader)
        same_opening(own, reader)
    # AND a query reads the same figures
    got = run_query(str(sample), QUERY)
    assert got.names == expected.names == ["ipu", "rows", "cycles"]
    for name in got.names:
        assert np.array_equal(got[name], expected[name])


@pytest.mark.parametrize("table, column, row, value, sentence", VIOLATIONS,
                         ids=[f"{t}.{c}={v}" for t, c, _, v, _ in VIOLATIONS])
def test_a_profile_refused_at_open_is_refused_in_the_same_sentence(tmp_path: Path, table: str, column: str, row: int,
                                                                   value, sentence: str | None) -> None:
    # GIVEN a profile written by hand with one value its schema does not allow
    bad = by_hand(tmp_path, table, edited(table, column, row, value))
    # WHEN it is opened by the reader and for its footers only
    outcomes = []
    for opener in (open_profile, open_profile_file):
        try:
            opener(bad).close()
            outcomes.append(None)
        except E.ProfileError as exc:
            outcomes.append((type(exc), str(exc)))
    # THEN both refuse it with the same sentence where the footer's statistics show the value (an integer
    # beyond its column's bounds), and both open it where they cannot (a code, a row out of order: refused
    # as it is read)
    assert outcomes[0] == outcomes[1]
    shown = isinstance(value, int) and sentence is not None and "less than its" not in sentence
    assert (outcomes[0] is not None) == shown, outcomes[0]
    if shown:
        assert outcomes[0][0] is E.ValueRangeError and outcomes[0][1].startswith(f"Column {table}.{column} of {bad} ")


def test_a_damaged_footer_is_one_sentence(tmp_path: Path) -> None:
    # GIVEN a profile whose trace footer lost its second half, its manifest's checksum of the footer
    # restamped (so the parser, not the checksum, meets the damage)
    from .test_format import _restamp, members, rezip

    contents = members(SAMPLES[0])
    data = contents["trace.parquet"]
    length = int.from_bytes(data[-8:-4], "little")
    footer = data[-8 - length:-8]
    cut = footer[: length // 2]
    contents["trace.parquet"] = data[:-8 - length] + cut + len(cut).to_bytes(4, "little") + b"PAR1"
    _restamp(contents, "trace")
    bad = rezip(tmp_path / "profile.pop", contents)
    # WHEN it is opened for its footers THEN one sentence says the trace is corrupt
    with pytest.raises(E.CorruptProfileError, match=rf"^Table trace of {bad} is corrupt \(.+\)\.$") as caught:
        open_profile_file(bad)
    # AND the sentence is the parser's, saying where the footer ends
    assert "the footer ends" in str(caught.value), str(caught.value)


def test_the_type_names_print_as_their_arrow_types() -> None:
    # GIVEN the schema's type names, and the text the opener compares stored types with (made without pyarrow)
    for name, text in S.ARROW_TEXT.items():
        # THEN each is what pyarrow prints for the Arrow type the name builds
        assert str(S.arrow_type(name)) == text, name
    # AND every column's type is one of them
    assert {c.type_name for t in S.TABLES.values() for c in t.columns} <= set(S.ARROW_TEXT)
