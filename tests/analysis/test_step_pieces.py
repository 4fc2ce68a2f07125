"""The programs table a piece at a time (``tables.StepPieces``): the answers that read a few of its columns once (the
exchanges' step cycles, the costliest exchanges' and the liveness steps' names, an import's operations) give what
the whole table decoded gives, whatever the pieces and their dictionaries."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import popvision_py as pv
from popvision_py.analysis.common.tables import Columns, StepIndex, StepPieces
from popvision_py.analysis.ipu import exchange, liveness

SAMPLES = Path(__file__).resolve().parents[2] / "sample_profiles"


def _cut(programs: pd.DataFrame, pieces: int, coded: tuple[str, ...] = ("type", "name", "pass")) -> StepPieces:
    """``programs`` (or another table of steps, its ``coded`` columns) in ``pieces`` pieces, each with dictionaries
    of its own (its words in another order)."""
    cuts = np.linspace(0, len(programs), pieces + 1).astype(int)
    parts = []
    names = coded
    for k, (a, b) in enumerate(zip(cuts, cuts[1:])):
        frame = programs.iloc[a:b]
        coded = {c: frame[c].astype(pd.CategoricalDtype(sorted(set(frame[c]), reverse=k % 2 == 1)))
                 for c in names}
        parts.append((int(a), Columns.from_frame(frame.assign(**coded))))
    return StepPieces(lambda: iter(parts), len(programs), int(programs["ipu"].max()) + 1)


@pytest.fixture(scope="module", params=["mnist_pipelined", "bert_base_pipelined", "pytorch_gpipe"])
def sample(request):
    report = pv.open(SAMPLES / request.param / "profile.pop")
    yield report, report.table("programs")
    report.close()


@pytest.mark.parametrize("pieces", [1, 3, 7])
def test_step_names_a_piece_at_a_time_are_the_indexs(sample, pieces):
    # GIVEN a sample's programs cut in pieces with dictionaries of their own, and steps asked for: every third one,
    # repeated, out of order, and two the program does not have
    report, programs = sample
    index = StepIndex(report.columns("programs"))
    rng = np.random.default_rng(pieces)
    ipu = np.r_[programs["ipu"].to_numpy()[::3], programs["ipu"].iloc[0], 0, 99].astype(np.int64)
    step = np.r_[programs["step"].to_numpy()[::3], programs["step"].iloc[0], 10**6, 0].astype(np.int64)
    shuffle = rng.permutation(len(ipu))
    ipu, step = ipu[shuffle], step[shuffle]
    # WHEN their names are looked up a piece at a time
    cut = _cut(programs, pieces)
    # THEN they are the index's: the step's name, "" where there is no such step
    want = np.asarray(index.names(index.rows(ipu, step)), dtype=object).tolist()
    assert np.asarray(cut.names_at(ipu, step), dtype=object).tolist() == want
    assert np.asarray(cut.categories_at(ipu, step), dtype=object).tolist() == want
    assert np.asarray(index.categories_at(ipu, step), dtype=object).tolist() == want
    assert want.count("") == 2


def test_exchanges_step_cycles_and_costliest_names_a_piece_at_a_time_are_the_whole_tables():
    # GIVEN a pipeline's exchanges and its programs cut in 5 pieces with dictionaries of their own
    with pv.open(SAMPLES / "mnist_pipelined" / "profile.pop") as report:
        x, trace = report.columns("exchanges"), report.trace_summary()
        whole = report.columns("programs")
        cut = _cut(report.table("programs"), 5)
        # WHEN each transfer is joined with its step's cycles, and the costliest named, both ways
        a, b = exchange.executed(x, trace, whole), exchange.executed(x, trace, cut)
        # THEN every figure of every transfer, and the costliest ten, are the same
        for figure in ("executions", "total_bytes", "total_cycles", "exposed_cycles"):
            assert getattr(a, figure).tolist() == getattr(b, figure).tolist(), figure
        assert a.exposed_cycles.sum() > 0
        want = exchange.costliest(a, StepIndex(whole), 10).frame()
        pd.testing.assert_frame_equal(exchange.costliest(b, cut, 10).frame(), want)
        assert want["name"].str.len().gt(0).all()


@pytest.mark.parametrize("pieces", [1, 2, 7])
def test_exchange_totals_a_piece_of_transfers_at_a_time_are_the_whole_tables(sample, pieces):
    # GIVEN a sample's exchanges, cut in pieces with dictionaries of their own (a step's transfers may lie in two)
    report, _ = sample
    x, trace, programs = report.columns("exchanges"), report.trace_summary(), report.columns("programs")
    cut = _cut(report.table("exchanges"), pieces, ("kind",))
    # WHEN the transfers' totals are summed a piece at a time, and made from every transfer at once
    whole = exchange.executed(x, trace, programs)
    summed = exchange.totals(cut, trace, programs)
    # THEN the figures by kind and the matrix are the same as every transfer's, summed here by hand
    kinds = pd.DataFrame({"kind": x["kind"], "executions": whole.executions, "bytes": whole.total_bytes,
                          "cycles": whole.total_cycles, "exposed": whole.exposed_cycles}).groupby("kind").sum()
    got = exchange.by_kind(summed, 1000).frame().set_index("kind")
    for kind, row in kinds.iterrows():
        assert got.loc[kind, ["executions", "bytes", "cycles", "exposed_cycles"]].tolist() == row.tolist(), kind
    assert got.drop(index=kinds.index)[["executions", "bytes", "cycles"]].eq(0).all().all()
    pairs = pd.DataFrame({"src_ipu": x["src_ipu"], "dst_ipu": x["dst_ipu"], "bytes": whole.total_bytes,
                          "cycles": whole.total_cycles}).groupby(["src_ipu", "dst_ipu"]).sum()
    pairs = pairs[(pairs["bytes"] > 0) | (pairs["cycles"] > 0)].reset_index()
    matrix = exchange.matrix(summed).frame()
    assert matrix.astype(np.int64).values.tolist() == pairs.astype(np.int64).values.tolist()
    # AND the costliest are the first of every transfer sorted by its total, then IPU, then step, then row
    index = StepIndex(programs)
    for n in (1, 10, 20):
        want = sorted(range(len(x)), key=lambda r: (-whole.total_cycles[r], x["ipu"][r], x["step"][r], r))[:n]
        got = exchange.costliest(summed, index, n)
        assert np.asarray(got["total_cycles"]).tolist() == whole.total_cycles[want].tolist()
        assert list(zip(np.asarray(got["ipu"]).tolist(), np.asarray(got["step"]).tolist(), got["kind"])) == \
            [(int(x["ipu"][r]), int(x["step"][r]), x["kind"][r]) for r in want]
    with pytest.raises(ValueError, match="keep the 20 costliest rows, not 21"):
        exchange.costliest(summed, index, 21)
    with pytest.raises(ValueError, match="a count of rows, 0 or more, not -1"):
        exchange.costliest(summed, index, -1)
    assert len(exchange.costliest(summed, index, 0)) == 0


@pytest.mark.parametrize("pieces", [1, 3, 12])
def test_the_costliest_of_tied_transfers_a_piece_at_a_time_are_the_first_in_row_order(pieces):
    # GIVEN 12 transfers of one step, every one of the same total (a run of equal transfers), cut in pieces
    import pyarrow as pa

    n = 12
    x = pd.DataFrame({"ipu": np.zeros(n, np.int16), "step": np.zeros(n, np.int32), "src_ipu": np.zeros(n, np.int16),
                      "dst_ipu": np.arange(n, dtype=np.int16) % 2, "bytes": np.full(n, 8),
                      "cycles": np.full(n, 5), "kind": pd.Categorical(["inter_ipu"] * n)})
    programs = Columns(pa.table({"ipu": np.zeros(1, np.int16), "step": np.zeros(1, np.int32),
                                 "name": pa.array(["send"]).dictionary_encode(), "cycles": [60]}))
    with pv.open(SAMPLES / "mnist_pipelined" / "profile.pop") as report:
        trace = report.trace_summary()
    cut = _cut(x, pieces, ("kind",))
    # WHEN the 4 costliest are kept a piece at a time
    summed = exchange.totals(cut, trace, programs, top=4)
    got = exchange.costliest(summed, StepIndex(programs), 4)
    # THEN there are four, each the step's share of its cycles (60 x 5 / 60 = 5, times the step's executions)
    runs = int(trace.executions[0, 0])
    assert runs > 0 and np.asarray(got["total_cycles"]).tolist() == [5 * runs] * 4
    assert np.asarray(got["dst_ipu"]).tolist() == [0, 1, 0, 1] and list(got["name"]) == ["send"] * 4
    assert len(summed.candidates["ipu"]) <= 4 * pieces


def test_liveness_steps_named_a_piece_at_a_time_are_the_indexs():
    # GIVEN a pipeline's liveness and its programs cut in 4 pieces with dictionaries of their own
    with pv.open(SAMPLES / "bert_base_pipelined" / "profile.pop") as report:
        rows, target = report.columns("liveness"), report.target
        whole = liveness.by_step(rows, report.columns("programs"), target).frame()
        cut = liveness.by_step(rows, None, target, index=_cut(report.table("programs"), 4)).frame()
        # WHEN every step's memory is listed both ways THEN the rows are the same, the names as strings
        assert cut.drop(columns="name").equals(whole.drop(columns="name"))
        assert cut["name"].astype(str).tolist() == whole["name"].astype(str).tolist()
        assert isinstance(cut["name"].dtype, pd.CategoricalDtype)


def test_a_report_of_one_section_reads_only_the_programs_columns_it_needs(monkeypatch):
    # GIVEN the imported GPipe sample, read as a long run is (its liveness peaks a batch at a time)
    from popvision_py.format import Profile
    from popvision_py.render.document import build_report

    read: list[tuple[str, tuple[str, ...]]] = []
    whole = Profile.read_table

    def record(self, table, columns=None, **kwargs):
        read.append((table, tuple(columns or ())))
        return whole(self, table, columns, **kwargs)

    monkeypatch.setattr(Profile, "read_table", record)
    monkeypatch.setattr(liveness, "STREAM_ROWS", 0)
    with pv.open(SAMPLES / "pytorch_gpipe" / "profile.pop") as report:
        # WHEN its exchange, liveness and operations sections are built alone
        for section in ("exchange", "liveness", "operations"):
            build_report(report, section)
        assert not report.decodes("programs")
    # THEN no section decoded the programs table whole, nor the exchanges: each read the columns it needs a piece at
    # a time
    assert "programs" not in [table for table, _ in read] and "exchanges" not in [table for table, _ in read]
    assert {"liveness"} <= {table for table, _ in read}
