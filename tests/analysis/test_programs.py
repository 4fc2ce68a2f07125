"""The program tree (analysis/ipu/programs.py) against the raw tables of real engine profiles, and its CLI.

Every figure is recomputed here from ``programs`` and the trace's own rows: each program step is a
leaf once, a leaf's executions are its rows in the trace, a node's total is its children's, and
the loops' repeats are the trace's distinct runs, iterations and micro-batches.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import popvision_py as pv
from popvision_py.analysis.ipu import programs
from popvision_py.cli import main

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = {name: ROOT / "sample_profiles" / name / "profile.pop"
           for name in ("mnist_pipelined", "mnist_sharded", "mnist_inference")}


@pytest.fixture(scope="module", params=list(SAMPLES))
def case(request):
    with pv.open(SAMPLES[request.param]) as report:
        trace = report.profile.read_table("trace", ["run", "iteration", "micro_batch", "ipu", "stage", "pass",
                                                    "step", "phase"]).to_pandas()
        trace["pass"] = trace["pass"].astype(str)
        yield report, report.programs.tree(), report.table("programs"), trace


def test_every_program_step_is_a_leaf_once_with_its_cycles(case):
    # GIVEN a profile's tree WHEN its leaves are read THEN they are the programs rows, each once
    _, tree, steps, _ = case
    leaves = tree[tree["step"] >= 0]
    assert sorted(zip(leaves["ipu"], leaves["step"])) == sorted(zip(steps["ipu"], steps["step"]))
    joined = leaves.merge(steps, on=["ipu", "step"], suffixes=("", "_programs"))
    assert (joined["cycles"] == joined["cycles_programs"]).all()
    assert (joined["kind"] == joined["type"].astype(str)).all()
    assert (joined["name"] == joined["name_programs"].astype(str)).all()


def test_a_leaf_ran_as_often_as_the_trace_says(case):
    _, tree, _, trace = case
    counted = trace[trace["step"] >= 0].groupby(["ipu", "step"]).size().rename("rows").reset_index()
    leaves = tree[tree["step"] >= 0].merge(counted, on=["ipu", "step"], how="left").fillna({"rows": 0})
    assert (leaves["executions"] == leaves["rows"]).all()
    assert (leaves["total_cycles"] == leaves["cycles"] * leaves["executions"]).all()


def test_a_node_totals_its_children_and_runs_its_repeats_per_parent(case):
    _, tree, _, _ = case
    assert (tree["node"] == np.arange(len(tree))).all()
    inner = tree["parent"] >= 0
    assert (tree.loc[inner, "parent"] < tree.loc[inner, "node"]).all()  # pre-order: a parent first
    parents = tree.loc[inner, "parent"].to_numpy()
    assert (tree.loc[inner, "depth"].to_numpy() == tree["depth"].to_numpy()[parents] + 1).all()
    sums = tree.loc[inner].groupby("parent")["total_cycles"].sum()
    assert (tree.loc[sums.index, "total_cycles"] == sums).all()
    parent_runs = tree["executions"].to_numpy()[parents]
    assert (tree.loc[inner, "repeats"].to_numpy() * parent_runs == tree.loc[inner, "executions"].to_numpy()).all()
    roots = tree[~inner]
    assert sorted(roots["ipu"]) == sorted(set(tree["ipu"])) and (roots["share_pct"] == 100).all()


def test_the_loops_repeat_as_the_trace_counts_runs_iterations_and_micro_batches(case):
    report, tree, _, trace = case
    runs = trace["run"].nunique()
    iterations = len(trace[["run", "iteration"]].drop_duplicates())
    loops = tree[tree["kind"] == "repeat"]
    assert set(loops.loc[loops["name"] == "runs (host calls)", "executions"]) == {runs}
    assert set(loops.loc[loops["name"] == "device iterations", "executions"]) == {iterations}
    assert set(loops.loc[loops["name"] == "device iterations", "repeats"]) == {iterations // runs}
    ga = loops[loops["name"] == "gradient accumulation"]
    if report.run["mode"] == "training":
        assert set(ga["repeats"]) == {report.run["gradient_accumulation"]}
    else:
        assert ga.empty
    # each stage's forward and backward: as many executions as distinct micro-batches in the trace
    segments = tree[tree["name"].str.match(r"stage \d+ (forward|backward)")]
    assert len(segments)
    for row in segments.to_dict("records"):
        rows = trace[(trace["ipu"] == row["ipu"]) & (trace["stage"] == row["stage"]) & (trace["pass"] == row["pass"])
                     & (trace["step"] >= 0)]
        assert row["executions"] == len(rows[["run", "iteration", "micro_batch"]].drop_duplicates())


def test_the_superstep_sync_runs_once_per_superstep_and_ops_group_their_steps(case):
    _, tree, steps, trace = case
    syncs = tree[tree["name"] == "pipeline/sync"]
    assert len(syncs) == tree["ipu"].nunique()
    sync_rows = trace[(trace["phase"].astype(str) == "sync") & (trace["stage"] == -1)]
    for row in syncs.itertuples():
        assert row.executions == (sync_rows["ipu"] == row.ipu).sum()
    ops = tree[(tree["kind"] == "sequence") & (tree["op"] != "")]
    children = tree[tree["parent"].isin(ops["node"])]
    # an op's steps carry its op, and an op node's ops count is 1
    assert (children["op"].to_numpy() == ops.set_index("node").loc[children["parent"], "op"].to_numpy()).all()
    assert (ops["ops"] == 1).all()
    assert ops["name"].str.endswith(("/fwd", "/bwd", "/update")).all()


def test_search_keeps_the_matches_and_their_ancestors():
    with pv.open(SAMPLES["mnist_pipelined"]) as report:
        table = report.answer("programs.tree")
    keep = programs.search(table, "CONV/BWD")
    names = np.asarray(table["name"], object)[keep]
    assert "layer1/conv/bwd/exchange" in names and "IPU 0" in names and "stage 0 backward" in names
    assert "layer1/pool/fwd" not in names
    parents = np.asarray(table["parent"])[keep]
    assert set(parents[parents >= 0]) <= set(np.flatnonzero(keep))
    assert programs.search(table, "  ").all()


def invoke(*args) -> object:
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


@pytest.mark.parametrize("fmt", ["text", "json", "csv", "md", "html"])
def test_report_section_programs_in_every_format(fmt, tmp_path):
    profile = SAMPLES["mnist_pipelined"]
    with pv.open(profile) as report:
        tree = report.programs.tree()
    out = tmp_path / f"programs.{fmt}"
    result = invoke("report", profile, "--section", "programs", "--format", fmt,
                    *(["-o", out] if fmt in ("csv", "html") else []))
    assert result.exit_code == 0, result.output
    if fmt == "text":
        lines = result.stdout.splitlines()
        assert lines[5] == "  (each op's steps are in --format json and csv)" and "  IPU 0  [program]" in lines[6]
        ga = next(line for line in lines if "gradient accumulation x10" in line)
        assert ga.startswith("        gradient") and "ramp-up 6, main 4, ramp-down 6" in ga  # 4 IPUs, GA 10
        assert not any("layer1/conv/fwd/sync" in line for line in lines)  # an op's steps: in json and csv
    elif fmt == "json":
        roots = json.loads(result.stdout)["sections"]["programs"]["tree"]
        assert [r["name"] for r in roots] == [f"IPU {i}" for i in range(4)]

        def count(node):
            return 1 + sum(count(c) for c in node["children"])

        assert sum(count(r) for r in roots) == len(tree)
        runs = roots[0]["children"][0]
        assert runs["total_cycles"] == sum(c["total_cycles"] for c in runs["children"])
    elif fmt == "csv":
        frame = pd.read_csv(out / "programs.tree.csv")
        assert len(frame) == len(tree) and list(frame.columns) == programs.COLUMNS
        assert (frame["total_cycles"] == tree["total_cycles"]).all()
    elif fmt == "md":
        assert "| node | parent | depth |" in result.stdout
    else:
        page = out.read_text()
        assert "Program tree" in page and "icicle" in page


def test_an_imported_trace_says_it_has_no_compiled_program():
    result = invoke("report", ROOT / "sample_profiles" / "pytorch_gpipe" / "profile.pop", "--section", "programs")
    assert result.exit_code == 0
    assert programs.NO_PROGRAM in result.stdout.replace("\n", " ")


def test_the_pipeline_cycles_the_loop_names_are_the_supersteps_the_trace_ran():
    # GIVEN mnist pipelined over 4 IPUs, gradient accumulation 10, 10 device iterations, one run
    with pv.open(SAMPLES["mnist_pipelined"]) as report:
        tree = report.programs.tree()
        trace = report.profile.read_table("trace", ["ipu", "stage", "phase", "iteration"]).to_pandas()
    loop = tree[(tree["name"] == "gradient accumulation") & (tree["ipu"] == 0)].iloc[0]
    # WHEN the loop's words are read THEN ramp-up 2N-2 = 6, main GA-(2N-2) = 4, ramp-down 6
    assert "pipelined over 4 IPUs: ramp-up 6, main 4, ramp-down 6 pipeline cycles" in loop["detail"]
    # AND they add up to the supersteps of an iteration in the trace: its superstep syncs (stage -1) on
    # IPU 0, less the host call's superstep and the weight update's
    syncs = trace[(trace["ipu"] == 0) & (trace["stage"] == -1) & (trace["phase"].astype(str) == "sync")]
    per_iteration = (len(syncs) - 1) / 10 - 1
    assert per_iteration == 6 + 4 + 6


# Step names, their ops' names, and each step's op pass label worked out by hand.
LABELS = [
    ("layer1/conv/fwd/sync", "layer1/conv", "layer1/conv/fwd"),  # the op's name, then the next part
    ("layer1/conv/fwd", "layer1/conv", "layer1/conv/fwd"),
    ("layer1/conv/", "layer1/conv", ""),  # nothing after the op's name
    ("layer1/conv//x", "layer1/conv", ""),  # an empty next part
    ("layer10/conv/fwd", "layer1/conv", ""),  # another op whose name starts with this one's
    ("layer1/conv", "layer1/conv", ""),  # the op's name alone
    ("stage0/grads/copy", "layer1/conv", ""),  # a copy the op pays for: a step of its segment
    ("x/y", "", ""),  # no op name
    ("ü/ß/z", "ü", "ü/ß"),  # characters beyond ASCII
]


@pytest.mark.parametrize("labels", [programs.op_labels, programs._op_labels_code_points],
                         ids=["op_labels", "code_points"])
def test_op_labels_on_any_numpy(labels):
    # GIVEN step names and their ops' names as object arrays, as the tree hands them over
    names, ops, expected = (np.array(column, dtype=object) for column in zip(*LABELS))
    # WHEN each step's label is made (np.strings on NumPy 2.3 on, the names' code points before;
    # the second is run on every NumPy)
    got = labels(names, ops)
    # THEN it is the label worked out by hand
    assert got.dtype == object
    assert got.tolist() == expected.tolist()
    assert labels(np.array([], dtype=object), np.array([], dtype=object)).tolist() == []
