"""`popvision compare` (issue 11, item 5): a row one side lacks is 0 there, identifiers get no
difference, and the run settings that differ head every format.

The right figures are computed here from the raw tables (``open_profile(path).read_table``), from the
manifests, or from each side's own `popvision report`, and compared with what compare answers
through the API and the CLI.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import popvision_py as pv
from popvision_py.cli import main
from popvision_py.format import open_profile

ROOT = Path(__file__).resolve().parent.parent
OOM = ROOT / "sample_profiles" / "bert_large_out_of_memory" / "profile.pop"
PIPELINED = ROOT / "sample_profiles" / "mnist_pipelined" / "profile.pop"
SHARDED = ROOT / "sample_profiles" / "mnist_sharded" / "profile.pop"
OPTIMISER_ROW = "ipu 0 optimiser_state always-live bytes"


def invoke(*args: object):
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def run(folder: Path, *options: str) -> Path:
    invoke("run", *options, "--profile", "--profile-dir", folder, "-q")
    return folder / "profile.pop"


@pytest.fixture(scope="module")
def bert_large(tmp_path_factory) -> Path:
    """bert-large as the zoo runs it: the optimiser offloaded (the out-of-memory sample keeps it on chip)."""
    return run(tmp_path_factory.mktemp("bert_large"), "bert-large")


@pytest.fixture(scope="module")
def mnist_runs(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("mnist")
    return {
        "default": run(folder / "default", "mnist"),
        # seven settings changed on the command line
        "changed": run(folder / "changed", "mnist", "--gradient-accumulation", "20", "--replicas", "2",
                       "--batch-size", "16", "--offload-optimiser", "--precision", "fp32", "--optimiser", "sgd",
                       "--system", "IPU-POD16"),
        "inference": run(folder / "inference", "mnist", "--mode", "inference", "--strategy", "sharded"),
    }


def compare_json(a: Path, b: Path, section: str = "all") -> dict:
    return json.loads(invoke("compare", a, b, "--section", section, "--format", "json").stdout)


def json_rows(doc: dict, section: str) -> dict[str, dict]:
    return {r["figure"]: r for r in doc["sections"][section]["comparison"]}


def text_row(text: str, figure: str) -> list[str]:
    """The cells after the figure's name on its line of compare's text table."""
    lines = [line for line in text.splitlines() if f"  {figure}  " in line]
    assert len(lines) == 1, (figure, lines)
    return lines[0].split(figure, 1)[1].split()


def text_block(text: str, title: str) -> str:
    """One titled block of compare's text output (up to the blank line after it)."""
    return text.split(f"\n{title}\n", 1)[1].split("\n\n", 1)[0]


def category_bytes(path: Path) -> dict[str, int]:
    """Bytes per IPU, category and always-live, summed by hand over the tile_memory table."""
    with open_profile(path) as profile:
        tm = profile.read_table("tile_memory").to_pandas()
    sums = tm.groupby(["ipu", "category", "always_live"], observed=True)["bytes"].sum()
    return {f"ipu {ipu} {cat} {'always-live' if live else 'not-always-live'} bytes": int(n)
            for (ipu, cat, live), n in sums.items() if n > 0}


# --------------------------------------------------------------- a row absent on one side is 0 there


def test_a_category_on_one_side_only_differs_by_all_its_bytes(bert_large):
    # GIVEN bert-large with its optimiser offloaded (A) and the out-of-memory sample holding it on chip (B)
    a, b = category_bytes(bert_large), category_bytes(OOM)
    assert OPTIMISER_ROW in b and OPTIMISER_ROW not in a
    only_a = [k for k in a if k not in b]
    # WHEN they are compared through the API
    memory = pv.compare(bert_large, OOM).memory().set_index("figure")
    # THEN every category row of either side is there, the side lacking it at 0 bytes, difference = b - a
    for key in a.keys() | b.keys():
        row = memory.loc[key]
        assert (row["a"], row["b"], row["difference"]) == (a.get(key, 0), b.get(key, 0), b.get(key, 0) - a.get(key, 0))
    # IPU 0 holds the embedding (31.8M parameters), 3 layers (12.6M each) and the head: LAMB's 6 B each
    # (an FP16 first moment, an FP32 second, as Graphcore's BERT-Large)
    assert memory.loc[OPTIMISER_ROW, "difference"] == b[OPTIMISER_ROW] > 6 * (31_800_000 + 3 * 12_600_000)
    assert math.isnan(memory.loc[OPTIMISER_ROW, "difference_pct"])  # nothing to be a percentage of
    for key in only_a:
        assert memory.loc[key, "difference_pct"] == -100
    # AND the CLI's JSON says the same: its bytes - 0, and no percentage
    rows = json_rows(compare_json(bert_large, OOM, "memory"), "memory")
    assert {k: (rows[k]["a"], rows[k]["b"], rows[k]["difference"]) for k in a.keys() | b.keys()} == {
        k: (a.get(k, 0), b.get(k, 0), b.get(k, 0) - a.get(k, 0)) for k in a.keys() | b.keys()}
    assert rows[OPTIMISER_ROW]["difference_pct"] is None
    # AND the text shows the row (among the first rows it prints) with the difference computed
    text = invoke("compare", bert_large, OOM, "--section", "memory").stdout
    assert text_row(text, OPTIMISER_ROW) == ["0", f"{b[OPTIMISER_ROW]:,}", f"{b[OPTIMISER_ROW]:,}", "-"]


def test_an_exchange_kind_one_side_never_used_is_0_bytes_and_0_cycles_there(bert_large):
    # GIVEN bert-large streams its offloaded optimiser over remote buffers; the out-of-memory sample does not
    with open_profile(bert_large) as p:
        ex = p.read_table("exchanges").to_pandas()
    with open_profile(OOM) as p:
        assert "remote_buffer" not in set(p.read_table("exchanges").to_pandas()["kind"].astype(str))
    assert (ex["kind"].astype(str) == "remote_buffer").any()
    # WHEN compared THEN remote-buffer bytes and time share go to 0 in B: -100 %; its rate has no value in B
    rows = json_rows(compare_json(bert_large, OOM, "exchange"), "exchange")
    own = {r["kind"]: r for r in json.loads(invoke("report", bert_large, "--section", "exchange", "--format",
                                                   "json").stdout)["sections"]["exchange"]["bandwidth"]}
    for field in ("bytes", "cycles"):
        row = rows[f"remote_buffer {field}"]
        assert (row["a"], row["b"], row["difference"], row["difference_pct"]) == (
            own["remote_buffer"][field], 0, -own["remote_buffer"][field], -100)
    assert rows["remote_buffer time_pct"]["b"] == 0 and rows["remote_buffer time_pct"]["difference_pct"] == -100
    rate = rows["remote_buffer achieved_bytes_per_s"]
    assert rate["b"] is None and rate["difference"] is None  # a rate of nothing moved is not 0


# ------------------------------------------------------------------------- identifiers: no difference


def worst_tile(path: Path) -> tuple[int, int, int]:
    """(IPU, tile, bytes) of the fullest tile, the first in IPU, tile order: by hand from tile_memory."""
    with open_profile(path) as profile:
        tm = profile.read_table("tile_memory").to_pandas()
    totals = tm.groupby(["ipu", "tile"])["bytes"].sum().sort_index()
    ipu, tile = totals.idxmax()
    return int(ipu), int(tile), int(totals.max())


def peak_steps(path: Path) -> dict[int, int]:
    """Each IPU's first step of most not-always-live bytes: by hand from the liveness table."""
    with open_profile(path) as profile:
        lv = profile.read_table("liveness").to_pandas().sort_values(["ipu", "step"])
    return {int(ipu): int(g["step"].iloc[g["not_always_live_bytes"].to_numpy().argmax()])
            for ipu, g in lv.groupby("ipu")}


def test_identifiers_have_no_difference_or_percentage(mnist_runs):
    # GIVEN two mnist runs whose fullest tiles are different tiles
    a, b = mnist_runs["default"], mnist_runs["changed"]
    wa, wb = worst_tile(a), worst_tile(b)
    assert wa[:2] != wb[:2]
    bottleneck = (pv.open(a).stages.figures().bottleneck_stage, pv.open(b).stages.figures().bottleneck_stage)
    # WHEN compared (API, JSON, text)
    c = pv.compare(a, b)
    api = pd.concat([c.summary(), c.stages(), c.liveness()]).set_index("figure")
    doc = compare_json(a, b)
    rows = {**json_rows(doc, "summary"), **json_rows(doc, "stages"), **json_rows(doc, "liveness")}
    text = invoke("compare", a, b).stdout
    # THEN which IPU, tile, stage and step are shown as they are, with no difference nor percentage
    expected = {"worst_ipu": (wa[0], wb[0]), "worst_tile": (wa[1], wb[1]), "bottleneck_stage": bottleneck,
                **{f"ipu {i} peak_step": (peak_steps(a)[i], peak_steps(b)[i]) for i in peak_steps(a)}}
    for figure, (va, vb) in expected.items():
        assert (api.loc[figure, "a"], api.loc[figure, "b"]) == (va, vb)
        assert math.isnan(api.loc[figure, "difference"]) and math.isnan(api.loc[figure, "difference_pct"])
        assert (rows[figure]["a"], rows[figure]["b"], rows[figure]["difference"], rows[figure]["difference_pct"]) \
            == (va, vb, None, None)
        assert text_row(text, figure) == [f"{va:,}", f"{vb:,}", "-", "-"]
    # AND the worst tile's bytes, a quantity, do change by a percentage
    assert rows["worst_tile_bytes"]["difference"] == wb[2] - wa[2]
    assert rows["worst_tile_bytes"]["difference_pct"] == pytest.approx(100 * (wb[2] - wa[2]) / wa[2])
    # AND whether it fits is a yes/no, not a quantity
    assert rows["fits"]["difference"] is None and rows["fits"]["difference_pct"] is None


# ------------------------------------------------------------------- the header: settings that differ


EXPECTED_SETTINGS = {
    # what the command line changed (mnist trains with 40 samples x GA 10, adamw, on an IPU-POD4)
    "changed": {"gradient_accumulation": (10, 20), "replication_factor": (1, 2), "micro_batch_size": (40, 16),
                "precision": ("fp16", "fp32"), "optimiser": ("adamw", "sgd"), "system": ("IPU-POD4", "IPU-POD16"),
                "tensor_locations.optimiser": ("on_chip", "off_chip")},
    # inference: no gradient accumulation, no optimiser, and mnist's inference batch (8 x 100 iterations)
    "inference": {"strategy": ("pipelined", "sharded"), "mode": ("training", "inference"),
                  "gradient_accumulation": (10, 1), "micro_batch_size": (40, 8), "device_iterations": (10, 100),
                  "optimiser": ("adamw", None), "optimiser_state_type": ("fp32", None),
                  "first_moment_type": ("fp32", None)},
}


def manifest_value(path: Path, setting: str):
    with open_profile(path) as profile:
        run, target = profile.run, profile.target
    if setting == "system":
        return target["system"]
    if "." in setting:
        nest, key = setting.split(".")
        return run[nest][key]
    return run[setting]


@pytest.mark.parametrize("other", ["changed", "inference"])
def test_header_lists_exactly_the_settings_that_differ(mnist_runs, other):
    a, b = mnist_runs["default"], mnist_runs[other]
    expected = EXPECTED_SETTINGS[other]
    # the values written by hand are the manifests' own
    assert {s: (manifest_value(a, s), manifest_value(b, s)) for s in expected} == expected
    # WHEN compared THEN the API, and the JSON header, list exactly those settings with A's and B's values
    frame = pv.compare(a, b).configuration()
    assert {s: (va, vb) for s, va, vb in frame.itertuples(index=False)} == expected
    doc = compare_json(a, b, "summary")
    assert {r["setting"]: (r["a"], r["b"]) for r in doc["sections"]["compare"]["configuration"]} == expected


def test_header_is_in_every_format(mnist_runs, tmp_path):
    a, b = mnist_runs["default"], mnist_runs["changed"]
    expected = EXPECTED_SETTINGS["changed"]
    # text: a table under its title, one line per setting
    text = text_block(invoke("compare", a, b, "--section", "summary").stdout, "Configuration: the settings that differ")
    for setting, (va, vb) in expected.items():
        assert text_row(text, setting) == [f"{va:,}" if isinstance(va, int) else va,
                                           f"{vb:,}" if isinstance(vb, int) else vb]
    # Markdown: a pipe table row per setting
    md = invoke("compare", a, b, "--section", "summary", "--format", "md").stdout
    for setting, (va, vb) in expected.items():
        assert f"| {setting} | {va} | {vb} |" in md
    # CSV: compare.configuration.csv, exactly the settings
    invoke("compare", a, b, "--section", "summary", "--format", "csv", "-o", tmp_path / "csv")
    table = pd.read_csv(tmp_path / "csv" / "compare.configuration.csv", dtype=str)
    assert list(table.columns) == ["setting", "a", "b"]
    assert {s: (va, vb) for s, va, vb in table.itertuples(index=False)} == {
        s: (str(va), str(vb)) for s, (va, vb) in expected.items()}
    # HTML: a row per setting
    invoke("compare", a, b, "--section", "summary", "--format", "html", "-o", tmp_path / "c.html")
    page = (tmp_path / "c.html").read_text()
    assert "Configuration: the settings that differ" in page
    for setting, (va, vb) in expected.items():
        assert f"<td class=''>{setting}</td><td class=''>{va}</td><td class=''>{vb}</td>" in page


def test_a_profile_against_itself_has_no_setting_that_differs(mnist_runs):
    a = mnist_runs["default"]
    doc = compare_json(a, a, "summary")
    assert doc["sections"]["compare"]["configuration"] == []
    assert "Configuration: a and b have the same settings" in invoke("compare", a, a, "--section", "summary").stdout
    # and every setting is there to see when asked
    every = pv.compare(a, a).configuration(every=True).set_index("setting")
    assert every.loc["strategy", "a"] == every.loc["strategy", "b"] == "pipelined"
    assert every.loc["stages", "a"] == "B1@0 B2@1 B3@2 B4@3"


# --------------------------------------------- independent recomputation from the single-profile reports


# per category / kind / stage rows
AMOUNTS_ABSENT_AS_0 = {"bytes", "cycles", "time_pct", "cycles_per_micro_batch", "busy_cycles"}
IDENTIFIERS = {"worst_ipu", "worst_tile", "fits", "bottleneck_stage", "peak_step"}


def report_figures(path: Path) -> dict[tuple[str, str], float]:
    """Every figure compare shows, read from `popvision report --format json` of the one profile."""
    s = json.loads(invoke("report", path, "--format", "json").stdout)["sections"]
    out: dict[tuple[str, str], float] = {}

    def numeric(section: str, figures: dict, prefix: str = "") -> None:
        for k, v in figures.items():
            if isinstance(v, (int, float)) or v is None:
                out[section, prefix + k] = v

    numeric("summary", s["summary"]["figures"])
    for r in s["memory"]["by_ipu"]:
        for k in ("always_live_bytes", "not_always_live_bytes", "total_bytes", "headroom_bytes", "used_pct",
                  "max_tile_bytes", "oom_tiles"):
            out["memory", f"ipu {r['ipu']} {k}"] = r[k]
    for r in s["memory"]["by_category"]:
        live = "always-live" if r["always_live"] else "not-always-live"
        out["memory", f"ipu {r['ipu']} {r['category']} {live} bytes"] = r["bytes"]
    for r in s["liveness"]["peaks"]:
        out["liveness", f"ipu {r['ipu']} peak_step"] = r["peak_step"]
        out["liveness", f"ipu {r['ipu']} peak not_always_live_bytes"] = r["not_always_live_bytes"]
        out["liveness", f"ipu {r['ipu']} peak total_bytes"] = r["total_bytes"]
    numeric("stages", s["stages"]["figures"])
    for r in s["stages"]["summary"]:
        for k in ("cycles_per_micro_batch", "busy_cycles", "utilisation_pct"):
            out["stages", f"stage {r['stage']} {r['pass']} {k}"] = r[k]
    out["stages", "best split predicted_step_cycles"] = s["stages"]["best_split_figures"]["predicted_step_cycles"]
    out["stages", "best split gain_pct"] = s["stages"]["best_split_figures"]["gain_pct"]
    numeric("exchange", s["exchange"]["figures"])
    for r in s["exchange"]["bandwidth"]:
        for k in ("bytes", "cycles", "achieved_bytes_per_s"):
            out["exchange", f"{r['kind']} {k}"] = r[k]
    for r in s["exchange"]["by_kind"]:
        for k in (k for k in r if k.endswith("_pct")):
            out["exchange", f"{r['kind']} {k}"] = r[k]
    return {k: (float(v) if v is not None else None) for k, v in out.items()}


@pytest.mark.parametrize("pair", ["mnist pipelined vs sharded", "bert-large vs out of memory"])
def test_compare_figures_are_the_two_reports_figures(pair, bert_large):
    a, b = (PIPELINED, SHARDED) if pair.startswith("mnist") else (bert_large, OOM)
    # GIVEN each profile's own report, read independently
    fa, fb = report_figures(a), report_figures(b)
    # WHEN the two are compared
    doc = compare_json(a, b)
    rows = {(name, r["figure"]): r for name in ("summary", "memory", "liveness", "stages", "exchange")
            for r in doc["sections"][name]["comparison"]}
    # THEN compare shows exactly the reports' figures, a row one report lacks at 0 (bytes, cycles, time)
    assert rows.keys() == fa.keys() | fb.keys()
    for key, row in rows.items():
        field = key[1].rsplit(" ", 1)[-1]
        absent = 0.0 if field in AMOUNTS_ABSENT_AS_0 else None
        va, vb = fa.get(key, absent), fb.get(key, absent)
        assert (row["a"], row["b"]) == (va, vb), key
        if field in IDENTIFIERS or va is None or vb is None:
            assert row["difference"] is None and row["difference_pct"] is None, key
        else:
            assert row["difference"] == pytest.approx(vb - va, rel=1e-12, abs=1e-9), key
            pct = None if va == 0 and vb != 0 else (0.0 if va == vb else 100 * (vb - va) / abs(va))
            assert row["difference_pct"] == (pytest.approx(pct, rel=1e-9) if pct is not None else None), key


def test_html_bars_leave_out_identifiers_and_figures_new_on_one_side(bert_large):
    from popvision_py.render import figures

    # GIVEN bert-large against the out-of-memory sample: the worst tile is tile 0 on both, the
    # on-chip optimiser state only in B
    c = pv.compare(bert_large, OOM)
    # WHEN the HTML's bars of the largest relative differences are drawn
    summary = figures.comparison(c.summary(), "Summary").data[0]
    memory = figures.comparison(c.memory(), "Memory", n=1000).data[0]
    # THEN each bar is a figure with a percentage; none is an identifier or has no percentage
    assert not {"worst_ipu", "worst_tile", "fits"} & set(summary.y)
    assert OPTIMISER_ROW not in set(memory.y)
    assert all(not math.isnan(x) for x in list(summary.x) + list(memory.x))
    assert "worst_tile_bytes" in set(summary.y)
