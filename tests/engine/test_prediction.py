"""An honest range on every answer (issue 20, item 3): the throughput and the worst tile at the ends of
the assumptions, the three-way fit verdict, and the drivers, in `popvision run`, --json and the manifest."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from engine.prediction import BORDERLINE, DOES_NOT_FIT, FITS, Prediction
from popvision_py.cli import main
from popvision_py.format import open_profile
from popvision_py.format.schema import Driver


def _run(*args: str):
    result = CliRunner().invoke(main, ["run", *args, "-q"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def bert():
    return json.loads(_run("bert-base", "--layers", "4", "--ipus", "2", "--json").stdout)


def test_the_range_contains_the_central_estimate(bert):
    # GIVEN a run's summary
    low, high = bert["throughput_range"]
    # THEN its throughput and worst tile lie inside their ranges, which are not empty
    assert low <= bert["samples_per_second"] <= high and low < high
    worst = 100 * bert["worst_tile_bytes"] / bert["bytes_per_tile"]
    wlow, whigh = bert["worst_tile_pct_range"]
    assert wlow <= worst <= whigh and wlow < whigh
    # AND the verdict follows from the worst tile's range, with the drivers named, largest first
    assert bert["fit_verdict"] == (FITS if whigh <= 100 else DOES_NOT_FIT if wlow > 100 else BORDERLINE)
    drivers = bert["throughput_range_drivers"]
    assert drivers and all({"name", "at_low", "at_high"} <= set(d) for d in drivers)
    effects = [max(abs(d["at_low"] - bert["samples_per_second"]), abs(d["at_high"] - bert["samples_per_second"]))
               for d in drivers]
    assert effects == sorted(effects, reverse=True)


def test_the_range_holds_the_root_sum_of_squares_of_the_drivers(bert):
    # GIVEN the drivers' throughput at each end of their intervals
    central = bert["samples_per_second"]
    drivers = bert["throughput_range_drivers"]
    below = sum(max(0.0, central - min(d["at_low"], d["at_high"])) ** 2 for d in drivers) ** 0.5
    above = sum(max(0.0, max(d["at_low"], d["at_high"]) - central) ** 2 for d in drivers) ** 0.5
    # THEN the range holds the central estimate minus and plus their root sum of squares
    low, high = bert["throughput_range"]
    assert low <= central - below + 1e-6 and high >= central + above - 1e-6


@pytest.mark.parametrize("figure,drivers,corners,value", [
    ("throughput_range", "throughput_range_drivers", "throughput_corners", "samples_per_second"),
    ("worst_tile_pct_range", "worst_tile_range_drivers", "worst_tile_pct_corners", None)])
def test_the_range_holds_every_assumption_at_its_ends_alone_and_together(bert, figure, drivers, corners, value):
    """What a range means (docs/emulator.md): the figure with any one assumption at either end of its
    interval, and with all of them together at the ends that lower it or raise it, lies inside."""
    low, high = bert[figure]
    moved = bert[drivers]
    # GIVEN each driver's figure at each end of its interval alone: inside the range
    assert moved and all(low <= d["at_low"] <= high and low <= d["at_high"] <= high for d in moved)
    for up, corner in zip((False, True), bert[corners]):
        # WHEN the user gives every driver at the end that lowered (raised) the figure, together
        ends = [f"{d['name']}={d['high'] if (d['at_high'] >= d['at_low']) == up else d['low']}" for d in moved]
        together = json.loads(_run("bert-base", "--layers", "4", "--ipus", "2", "--json",
                                   *[w for e in ends for w in ("--assume", e)]).stdout)
        # THEN that run's central figure is the corner the range was built from, and lies inside it
        got = together[value] if value else 100 * together["worst_tile_bytes"] / together["bytes_per_tile"]
        assert got == pytest.approx(corner, rel=1e-9)
        assert low - 1e-9 <= got <= high + 1e-9
    # AND the corners lie beyond every single driver's end on their side: the range is not the drivers' alone
    assert bert[corners][0] <= min(min(d["at_low"], d["at_high"]) for d in moved) + 1e-9
    assert bert[corners][1] >= max(max(d["at_low"], d["at_high"]) for d in moved) - 1e-9


def test_pinning_an_assumption_narrows_the_range(bert):
    # GIVEN the assumption that drives the throughput range most
    top = bert["throughput_range_drivers"][0]
    # WHEN the user pins it at its value with --assume
    pinned = json.loads(_run("bert-base", "--layers", "4", "--ipus", "2", "--json",
                             "--assume", f"{top['name']}={top['value']}").stdout)
    # THEN the central estimate is the same, the range narrower, and the pinned one no longer a driver
    assert pinned["samples_per_second"] == pytest.approx(bert["samples_per_second"])
    low, high = pinned["throughput_range"]
    assert high - low < bert["throughput_range"][1] - bert["throughput_range"][0]
    assert top["name"] not in {d["name"] for d in pinned["throughput_range_drivers"]}
    assert pinned["pinned_assumptions"] == [top["name"]]


def test_run_prints_the_range_the_verdict_and_the_drivers():
    # WHEN a user runs a model
    out = _run("mnist").stdout
    # THEN the throughput carries its range, the fit line its verdict, and the drivers are named
    rate = re.search(r"throughput\s+([\d,.]+) samples/s \(([\d,.]+) to ([\d,.]+)\)", out)
    assert rate, out
    central, low, high = (float(g.replace(",", "")) for g in rate.groups())
    assert low <= central <= high
    assert re.search(r"fit\s+fits \(worst tile \d+% to \d+%\)", out), out
    assert re.search(r"ranges driven by\s+throughput: \w+", out), out
    # AND --no-ranges prints the central figures alone
    plain = _run("mnist", "--no-ranges").stdout
    assert "ranges driven by" not in plain and re.search(r"throughput\s+[\d,.]+ samples/s\n", plain)


def test_the_manifest_records_the_prediction(tmp_path):
    # WHEN a run writes its profile
    summary = json.loads(_run("mnist", "--profile", "--profile-dir", str(tmp_path), "--json").stdout)
    # THEN the manifest holds the same ranges and verdict as the summary
    with open_profile(tmp_path / "profile.pop") as profile:
        prediction = profile.manifest["run"]["prediction"]
    assert prediction["throughput_range"] == pytest.approx(summary["throughput_range"])
    assert prediction["worst_tile_pct_range"] == pytest.approx(summary["worst_tile_pct_range"])
    assert prediction["fit_verdict"] == summary["fit_verdict"] == FITS


def _prediction(low: float, high: float, rate_low: float = 900, rate_high: float = 1100) -> Prediction:
    drivers = (Driver("link_latency_cycles", 1500, 700, 4000, rate_low, rate_high),)
    return Prediction(1000.0, (rate_low, rate_high), (low + high) / 2, (low, high), drivers)


def test_a_worst_tile_range_across_the_tile_is_borderline():
    # GIVEN worst-tile ranges below, across and above a tile's memory
    # THEN the verdicts are fits, borderline (with the range in words) and does not fit
    assert _prediction(80, 99.9).fit_verdict == FITS
    assert _prediction(93, 104).verdict_text() == "borderline (93% to 104% of the worst tile)"
    assert _prediction(100.5, 120).fit_verdict == DOES_NOT_FIT


def test_a_range_wider_than_a_quarter_says_what_to_pin_down():
    # GIVEN throughput ranges within and beyond ±25% of the central 1,000 samples/s
    # THEN only the wide one names its largest driver to pin down
    assert _prediction(80, 90).pin_down is None
    assert _prediction(80, 90, rate_low=700).pin_down == "link_latency_cycles"
    assert _prediction(80, 90, rate_high=1300).pin_down == "link_latency_cycles"
