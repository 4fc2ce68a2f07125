"""Each table is decoded once per Report, only the columns the reports use (docs/api.md: "read once")."""

from __future__ import annotations

import pytest

import popvision_py as pv
from popvision_py.analysis.tables import TABLE_COLUMNS
from popvision_py.format import Profile
from popvision_py.render.document import build_report


@pytest.fixture
def reads(monkeypatch):
    seen: list[tuple[str, tuple[str, ...] | None]] = []
    original, original_batches = Profile.read_table, Profile.iter_batches

    def record(self, table, columns=None, **kwargs):
        seen.append((table, tuple(columns) if columns is not None else None))
        return original(self, table, columns, **kwargs)

    def record_batches(self, table, columns=None, **kwargs):  # the trace is streamed batch by batch
        seen.append((table, tuple(columns) if columns is not None else None))
        return original_batches(self, table, columns, **kwargs)

    monkeypatch.setattr(Profile, "read_table", record)
    monkeypatch.setattr(Profile, "iter_batches", record_batches)
    return seen


@pytest.mark.parametrize("name", ["oom", "exchange", "sharded", "inference"])
def test_every_section_reads_each_table_once_with_the_listed_columns(profiles, reads, name):
    # GIVEN a fresh Report WHEN every section is built (twice: answers are cached)
    with pv.open(profiles[name]) as report:
        build_report(report, "all")
        build_report(report, "all")
        report.memory.tile_variables(0, 0)
        report.liveness.live_at(0, 0)
    # THEN each table was decoded once, with exactly the columns tables.TABLE_COLUMNS lists
    tables = [t for t, _ in reads]
    assert len(tables) == len(set(tables))
    assert set(tables) <= set(TABLE_COLUMNS)
    assert all(columns == TABLE_COLUMNS[table] for table, columns in reads)
    assert "trace" in tables


def test_one_section_reads_only_its_tables(profiles, reads):
    # GIVEN a fresh Report WHEN only the memory section is built THEN the trace is never decoded
    with pv.open(profiles["oom"]) as report:
        build_report(report, "memory")
    assert sorted(t for t, _ in reads) == ["tile_memory", "variables"]
