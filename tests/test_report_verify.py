"""`popvision report --verify`: every fix the insights suggest, run for real, measured beside predicted.

GIVEN a profile whose insights suggest fixes, WHEN `report --verify` runs, THEN each fix's profile is
in the verify folder, and its measured figures are those `popvision run` prints when the fix's own
command is run through the CLI; the verdict follows from the figures; every format shows it; a fix
whose run fails is a row saying so, never a crash.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pandas as pd
import pytest

from tests.engine.helpers import BALANCED_MODEL, run_cli, write_model

FAST_HOST = ("--input", "synthetic")  # the IPUs' own findings, not a host-bound run's
# FP16 optimiser state: no precision finding (tests/analysis/test_insights.py runs that fix)
FP16_STATE = ("--optimiser-state-type", "fp16")


@pytest.fixture(scope="module")
def mnist(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("verify")
    result = run_cli("run", "mnist", "--profile", "--profile-dir", str(folder / "p"), "-q", *FAST_HOST, *FP16_STATE)
    assert result.exit_code == 0, result.output
    return folder / "p" / "profile.pop"


def _report(profile: Path, *args: str):
    result = run_cli("report", str(profile), "--section", "summary", "--verify", *args)
    assert result.exit_code == 0, result.output
    return result


def _measured_by_cli(command: str, folder: Path) -> dict:
    """Run a fix's printed command (its profile into ``folder``) and return `popvision run --json`'s summary: its
    central figures, which verify measures (``--no-ranges``, as verify runs it)."""
    words = shlex.split(command)
    k = words.index("--profile-dir")
    words[k + 1] = str(folder / words[k + 1])
    result = run_cli(*words[1:], "-q", "--json", "--no-ranges")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_each_fix_is_measured_as_its_own_command_measures_it(mnist, tmp_path):
    # GIVEN mnist's pipelined profile (its insights suggest more gradient accumulation and more device iterations)
    before = json.loads(run_cli("report", str(mnist), "--section", "summary", "--format", "json").output)
    figures = before["sections"]["summary"]["figures"]
    # WHEN report --verify runs them into a folder of our choosing
    out = _report(mnist, "--format", "json", "--verify-dir", str(tmp_path / "v"))
    rows = json.loads(out.output)["sections"]["verify"]["fixes"]
    commands = [c for c in before["sections"]["summary"]["insights"] if c["command"]]
    # THEN there is one row per fix with a command, in the insights' order
    assert [r["command"] for r in rows] == [c["command"] for c in commands]
    assert {r["tag"] for r in rows} == {"gradient-accumulation-20", "device-iterations-20"}
    for r in rows:
        # AND its profile is in the folder
        assert r["profile"] == str(tmp_path / "v" / r["tag"] / "profile.pop")
        assert Path(r["profile"]).is_file()
        # AND the measured figures are what `popvision run` prints for the fix's own command
        measured = _measured_by_cli(r["command"], tmp_path / "by-hand")
        assert r["step_s_after"] == pytest.approx(measured["seconds_per_step"], rel=1e-12)
        assert r["samples_per_second_after"] == pytest.approx(measured["samples_per_second"], rel=1e-12)
        assert r["worst_tile_bytes_after"] == measured["worst_tile_bytes"]
        assert r["fits_after"] is measured["fits"]
        # AND "before" is the profile's own summary
        assert r["step_s_before"] == pytest.approx(figures["step_s"])
        assert r["samples_per_second_before"] == pytest.approx(figures["throughput_samples_per_s"])
        assert r["worst_tile_bytes_before"] == figures["worst_tile_bytes"]
        # AND the prediction is the effect's "worst tile unchanged (N bytes)", and it held: the worst
        # tile within 10% of it and (both fixes aim at speed) a higher throughput than before
        effect = next(c["effect"] for c in commands if c["command"] == r["command"])
        said = int(re.search(r"unchanged \(([\d,]+) bytes\)", effect).group(1).replace(",", ""))
        assert r["worst_tile_bytes_predicted"] == said
        held = (abs(measured["worst_tile_bytes"] - said) <= 0.10 * said
                and measured["samples_per_second"] > figures["throughput_samples_per_s"])
        assert r["status"] == ("held" if held else "did not hold")
        assert r["verdict"].startswith("Held:" if held else "Did not hold:")


def test_every_format_shows_the_measured_effect(mnist, tmp_path):
    # GIVEN the fixes verified once into a folder
    folder = str(tmp_path / "v")
    rows = json.loads(_report(mnist, "--format", "json", "--verify-dir", folder).output)["sections"]["verify"]["fixes"]
    first = rows[0]
    after = f"{first['samples_per_second_after']:,.0f} samples/s"
    # WHEN the report is written as text, Markdown, HTML and CSV
    text = _report(mnist, "--verify-dir", folder).output
    md = _report(mnist, "--format", "md", "--verify-dir", folder).output
    _report(mnist, "--format", "html", "-o", str(tmp_path / "r.html"), "--verify-dir", folder)
    _report(mnist, "--format", "csv", "-o", str(tmp_path / "csv"), "--verify-dir", folder)
    html = (tmp_path / "r.html").read_text()
    # THEN each shows every fix's status and tag, and its measured throughput
    for shown in (text, md, html):
        assert "Fixes re-emulated: measured beside predicted" in shown
        for r in rows:
            assert f"[{r['status']}] {r['tag']}" in shown
        assert after in shown
    # AND CSV is the table itself, with the same figures as JSON
    table = pd.read_csv(tmp_path / "csv" / "verify.fixes.csv")
    assert list(table["tag"]) == [r["tag"] for r in rows]
    assert table["samples_per_second_after"].tolist() == pytest.approx([r["samples_per_second_after"] for r in rows])


def test_a_fix_whose_run_fails_is_a_row_saying_why(tmp_path):
    # GIVEN a profile of a model file (a pipeline of 4 stages at gradient accumulation 8: a bubble the
    # insights would fill with more accumulation), then the model file removed
    model = write_model(tmp_path, BALANCED_MODEL, "gone.py")
    result = run_cli("run", model, "--profile", "--profile-dir", str(tmp_path / "p"), "-q", *FAST_HOST)
    assert result.exit_code == 0, result.output
    Path(model).unlink()
    # WHEN its fixes are verified
    out = _report(tmp_path / "p" / "profile.pop", "--format", "json")
    rows = json.loads(out.output)["sections"]["verify"]["fixes"]
    # THEN each is a failed row naming the cause, with no figures after and no profile
    assert rows, "the insights suggested no fix"
    for r in rows:
        assert r["status"] == "failed"
        assert r["verdict"] == f"The run failed: Model file {model} does not exist."
        assert r["step_s_after"] is None and r["worst_tile_bytes_after"] is None and r["profile"] == ""
    # AND the default folder (verify/ beside the profile) holds no profile of them
    assert not list((tmp_path / "p").glob("verify/*/profile.pop"))


def test_no_fix_no_runs_and_no_bar_off_a_terminal(tmp_path):
    # GIVEN a profile whose insights suggest no fix with a command (sharded mnist, 64 micro-batches and
    # 64 iterations per host call: no bubble, little host exchange per sample)
    result = run_cli("run", "mnist", "--profile", "--profile-dir", str(tmp_path / "p"), "-q", *FAST_HOST, *FP16_STATE,
                     "--strategy", "sharded", "--gradient-accumulation", "64", "--device-iterations", "64")
    assert result.exit_code == 0, result.output
    # WHEN it is verified
    out = _report(tmp_path / "p" / "profile.pop")
    rows = json.loads(_report(tmp_path / "p" / "profile.pop", "--format", "json").output)["sections"]["verify"]["fixes"]
    # THEN nothing ran, the verify block says why, and no progress bar reached the (non-terminal) output
    assert rows == []
    assert not (tmp_path / "p" / "verify").exists()
    assert "(no fix to run: the insights suggest none with a command)" in out.output
    assert "Verifying fixes" not in out.output


def test_memory_fixes_of_an_out_of_memory_run_are_held_to_their_estimates(tmp_path):
    # GIVEN the out-of-memory BERT-Large sample, whose fixes estimate the worst tile they leave
    sample = Path(__file__).resolve().parents[1] / "sample_profiles" / "bert_large_out_of_memory" / "profile.pop"
    insights = {c["command"]: c for c in json.loads(run_cli("report", str(sample), "--section", "summary", "--format",
                                                            "json").output)["sections"]["summary"]["insights"]}
    # WHEN they are verified
    rows = json.loads(_report(sample, "--format", "json", "--verify-dir", str(tmp_path / "v")).output)
    # (the memory fixes: those whose effect estimates the worst tile; a speed fix may come after them)
    rows = [r for r in rows["sections"]["verify"]["fixes"] if "-> about" in insights[r["command"]]["effect"]]
    assert rows
    for r in rows:
        # THEN the prediction is the effect's "-> about N bytes"
        said = int(re.search(r"-> about ([\d,]+) bytes", insights[r["command"]]["effect"]).group(1).replace(",", ""))
        assert r["worst_tile_bytes_predicted"] == said
        # AND the measured worst tile is what `popvision run` prints for the fix's command
        measured = _measured_by_cli(r["command"], tmp_path / "by-hand")
        assert r["worst_tile_bytes_after"] == measured["worst_tile_bytes"]
        # AND it held when the estimate is within 10% and tells fit from overflow as the run does
        capacity = measured["bytes_per_tile"]
        held = (abs(measured["worst_tile_bytes"] - said) <= 0.10 * said
                and (said <= capacity) == measured["fits"])
        assert r["status"] == ("held" if held else "did not hold"), r["verdict"]


def test_the_verdict_names_each_figure_that_missed():
    from popvision_py.analysis.findings.fixes import Predicted
    from popvision_py.analysis.verify import FixRun, MeasuredFigures, judge

    capacity, clock = 638_976, 1.33e9
    before = MeasuredFigures(step_s=0.010, samples_per_second=1000.0, worst_tile_bytes=700_000,
                             bytes_per_tile=capacity, fits=False)

    def fix(**predicted) -> FixRun:
        return FixRun("t", "s", "e", Predicted(**predicted), "popvision run m", {"model": "m"})

    # a worst tile 20% over its estimate of 500,000 bytes, though it fits: off by +20.0%
    after = MeasuredFigures(0.010, 1000.0, 600_000, capacity, True)
    assert judge(fix(worst_tile_bytes=500_000), before, after, clock) == (
        "did not hold", "Did not hold: worst tile 600,000 bytes, +20.0% off the predicted 500,000 "
                        "(+0.0% throughput, worst tile 700,000 -> 600,000 bytes (fits)).")
    # predicted to fit (620,000 bytes), measured over the tile (640,000: within 10%, but it does not fit)
    over = MeasuredFigures(0.010, 1000.0, 640_000, capacity, False)
    status, verdict = judge(fix(worst_tile_bytes=620_000), before, over, clock)
    assert status == "did not hold" and "it does not fit (worst tile 640,000 bytes, predicted 620,000)" in verdict
    # meant to be faster, 13,300,000 cycles per step predicted (10 ms at 1.33 GHz): measured 12 ms and slower
    slower = MeasuredFigures(0.012, 900.0, 700_000, capacity, False)
    status, verdict = judge(fix(step_cycles=13_300_000.0, faster=True), before, slower, clock)
    assert status == "did not hold"
    assert "time per step 12.000 ms, +20.0% off the predicted 10.000 ms" in verdict
    assert "no faster: 900 samples/s against 1,000 before" in verdict
    # within 10% on every figure, and faster: held
    faster = MeasuredFigures(0.009, 1050.0, 700_000, capacity, False)
    assert judge(fix(samples_per_second=1100.0, faster=True), before, faster, clock)[0] == "held"


def test_the_verify_block_reads_as_a_list_in_text_markdown_and_html():
    import math
    from html import escape

    from popvision_py.analysis.common.tables import Table
    from popvision_py.analysis.verify import COLUMNS
    from popvision_py.render import html, markdown, text
    from popvision_py.render.document import Document, add_verification

    # GIVEN one verified fix, its figures a person wrote down, and no fix at all
    row = {"tag": "gradient-accumulation-20", "suggestion": "accumulate 20", "status": "held",
           "verdict": "Held: +25.0% throughput.", "step_s_before": 0.010, "step_s_predicted": math.nan,
           "step_s_after": 0.008, "samples_per_second_before": 1000.0, "samples_per_second_predicted": math.nan,
           "samples_per_second_after": 1250.4, "worst_tile_bytes_before": 700_000.0,
           "worst_tile_bytes_predicted": 700_000.0, "worst_tile_bytes_after": 712_345.0, "fits_after": False,
           "profile": "v/gradient-accumulation-20/profile.pop", "command": "popvision run m"}
    one, none = Document("report", "r", ["p"]), Document("report", "r", ["p"])
    add_verification(one, Table({c: [row[c]] for c in COLUMNS}))
    add_verification(none, Table({c: [] for c in COLUMNS}))
    # THEN the block carries the fix as a heading and its detail lines: milliseconds, whole samples and bytes
    assert one.blocks[0].items == [("[held] gradient-accumulation-20: accumulate 20", [
        "time per step: 10.000 -> 8.000 ms",
        "throughput: 1,000 -> 1,250 samples/s",
        "worst tile: 700,000 -> 712,345 bytes (predicted 700,000)",
        "Held: +25.0% throughput.",
        "profile: v/gradient-accumulation-20/profile.pop"])]
    assert none.blocks[0].items == []
    # AND each of text, Markdown and HTML shows those lines, or why there is no fix
    line = "worst tile: 700,000 -> 712,345 bytes (predicted 700,000)"
    for render, shown_line in ((text.render, line), (markdown.render, line), (html.render, escape(line))):
        shown = render(one).decode()
        assert "gradient-accumulation-20: accumulate 20" in shown and shown_line in shown
        assert "(no fix to run: the insights suggest none with a command)" in render(none).decode()
