"""`popvision import` as a user runs it: the command, what it prints, every command on its result, and
bad input as one sentence with exit code 2 and no profile written (an earlier one left as it was)."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest
from click.testing import CliRunner

from popvision_py.cli import main
from popvision_py.format import open_profile

pytestmark = pytest.mark.slow


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def tables(path):
    with open_profile(path) as profile:
        return {name: profile.read_table(name)
                for name in ("trace", "programs", "exchanges", "liveness", "tile_memory")}


def test_import_writes_a_profile_and_says_what_it_found(recorded, tmp_path):
    run = recorded("gpipe")
    result = invoke("import", run.folder, "-o", tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert "Imported 4 trace(s)" in result.output and "GPipe, 4 stage(s)" in result.output
    assert "not in the trace: samples per micro-batch" in result.output
    with open_profile(tmp_path / "out" / "profile.pop") as profile:
        assert profile.run["source"] == "pytorch-profiler"
        assert profile.run["import"]["ranks"] == [0, 1, 2, 3]
        assert profile.run["import"]["world_size"] == 4
        assert profile.target["clock_hz"] == 1e9 and profile.target["tiles_per_ipu"] == 1


def test_every_command_reads_an_imported_profile(recorded, tmp_path):
    a, b = recorded("gpipe").profile, recorded("1f1b").profile
    for fmt in ("text", "md", "json"):
        result = invoke("report", a, "--format", fmt)
        assert result.exit_code == 0, result.output
    text = invoke("report", a, "--section", "all").output
    # once that a rank has no tiles; the blocks of what a trace cannot have (an IPU's host calls) left out, kept in JSON
    assert text.count("A rank has no tiles") == 1 and "PyTorch traces have no IPU host calls" not in text
    doc = json.loads(invoke("report", a, "--section", "all", "--format", "json").output)
    assert doc["sections"]["stages"]["host_input"] == [] and "tree" in doc["sections"]["programs"]
    assert "Communication per rank: exposed and hidden behind compute" in text
    assert invoke("report", a, "--format", "html", "-o", tmp_path / "r.html").exit_code == 0
    assert invoke("report", a, "--format", "csv", "-o", tmp_path / "csv").exit_code == 0
    compared = invoke("compare", a, b)
    assert compared.exit_code == 0 and "gpipe vs 1f1b" in compared.output
    assert invoke("export-trace", a, "-o", tmp_path / "t.json").exit_code == 0
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert any(e.get("name") == "Forward 0" for e in events)
    sql = invoke("sql", a, "select count(*) as n from trace where phase = 'compute'")
    assert sql.exit_code == 0 and "n" in sql.output
    assert invoke("info", a).exit_code == 0


def test_gzipped_and_older_absolute_time_traces_import_to_the_same_tables(recorded, tmp_path):
    run = recorded("gpipe")
    gz, old = tmp_path / "gz", tmp_path / "old"
    gz.mkdir()
    old.mkdir()
    for path in run.paths:
        with open(path, "rb") as src, gzip.open(gz / (path.name + ".gz"), "wb") as dst:
            shutil.copyfileobj(src, dst)
        # an older trace: no baseTimeNanoseconds, ts on the wall clock (microseconds)
        trace = json.loads(path.read_text())
        base_us = trace.pop("baseTimeNanoseconds") / 1000
        for event in trace["traceEvents"]:
            if isinstance(event.get("ts"), (int, float)):
                event["ts"] = event["ts"] + base_us
        (old / path.name).write_text(json.dumps(trace))
    for folder in (gz, old):
        result = invoke("import", folder, "-o", folder / "out")
        assert result.exit_code == 0, result.output
    reference = tables(run.profile)
    assert tables(gz / "out" / "profile.pop") == reference
    moved = tables(old / "out" / "profile.pop")
    # absolute float microseconds near 1.8e15 are spaced 0.25 us apart: times agree within that
    for name in ("programs", "liveness", "tile_memory"):
        assert moved[name].num_rows == reference[name].num_rows
    a, b = reference["trace"].to_pandas(), moved["trace"].to_pandas()
    assert len(a) == len(b) and (abs(a["start_cycle"] - b["start_cycle"]) <= 500).all()
    assert (a["phase"] == b["phase"]).mean() > 0.99


HOSTILE = {
    "empty.json": (b"", "is empty"),
    "not_json.json": (b"hello", "is not valid JSON"),
    "truncated.json": (b'{"traceEvents": [{"ph": "X", "name": "a"', "ends before its JSON does"),
    "array.json": (b"[1, 2, 3]", "it is not a PyTorch profiler trace"),
    "no_events.json": (b'{"traceEvents": []}', "hold no events"),
    "junk_events.json": (b'{"traceEvents": [5, "x", null, {"ph": "X"}]}', "(number 1) that is 5, not an event"),
    "negative.json": (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": -2}]}',
                      "duration is negative or out of range"),
    "far_future.json": (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1e300, "dur": 2}]}',
                        "time stamp out of range"),
    "huge_micro_batch.json": (b'{"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "Forward 99999999999",'
                              b' "ts": 1, "dur": 2}]}', "out of range"),
    "huge_transfer.json": (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "c10d::send", "ts": 1, "dur": 2,'
                           b' "args": {"Input Dims": [[[99999999999, 99999999999, 99999999999]]]}}]}', "out of range"),
    "long.json": (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 2},'
                  b' {"ph": "X", "cat": "cpu_op", "name": "b", "ts": 1e13, "dur": 2}]}', "more than a profile holds"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_bad_trace_is_one_sentence_and_leaves_the_earlier_profile(recorded, tmp_path, name):
    data, words = HOSTILE[name]
    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(recorded("gpipe").profile, out / "profile.pop")
    before = (out / "profile.pop").read_bytes()
    bad = tmp_path / name
    bad.write_bytes(data)
    result = invoke("import", bad, "-o", out)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and words in lines[0], result.output
    assert (out / "profile.pop").read_bytes() == before
    assert sorted(p.name for p in out.iterdir()) == ["profile.pop"]


def test_bad_arguments_are_one_sentence(recorded, tmp_path):
    run = recorded("gpipe")
    twice = invoke("import", run.paths[0], run.paths[0], "-o", tmp_path / "x")
    assert twice.exit_code == 0  # the same file given twice is read once
    shutil.copy(run.paths[0], tmp_path / "again.json")
    duplicate = invoke("import", run.paths[0], tmp_path / "again.json", "-o", tmp_path / "y")
    assert duplicate.exit_code == 2 and "Two traces are of rank 0" in duplicate.output
    assert not (tmp_path / "y").exists()
    (tmp_path / "empty").mkdir()
    for args, words in (((tmp_path / "nothere.json",), "does not exist"),
                        ((str(tmp_path / "zz*.json"),), "No file matches"),
                        ((tmp_path / "empty",), "holds no PyTorch profiler trace")):
        result = invoke("import", *args, "-o", tmp_path / "z")
        assert result.exit_code == 2 and words in result.output, result.output
    gz_bad = tmp_path / "bad.json.gz"
    gz_bad.write_bytes(gzip.compress(run.paths[0].read_bytes())[:200])
    result = invoke("import", gz_bad, "-o", tmp_path / "z")
    assert result.exit_code == 2 and ("cannot be decompressed" in result.output or "ends before" in result.output)
    assert invoke("import", run.folder, "-o", tmp_path / "m", "--device-memory", "-1").exit_code == 2


def test_device_memory_sets_what_memory_is_measured_against(recorded, tmp_path):
    result = invoke("import", recorded("ddp").folder, "-o", tmp_path, "--device-memory", "0.5")
    assert result.exit_code == 0, result.output
    with open_profile(tmp_path / "profile.pop") as profile:
        assert profile.target["bytes_per_tile"] == 2**29
        assert not any("memory capacity" in line for line in profile.run["import"]["not_inferred"])
