"""analysis.imported.gpu_ranks: the GPU's figures computed a run of ranks at a time (the row groups read once each, in
order) are those of one rank at a time and of the whole kernels table at once, row groups shared between ranks
included."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import popvision_py
from popvision_py.analysis.imported import gpu, gpu_ranks, intervals, kernels
from popvision_py.importer import find_traces, import_traces
from popvision_py.importer import profile as importer_profile
from tests.importer.test_import_spill import synthetic_gpu


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-rank synthetic GPU run imported with row groups of about 100 rows: a rank's kernels span several, and
    one row group holds both ranks' kernels."""
    folder = tmp_path_factory.mktemp("gpu_ranks")
    traces = synthetic_gpu(folder / "traces")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(importer_profile, "ROW_GROUP_ROWS", 100)
        patch.setattr(importer_profile, "KERNEL_GROUP_ROWS", 100)
        patch.setattr(importer_profile, "SLICE_ROWS", 30)  # written 30 rows at a time: a group across the ranks
        import_traces(find_traces([str(traces)]), folder / "out" / "profile.pop", jobs=1)
    return folder / "out" / "profile.pop"


def same(a, b) -> None:
    assert a.names == b.names
    for name in a.names:
        x, y = np.asarray(a[name]), np.asarray(b[name])
        assert x.dtype.kind == y.dtype.kind and len(x) == len(y), name
        if x.dtype.kind == "f":
            assert np.allclose(x, y, equal_nan=True, rtol=1e-12), name
        else:
            assert x.tolist() == y.tolist(), name


def test_each_figure_a_rank_at_a_time_is_the_whole_tables(imported):
    # GIVEN a GPU import whose kernels table has a row group holding both ranks' kernels
    with popvision_py.open(imported) as report:
        view = report.gpu
        metadata = report.profile.metadata("kernels")
        assert metadata.num_row_groups > 4
        # (its times delta-encoded, without a dictionary: they rise along each rank)
        column = {metadata.schema.column(i).name: i for i in range(metadata.num_columns)}["start_cycle"]
        chunk = metadata.row_group(0).column(column)
        assert "DELTA_BINARY_PACKED" in chunk.encodings and not chunk.has_dictionary_page
        assert set(gpu_ranks.row_groups(report.profile, 0)) & set(gpu_ranks.row_groups(report.profile, 1))
        # WHEN each figure is computed a rank at a time, and over every kernel at once
        k, window, last, spans = view.kernels(), view.window(), view.last_step_starts(), view.spans()
        hta = k.take(gpu.hta_selection(k, last))
        everything = gpu_ranks.Rank(k, hta, window, spans)
        whole = {name: gpu_ranks.FIGURES[name](everything, *args) for name, args in gpu_ranks.DEFAULTS.items()}
        whole["kernel_types"] = gpu.kernel_types(hta)
        by_rank = gpu_ranks.figures(report.profile, window, last, spans)
        # THEN every figure is the same, row for row, and the report's answers are these
        assert last is not None and len(k) > 2 * 100 and (k.ipu == 1).sum() > 100
        assert len(whole["bounds"]) > 4 and len(whole["phases"]) > 4 and len(whole["collectives"]) == 2
        for name, table in whole.items():
            same(by_rank[name], table)
        same(report.answer("gpu.temporal"), whole["temporal"])
        same(report.answer("gpu.kernels_by_name", 3), gpu.kernels_by_name(k, window, 3))
        same(report.answer("gpu.phases", None), gpu_ranks.FIGURES["phases"](everything, None))
        assert len(view.launches()) == len(gpu.launches(hta)) > 0


def test_a_long_rank_held_compressed_gives_every_figure_of_its_arrays(imported, monkeypatch):
    # GIVEN the import's two ranks of over 100 kernels each, in row groups of about 100, and each figure of their
    # kernels read as arrays
    with popvision_py.open(imported) as report:
        view, profile = report.gpu, report.profile
        window, last, spans = view.window(), view.last_step_starts(), view.spans()
        as_arrays = gpu_ranks.figures(profile, window, last, spans)
        ranks = gpu_ranks.rank_numbers(profile.run, int(profile.target["num_ipus"]))
        # WHEN a rank of 150 kernels or more is long: held compressed, and given back in pieces of 40 or more
        monkeypatch.setattr(kernels, "HOLD_KERNELS", 150)
        monkeypatch.setattr(gpu_ranks, "HOLD_KERNELS", 150)
        monkeypatch.setattr(intervals, "PIECE_KERNELS", 40)
        chunks = list(gpu_ranks.each_chunk(profile, ranks, rows=1))
        held = gpu_ranks.figures(profile, window, last, spans)
        # THEN both ranks are held, without arrays of their rows; their pieces, one after the other, are the rank's
        # kernels as read whole (each field, and the names and labels by their words)
        assert [type(c.k) for c in chunks] == [kernels.HeldKernels] * 2
        assert not hasattr(chunks[0].k, "start")
        for ipu, chunk in enumerate(chunks):
            whole = gpu_ranks.rank_kernels(profile, ipu, ranks)
            pieces = list(chunk.k.pieces())
            assert len(pieces) > 2 and sum(len(p) for p in pieces) == len(whole) == len(chunk.k)
            for name in kernels.ROW_FIELDS:
                got = np.concatenate([getattr(p, name) for p in pieces])
                if name == "name":
                    assert chunk.k.names[got].tolist() == whole.names[whole.name].tolist()
                elif name in kernels.LABELS:
                    assert chunk.k.labels[name][got].tolist() == whole.labels[name][getattr(whole, name)].tolist()
                else:
                    assert got.tolist() == (getattr(whole, name) - (ipu if name == "ipu" else 0)).tolist(), name
        # AND every figure is the one of the arrays
        assert held.keys() == as_arrays.keys()
        for name, table in as_arrays.items():
            same(held[name], table)


def reads(profile, monkeypatch) -> list[int]:
    """The row groups of ``profile`` read from now on, in order (the list grows as they are read)."""
    read: list[int] = []
    iter_batches = profile.iter_batches

    def counted(table, columns=None, batch_size=1 << 20, row_groups=None, use_threads=True):
        read.extend(row_groups if row_groups is not None else [])
        return iter_batches(table, columns, batch_size, row_groups, use_threads)

    monkeypatch.setattr(profile, "iter_batches", counted)
    return read


def test_each_chunk_reads_each_row_group_once_and_gives_each_ranks_kernels(imported, monkeypatch):
    # GIVEN the import whose row groups hold both ranks' kernels, and a rank's kernels span several
    with popvision_py.open(imported) as report:
        profile = report.profile
        ranks = gpu_ranks.rank_numbers(profile.run, int(profile.target["num_ipus"]))
        read = reads(profile, monkeypatch)
        groups = profile.metadata("kernels").num_row_groups
        # WHEN the ranks' kernels are read in chunks of one rank (a chunk holds one rank at least), and of all
        alone = [gpu_ranks.rank_kernels(profile, ipu, ranks) for ipu in range(len(ranks))]
        read.clear()
        streamed = list(gpu_ranks.each_chunk(profile, ranks, rows=1))
        # THEN each row group was read once, in order
        assert read == list(range(groups))
        read.clear()
        together = list(gpu_ranks.each_chunk(profile, ranks, rows=1 << 40))
        assert read == list(range(groups))
        # AND each chunk holds its ranks' kernels, those their own row groups hold, every column the same, their
        # IPUs counted from the chunk's first
        assert [(c.first, c.k.ranks.tolist()) for c in streamed] == [(0, [ranks[0]]), (1, [ranks[1]])]
        assert [(c.first, c.k.ranks.tolist()) for c in together] == [(0, ranks.tolist())]
        for ipu, chunk in enumerate(streamed):
            assert len(chunk.k) == len(alone[ipu]) > 100 and (chunk.k.ipu == 0).all()
            for name, value in vars(alone[ipu]).items():
                if isinstance(value, np.ndarray) and name not in ("ipu", "ranks"):
                    assert np.asarray(getattr(chunk.k, name)).tolist() == value.tolist(), name
            for label in gpu.LABELS:  # the words of its labels too, joined from its row groups
                assert chunk.k.labels[label].tolist() == alone[ipu].labels[label].tolist(), label
        both = together[0].k
        assert both.ipu.tolist() == [0] * len(alone[0]) + [1] * len(alone[1])
        assert both.start.tolist() == alone[0].start.tolist() + alone[1].start.tolist()


@pytest.fixture(scope="module")
def five(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 5-rank synthetic GPU run imported with row groups of about 100 rows."""
    folder = tmp_path_factory.mktemp("gpu_ranks_5")
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import make_gpu_trace

    make_gpu_trace.make(folder / "traces", total_mb=1.5, ranks=5, layers=3, bucket=2, jobs=1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(importer_profile, "KERNEL_GROUP_ROWS", 100)
        import_traces(find_traces([str(folder / "traces")]), folder / "out" / "profile.pop", jobs=1)
    return folder / "out" / "profile.pop"


@pytest.mark.parametrize("rows", [1, 450, 1 << 40])
def test_figures_of_runs_of_ranks_are_those_of_one_rank_at_a_time(five, rows, monkeypatch):
    # GIVEN a 5-rank GPU import, its ranks of about 200 kernels each (row groups of 100)
    with popvision_py.open(five) as report:
        view = report.gpu
        k, window, last, spans = view.kernels(), view.window(), view.last_step_starts(), view.spans()
        counts = np.bincount(k.ipu, minlength=5)
        assert len(counts) == 5 and (counts > 150).all() and (counts < 250).all()
        # WHEN the figures are computed one rank at a time, and in runs of ranks of at most ``rows`` kernels
        # (1: a rank each; 450: two ranks, the last alone; all: the five at once)
        monkeypatch.setattr(gpu_ranks, "CHUNK_KERNELS", 1)
        one = gpu_ranks.figures(report.profile, window, last, spans)
        monkeypatch.setattr(gpu_ranks, "CHUNK_KERNELS", rows)
        runs = gpu_ranks.figures(report.profile, window, last, spans)
        # THEN every figure is the same, row for row, each rank's rows in rank order, and the rank at a time
        # figures are the whole table's
        hta = k.take(gpu.hta_selection(k, last))
        everything = gpu_ranks.Rank(k, hta, window, spans)
        assert len(one["by_rank"]) == 5 and np.asarray(one["by_rank"]["rank"]).tolist() == [0, 1, 2, 3, 4]
        assert len(one["bounds"]) >= 5 and len(one["arrivals"]) >= 5
        for name, args in gpu_ranks.DEFAULTS.items():
            same(runs[name], one[name])
            same(one[name], gpu_ranks.FIGURES[name](everything, *args))
        same(runs["kernel_types"], one["kernel_types"])


@pytest.mark.parametrize("rows", [1, 450])
def test_spans_out_of_rank_order_give_the_figures_of_spans_in_order(five, rows, monkeypatch):
    # GIVEN a 5-rank GPU import's spans, in rank order as an import writes its timelines (a run of ranks then takes
    # a slice of them), and the same spans with the ranks in reverse (each rank's spans then found by an order)
    monkeypatch.setattr(gpu_ranks, "CHUNK_KERNELS", rows)
    with popvision_py.open(five) as report:
        view = report.gpu
        window, last, spans = view.window(), view.last_step_starts(), view.spans()
        assert spans.ipu_sorted() and len(np.unique(spans.ipu)) == 5
        backwards = spans.take(np.argsort(-spans.ipu, kind="stable"))
        assert not backwards.ipu_sorted()
        # WHEN the figures are made from each
        ordered = gpu_ranks.figures(report.profile, window, last, spans)
        reordered = gpu_ranks.figures(report.profile, window, last, backwards)
    # THEN every figure is the same, row for row
    for name in gpu_ranks.DEFAULTS:
        same(reordered[name], ordered[name])
    assert len(ordered["bounds"]) >= 5


def test_a_run_of_more_rows_than_a_runs_goes_once_the_next_ranks_first_row_is_read(five, monkeypatch):
    # GIVEN a 5-rank GPU import whose ranks each span several row groups
    from popvision_py.format.values import statistics

    with popvision_py.open(five) as report:
        profile = report.profile
        ranks = gpu_ranks.rank_numbers(profile.run, int(profile.target["num_ipus"]))
        metadata = profile.metadata("kernels")
        groups = metadata.num_row_groups
        first_group = [min(g for g in range(groups) if statistics(metadata, g, "ipu")[0] <= ipu
                           <= statistics(metadata, g, "ipu")[1]) for ipu in range(5)]
        assert first_group == sorted(first_group) and first_group[-1] > 4
        read = reads(profile, monkeypatch)
        # WHEN read in runs of at most one kernel (each rank a run of its own, longer than a run may be)
        yielded = [(chunk.first, len(read)) for chunk in gpu_ranks.each_chunk(profile, ranks, rows=1)]
        # THEN each rank's run comes as soon as the row group holding the next rank's first kernel is read: the
        # rows held are a rank's and a row group's, never two ranks'
        assert yielded[:4] == [(ipu, first_group[ipu + 1] + 1) for ipu in range(4)]
        assert yielded[4] == (4, groups)


def test_pieces_joined_are_the_kernels_built_at_once_their_words_the_union_sorted():
    # GIVEN six kernels built at once, and the same cut into three pieces, each with its own names and labels
    rows = {"ipu": [0, 0, 0, 1, 1, 1], "stream": [7, 7, 8, 7, 7, 7],
            "kind": ["compute", "communication", "memcpy", "compute", "compute", "memset"],
            "name": ["mm", "ncclKernel_AllReduce", "Memcpy HtoD", "relu", "mm", "Memset"],
            "start": [0, 5, 9, 1, 4, 8], "end": [4, 9, 12, 3, 6, 9]}
    groups = ["", "dp", "", "", "", "tp"]
    ops = ["aten::mm", "", "aten::copy_", "aten::relu", "aten::mm", ""]
    whole = gpu.Kernels.build(**rows, launch_start=[-1, 1, 2, 0, -1, 3], labels={"group": groups, "op": ops})
    pieces = [gpu.Kernels.build(**{c: v[a:b] for c, v in rows.items()}, launch_start=[-1, 1, 2, 0, -1, 3][a:b],
                                ranks=[0, 1], labels={"group": groups[a:b], "op": ops[a:b]})
              for a, b in ((0, 2), (2, 3), (3, 6))]
    assert pieces[1].names.tolist() == ["Memcpy HtoD"] and whole.names.tolist() != pieces[0].names.tolist()
    # WHEN the pieces are joined
    joined = gpu.Kernels.joined(pieces)
    # THEN every field, its names and its labels' words are those built at once, and the pieces' rows let go
    for name in gpu.ROW_FIELDS:
        assert np.asarray(getattr(joined, name)).tolist() == np.asarray(getattr(whole, name)).tolist(), name
    assert joined.names.tolist() == whole.names.tolist()
    assert all(joined.labels[k].tolist() == whole.labels[k].tolist() for k in gpu.LABELS)
    assert joined.words("op", joined.op).tolist() == ops and joined.names[joined.name].tolist() == rows["name"]
    assert all(getattr(p, name) is None for p in pieces for name in gpu.ROW_FIELDS)


def test_the_gpu_figures_read_only_the_timeline_rows_they_use(imported):
    # GIVEN a GPU import's ranks' CPU timelines (system/), whose pytorch channel holds operators and calls besides
    # the profiler's steps
    from popvision_py.analysis.imported import bound
    from popvision_py.format import system as S

    with popvision_py.open(imported) as report:
        view = report.gpu
        # WHEN the GPU's figures ask for their spans and steps before anything reads the timelines whole
        spans, last = view.spans(), view.last_step_starts()
        some = report.system.some_events(bound.TIMELINE_ROWS)
        every = report.system.events()
        # THEN they read the DataLoader's and the annotations' rows and the steps, no other row
        def channel(events):
            return np.array(events.channels, dtype=object)[events.channel]

        def named(events):
            return np.array(events.names, dtype=object)[events.name]

        wanted = np.isin(channel(every), [S.DATALOADER, S.ANNOTATION]) | np.array(
            [n.startswith("ProfilerStep") for n in named(every)], bool)
        assert 0 < len(some) == int(wanted.sum()) < len(every)
        assert sorted(zip(named(some), some.start.tolist())) == sorted(zip(named(every)[wanted],
                                                                           every.start[wanted].tolist()))
        # AND the spans and the last steps are those every row gives
        ranks = np.asarray(view.kernels().ranks)
        origin = (report.run.get("import") or {}).get("origin_ns")
        whole = bound.TraceSpans.from_timeline(every, ranks, origin)
        for field in ("ipu", "start", "end", "kind", "stream", "name", "names"):
            assert getattr(spans, field).tolist() == getattr(whole, field).tolist(), field
        assert last.tolist() == bound.last_step_starts(bound.step_starts(every, ranks), len(ranks)).tolist()
        # AND once every row is read, those are what a later view is handed
        assert report.system.some_events(bound.TIMELINE_ROWS) is every


@pytest.mark.parametrize("rank_a_run", [True, False])
def test_every_section_builds_the_gpu_section_first_and_shows_it_where_it_belongs(imported, monkeypatch, rank_a_run):
    # GIVEN a GPU import whose figures are made a rank a run (its ranks hold more kernels each than a run's) or two
    # ranks a run, and the order report --section all builds its sections in (the same either way)
    from popvision_py.render import document
    from popvision_py.render.jsonout import to_dict

    with popvision_py.open(imported) as report:
        kernels = report.profile.num_rows("kernels")
    monkeypatch.setattr(gpu_ranks, "CHUNK_KERNELS", (kernels - 1) // 2 if rank_a_run else (kernels + 1) // 2)
    built = []
    for name, builder in list(document._SECTION_BUILDERS.items()):
        monkeypatch.setitem(document._SECTION_BUILDERS, name,
                            lambda doc, r, figures, name=name, builder=builder: (built.append(name),
                                                                                  builder(doc, r, figures)))
    prefetch = document.prefetch_beside_trace
    monkeypatch.setattr(document, "prefetch_beside_trace", lambda r: (built.append("prefetch"), prefetch(r)))
    # WHEN every section is built
    with popvision_py.open(imported) as report:
        every = document.build_report(report, "all")
    # THEN the GPU section was built first (the sections' answers are let go as each is built: its figures weigh on
    # none after it), then the System section, which reads none of the tables, and no table prefetched (an import's
    # sections each decode what they read, and let it go)
    others = [s for s in document.SECTIONS if s not in ("gpu", "system")]
    assert built == ["gpu", "system", *others]
    # AND it is shown last, as it is on its own, each section's blocks in their place
    sections = [b.section for b in every.blocks]
    assert sections == sorted(sections, key=document.SECTIONS.index) and sections[-1] == "gpu"
    with popvision_py.open(imported) as report:
        alone = document.build_report(report, "gpu")
    assert to_dict(every)["sections"]["gpu"] == to_dict(alone)["sections"]["gpu"]
