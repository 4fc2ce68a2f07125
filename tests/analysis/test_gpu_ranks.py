"""analysis.imported.gpu_ranks: the GPU's figures computed a rank at a time (each rank's kernels read from the row
groups that hold them) are those of the whole kernels table at once, row groups shared between ranks included."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import popvision_py
from popvision_py.analysis.imported import gpu, gpu_ranks
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


def test_each_rank_reads_each_row_group_once_and_gives_each_ranks_kernels(imported, monkeypatch):
    # GIVEN the import whose row groups hold both ranks' kernels, and a rank's kernels span several
    with popvision_py.open(imported) as report:
        profile = report.profile
        ranks = gpu_ranks.rank_numbers(profile.run, int(profile.target["num_ipus"]))
        read: list[int] = []
        iter_batches = profile.iter_batches

        def counted(table, columns=None, batch_size=1 << 20, row_groups=None, use_threads=True):
            read.extend(row_groups if row_groups is not None else [])
            return iter_batches(table, columns, batch_size, row_groups, use_threads)

        monkeypatch.setattr(profile, "iter_batches", counted)
        # WHEN each rank's kernels are read in turn
        streamed = list(gpu_ranks.each_rank(profile, ranks))
        groups = profile.metadata("kernels").num_row_groups
        # THEN each row group was read once, in order
        assert read == list(range(groups))
        # AND each rank's kernels are those its own row groups hold, every column the same
        assert len(streamed) == len(ranks) == 2
        for ipu, k in enumerate(streamed):
            alone = gpu_ranks.rank_kernels(profile, ipu, ranks)
            assert len(k) == len(alone) > 100
            for name, value in vars(alone).items():
                if isinstance(value, np.ndarray):
                    assert np.asarray(getattr(k, name)).tolist() == value.tolist(), name
