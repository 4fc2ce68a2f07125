"""The Operations section: every figure recomputed here from the raw tables with pandas.

The op of a trace row is its program step's (programs.op_id, programs.pass); its cycles are the
row's end - start. The emulated samples (mnist pipelined, sharded and with the optimiser in
streaming memory) and the imported PyTorch GPipe sample are small enough to read whole.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import popvision_py as pv
from popvision_py.analysis.ipu import operations

SAMPLES = Path(__file__).resolve().parents[2] / "sample_profiles"
EMULATED = ["mnist_pipelined", "mnist_sharded", "mnist_offload_optimiser"]
PHASES = ["compute", "exchange", "sync", "stream"]


def raw(report: pv.Report) -> dict[str, pd.DataFrame]:
    tables = {name: report.profile.read_pandas(name) for name in ("ops", "programs", "variables", "trace")}
    for frame in tables.values():
        for column in frame.columns:
            if isinstance(frame[column].dtype, pd.CategoricalDtype):
                frame[column] = frame[column].astype(str)
    return tables


def trace_by_step(t: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Each program step's rows of the trace: how many, and their cycles per phase."""
    trace = t["trace"][t["trace"]["step"] >= 0].assign(cycles=lambda f: f["end_cycle"] - f["start_cycle"])
    per = trace.pivot_table(index=["ipu", "step"], columns="phase", values="cycles", aggfunc="sum", fill_value=0)
    per = per.reindex(columns=PHASES, fill_value=0).add_suffix("_cycles").reset_index()
    counts = trace.groupby(["ipu", "step"]).size().rename("executions").reset_index()
    steps = t["programs"].merge(per, on=["ipu", "step"], how="left").merge(counts, on=["ipu", "step"], how="left")
    return steps.fillna({c: 0 for c in [f"{p}_cycles" for p in PHASES] + ["executions"]})


def expected_ops(report: pv.Report, t: dict[str, pd.DataFrame]) -> pd.DataFrame:
    steps = trace_by_step(t)
    steps = steps[steps["op_id"] >= 0]
    cycles = [f"{p}_cycles" for p in PHASES]
    per = steps.groupby(["op_id", "pass"]).agg(steps=("step", "size"), executions=("executions", "max"),
                                               **{c: (c, "sum") for c in cycles}).reset_index()
    ops = t["ops"].merge(per, on=["op_id", "pass"], how="left")
    ops["total_cycles"] = ops[cycles].sum(axis=1)
    traced = t["trace"]["end_cycle"].max() - t["trace"]["start_cycle"].min()
    ops["step_pct"] = 100 * ops["total_cycles"] / traced
    ops["flops"] = ops["flops"] * ops["executions"]
    clock = report.target["clock_hz"]
    ops["flops_per_s"] = ops["flops"] / (ops["compute_cycles"] / clock)
    peak = report.target["flops_per_cycle_per_tile"][report.run["precision"]] * report.target["tiles_per_ipu"] * clock
    ops["peak_pct"] = 100 * ops["flops_per_s"] / peak
    v = t["variables"]
    mine = v.groupby("op_id").agg(variables=("var_id", "size"), variable_bytes=("bytes", "sum"))
    mine["always_live_bytes"] = v[v["always_live"]].groupby("op_id")["bytes"].sum()
    ops = ops.merge(mine.fillna(0).reset_index(), on="op_id", how="left").fillna(
        {"variables": 0, "variable_bytes": 0, "always_live_bytes": 0})
    ops["layer"] = ops["name"].map(lambda n: n.rsplit("/", 1)[0] if "/" in n else n)
    return ops


@pytest.fixture(scope="module", params=EMULATED)
def emulated(request):
    with pv.open(SAMPLES / request.param / "profile.pop") as report:
        yield report, raw(report)


@pytest.fixture(scope="module")
def gpipe():
    with pv.open(SAMPLES / "pytorch_gpipe" / "profile.pop") as report:
        yield report, raw(report)


NUMBERS = ["steps", "executions", "compute_cycles", "exchange_cycles", "sync_cycles", "stream_cycles", "total_cycles",
           "flops", "variables", "variable_bytes", "always_live_bytes"]
RATIOS = ["step_pct", "flops_per_s", "peak_pct"]


def test_each_op_pass_recomputed_from_the_trace(emulated):
    # GIVEN an emulated profile's raw tables
    report, t = emulated
    want = expected_ops(report, t).set_index(["op_id", "pass"])
    # WHEN its operations are asked for
    got = report.operations.by_op().set_index(["op_id", "pass"])
    # THEN there is a row per row of ops, costliest first, and every figure is the trace's
    assert len(got) == len(t["ops"]) and got.index.is_unique
    assert got["total_cycles"].is_monotonic_decreasing
    want = want.loc[got.index]
    for column in NUMBERS:
        assert got[column].astype(np.int64).tolist() == want[column].astype(np.int64).tolist(), column
    for column in RATIOS:
        np.testing.assert_allclose(got[column].to_numpy(float), want[column].to_numpy(float), rtol=1e-9, err_msg=column)
    for column in ("name", "kind", "block", "layer", "stage", "ipu"):
        assert got[column].tolist() == want[column].tolist(), column


def test_op_flops_add_up_to_the_summary(emulated):
    report, _ = emulated
    assert int(report.operations.by_op()["flops"].sum()) == report.summary.figures().total_flops
    assert report.operations.figures().total_flops == report.summary.figures().total_flops


@pytest.mark.parametrize("by", ["block", "layer"])
def test_blocks_and_layers_recomputed(emulated, by):
    # GIVEN the per-op figures recomputed from the raw tables
    report, t = emulated
    ops = expected_ops(report, t)
    # WHEN they are summed per block or layer (each op's variables once, not once per pass)
    once = ops.drop_duplicates("op_id")
    want = ops.groupby(by).agg(ops=("op_id", "nunique"), steps=("steps", "sum"), flops=("flops", "sum"),
                               **{c: (c, "sum") for c in NUMBERS[2:7]})
    want = want.join(once.groupby(by)[["variables", "variable_bytes", "always_live_bytes"]].sum())
    got = (report.operations.by_block() if by == "block" else report.operations.by_layer()).set_index(by)
    # THEN the report's table holds the same figures
    assert sorted(got.index) == sorted(want.index)
    want = want.loc[got.index]
    for column in want.columns:
        assert got[column].astype(np.int64).tolist() == want[column].astype(np.int64).tolist(), column
    stage = ops.groupby(by)["stage"].agg(lambda s: s.iloc[0] if s.nunique() == 1 else -1)
    assert got["stage"].tolist() == stage.loc[got.index].tolist()


def test_figures_split_the_ipu_time(emulated):
    report, t = emulated
    trace = t["trace"].assign(cycles=lambda f: f["end_cycle"] - f["start_cycle"])
    op_of = t["programs"].set_index(["ipu", "step"])["op_id"]
    rows = trace[trace["step"] >= 0]
    has_op = op_of.reindex(pd.MultiIndex.from_frame(rows[["ipu", "step"]])).to_numpy() >= 0
    f = report.operations.figures()
    assert f.ipu_cycles == trace["cycles"].sum()
    assert f.op_cycles == rows["cycles"][has_op].sum()
    assert f.other_cycles == rows["cycles"][~has_op].sum()
    assert f.idle_cycles == trace["cycles"][trace["phase"] == "idle"].sum()
    assert f.op_cycles + f.other_cycles + f.idle_cycles == f.ipu_cycles


def test_an_ops_variables_and_steps(emulated):
    # GIVEN the costliest op pass
    report, t = emulated
    row = report.operations.by_op().iloc[0]
    # WHEN its variables and program steps are asked for
    variables = report.operations.variables(0)
    steps = report.operations.steps("op", 0)
    # THEN they are the variables it owns, largest first, and the program steps of its op and pass
    v = t["variables"][t["variables"]["op_id"] == row["op_id"]]
    assert sorted(variables["var_id"]) == sorted(v["var_id"]) and variables["bytes"].is_monotonic_decreasing
    p = t["programs"][(t["programs"]["op_id"] == row["op_id"]) & (t["programs"]["pass"] == row["pass"])]
    assert sorted(zip(steps["ipu"], steps["step"])) == sorted(zip(p["ipu"], p["step"]))
    layer = report.operations.steps("layer", row["layer"])
    names = t["programs"]["name"].where(t["programs"]["op_id"] >= 0, "")
    in_layer = t["programs"][(t["programs"]["op_id"] >= 0) & names.str.startswith(row["layer"] + "/")]
    assert len(layer) == len(in_layer)


@pytest.mark.parametrize("decoded", [False, True])
@pytest.mark.parametrize("at_once", [operations.IMPORTED_STEPS, 7])
def test_imported_rows_are_the_steps_by_name_rank_and_pass(gpipe, at_once, decoded, monkeypatch):
    # GIVEN the imported GPipe sample: no ops, its program steps named after the trace's modules and operators,
    # grouped all at once or 7 at a time (a new Report: nothing kept from another), read from the file a piece at a
    # time or sliced from the whole table decoded first (as `--section all` does)
    _, t = gpipe
    monkeypatch.setattr(operations, "IMPORTED_STEPS", at_once)
    report = pv.open(SAMPLES / "pytorch_gpipe" / "profile.pop")
    assert report.imported and t["ops"].empty and len(t["programs"]) > 10 * 7
    if decoded:
        report.columns("programs")
    assert report.decodes("programs") == decoded
    steps = trace_by_step(t)
    cycles = [f"{p}_cycles" for p in PHASES]
    want = steps.groupby(["name", "ipu", "pass"]).agg(steps=("step", "size"), executions=("executions", "sum"),
                                                     **{c: (c, "sum") for c in cycles})
    # WHEN its operations are asked for
    got = report.operations.by_op().set_index(["name", "ipu", "pass"])
    # THEN each (name, rank, pass) is a row with the trace's cycles, and no FLOPs or variables
    assert got.index.is_unique and len(got) == len(want)
    want = want.loc[got.index]
    for column in ["steps", "executions", *cycles]:
        assert got[column].astype(np.int64).tolist() == want[column].astype(np.int64).tolist(), column
    assert got[["flops", "flops_per_s", "peak_pct", "variables", "variable_bytes"]].isna().all().all()
    layers = report.operations.by_layer().set_index("layer")
    assert layers["total_cycles"].to_dict() == want.groupby(level="name")[cycles].sum().sum(axis=1).to_dict()
    assert report.operations.figures().not_recorded.startswith("The traces record no FLOPs")
    # ... and each program step's row is the row of its (name, rank, pass), the cycles of them all the figures'
    costs = report.operations.costs()
    rows = got.reset_index()
    keys = list(zip(rows["name"], rows["ipu"], rows["pass"]))
    assert [keys[r] for r in costs.step_row] == list(zip(t["programs"]["name"], t["programs"]["ipu"],
                                                         t["programs"]["pass"]))
    assert (costs.op_cycles, costs.other_cycles) == (int(steps[cycles].to_numpy().sum()), 0)
    report.close()


def test_pieces_with_dictionaries_of_their_own_group_as_the_whole_table_does(gpipe):
    # GIVEN the GPipe sample's steps cut in three pieces, each with a dictionary of its own (its names in another
    # order, as each row group of a file has), its type, pass and name columns coded
    from popvision_py.analysis.common.tables import Columns

    report, t = gpipe
    programs = t["programs"][list(operations.IMPORTED_COLUMNS)]
    whole = Columns.from_frame(programs.astype({c: "category" for c in ("type", "name", "pass")}))
    cuts = [0, len(programs) // 3, 2 * len(programs) // 3, len(programs)]

    def piece(a: int, b: int) -> Columns:
        frame = programs.iloc[a:b]
        coded = {c: frame[c].astype(pd.CategoricalDtype(sorted(set(frame[c]), reverse=a > 0)))
                 for c in ("type", "name", "pass")}
        return Columns.from_frame(frame.assign(**coded))

    pieces = [piece(a, b) for a, b in zip(cuts, cuts[1:])]
    assert [p.words("name")[0] for p in pieces[:2]] != [pieces[0].words("name")[0]] * 2
    apart = operations.StepPieces(lambda: zip(cuts, pieces), len(programs), int(programs["ipu"].max()) + 1)
    # WHEN they are grouped piece by piece, and the whole table at once
    args = (report.columns("ops"), report.columns("variables"), report.trace_summary(), report.target, report.run)
    got = operations.costs(args[0], apart, *args[1:], imported=True)
    want = operations.costs(args[0], whole, *args[1:], imported=True)
    # THEN the rows, each step's row and the figures are the same
    assert got.by_op.frame().equals(want.by_op.frame())
    assert got.step_row.tolist() == want.step_row.tolist() and got.op_cycles == want.op_cycles


def test_imported_report_says_blocks_do_not_apply(gpipe):
    from popvision_py.render.document import build_report

    report, _ = gpipe
    doc = build_report(report, "operations")
    block = next(b for b in doc.blocks if b.key == "operations.by_block")
    assert block.empty == operations.IMPORTED_NO_BLOCKS and block.items == []


@pytest.mark.parametrize("sample", ["mnist_pipelined", "pytorch_gpipe"])
@pytest.mark.parametrize("fmt", ["text", "json", "csv", "md", "html"])
def test_report_section_operations_in_every_format(sample, fmt, tmp_path):
    import json

    from click.testing import CliRunner

    from popvision_py.cli import main

    # GIVEN a sample profile and its operations as the analysis gives them
    path = SAMPLES / sample / "profile.pop"
    with pv.open(path) as report:
        by_op = report.operations.by_op()
    out = tmp_path / f"operations.{fmt}"
    args = ["report", str(path), "--section", "operations", "--format", fmt]
    args += ["-o", str(out)] if fmt in ("csv", "html") else []
    # WHEN `popvision report --section operations` writes them
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    costliest = by_op["name"].iloc[0]
    # THEN each format holds the costliest op first, and the block table or the line saying why there is none
    if fmt == "json":
        section = json.loads(result.stdout)["sections"]["operations"]
        assert set(section) == {"figures", "by_op", "by_block", "by_layer"}
        assert [r["total_cycles"] for r in section["by_op"]] == by_op["total_cycles"].tolist()
    elif fmt == "csv":
        names = ("by_block", "by_layer", "by_op", "figures")
        assert sorted(p.name for p in out.iterdir()) == [f"operations.{n}.csv" for n in names]
        written = pd.read_csv(out / "operations.by_op.csv", keep_default_na=False, na_values=[""])
        assert written["total_cycles"].tolist() == by_op["total_cycles"].tolist()
        blocks = pd.read_csv(out / "operations.by_block.csv")
        assert (list(blocks.columns) == ["note"]) == (sample == "pytorch_gpipe")
    else:
        text = out.read_text() if fmt == "html" else result.stdout
        assert costliest in text and "Operations by layer" in text
        # an imported trace has no blocks: its by-block table, only a note saying so, is left out for a reader
        assert "The traces name no blocks" not in text
        assert ("Operations by block" in text) == (sample != "pytorch_gpipe")


@pytest.mark.parametrize("cells", [120, 1 << 40])
def test_keys_are_numbered_as_numpys_unique_numbers_them_by_a_grid_or_a_sort(cells):
    from popvision_py.analysis.common.tables import numbered

    # GIVEN 835 (name, rank, pass) keys of 120 cells (a few names a rank: the grid), or of 2**40 (a sort)
    keys = np.random.default_rng(3).integers(0, 120, 835) * (1 if cells == 120 else 7_000_000_000)
    # WHEN they are numbered THEN the distinct keys and each key's number among them are np.unique's
    for got, want in zip(numbered(keys, cells), np.unique(keys, return_inverse=True)):
        np.testing.assert_array_equal(got, want)
    # AND a key outside the cells (a name the dictionary has not: -1) is numbered by the sort, not wrapped around
    keys[5] = -1
    for got, want in zip(numbered(keys, cells), np.unique(keys, return_inverse=True)):
        np.testing.assert_array_equal(got, want)


def test_a_slice_of_a_tables_columns_indexes_the_tables_words_and_strings_at_rows_are_numpys_indexing():
    import pyarrow as pa

    from popvision_py.analysis.common.tables import Columns

    # GIVEN a table of a dictionary column and a plain string column, and the words of its rows
    names = ["fwd", "bwd", "fwd", "send", "bwd", "recv"]
    columns = Columns(pa.table({"name": pa.array(names).dictionary_encode(), "kind": pa.array(names)}))
    assert columns.coded("name") and not columns.coded("kind")
    # WHEN rows 2 to 5 are taken as Columns of their own THEN their codes index the whole table's words
    part = columns.rows(2, 5)
    assert len(part) == 3 and columns.words("name")[part.codes("name")].tolist() == names[2:5]
    # AND the strings at some rows, by index, by mask or from the end, are those NumPy's indexing gives
    for rows in (np.array([5, 0, 3]), np.array([True, False, False, True, False, True]), np.array([-1, 1]),
                 np.zeros(0, np.int64)):
        for name in ("name", "kind"):
            assert columns.strings(name, rows).tolist() == np.array(names, dtype=object)[rows].tolist()


def test_an_object_columns_words_are_numpys_unique_of_its_strings_without_a_wide_string_a_row():
    import tracemalloc

    from popvision_py.analysis.common.tables import sorted_words

    # GIVEN a column of layer names: a few words, one of 200 characters, None and NaN (made "None" and "nan" apart), a
    # number and its string (one word)
    values = np.array(["b", None, "a", float("nan"), "b", 1, "1", "z" * 200, None] * 3, dtype=object)
    # WHEN its words are numbered THEN they are np.unique's of the column as strings, and each row's place too
    words, place = sorted_words(values)
    want_words, want_place = np.unique(values.astype(str), return_inverse=True)
    assert words.tolist() == want_words.tolist() and words.dtype == want_words.dtype
    assert place.tolist() == want_place.reshape(-1).tolist() and place.dtype == np.int64
    assert sorted_words(np.zeros(0, dtype=object))[0].tolist() == []
    # AND 20,000 rows of long names (a fixed-width string a row would be 20,000 x 200 x 4 bytes: 16 MB) are numbered
    # holding well under that
    rows = np.array([f"{'layer' * 39}{k % 7}" for k in range(20_000)], dtype=object)
    tracemalloc.start()
    words, place = sorted_words(rows)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(words) == 7 and peak < 2_000_000, peak
