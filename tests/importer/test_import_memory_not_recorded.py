"""A trace recorded without ``profile_memory=True`` holds no ``[memory]`` events: its memory is "not recorded"
everywhere a memory figure would show (the import's notes and ``info``, the report's overview, summary, memory
and liveness sections in every format, ``compare``, the dashboard's cards and pages), never a number; the
manifest records the fact (``run.import.memory_recorded``) and the analysis reads it from there."""

from __future__ import annotations

import importlib
import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from popvision_py.cli import main
from popvision_py.format import open_profile

MIB = 1 << 20
NOTE = ("memory: the traces hold no [memory] events, so memory is not recorded (record it with "
        "torch.profiler.profile(profile_memory=True))")
NO_MEMORY = ("Memory not recorded: the traces hold no [memory] events (record them with "
             "torch.profiler.profile(profile_memory=True)).")


def gpu_trace(memory: bool) -> dict:
    """One profiler step of 1 ms on a GPU: a kernel from 100 to 400 µs. With ``memory``, CUDA [memory] events
    of 3 MiB at 150 µs and 5 MiB at 250 µs: the peak is 5 MiB."""
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0.0,
               "dur": 1000.0},
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10.0, "dur": 20.0},
              {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 100.0, "dur": 300.0}]
    if memory:
        events += [{"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts,
                    "args": {"Total Allocated": total, "Device Type": 1, "Device Id": 0, "Bytes": 1}}
                   for ts, total in ((150.0, 3 * MIB), (250.0, 5 * MIB))]
    return {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1},
            "baseTimeNanoseconds": 1_700_000_000_000_000_000, "traceEvents": events}


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture()
def profiles(tmp_path) -> dict[str, Path]:
    """The trace imported without memory events ("none") and with them ("recorded")."""
    made = {}
    for name, memory in (("none", False), ("recorded", True)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(gpu_trace(memory)))
        result = invoke("import", path, "-o", tmp_path / name)
        assert result.exit_code == 0, result.output
        made[name] = tmp_path / name / "profile.pop"
        made[f"{name}_output"] = result.output
    return made


def test_the_import_says_memory_is_not_recorded_and_the_manifest_records_it(profiles):
    # GIVEN a trace without [memory] events, imported (and one with them)
    # THEN the import says so in one line, the manifest records it and `info` shows the line
    assert f"  not in the trace: {NOTE}" in profiles["none_output"].splitlines()
    assert NOTE not in profiles["recorded_output"]
    with open_profile(profiles["none"]) as a, open_profile(profiles["recorded"]) as b:
        assert a.run["import"]["memory_recorded"] is False and b.run["import"]["memory_recorded"] is True
    info = invoke("info", profiles["none"])
    assert info.exit_code == 0 and NOTE in info.output


def test_the_report_says_not_recorded_and_shows_no_memory_figure(profiles):
    # WHEN the overview and every section are reported
    overview = invoke("report", profiles["none"])
    every = invoke("report", profiles["none"], "--section", "all")
    recorded = invoke("report", profiles["recorded"])
    assert overview.exit_code == every.exit_code == recorded.exit_code == 0
    # THEN the overview's "fits" says not recorded and how to record it, and no figure of memory shows
    fits = next(line for line in overview.output.splitlines() if line.strip().startswith("fits"))
    assert fits.split(None, 1)[1] == ("not recorded: the traces hold no [memory] events (record them with "
                                      "torch.profiler.profile(profile_memory=True))")
    assert "MiB" not in overview.output + every.output
    assert "not recorded: the traces hold no [memory] events" in overview.output  # the finding
    # the memory and liveness sections: one line each in place of their tables, the summary's figures too
    assert every.output.count(f"({NO_MEMORY})") == 4
    summary = dict(line.split(None, 1) for line in every.output.split("Summary\n=======\n")[1].split("\n\n")[0]
                   .splitlines())
    # (in a rank's words: the worst IPU is the fullest rank, its tile's bytes the rank's, the tile's memory the
    # device's; a tile's own figures are left out)
    for name in ("fits", "fullest_rank", "fullest_rank_bytes", "device_bytes"):
        assert summary[name] == "not recorded", name
    assert not {"oom_tiles", "worst_tile", "worst_ipu", "bytes_per_tile"} & set(summary)
    # AND the trace with memory events reports its peak, 5 MiB
    assert "peak 5.0 MiB allocated on rank 0" in recorded.output


@pytest.mark.parametrize("fmt", ["json", "md", "csv", "html"])
def test_every_format_says_not_recorded(fmt, profiles, tmp_path):
    # WHEN every section is written in each format
    out = tmp_path / f"report.{fmt}"
    result = invoke("report", profiles["none"], "--section", "all", "--format", fmt, "-o", out)
    # THEN it is written, and where it holds the summary's figures of memory they say not recorded
    assert result.exit_code == 0, result.output
    if fmt == "json":
        sections = json.loads(out.read_text())["sections"]
        assert sections["summary"]["figures"]["worst_tile_bytes"] == "not recorded"
        assert sections["summary"]["figures"]["fits"] == "not recorded"
        assert sections["memory"]["by_ipu"] == [] and sections["liveness"]["by_step"] == []
    elif fmt == "csv":
        assert NO_MEMORY in (out / "memory.by_ipu.csv").read_text()
        assert "worst_tile_bytes,not recorded" in (out / "summary.figures.csv").read_text()
    else:
        text = out.read_text()
        assert "not recorded" in text and "MiB" not in text.replace("MiB at peak", "")


def test_compare_shows_no_figure_of_memory_for_the_side_not_recorded(profiles):
    from popvision_py.analysis.compare import Comparison

    # GIVEN the profile with memory (a) and the one without (b)
    with Comparison(profiles["recorded"], profiles["none"]) as comparison:
        # WHEN they are compared
        memory, summary = comparison.memory(), comparison.summary().set_index("figure")
        liveness = comparison.liveness()
    # THEN b's memory figures are missing, not 0; a's are its own (5 MiB at its peak)
    assert memory["b"].isna().all() and memory["difference"].isna().all() and liveness["b"].isna().all()
    assert summary.loc["worst_tile_bytes", "a"] == 5 * MIB and math.isnan(summary.loc["worst_tile_bytes", "b"])
    assert summary.loc["step_s", "b"] == summary.loc["step_s", "a"]  # the rest is compared as before
    text = invoke("compare", profiles["recorded"], profiles["none"], "--section", "all")
    assert text.exit_code == 0 and f"b ({profiles['none']}): {NO_MEMORY}" in text.output


def shown(component) -> str:
    """A figure's or component's text as a reader sees it: an empty figure's reason is wrapped with <br>."""
    return json.dumps(component.to_plotly_json(), default=str).replace("<br>", " ")


def test_the_dashboard_says_not_recorded_on_its_cards_and_pages(profiles):
    from dashboards.app import create_app

    # GIVEN the dashboard on the profile without memory (a) and the one with it (b)
    create_app([str(profiles["none"]), str(profiles["recorded"])])
    summary, memory, liveness, compare = (importlib.import_module(f"dashboards.pages.{name}")
                                          for name in ("summary", "memory", "liveness", "compare"))
    # WHEN each page is drawn for a
    cards, _, _, memory_figure, _ = summary.render("a")
    description = memory.render_words("a")[0]
    _, _, figures_slot, categories, _, _ = memory.render_overview("a")
    # THEN its peak card says not recorded and why, its memory figures and lines say so, with no number
    peak = str(cards.to_plotly_json())
    assert "Peak memory" in peak and "not recorded" in peak and "0 B" not in peak
    assert NO_MEMORY in shown(memory_figure) and description == NO_MEMORY
    assert NO_MEMORY in shown(figures_slot) and NO_MEMORY in shown(categories)
    assert NO_MEMORY in shown(liveness.render_plot(0, 0, "a"))
    assert NO_MEMORY in shown(liveness.render_peaks("a"))
    assert liveness.choose_peak("a")[1:] == (None, None)
    # AND b, whose traces hold memory events, shows its peak: 5 MiB
    assert "5.00 MiB" in str(summary.render("b")[0].to_plotly_json())
    # AND the Compare page draws no memory bars, naming the profile whose memory is not recorded
    compared = compare.render(None)[2]
    assert NO_MEMORY in shown(compared)
