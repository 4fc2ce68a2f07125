"""`popvision report --section memory` in depth: each IPU's fullest tiles with the two categories that
fill them, and their peaks over the program steps, recomputed from the raw tables; an imported trace
says in one line why they do not apply."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from popvision_py.analysis.imported import ranks as imported
from popvision_py.cli import main
from popvision_py.format import open_profile
from popvision_py.format.schema import MEMORY_CATEGORIES

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_profiles" / "mnist_pipelined" / "profile.pop"
IMPORTED = ROOT / "sample_profiles" / "pytorch_gpipe" / "profile.pop"


def report(profile: Path, fmt: str = "json") -> str:
    result = CliRunner().invoke(main, ["report", str(profile), "--section", "memory", "--format", fmt])
    assert result.exit_code == 0, result.output
    return result.output


def test_the_fullest_tiles_and_their_peaks_recomputed_from_tile_memory():
    # GIVEN the sample's tile_memory, summed per tile and per tile and category
    with open_profile(SAMPLE) as profile:
        memory = profile.read_pandas("tile_memory")
    memory["category"] = memory["category"].astype(str)
    totals = memory.groupby(["ipu", "tile"])["bytes"].sum()
    # WHEN the memory section is reported
    section = json.loads(report(SAMPLE))["sections"]["memory"]
    fullest, worst = section["fullest_tiles"], section["worst_tiles"]
    # THEN each IPU lists its five fullest tiles, largest first (then by tile), with their categories
    rank = {c: i for i, c in enumerate(MEMORY_CATEGORIES)}
    for ipu, part in totals.groupby(level="ipu"):
        ranked = part.reset_index().sort_values(["bytes", "tile"], ascending=[False, True]).head(5)
        rows = [r for r in fullest if r["ipu"] == ipu]
        assert [r["tile"] for r in rows] == ranked["tile"].tolist()
        assert [r["total_bytes"] for r in rows] == ranked["bytes"].tolist()
        for r in rows:
            sums = memory[(memory["ipu"] == ipu) & (memory["tile"] == r["tile"])].groupby("category")["bytes"].sum()
            order = np.lexsort((sums.index.map(rank.get), -sums.to_numpy()))
            assert (r["category"], r["second_category"]) == tuple(sums.index[order[:2]])
            assert abs(r["category_pct"] - 100 * sums.iloc[order[0]] / sums.sum()) < 1e-6
    # AND the same tiles, in the same order, are summarised over the steps: where every not-always-live
    # variable on the tile spans fewer tiles than the IPU has (one grain a tile: its split is exact),
    # the most the tile holds over the steps is its recorded peak
    assert [(r["ipu"], r["tile"]) for r in worst] == [(r["ipu"], r["tile"]) for r in fullest]
    with open_profile(SAMPLE) as profile:
        variables = profile.read_pandas("variables")
        tiles_per_ipu = profile.target["tiles_per_ipu"]
    exact = 0
    for r in worst:
        on = variables[(variables["ipu"] == r["ipu"]) & ~variables["always_live"]
                       & (variables["start_tile"] <= r["tile"])
                       & (r["tile"] < variables["start_tile"] + variables["tiles"])]
        if (on["tiles"] < tiles_per_ipu).all():
            assert r["peak_bytes"] == totals[(r["ipu"], r["tile"])]
            exact += 1
        assert r["always_live_bytes"] <= r["peak_bytes"]
    assert exact >= 10


def test_every_format_holds_the_new_tables(tmp_path: Path):
    text = report(SAMPLE, "text")
    assert "The fullest tiles and the categories that fill them" in text
    assert "The fullest tiles over the program steps: each tile's peak step" in text
    assert "peak_step_name" in report(SAMPLE, "md")
    result = CliRunner().invoke(main, ["report", str(SAMPLE), "--section", "memory", "--format", "csv",
                                       "-o", str(tmp_path / "csv")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "csv" / "memory.fullest_tiles.csv").read_text().startswith(
        "ipu,tile,total_bytes,excess_bytes,category,category_pct,second_category,second_pct")
    assert (tmp_path / "csv" / "memory.worst_tiles.csv").read_text().startswith(
        "ipu,tile,always_live_bytes,peak_step,peak_step_name,peak_bytes")
    result = CliRunner().invoke(main, ["report", str(SAMPLE), "--section", "memory", "--format", "html",
                                       "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 0 and "The fullest tiles over the program steps" in (tmp_path / "r.html").read_text()


def test_an_imported_trace_says_in_one_line_why_there_are_no_tiles():
    text = report(IMPORTED, "text")
    # once, under the distribution over tiles: the other tile tables (out-of-memory tiles, the fullest tiles and
    # their categories, over the steps) are only the same note, left out for a reader; JSON keeps them
    assert text.count(imported.NO_TILES) == 1
    assert "The fullest tiles and the categories that fill them" not in text
    doc = json.loads(report(IMPORTED, "json"))
    assert {"distribution", "out_of_memory", "fullest_tiles", "worst_tiles"} <= set(doc["sections"]["memory"])
