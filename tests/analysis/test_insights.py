"""The insights Graph Analyser gives beside the summary: FP32 variables that could be FP16, the five
fullest tiles with what fills them, and memory over tiles in bins.

GIVEN small emulated runs (mnist in FP32, and with FP32 accumulators behind FP16 weights), WHEN the
report answers, THEN every figure equals a recomputation from the raw tables here, and the fix the
FP16 insight suggests, run for real, saves what it estimated (or differs as docs/reports.md says).
"""

from __future__ import annotations

import io
import json
import re
import shlex
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import popvision_py as pv
from popvision_py import errors as E
from popvision_py.analysis import verify
from popvision_py.analysis.findings import fixes
from popvision_py.format import open_profile
from tests.test_format import members, rezip
from tests.engine.helpers import profile_path, run_cli

ROOT = Path(__file__).resolve().parents[2]
MNIST = ROOT / "sample_profiles" / "mnist_pipelined" / "profile.pop"
IMPORTED = ROOT / "sample_profiles" / "pytorch_gpipe" / "profile.pop"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("insights")
    return {
        # FP32 everything: --precision fp16 halves weights, accumulators (they follow it), activations
        "fp32": profile_path(folder, "mnist", "--precision", "fp32", "--input", "synthetic", name="fp32"),
        # FP16 weights with FP32 gradient accumulators and optimiser state
        "accum": profile_path(folder, "mnist", "--accum-type", "fp32", "--input", "synthetic", name="accum"),
    }


def tables(path: Path) -> dict[str, pd.DataFrame]:
    with open_profile(path) as p:
        return {name: p.read_pandas(name) for name in ("variables", "tile_memory")} | {"target": p.target}


def test_the_emulator_records_each_variables_type(runs):
    # GIVEN an FP32 run and an FP16 run with FP32 accumulators
    v32, v16 = tables(runs["fp32"])["variables"], tables(runs["accum"])["variables"]
    # THEN every variable of the FP32 run is FP32 (its inputs are images, not token ids)
    assert set(v32["dtype"].astype(str)) == {"fp32"}
    # AND the FP16 run's weights, gradients and activations are FP16; its accumulators and its (AdamW,
    # FP32 by default) optimiser state FP32; the loss's output FP32 as the model computes it
    kind = np.where(v16["name"].astype(str).str.endswith("/grad_accumulator"), "accumulator",
                    v16["category"].astype(str))
    got = pd.Series(v16["dtype"].astype(str).values, index=kind).groupby(level=0).agg(lambda s: sorted(set(s)))
    assert got["accumulator"] == ["fp32"] and got["optimiser_state"] == ["fp32"] and got["weights"] == ["fp16"]
    assert got["activations"] == ["fp16"] and got["exchange_buffers"] == ["fp16"]
    assert got["stash"] == ["fp16", "fp32"]
    assert v16.loc[v16["dtype"].astype(str).eq("fp32") & v16["category"].astype(str).eq("stash"), "name"] \
        .astype(str).str.contains("loss").all()


def test_fp32_variables_are_the_raw_tables_grouped(runs):
    # GIVEN the FP16 run with FP32 accumulators
    with pv.open(runs["accum"]) as r:
        got = r.insights.fp32_variables()
    v = tables(runs["accum"])["variables"]
    # WHEN recomputed here: FP32 variables by IPU and kind (accumulators apart from other gradients)
    v = v[v["dtype"].astype(str) == "fp32"].copy()
    v["kind"] = np.where(v["name"].astype(str).str.endswith("/grad_accumulator"), "gradient_accumulators",
                         v["category"].astype(str))
    want = v.groupby(["ipu", "kind"]).agg(variables=("var_id", "size"), bytes=("bytes", "sum")).reset_index()
    option = {"gradient_accumulators": "--accum-type fp16", "optimiser_state": "--optimiser-state-type fp16"}
    want["option"] = want["kind"].map(option).fillna("")
    want["saved_bytes"] = np.where(want["option"] != "", want["bytes"] // 2, 0)
    # THEN the answer holds the same rows, the largest saving first
    merged = got.merge(want, on=["ipu", "kind"], suffixes=("", "_want"), validate="one_to_one")
    assert len(merged) == len(got) == len(want)
    for c in ("variables", "bytes", "saved_bytes", "option"):
        assert merged[c].tolist() == merged[f"{c}_want"].tolist(), c
    assert (got["dtype"] == "fp32").all()
    assert got["saved_bytes"].is_monotonic_decreasing
    # AND the stash row (the loss's FP32 output) is listed with no option and nothing saved
    assert got.loc[got["kind"] == "stash", "option"].tolist() == [""]


def _command(r, option: str) -> str:
    insights = r.summary.insights()
    (command,) = [c for c in insights["command"] if option in c]
    return command


def test_the_fp16_fix_run_for_real_saves_what_it_estimated(runs, tmp_path):
    # GIVEN the FP32 run's FP16 insight: --precision fp16, with its estimate per kind
    with pv.open(runs["fp32"]) as r:
        fp32 = r.insights.fp32_variables()
        command = _command(r, "--precision fp16")
        (fix,) = [f for f in verify.fix_runs(r) if f.command == command]
        before = verify.MeasuredFigures.of(r)
    assert "--precision fp32" not in command and command.startswith("popvision run mnist ")
    # WHEN its command runs
    words = shlex.split(command)
    k = words.index("--profile-dir")
    words[k + 1] = str(tmp_path / words[k + 1])
    assert run_cli(*words[1:], "-q").exit_code == 0
    after_path = Path(words[k + 1]) / "profile.pop"
    old, new = tables(runs["fp32"])["variables"], tables(after_path)["variables"]

    def by_kind(v: pd.DataFrame) -> pd.Series:
        kind = np.where(v["name"].astype(str).str.endswith("/grad_accumulator"), "gradient_accumulators",
                        v["category"].astype(str))
        return v.groupby([v["ipu"], kind])["bytes"].sum()

    measured = by_kind(old) - by_kind(new)
    estimated = fp32[fp32["option"] == "--precision fp16"].set_index(["ipu", "kind"])["saved_bytes"]
    # THEN weights, accumulators and activations save exactly the estimate (their bytes halve)
    exact = estimated[estimated.index.get_level_values(1).isin(["weights", "gradient_accumulators", "activations"])]
    assert (measured[exact.index] == exact).all()
    # AND the stash saves it less the half of the loss's output, which stays FP32 (docs/reports.md)
    loss = old[old["name"].astype(str).str.contains("loss") & old["category"].astype(str).eq("stash")]
    stash = estimated.xs("stash", level=1)
    assert (stash - measured.xs("stash", level=1)[stash.index]).sum() == loss["bytes"].sum() // 2
    # AND the exchange buffers save about half: the matmul planner's split changes with the precision
    buffers = measured.xs("exchange_buffers", level=1)
    assert (buffers > 0).all()
    assert 0.5 < buffers.sum() / estimated.xs("exchange_buffers", level=1).sum() < 1.5
    # AND the worst tile it predicted holds, as `popvision report --verify` judges it
    with pv.open(after_path) as fixed:
        after = verify.MeasuredFigures.of(fixed)
    status, verdict = verify.judge(fix, before, after, 1.33e9)
    assert status == "held", verdict
    assert after.worst_tile_bytes < before.worst_tile_bytes


def _words(fix) -> str:
    """A fix's changes as the command-line options its command gives them."""
    return " ".join(word for name, value in fix.changes.items() for word in fixes.flag(name, value))


def _precision_command(r, option: str) -> str:
    """The command of the precision fix for ``option``, listed among the insights or not."""
    worst = r.summary.figures().worst_tile_bytes
    (fix,) = [fix for _, fix in r.insights.precision_fixes(worst) if option in _words(fix)]
    return fixes.command(r.run, r.target, fix.changes, fix.tag, r.planner)


def test_a_precision_fix_that_leaves_the_worst_tile_as_it_is_is_not_listed(runs):
    # GIVEN the FP32 run and the FP16 run with FP32 optimiser state and accumulators, both far from full
    seen = {True: [], False: []}
    for name in ("fp32", "accum"):
        with pv.open(runs[name]) as r:
            worst = r.summary.figures().worst_tile_bytes
            estimated = {_words(fix): fix.predicted.worst_tile_bytes for _, fix in r.insights.precision_fixes(worst)}
            listed = r.summary.insights()
        # THEN a fix the insights list lowers the worst tile; one whose saving lands only on other tiles is not
        # listed (its variables stay in the FP32 table)
        for words, after in estimated.items():
            shown = any(words in command for command in listed["command"])
            assert shown == (after < worst), (name, words, after, worst)
            seen[shown].append(words)
        effects = listed.loc[listed["topic"] == "precision", "effect"]
        assert not effects.str.contains(f"{worst:,} bytes -> about {worst:,} bytes").any()
    # AND both kinds occur: --precision fp16 lowers the FP32 run's worst tile, the optimiser state's does not
    assert "--precision fp16" in seen[True] and "--optimiser-state-type fp16" in seen[False], seen


def test_the_optimiser_state_fix_halves_the_state_exactly(runs, tmp_path):
    # GIVEN the FP16 run's FP32 optimiser state and accumulators, and their fixes' commands
    with pv.open(runs["accum"]) as r:
        fp32 = r.insights.fp32_variables()
        command = _precision_command(r, "--optimiser-state-type")
        accum = _precision_command(r, "--accum-type")
    assert "--accum-type fp32" in command and "--accum-type fp32" not in accum
    # WHEN the optimiser state's command runs
    words = shlex.split(command)
    k = words.index("--profile-dir")
    words[k + 1] = str(tmp_path / words[k + 1])
    assert run_cli(*words[1:], "-q").exit_code == 0
    new = tables(Path(words[k + 1]) / "profile.pop")["variables"]
    old = tables(runs["accum"])["variables"]
    # THEN the state's bytes on each IPU fall by exactly the estimate, and nothing else changes
    state = lambda v: v[v["category"].astype(str) == "optimiser_state"].groupby("ipu")["bytes"].sum()  # noqa: E731
    estimate = fp32[fp32["kind"] == "optimiser_state"].set_index("ipu")["saved_bytes"]
    assert ((state(old) - state(new))[estimate.index] == estimate).all()
    others = lambda v: v[v["category"].astype(str) != "optimiser_state"]["bytes"].sum()  # noqa: E731
    assert others(old) == others(new)


def _share(total: int, start: int, tiles: int, tile: int) -> int:
    """engine/mapping.py's Mapping.share for one grain per tile, written out: floor(total x cum / G) differences."""
    if not start <= tile < start + tiles:
        return 0
    k = tile - start
    return total * (k + 1) // tiles - total * k // tiles


def test_the_fullest_tiles_are_the_raw_tables_summed(runs):
    # GIVEN the FP32 run
    with pv.open(runs["fp32"]) as r:
        head, cats, held = (r.insights.fullest_tiles(), r.insights.fullest_tile_categories(),
                            r.insights.fullest_tile_variables())
    raw = tables(runs["fp32"])
    mem, v, capacity = raw["tile_memory"], raw["variables"], raw["target"]["bytes_per_tile"]
    # WHEN the five fullest tiles are found here: tile_memory summed per tile, largest first
    totals = mem.groupby(["ipu", "tile"])["bytes"].sum().reset_index()
    top = totals.sort_values(["bytes", "ipu", "tile"], ascending=[False, True, True]).head(5)
    # THEN they are the answer's, with their share of the tile
    assert head[["ipu", "tile", "total_bytes"]].values.tolist() == top.values.tolist()
    assert np.allclose(head["used_pct"], 100 * top["bytes"].to_numpy() / capacity)
    for row in head.itertuples():
        on = mem[(mem["ipu"] == row.ipu) & (mem["tile"] == row.tile)]
        # AND its categories are its tile_memory rows
        mine = cats[cats["rank"] == row.rank]
        assert sorted(zip(mine["category"], mine["always_live"], mine["bytes"])) == sorted(
            zip(on["category"].astype(str), on["always_live"], on["bytes"]))
        # AND its peak step is the first where its not-always-live variables' bytes on it are the most
        vi = v[v["ipu"] == row.ipu]
        share = np.array([_share(b, s, n, row.tile) for b, s, n in zip(vi["bytes"], vi["start_tile"], vi["tiles"])])
        steps = int(v["live_to_step"].max()) + 1
        nal = [sum(b for b, a, f, t in zip(share, vi["always_live"], vi["live_from_step"], vi["live_to_step"])
                   if not a and f <= s <= t) for s in range(steps)]
        assert row.peak_step == int(np.argmax(nal))
        # AND the variables there, by category, hold exactly the tile's not-always-live bytes (the
        # emulator's grain rule recomputed: every variable of mnist lies on fewer tiles than the IPU's)
        live = (vi["always_live"] | ((vi["live_from_step"] <= row.peak_step) & (row.peak_step <= vi["live_to_step"])))
        filled = pd.Series(share[live.to_numpy()], index=vi["category"].astype(str)[live]).groupby(level=0).sum()
        nal_rows = on[~on["always_live"]].set_index(on[~on["always_live"]]["category"].astype(str))["bytes"]
        assert (filled[nal_rows.index] == nal_rows).all()
        # AND its largest variables are the five with most bytes on it at that step
        ranked = sorted(((-b, i) for b, i, ok in zip(share, vi["var_id"], live) if ok and b > 0))[:5]
        ours = held[held["rank"] == row.rank]
        assert list(zip(-ours["bytes_on_tile"], ours["var_id"])) == ranked


def test_the_histogram_counts_every_tile_once(runs):
    # GIVEN the FP16 run
    with pv.open(runs["accum"]) as r:
        got = r.insights.histogram()
    raw = tables(runs["accum"])
    totals = raw["tile_memory"].groupby(["ipu", "tile"])["bytes"].sum()
    tiles = raw["target"]["tiles_per_ipu"] * raw["target"]["num_ipus"]
    # WHEN binned here: 20 bins from 0, each a whole number of KiB wide, the fullest tile in the last
    width = -(-(-(-(int(totals.max()) + 1) // 20)) // 1024) * 1024
    counts, edges = np.histogram(totals.reindex(pd.MultiIndex.from_product(
        [range(raw["target"]["num_ipus"]), range(raw["target"]["tiles_per_ipu"])]), fill_value=0),
        bins=np.arange(21) * width)
    # THEN the answer's bins and counts are those, every tile counted once
    assert got["low_bytes"].tolist() == edges[:-1].tolist() and got["high_bytes"].tolist() == edges[1:].tolist()
    assert got["tiles"].tolist() == counts.tolist() and got["tiles"].sum() == tiles
    assert np.isclose(got["tiles_pct"].sum(), 100.0)
    assert not got["over_capacity"].any()


def test_a_schema_1_profile_still_opens_and_reports(tmp_path):
    # GIVEN the sample as schema 1 wrote it: its variables have no dtype
    from tests.test_format_hostile import as_schema_1

    schema_1 = as_schema_1(MNIST, tmp_path / "v1.pop")
    with open_profile(schema_1) as p:
        assert p.manifest["schema_version"] == 1 and not p.has_column("variables", "dtype")
    # WHEN it is reported in every format
    for fmt in ("text", "json", "csv", "md", "html"):
        out = tmp_path / f"report.{fmt}"
        result = run_cli("report", str(schema_1), "--section", "summary", "--format", fmt, "-o", str(out))
        assert result.exit_code == 0, result.output
    # THEN the FP16 insight says its types are inferred from the run configuration (FP16 precision,
    # FP32 AdamW state) and lists the optimiser state only
    text = (tmp_path / "report.text").read_text()
    assert "types inferred from the run configuration: a schema-1 profile does not record them" in text
    with pv.open(schema_1) as r:
        fp32 = r.insights.fp32_variables()
        assert r.insights.dtypes()[1]
    assert set(fp32["kind"]) == {"optimiser_state"}
    assert set(fp32["option"]) == {"--optimiser-state-type fp16"}
    # AND the fullest tiles and the histogram are there, in JSON and as CSV files
    assert re.search(r"1\. IPU \d+ tile \d+: [\d,]+ bytes", text)
    assert (tmp_path / "report.csv" / "summary.memory_histogram.csv").exists()


def test_an_imported_profile_says_why_in_one_line(tmp_path):
    # GIVEN a profile imported from PyTorch traces (ranks, no tiles, no named tensors)
    out = tmp_path / "report.text"
    # WHEN its summary is reported
    assert run_cli("report", str(IMPORTED), "--section", "summary", "-o", str(out)).exit_code == 0
    text = out.read_text()
    # THEN the three tile insights, none of which applies, are left out of what a reader sees, nothing repeated
    assert "FP32 variables, the fullest tiles, memory over tiles" not in text
    assert "A rank has no tiles" not in text and "The five fullest tiles" not in text
    assert "Memory over tiles" not in text and "Summary" in text and "Insights" in text
    # AND JSON keeps their block, its one line saying why none applies
    doc = json.loads(run_cli("report", str(IMPORTED), "--section", "summary", "--format", "json").output)
    assert doc["sections"]["summary"]["tile_insights"] == []


def test_only_a_profile_older_than_dtype_may_lack_it(runs, tmp_path):
    # GIVEN a schema-2 profile whose variables table is rewritten without its dtype column
    contents = members(runs["accum"])
    with open_profile(runs["accum"]) as p:
        lacking = p.read_table("variables").drop_columns(["dtype"])
    sink = io.BytesIO()
    pq.write_table(lacking, sink)
    data = sink.getvalue()
    contents["variables.parquet"] = data
    manifest = json.loads(contents["manifest.json"])
    manifest["tables"]["variables"]["footer_crc32"] = zlib.crc32(data[-(int.from_bytes(data[-8:-4], "little") + 8):])
    contents["manifest.json"] = json.dumps(manifest).encode()
    v2 = rezip(tmp_path / "v2.pop", contents)
    # WHEN it is opened THEN it is refused: schema 2 has the column
    with pytest.raises(E.MissingColumnError, match="Table variables of .* has no column dtype."):
        open_profile(v2)
    # AND the same file stamped schema 1 opens, saying it has no dtype, and reports with inferred types
    manifest["schema_version"] = 1
    contents["manifest.json"] = json.dumps(manifest).encode()
    v1 = rezip(tmp_path / "v1.pop", contents)
    with pv.open(v1) as r:
        assert not r.profile.has_column("variables", "dtype")
        assert r.insights.dtypes()[1] and len(r.insights.fp32_variables())
    assert run_cli("report", str(v1), "--section", "summary", "-o", str(tmp_path / "r.txt")).exit_code == 0
