"""`popvision tune` ranks by the central estimates and ranges only the candidates it shows: their rows carry
the fit verdict and the throughput's and worst tile's ranges, as `popvision run` gives them; a borderline best
candidate is said so; a result written before ranges existed resumes, its candidates shown ranged then."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from engine.runner import RunRequest, emulate
from popvision_py.cli import main
from popvision_py.format import tunefile
from popvision_py.format.tunefile import read_tune
from popvision_py.tune.evaluate import RANGE_FIELDS
from tests.tune.conftest import tune

STAGES = ("mnist", "--system", "POD4", "--search", "stages", "--workers", "1", "-q", "--no-profile", "--top", "3")
# mnist at micro-batch 6500 with a loader that keeps up: its worst tile is close to a tile's memory
BORDERLINE = ("mnist", "--batch-size", "6500", "--assume", "host_tensor_samples_per_s_per_core=1e9", "--system",
              "POD4", "--search", "batch", "--workers", "1", "-q", "--no-profile")


def json_rows(result) -> pd.DataFrame:
    assert result.exit_code == 0, result.output
    return pd.DataFrame(json.loads(result.output)["rows"])


def table_line(output: str, label: str) -> str:
    """The table's line of the row ranked ``label`` ('1', '2', ... or '-' for an unranked start)."""
    table = output.split("\n\n")[1].splitlines()
    return next(line for line in table[1:] if line.split()[0].rstrip("*") == label)


@pytest.fixture(scope="module")
def stages(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, str]:
    """mnist's stage splits on an IPU-POD4, the top 3 shown: the rows (--json) and the text printed."""
    folder = tmp_path_factory.mktemp("ranges")
    rows = json_rows(tune(*STAGES, "--json", "-o", str(folder / "json.parquet")))
    text = tune(*STAGES, "-o", str(folder / "text.parquet"))
    assert text.exit_code == 0, text.output
    return rows, text.output


def test_only_the_rows_shown_are_ranged_and_each_range_holds_its_central_estimate(stages) -> None:
    rows, _ = stages
    # GIVEN the 8 contiguous splits of mnist's four blocks over one to four IPUs (1 + 3 + 3 + 1), every one fitting
    assert len(rows) == 8 and (rows["status"] == "ok").all()
    # THEN the rows with ranges are the ones the text shows: the top 3, the start and the Pareto front
    ranged = rows["fit_verdict"].notna()
    shown = (rows["rank"] <= 3) | rows["is_start"] | rows["pareto"]
    assert list(ranged) == list(shown) and 4 <= ranged.sum() < len(rows)
    # AND every other row has none of the range columns: not computed
    assert rows.loc[~ranged, list(RANGE_FIELDS)].isna().all().all()
    # AND each range holds its central estimate, and a candidate that fits is never "does not fit"
    for _, r in rows[ranged].iterrows():
        assert r["throughput_low"] <= r["samples_per_second"] <= r["throughput_high"], r["key"]
        assert r["worst_tile_pct_low"] <= r["worst_tile_pct"] <= r["worst_tile_pct_high"], r["key"]
        assert r["throughput_low"] < r["throughput_high"]
        assert r["fit_verdict"] in ("fits", "borderline")


def test_the_best_rows_ranges_are_what_popvision_run_gives_for_its_command(stages) -> None:
    rows, _ = stages
    best = rows[rows["rank"] == 1].iloc[0]
    # WHEN the best row's command is run as `popvision run` (with its sensitivity pass, the default)
    result = CliRunner().invoke(main, [*shlex.split(best["command"])[1:], "--json", "-q"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    run = json.loads(result.output)
    # THEN the row's verdict and ranges are the run's
    assert best["fit_verdict"] == run["fit_verdict"]
    assert [best["throughput_low"], best["throughput_high"]] == pytest.approx(run["throughput_range"], rel=1e-12)
    assert [best["worst_tile_pct_low"], best["worst_tile_pct_high"]] == pytest.approx(run["worst_tile_pct_range"],
                                                                                      rel=1e-12)


def test_the_table_has_a_fits_column_and_a_range_for_each_row_shown(stages) -> None:
    rows, output = stages
    header = output.split("\n\n")[1].splitlines()[0]
    assert "range of samples/s" in header and " fits " in header
    # THEN the best's line shows its verdict (mnist's worst tile is about 6% of a tile: it fits at every end)
    # and its range, to three significant figures
    best = rows[rows["rank"] == 1].iloc[0]
    assert best["fit_verdict"] == "fits" and best["worst_tile_pct_high"] < 10
    line = table_line(output, "1")
    low, high = (f"{float(f'{x:.3g}'):,.0f}" for x in (best["throughput_low"], best["throughput_high"]))
    assert f"{low} to {high}" in line
    assert line.split()[6] == "yes"  # rank, samples/s, the range's three words, vs start, then fits
    assert "BORDERLINE" not in output


def test_a_borderline_best_candidate_is_marked_in_the_table_and_said_so(tmp_path: Path) -> None:
    # GIVEN mnist at micro-batch 6500, whose worst tile is 97.7% of a tile at the central estimate and crosses
    # 100% within the assumptions' intervals (a precondition: if the emulator moves it, pick another batch)
    given = emulate(RunRequest("mnist", options={"micro_batch_size": 6500, "system": "IPU-POD4"},
                               assumptions={"host_tensor_samples_per_s_per_core": 1e9}))
    low, high = given.worst_tile_pct_range
    assert given.fits and low < 100 < high and given.fit_verdict == "borderline", given.worst_tile_pct_range
    # WHEN its micro-batches are searched (3250, 6500 and 13000; 13000 does not fit; 6500 is the fastest that fits)
    result = tune(*BORDERLINE, "-o", str(tmp_path / "text.parquet"))
    assert result.exit_code == 0, result.output
    rows = json_rows(tune(*BORDERLINE, "--json", "-o", str(tmp_path / "json.parquet")))
    best = rows[rows["rank"] == 1].iloc[0]
    assert best["is_start"] and best["fit_verdict"] == "borderline"
    assert [best["worst_tile_pct_low"], best["worst_tile_pct_high"]] == pytest.approx([low, high], rel=1e-12)
    # THEN the best's line says borderline, and the text says the best is borderline and names the fastest that
    # fits at every end: micro-batch 3250, ranked 2
    assert table_line(result.output, "1").split()[6] == "borderline"
    assert (f"The best candidate (#1) is BORDERLINE: at the ends of the assumptions its worst tile is {low:.1f}% to "
            f"{high:.1f}% of a tile, so it may not fit") in result.output
    second = rows[rows["rank"] == 2].iloc[0]
    assert second["fit_verdict"] == "fits" and second["changes"] == "--batch-size 3250"
    assert f"The fastest that fits at every end is #2: {second['samples_per_second']:,.1f} samples/s" in result.output
    assert "(#1, borderline)" in result.output  # the Pareto front says so too
    # AND the candidate that does not fit is not shown (one fits), so not ranged
    assert rows.loc[rows["status"] == "oom", "fit_verdict"].isna().all()


def written_before_ranges(path: Path) -> None:
    """``path`` rewritten as a result written before ranges existed: without their columns, if it has them."""
    table = pq.read_table(path)
    table = table.drop_columns([name for name in RANGE_FIELDS if name in table.column_names])
    pq.write_table(table, path)


def test_a_result_written_before_ranges_resumes_and_ranges_the_candidates_shown(tmp_path: Path) -> None:
    out = tmp_path / "tune.parquet"
    # GIVEN a finished search whose file has no range columns (as one written before they existed)
    assert tune(*STAGES, "-o", str(out)).exit_code == 0
    written_before_ranges(out)
    before, _ = read_tune(out)
    assert not set(RANGE_FIELDS) & set(pq.read_schema(out).names)
    # WHEN it is resumed
    result = tune(*STAGES, "--resume", str(out))
    assert result.exit_code == 0, result.output
    # THEN nothing is emulated again, and the candidates shown are ranged now
    shown = ((before["rank"] <= 3) | before["is_start"] | before["pareto"]).sum()
    assert f"8 candidates taken from {out}, 0 emulated now. Ranges computed now for {shown} of the candidates " \
           f"shown." in result.output
    assert table_line(result.output, "1").split()[6] == "yes"
    _, meta = read_tune(out)
    assert (meta["emulated"], meta["reused"], meta["ranged"]) == (0, 8, shown)


def test_the_file_keeps_the_ranges_and_a_resume_does_not_compute_them_again(tmp_path: Path) -> None:
    out = tmp_path / "tune.parquet"
    # GIVEN a finished search
    printed = json_rows(tune(*STAGES, "--json", "-o", str(out)))
    rows, _ = read_tune(out)
    # THEN its file holds the rows' verdicts and ranges as printed, under the names the search gives them
    assert tunefile.RANGE_COLUMNS.names == list(RANGE_FIELDS)
    ranged = printed["fit_verdict"].notna()
    assert list(rows["fit_verdict"].notna()) == list(ranged)
    assert list(rows.loc[ranged.to_numpy(), "throughput_low"]) == list(printed.loc[ranged, "throughput_low"])
    # AND a resume takes them from it: no candidate emulated or ranged again
    result = tune(*STAGES, "--resume", str(out))
    assert result.exit_code == 0, result.output
    assert f"8 candidates taken from {out}, 0 emulated now.\n" in result.output
