"""Each table is decoded once per Report, only the columns the reports use (docs/api.md: "read once")."""

from __future__ import annotations

import pytest

import popvision_py as pv
from popvision_py.analysis.common.tables import TABLE_COLUMNS
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
    # (programs: the program steps the fullest tiles are followed over)
    assert sorted(t for t, _ in reads) == ["programs", "tile_memory", "variables"]


@pytest.mark.parametrize("name", ["oom", "exchange", "inference"])
def test_read_table_with_the_footer_kept_from_open_decodes_what_pyarrow_decodes(profiles, name):
    # GIVEN a profile opened once (each table's Parquet footer parsed at open and kept)
    import pyarrow as pa
    import pyarrow.parquet as pq

    with pv.open(profiles[name]) as report:
        profile = report.profile
        for table, columns in TABLE_COLUMNS.items():
            member = profile._members[table + ".parquet"]
            raw = pa.BufferReader(profile.read_at(member.offset, member.size))
            # WHEN a table, or some of its columns, is read through the reader
            # THEN it equals pyarrow's own pq.read_table of the same member, schema and values
            assert profile.read_table(table, columns).equals(pq.read_table(raw, columns=list(columns)),
                                                             check_metadata=True)
            raw.seek(0)
            assert profile.read_table(table).equals(pq.read_table(raw), check_metadata=True)
        # and a filtered read keeps only the rows that pass the filter
        ipu0 = profile.read_table("tile_memory", ["ipu"], filters=[("ipu", "=", 0)])
        assert set(ipu0.column("ipu").to_pylist()) == {0}


def test_answers_as_tables_hold_what_the_frames_hold(profiles):
    # GIVEN a Report WHEN an answer is asked for as a Table (what the renderers read) and as a frame
    import pandas as pd

    with pv.open(profiles["oom"]) as report:
        for key, args in [("memory.by_ipu", ()), ("memory.by_category", (0,)), ("liveness.peaks", ()),
                          ("stages.summary", ()), ("exchange.costliest", (3,)), ("summary.insights", ())]:
            view, name = key.split(".")
            table = report.answer(key, *args)
            # THEN the Table's columns are the frame's, value for value, and its frame is that frame
            frame = getattr(getattr(report, view), name)(*args)
            assert table.names == list(frame.columns) and len(table) == len(frame)
            pd.testing.assert_frame_equal(table.frame(), frame)
            assert table.frame() is frame  # built once
        # AND an answer that does not exist is refused by name
        with pytest.raises(KeyError, match="no answer 'memory.nothing'"):
            report.answer("memory.nothing")
        with pytest.raises(KeyError, match="no answer 'profile.close'"):
            report.answer("profile.close")


def test_an_imported_gpu_traces_kernels_are_read_a_rank_at_a_time_never_whole(tmp_path, monkeypatch):
    import threading

    from tests.importer.test_gpu_timeline import import_gpu_trace

    # GIVEN an imported GPU trace, and which thread decodes each table whole, and which tables are read by batches
    profile = import_gpu_trace(tmp_path)
    whole: dict[str, str] = {}
    batches: list[str] = []
    original, original_batches = Profile.read_table, Profile.iter_batches

    def record(self, table, columns=None, **kwargs):
        whole[table] = threading.current_thread().name
        return original(self, table, columns, **kwargs)

    def record_batches(self, table, columns=None, **kwargs):
        batches.append(table)
        return original_batches(self, table, columns, **kwargs)

    monkeypatch.setattr(Profile, "read_table", record)
    monkeypatch.setattr(Profile, "iter_batches", record_batches)
    # WHEN every section is built
    with pv.open(profile) as report:
        build_report(report, "all")
    # THEN the kernels were read by the GPU section a rank's row groups at a time, never decoded whole (at 5 GB of
    # traces the whole table, decoded ahead and held through every section, was a quarter of the report's peak)
    assert "kernels" in batches and "kernels" not in whole
    # AND no table was decoded ahead in the prefetch's thread: an import's sections each decode what they read
    # (``one_at_a_time``), the steps' names and cycles a piece at a time where nothing else holds them
    assert whole and set(whole.values()) == {"MainThread"}
    assert "programs" in batches


@pytest.mark.parametrize("name", ["oom", "exchange", "sharded"])
def test_a_report_lets_each_sections_answers_go_and_says_the_same(profiles, tmp_path, monkeypatch, reads, name):
    from popvision_py.analysis.report import KEPT, Report
    from popvision_py.render import jsonout

    path = profiles[name]
    # GIVEN every section reported holding every answer (hand_back handing no answer back)
    with monkeypatch.context() as m:
        m.setattr(Report, "hand_back", lambda self, tables=False: None)
        with pv.open(path) as report:
            held = jsonout.render(build_report(report, "all"))
            holding = set(report._cache)
    reads.clear()
    # WHEN it is reported letting each section's answers go once the section is built
    with pv.open(path) as report:
        let_go = jsonout.render(build_report(report, "all"))
        kept = set(report._cache)
        made = {k: list(v._arrays) for k, v in report._cache.items() if isinstance(k, tuple) and k[0] == "columns"}
    # THEN the report is the same, byte for byte, each table still decoded once
    assert let_go == held
    tables = [t for t, _ in reads]
    assert len(tables) == len(set(tables)) and "trace" in tables
    # AND what is held after is the tables decoded whole and the trace's summary only, not the sections' answers
    # (the tables decoded beside the trace may still be landing when the report ends: which ones, not asserted)
    assert "trace" in kept and all(k in KEPT or (isinstance(k, tuple) and k[0] == "columns") for k in kept)
    assert len(holding - kept) > 10
    # (and of the tables, the tables only: the arrays made from them are made again when asked)
    assert made and all(arrays == [] for arrays in made.values())


def test_an_imports_report_lets_each_sections_tables_go_and_says_the_same(tmp_path, monkeypatch, reads):
    from popvision_py.analysis.report import KEPT, Report
    from popvision_py.render import jsonout
    from tests.importer.test_gpu_timeline import import_gpu_trace

    path = import_gpu_trace(tmp_path)
    # GIVEN an import's every section reported holding every answer and every table
    with monkeypatch.context() as m:
        m.setattr(Report, "hand_back", lambda self, tables=False: None)
        with pv.open(path) as report:
            held = jsonout.render(build_report(report, "all"))
            holding = set(report._cache)
    assert ("columns", "programs") in holding
    reads.clear()
    # WHEN it is reported letting each section's answers and tables go once the section is built
    with pv.open(path) as report:
        let_go = jsonout.render(build_report(report, "all"))
        kept = set(report._cache)
    # THEN the report is the same, byte for byte
    assert let_go == held
    # AND what is held after is the trace's summary only: no answer, no table decoded whole
    assert "trace" in kept and kept <= set(KEPT)
    # AND a table two sections read is read again, not held between them (the trace once: its summary is kept)
    tables = [t for t, _ in reads]
    assert tables.count("trace") == 1 and len(tables) > len(set(tables))


@pytest.mark.parametrize("name", ["gpu import", "emulated"])
def test_the_system_section_is_built_before_the_profiles_tables_are_decoded(profiles, tmp_path, monkeypatch, name):
    from popvision_py.analysis.report import Report
    from popvision_py.render import document
    from tests.importer.test_gpu_timeline import import_gpu_trace

    # GIVEN a GPU trace's import, with its ranks' CPU timelines beside it (the System section's files), or an
    # emulated run
    path = import_gpu_trace(tmp_path) if name == "gpu import" else profiles["exchange"]
    assert (path.parent / "system").is_dir() or name == "emulated"
    done: list[str] = []
    system = document._SECTION_BUILDERS["system"]
    monkeypatch.setitem(document._SECTION_BUILDERS, "system",
                        lambda doc, r, figures: (system(doc, r, figures), done.append("system")))
    prefetch = Report.prefetch
    monkeypatch.setattr(Report, "prefetch", lambda self, names: (done.append("decode"), prefetch(self, names))[1])
    # WHEN every section is reported THEN the System section, which reads no table of the profile, is built before
    # the tables are decoded (its events' load does not stand on them), and shown in its place all the same; an
    # import's tables are never decoded ahead (``one_at_a_time``)
    with pv.open(path) as report:
        doc = document.build_report(report, "all")
    assert done == (["system"] if name == "gpu import" else ["system", "decode"])
    shown = doc.sections()
    assert "system" in shown and shown == sorted(shown, key=lambda s: document.SECTIONS.index(s))
