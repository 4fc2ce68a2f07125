"""The summary page's ranges as built by plain functions (no browser): ``data.ranges`` reads the manifest's
prediction (None without one), ``key_figures`` and ``ranges_panel`` show the throughput's range, the fit verdict
and what drives each range; a profile without ranges shows the central figures as before."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, replace
from typing import Any

import pytest
from dash import html

from dashboards import data, ids
from popvision_py.format.schema import Driver
from tests.dashboard.conftest import SAMPLES
from tests.dashboard.test_summary_insights import find, texts

# A borderline run, as a person writes it: 27,100 samples/s between 24,037 and 30,958; the worst tile at
# 93% to 104% of a tile; host_call_latency_s drives the throughput most, stack_bytes_per_tile the worst tile.
PREDICTION = {
    "throughput_range": [24_037.0, 30_958.0], "worst_tile_pct": 97.5, "worst_tile_pct_range": [93.04, 103.96],
    "fit_verdict": "borderline",
    "throughput_range_drivers": [
        {"name": "host_call_latency_s", "value": 0.002, "low": 0.0005, "high": 0.005, "at_low": 30_900.0,
         "at_high": 24_100.0},
        {"name": "streaming_memory_bytes_per_s", "value": 2e10, "low": 1e10, "high": 4e10, "at_low": 26_000.0,
         "at_high": 27_600.0},
    ],
    "worst_tile_range_drivers": [
        {"name": "stack_bytes_per_tile", "value": 7168, "low": 4096, "high": 12288, "at_low": 94.0, "at_high": 103.0},
    ],
    "pinned_assumptions": ["amp_efficiency"], "pin_down": None,
}


@dataclass
class Manifest:
    """What ``data.ranges`` reads of a Report: its manifest's run."""

    run: dict[str, Any]


@dataclass(frozen=True)
class Figures:
    """The summary figures ``key_figures`` reads (``analysis.summary.Summary``'s fields)."""

    model: str = "bert-large"
    strategy: str = "pipelined"
    mode: str = "training"
    arch: str = "mk2"
    num_ipus: int = 4
    replication_factor: int = 1
    micro_batch_size: int = 8
    gradient_accumulation: int = 16
    device_iterations: int = 1
    step_s: float = 0.0047
    step_cycles: float = 6_251_000.0
    throughput_samples_per_s: float = 27_100.0
    samples_per_step: int = 128
    flop_utilisation_pct: float = 22.2
    total_flops: int = 10**12
    fits: bool = True
    oom_tiles: int = 0
    worst_tile_bytes: int = 623_000
    worst_ipu: int = 1
    worst_tile: int = 0
    bytes_per_tile: int = 638_976


@pytest.fixture()
def summary_page(app):
    # the app fixture built the app, which registers the page modules (they cannot be imported before)
    return importlib.import_module("dashboards.pages.summary")


def test_the_manifests_prediction_reads_as_ranges_and_a_profile_without_one_as_none() -> None:
    # GIVEN a manifest with the prediction above; WHEN it is read
    ranges = data.ranges(Manifest({"model": "m", "prediction": PREDICTION}))
    # THEN its ranges, verdict and drivers are the manifest's, largest effect first
    assert ranges.throughput_range == (24_037.0, 30_958.0)
    assert ranges.worst_tile_pct_range == (93.04, 103.96)
    assert ranges.fit_verdict == "borderline"
    assert [d.name for d in ranges.throughput_drivers] == ["host_call_latency_s", "streaming_memory_bytes_per_s"]
    assert ranges.worst_tile_drivers[0] == Driver("stack_bytes_per_tile", 7168, 4096, 12288, 94.0, 103.0)
    assert ranges.pinned == ("amp_efficiency",) and ranges.pin_down is None
    # AND a manifest without a prediction (an older profile, or --no-ranges) has none
    assert data.ranges(Manifest({"model": "m"})) is None
    # AND one whose prediction is not what popvision writes is read as none, never an error on the page
    for broken in ({**PREDICTION, "fit_verdict": "maybe"}, {**PREDICTION, "throughput_range": [1.0]},
                   {**PREDICTION, "worst_tile_pct_range": None}, "fits"):
        assert data.ranges(Manifest({"prediction": broken})) is None


def test_a_sample_profile_carries_its_ranges_and_a_synthetic_one_none(oom_profile) -> None:
    import popvision_py as pv

    with pv.open(SAMPLES / "bert_large_out_of_memory" / "profile.pop") as report:
        ranges = data.ranges(report)
    assert ranges.fit_verdict == "does not fit" and ranges.worst_tile_pct_range[0] > 100
    with pv.open(oom_profile) as report:
        assert data.ranges(report) is None


def test_the_cards_show_the_throughput_range_and_the_fit_verdict(summary_page) -> None:
    ranges = data.ranges(Manifest({"prediction": PREDICTION}))
    # WHEN the cards are built with the ranges
    cards = {card[0]: card[1:] for card in summary_page.key_figures(Figures(), ranges)}
    # THEN the throughput's card gives its range to three significant figures, and "fits in memory" the verdict
    assert cards["Throughput"] == ("27,100 /s", "24,000 to 31,000 at the assumptions' ends; 128 samples per step")
    assert cards["Fits in memory"] == ("borderline", "worst tile 93.0 % to 104.0 % of a tile", "warn")
    # AND out of memory at the central estimate, the note says how many tiles
    over = summary_page.key_figures(Figures(fits=False, oom_tiles=12), ranges)
    assert dict((card[0], card[1:]) for card in over)["Fits in memory"] == (
        "borderline", "worst tile 93.0 % to 104.0 % of a tile; 12 tiles out of memory at the central estimate", "warn")
    # AND without ranges, the central figures as before
    central = {card[0]: card[1:] for card in summary_page.key_figures(Figures())}
    assert central["Throughput"] == ("27,100 /s", "128 samples per step")
    assert central["Fits in memory"] == ("yes", "no tile over capacity", "good")
    assert {card[0]: card[1:] for card in summary_page.key_figures(Figures(fits=False, oom_tiles=12))}[
        "Fits in memory"] == ("no", "12 tiles out of memory", "bad")


def test_the_ranges_panel_gives_the_range_the_verdict_and_the_drivers_largest_first(summary_page) -> None:
    ranges = data.ranges(Manifest({"prediction": PREDICTION}))
    # WHEN the panel is built for the central throughput of 27,100 samples/s
    panel = summary_page.ranges_panel(ranges, 27_100.0)
    text = texts(panel)
    # THEN it gives the throughput with its range, and the verdict with the worst tile's range
    assert "27,100 samples/s (24,000 to 31,000)" in text
    verdict = find(panel, html.P)[2]  # the section's note, the throughput, then the verdict
    assert "".join(texts(verdict)) == "Fit borderline (worst tile 93.0 % to 104.0 % of a tile)"
    # AND, borderline, what to do about it; the pinned assumption is named as known
    assert any(t.startswith("Within the assumptions' intervals the worst tile may be over or under") for t in text)
    assert "Given with --assume (known, so out of the ranges): amp_efficiency." in text
    # AND each range's drivers, largest effect first, each with its value, interval and the figure at each end
    tables = {table.id: table for table in find(panel, html.Table)}
    rows = [[texts(cell)[0] for cell in row.children]
            for row in find(tables[ids.SUMMARY_THROUGHPUT_DRIVERS].children[1], html.Tr)]
    assert rows == [["host_call_latency_s", "0.002 (0.0005 to 0.005)", "30,900", "24,100"],
                    ["streaming_memory_bytes_per_s", "20,000,000,000 (10,000,000,000 to 40,000,000,000)", "26,000",
                     "27,600"]]
    rows = [[texts(cell)[0] for cell in row.children]
            for row in find(tables[ids.SUMMARY_WORST_TILE_DRIVERS].children[1], html.Tr)]
    assert rows == [["stack_bytes_per_tile", "7,168 (4,096 to 12,288)", "94.0 %", "103.0 %"]]
    # AND no pin-down advice: the range is within ±25% of the central estimate
    assert not any("wider than ±25%" in t for t in text)


def test_a_wide_range_says_which_assumption_to_pin_down(summary_page) -> None:
    ranges = replace(data.ranges(Manifest({"prediction": PREDICTION})), throughput_range=(15_000.0, 40_000.0),
                     pin_down="host_call_latency_s", fit_verdict="fits", worst_tile_pct_range=(60.0, 70.0))
    panel = summary_page.ranges_panel(ranges, 27_100.0)
    assert "".join(texts(find(panel, html.P)[-2])) == (
        "The throughput range is wider than ±25%: measure host_call_latency_s and give it with "
        "--assume host_call_latency_s=VALUE.")
    assert "".join(texts(find(panel, html.P)[2])) == "Fit fits (worst tile 60.0 % to 70.0 % of a tile)"


def test_a_profile_without_ranges_has_no_panel(summary_page) -> None:
    assert summary_page.ranges_panel(None, 27_100.0) is None
