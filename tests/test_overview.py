"""`popvision report PROFILE` in a terminal answers the four questions and the findings on one screen
(issue 37, item 2): fits? how fast? which stage? what does exchange cost? Each figure is checked against
the answer the full report gives for it; nothing is printed twice, in the overview or in `--section all`."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import popvision_py

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = sorted((ROOT / "sample_profiles").glob("*/profile.pop"))


def report(*args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "popvision_py.cli", "report", *args], capture_output=True,
                            text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout


def headings(text: str) -> list[str]:
    lines = text.splitlines()
    return [lines[i - 1] for i in range(1, len(lines)) if re.fullmatch(r"=+", lines[i])]


@pytest.mark.parametrize("profile", SAMPLES, ids=lambda p: p.parent.name)
def test_the_default_report_fits_on_two_screens_with_nothing_repeated(profile: Path) -> None:
    text = report(str(profile))
    assert len(text.splitlines()) < 120
    assert headings(text) == ["Overview", "Findings", "More: popvision report PROFILE --section NAME"]
    for question in ("fits", "speed", "stages", "exchange"):
        assert re.search(rf"^  {question} +\S", text, re.M), question
    assert "  all            everything" in text


def test_the_overview_s_figures_are_the_full_report_s(tmp_path) -> None:
    profile = ROOT / "sample_profiles" / "mnist_pipelined" / "profile.pop"
    text = report(str(profile))
    with popvision_py.open(profile) as r:
        s, st = r.summary.figures(), r.stages.figures()
    assert (f"the fullest tile (IPU {s.worst_ipu} tile {s.worst_tile}) holds {s.worst_tile_bytes:,} of "
            f"{s.bytes_per_tile:,} bytes") in text
    assert f"{s.step_cycles:,.0f} cycles), {s.throughput_samples_per_s:,.0f} samples/s" in text
    assert f"stage {st.bottleneck_stage} is the bottleneck, {st.imbalance:.2f}x the mean stage" in text


def test_json_and_all_keep_everything_once() -> None:
    profile = ROOT / "sample_profiles" / "mnist_pipelined" / "profile.pop"
    everything = headings(report(str(profile), "--section", "all"))
    assert len(everything) == len(set(everything)), [h for h in everything if everything.count(h) > 1]
    assert "Host input: the IPUs' wait for the host's data loaders" in everything  # once, in the stages
    assert '"sections"' in report(str(profile), "--format", "json") and "critical-path" in report(
        str(profile), "--format", "json")
