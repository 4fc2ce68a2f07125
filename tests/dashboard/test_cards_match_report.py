"""The dashboard's cards in a real Chromium show the figures `popvision report --format json` gives.

The report is produced by the real CLI; each card's text is parsed back (thousands separators, k/M/G/T,
binary byte units, %) and must equal the report's figure within the rounding the card shows. The
figure the issue found ten times too small (533,301 cycles per step shown as "53.3 k") is among them, in
the form the mnist sample has (hundreds of thousands of cycles). The summary's ranges (the manifest's prediction)
read back as the manifest gives them.
"""

from __future__ import annotations

import json
import re
import time

import pytest
from click.testing import CliRunner

from dashboards import ids
from popvision_py.cli import main
from tests.dashboard.conftest import SAMPLES
from tests.dashboard.test_number_formats import BYTES, COUNT, parse

pytestmark = pytest.mark.browser


def report_json(profile: str) -> dict:
    result = CliRunner().invoke(main, ["report", profile, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["sections"]


def shown_cards(dash_duo, container: str) -> dict[str, tuple[str, str]]:
    """label -> (value, note) of every card in ``container``, as the browser shows them."""
    cards = dash_duo.driver.execute_script("""
        return [...document.querySelectorAll(arguments[0] + ' .card')].map(card => [
          card.querySelector('.card-label').innerText.trim(),
          card.querySelector('.card-value').innerText.replace(/\\s+/g, ' ').trim(),
          (card.querySelector('.card-note') || {innerText: ''}).innerText.replace(/\\s+/g, ' ').trim()]);
    """, f"#{container}")
    # labels are upper-cased by the style sheet; compare them as written
    return {label.lower(): (value, note) for label, value, note in cards}


def reads_as(text: str, units: dict[str, float], value: float, suffix: str = "") -> None:
    """``text`` (with ``suffix`` after the figure) parses back to ``value`` within its shown rounding."""
    assert text.endswith(suffix), (text, suffix)
    shown, tolerance, _, _ = parse(text.removesuffix(suffix).strip(), units)
    assert abs(shown - value) <= tolerance * (1 + 1e-9), f"{text!r} reads as {shown!r}, the report says {value!r}"


PERCENT = {"%": 1.0}


def manifest_prediction(profile: str) -> dict:
    """The sensitivity pass a profile's manifest carries (``run.prediction``)."""
    import popvision_py as pv

    with pv.open(profile) as report:
        return report.run["prediction"]


def three_figures(x: float) -> str:
    """A range's end as a person rounds it to three significant figures: 466,000, 1,090,000, 938."""
    return f"{float(f'{x:.3g}'):,.0f}"


def clipboard(dash_duo, until, timeout: float = 5.0) -> str:
    """The clipboard's text once ``until`` accepts it (the copy is asynchronous), or its last text."""
    deadline = time.monotonic() + timeout
    while True:
        text = dash_duo.driver.execute_async_script(
            "const done = arguments[0]; navigator.clipboard.readText().then(done, e => done('no clipboard: ' + e));")
        if until(text) or time.monotonic() > deadline:
            return text
        time.sleep(0.1)


@pytest.mark.parametrize("sample", ["mnist_pipelined", "bert_base_pipelined"])
def test_summary_and_stages_cards_show_the_reports_figures(dash_duo, sample):
    from dashboards.app import create_app

    # GIVEN a sample profile and the JSON report of it from the real CLI
    profile = str(SAMPLES / sample / "profile.pop")
    report = report_json(profile)
    summary, stages = report["summary"]["figures"], report["stages"]["figures"]
    dash_duo.start_server(create_app([profile]))

    # WHEN the summary page is open
    dash_duo.wait_for_element(f"#{ids.SUMMARY_FIGURES} .card", timeout=20)
    cards = shown_cards(dash_duo, ids.SUMMARY_FIGURES)
    # THEN its cards read back as the report's figures
    reads_as(cards["time per step"][1], COUNT, summary["step_cycles"], " cycles")
    reads_as(cards["flop utilisation"][0], PERCENT, summary["flop_utilisation_pct"])
    reads_as(cards["flop utilisation"][1], COUNT, summary["total_flops"], " FLOPs")
    reads_as(cards["worst tile"][0], BYTES, summary["worst_tile_bytes"])
    assert cards["worst tile"][1].startswith(f"IPU {summary['worst_ipu']}, tile {summary['worst_tile']} of ")
    assert cards["fits in memory"][0] == ("yes" if summary["fits"] else "no")

    # AND the ranges the profile's manifest carries are shown: the throughput's range (three significant
    # figures) in its card and in the ranges panel, the fit verdict with the worst tile's range, and the
    # assumptions that drive each range, largest effect first
    prediction = manifest_prediction(profile)
    low, high = prediction["throughput_range"]
    tile_low, tile_high = prediction["worst_tile_pct_range"]
    assert prediction["fit_verdict"] == "fits"
    assert cards["throughput"][1].startswith(f"{three_figures(low)} to {three_figures(high)} at the assumptions' ends")
    assert cards["fits in memory"][1] == f"worst tile {tile_low:.1f} % to {tile_high:.1f} % of a tile"
    panel = dash_duo.find_element(f"#{ids.SUMMARY_RANGES}").text
    throughput = re.search(r"Throughput ([\d,]+) samples/s \(([\d,.]+) to ([\d,.]+)\)", panel)
    assert throughput, panel
    reads_as(throughput[1], COUNT, summary["throughput_samples_per_s"])
    assert (throughput[2], throughput[3]) == (three_figures(low), three_figures(high))
    assert f"Fit fits (worst tile {tile_low:.1f} % to {tile_high:.1f} % of a tile)" in panel
    for table, drivers in ((ids.SUMMARY_THROUGHPUT_DRIVERS, prediction["throughput_range_drivers"]),
                           (ids.SUMMARY_WORST_TILE_DRIVERS, prediction["worst_tile_range_drivers"])):
        names = [row.text.split()[0] for row in dash_duo.find_elements(f"#{table} tbody tr")]
        assert names == [d["name"] for d in drivers[:5]]
    if prediction["pin_down"]:
        assert (f"The throughput range is wider than ±25%: measure {prediction['pin_down']} and give it with "
                f"--assume {prediction['pin_down']}=VALUE.") in panel
    assert [entry for entry in dash_duo.get_logs() if entry.get("level") == "SEVERE"] == []

    # WHEN the stages page is open
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/stages")
    dash_duo.wait_for_element(f"#{ids.STAGES_FIGURES} .card", timeout=20)
    cards = shown_cards(dash_duo, ids.STAGES_FIGURES)
    # THEN its cards read back as the report's stage figures
    assert cards["stages"][0] == str(stages["num_stages"])
    assert cards["bottleneck"][0] == f"stage {stages['bottleneck_stage']}"
    reads_as(cards["step"][0], COUNT, stages["step_cycles"], " cycles")
    reads_as(cards["step"][1].removeprefix("balanced: "), COUNT, stages["balanced_step_cycles"])
    reads_as(cards["bubble"][0], PERCENT, stages["bubble_pct"])
    reads_as(cards["balance gain"][0], PERCENT, stages["balance_gain_pct"])
    assert cards["imbalance"][0] == f"{stages['imbalance']:.2f} ×"
    # and the step is the summary's step
    assert stages["step_cycles"] == summary["step_cycles"]


def test_the_summary_shows_a_step_in_thousands_or_millions_of_cycles_at_its_true_size(dash_duo):
    # GIVEN the mnist sample, whose report gives some hundred thousand to some million cycles per step
    profile = str(SAMPLES / "mnist_pipelined" / "profile.pop")
    step = report_json(profile)["summary"]["figures"]["step_cycles"]
    assert 1e5 <= step < 1e8
    from dashboards.app import create_app

    dash_duo.start_server(create_app([profile]))
    dash_duo.wait_for_element(f"#{ids.SUMMARY_FIGURES} .card", timeout=20)
    # THEN the time-per-step card gives it in thousands (k = 10^3) or millions (M = 10^6) to one decimal: the bug
    # showed a tenth of it (533,301 cycles as "53.3 k")
    expected = f"{step / 1e6:.1f} M cycles" if step >= 1e6 else f"{step / 1e3:.1f} k cycles"
    assert shown_cards(dash_duo, ids.SUMMARY_FIGURES)["time per step"][1] == expected


@pytest.mark.parametrize("sample", ["mnist_pipelined", "bert_large_out_of_memory"])
def test_each_fix_shows_the_command_the_report_gives(dash_duo, sample):
    from dashboards.app import create_app
    from engine import rules

    # GIVEN a sample profile and its findings from the real CLI
    profile = str(SAMPLES / sample / "profile.pop")
    insights = report_json(profile)["summary"]["insights"]
    commands = [insight["command"] for insight in insights]
    assert any(commands), "the sample's findings carry no command to show"
    dash_duo.start_server(create_app([profile], planner=rules))  # as `popvision dashboard` builds it
    # WHEN the summary page lists them
    dash_duo.wait_for_element(".insight", timeout=20)
    shown = dash_duo.driver.execute_script("""
        return [...document.querySelectorAll('.insight')].map(item => {
          const code = item.querySelector('.insight-command-text');
          return [item.querySelector('.insight-finding').innerText,
                  code ? code.innerText : '', !!item.querySelector('.insight-command .insight-copy')];
        });""")
    # THEN each finding shows exactly its command (none where the report has none), with a copy button
    assert [finding for finding, _, _ in shown] == [insight["finding"] for insight in insights]
    assert [command for _, command, _ in shown] == commands
    assert [copy for _, _, copy in shown] == [bool(command) for command in commands]
    # AND each copy button puts exactly its command, on one line, on the clipboard
    dash_duo.driver.execute_cdp_cmd("Browser.grantPermissions", {
        "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"], "origin": dash_duo.server_url})
    buttons = dash_duo.find_elements(".insight-copy")
    for button, command in zip(buttons, filter(None, commands), strict=True):
        button.click()
        copied = clipboard(dash_duo, until=lambda text: text == command)
        assert copied == command
        assert copied.startswith("popvision run ") and "\n" not in copied
    assert [entry for entry in dash_duo.get_logs() if entry.get("level") == "SEVERE"] == []
