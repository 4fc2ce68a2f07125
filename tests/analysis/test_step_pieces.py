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


def _cut(programs: pd.DataFrame, pieces: int) -> StepPieces:
    """``programs`` in ``pieces`` pieces, each with dictionaries of its own (its words in another order)."""
    cuts = np.linspace(0, len(programs), pieces + 1).astype(int)
    parts = []
    for k, (a, b) in enumerate(zip(cuts, cuts[1:])):
        frame = programs.iloc[a:b]
        coded = {c: frame[c].astype(pd.CategoricalDtype(sorted(set(frame[c]), reverse=k % 2 == 1)))
                 for c in ("type", "name", "pass")}
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
    # THEN no section decoded the programs table whole: each read the columns it needs a piece at a time
    assert "programs" not in [table for table, _ in read]
    assert {"liveness", "exchanges"} <= {table for table, _ in read}
