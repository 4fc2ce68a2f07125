"""benchmarks/make_large_trace.py: recorded rank traces grown by repeating their profiler steps stay valid traces
in Kineto's layout, with every copy shifted by one common span, renumbered, and its ids unique."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import make_large_trace  # noqa: E402


def kineto(path: Path, rank: int, events: list[dict]) -> None:
    """Write ``events`` the way Kineto does: header keys, one key a line, ``args`` on one line, traceName last."""
    def one(e: dict) -> str:
        keys = [f'    "{k}": {json.dumps(v) if k not in ("ts", "dur") else f"{v:.3f}"}' for k, v in e.items()
                if k != "args"]
        body = ",\n".join(keys)
        if "args" in e:
            body += "\n    ,\n    \"args\": {\n      " + json.dumps(e["args"])[1:-1] + "\n    }"
        return "  {\n" + body + "\n  }"
    head = ('{\n  "schemaVersion": 1,\n  "deviceProperties": [],\n  "distributedInfo": '
            + json.dumps({"backend": "gloo", "rank": rank, "world_size": 2})
            + ',\n  "baseTimeNanoseconds": 1790857026000000000,\n  "traceEvents": [\n')
    path.write_text(head + ",\n".join(one(e) for e in events) + f'\n  ],"traceName": "{path}" }}')


def rank_events(rank: int, t0: float) -> list[dict]:
    pid = 100 + rank
    events = [{"ph": "M", "name": "process_name", "ts": t0, "pid": pid, "tid": 0, "args": {"name": "python"}},
              {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
               "ts": t0, "dur": 2000.5, "args": {"Op count": 0}}]
    ext = 1
    for step in (1, 2):
        start = t0 + 100 + (step - 1) * 800 + rank * 3.25
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": pid, "tid": pid,
                       "ts": start, "dur": 790.125, "args": {"External id": ext, "Ev Idx": ext - 1}})
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": pid, "tid": pid, "ts": start + 10,
                       "dur": 300.5, "args": {"External id": ext + 1, "Sequence number": 7 + step, "Ev Idx": ext,
                                              "Concrete Inputs": ["", ""]}})
        events.append({"ph": "s", "id": step, "pid": pid, "tid": pid, "ts": start + 20, "cat": "fwdbwd",
                       "name": "fwdbwd"})
        events.append({"ph": "f", "id": step, "pid": pid, "tid": pid, "ts": start + 400, "cat": "fwdbwd",
                       "name": "fwdbwd", "bp": "e"})
        ext += 2
    events.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": pid, "tid": pid,
                   "ts": t0 + 150, "args": {"Total Allocated": 4096, "Bytes": 4096, "Ev Idx": 10}})
    events.append({"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": t0 + 1990.25})
    return events


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    for rank in (0, 1):
        kineto(src / f"rank{rank}.json", rank, rank_events(rank, 4749474047000.0 + rank * 7))
    (src / "meta.json").write_text('{"kind": "gpipe"}')  # not a trace: skipped
    return src


def test_one_copy_is_the_recorded_file(recorded: Path, tmp_path: Path) -> None:
    # GIVEN two recorded ranks in Kineto's layout
    ranks = [make_large_trace.load(p) for p in make_large_trace.find_traces(recorded)]
    for r in ranks:
        make_large_trace.step_window(r)
    span, step_stride = make_large_trace.plan(ranks)
    for r in ranks:
        # WHEN each is written with one copy of its steps
        out = tmp_path / r.path.name
        make_large_trace.grow_rank(r.path, out, 1, span, step_stride)
        # THEN the file is the recorded one byte for byte, but the traceName
        assert out.read_text().replace(str(out), str(r.path)) == r.path.read_text()


def test_grown_traces_repeat_the_steps_renumbered_and_aligned(recorded: Path, tmp_path: Path) -> None:
    # GIVEN two recorded ranks whose steps last about 1.6 ms each
    out = tmp_path / "grown"
    # WHEN they are grown to a total larger than three copies
    summary = make_large_trace.grow(recorded, out, total_mb=0.02)
    copies = summary["copies"]
    assert copies >= 3 and summary["bytes"] >= 0.02e6
    assert sorted(p.name for p in out.iterdir()) == ["rank0.json", "rank1.json"]
    assert make_large_trace.manifest(out).exists()
    span = summary["span_us"]
    starts = {}
    for rank in (0, 1):
        recorded_trace = json.loads((recorded / f"rank{rank}.json").read_text())
        grown = json.loads((out / f"rank{rank}.json").read_text())
        # THEN the header and the keys' order are the recorded ones
        assert list(grown) == list(recorded_trace)
        assert grown["distributedInfo"] == recorded_trace["distributedInfo"]
        assert grown["baseTimeNanoseconds"] == recorded_trace["baseTimeNanoseconds"]
        events = grown["traceEvents"]
        assert len(events) == summary["files"][rank]["events"] == 3 + copies * 9
        # AND the steps are numbered on, each copy one span later
        steps = sorted((e["ts"], e["name"]) for e in events if e["name"].startswith("ProfilerStep#"))
        assert [name for _, name in steps] == [f"ProfilerStep#{n}" for n in range(1, 2 * copies + 1)]
        assert steps[2][0] - steps[0][0] == pytest.approx(span, abs=1e-3)
        starts[rank] = [ts for ts, _ in steps]
        # AND the ids are unique, every flow start meets its end, the autograd sequence numbers stay paired
        for key in ("External id", "Ev Idx"):
            values = [e["args"][key] for e in events if key in e.get("args", {})]
            assert len(values) == len(set(values))
        flows = [(e["ph"], e["id"]) for e in events if e["ph"] in "sf"]
        assert sorted(i for ph, i in flows if ph == "s") == sorted(i for ph, i in flows if ph == "f")
        assert len(flows) == 2 * 2 * copies
        # AND the profiler's span covers the grown run, and what came after the steps comes after the last copy
        trace_span = next(e for e in events if e.get("cat") == "Trace")
        assert trace_span["dur"] == pytest.approx(2000.5 + (copies - 1) * span, abs=1e-3)
        assert events[-1]["name"] == "Record Window End" and events[-1]["ts"] == max(e["ts"] for e in events)
        assert grown["traceName"] == str(out / f"rank{rank}.json")
    # AND the ranks stay aligned: every step of rank 1 is as far from rank 0's as in the recording
    offsets = {round(b - a, 3) for a, b in zip(starts[0], starts[1])}
    assert offsets == {10.25}
