"""Which files of a folder ``popvision import`` takes as traces (``find_traces``, ``looks_like_trace``): a run's
other small JSON files are skipped, and a large plain file is taken by its size, without being opened."""

from __future__ import annotations

import builtins
import gzip
import json

import popvision_py.importer as importer
from popvision_py.importer import find_traces, looks_like_trace

SETTINGS = {"lr": 0.1, "batch_size": 32}


def trace_bytes(events: int) -> bytes:
    """A trace of ``events`` operators, as Kineto writes one (its header, then "traceEvents")."""
    rows = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10 * k, "dur": 5}
            for k in range(events)]
    return json.dumps({"schemaVersion": 1, "traceEvents": rows}).encode()


def opened_paths(monkeypatch) -> list[str]:
    """The paths the importer's module opens from now on (recorded, then opened as usual)."""
    seen: list[str] = []

    def recording_open(path, *args, **kwargs):
        seen.append(str(path))
        return builtins.open(path, *args, **kwargs)

    monkeypatch.setattr(importer, "open", recording_open, raising=False)
    return seen


def test_a_folders_small_settings_file_is_skipped_and_its_traces_taken(tmp_path):
    # GIVEN a folder of a small trace, a large one (over 64 KiB), and the run's settings in JSON (plain and gzipped)
    (tmp_path / "rank0.json").write_bytes(trace_bytes(3))
    (tmp_path / "rank1.json").write_bytes(trace_bytes(2000))
    (tmp_path / "settings.json").write_text(json.dumps(SETTINGS))
    (tmp_path / "settings.json.gz").write_bytes(gzip.compress(json.dumps(SETTINGS).encode()))
    assert (tmp_path / "rank1.json").stat().st_size > 1 << 16
    # WHEN the folder is given THEN both traces are taken and neither settings file
    assert [p.name for p in find_traces([str(tmp_path)])] == ["rank0.json", "rank1.json"]


def test_a_large_plain_file_is_taken_without_being_opened(tmp_path, monkeypatch):
    # GIVEN a plain .json file of 2,000 bytes, past a peek of 1,000 bytes, whose JSON holds no "traceEvents"
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"padding": "x" * 2000}))
    seen = opened_paths(monkeypatch)
    # WHEN asked whether it is a trace THEN it is taken (a peek would find it not whole), and it was not opened
    assert looks_like_trace(big, peek=1000)
    assert seen == []
    # AND the same document within the peek is read, and skipped
    assert not looks_like_trace(big, peek=4000)
    assert seen == [str(big)]


def test_a_gzipped_file_is_peeked_at_whatever_its_size(tmp_path, monkeypatch):
    # GIVEN the settings gzipped (under the peek) and a trace gzipped
    small = tmp_path / "settings.json.gz"
    small.write_bytes(gzip.compress(json.dumps(SETTINGS).encode()))
    trace = tmp_path / "rank0.json.gz"
    trace.write_bytes(gzip.compress(trace_bytes(3)))
    seen = opened_paths(monkeypatch)
    # WHEN asked THEN each is opened: the settings are skipped, the trace taken
    assert not looks_like_trace(small)
    assert looks_like_trace(trace)
    assert seen == [str(small), str(trace)]
