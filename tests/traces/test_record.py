"""The trace recorder: a real GPipe run over four gloo ranks gives one Chrome trace per rank."""

import json
import re

import pytest

pytest.importorskip("torch")  # the recorder trains with it (not in the test matrix's environments)

from tests.traces.record import record  # noqa: E402


@pytest.mark.slow
def test_gpipe_records_one_trace_per_rank(tmp_path):
    micro_batches, steps = 4, 2
    paths = record("gpipe", tmp_path, micro_batches=micro_batches, steps=steps)
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["world_size"] == 4
    assert paths == [tmp_path / f"rank{r}.json" for r in range(4)]
    assert sorted(p.name for p in tmp_path.glob("rank*.json")) == [p.name for p in paths]
    for rank, path in enumerate(paths):
        trace = json.loads(path.read_text())
        events = trace["traceEvents"]
        assert isinstance(events, list) and events
        assert trace["distributedInfo"]["rank"] == rank
        assert trace["distributedInfo"]["world_size"] == 4
        forwards = [e for e in events if e.get("ph") == "X" and re.fullmatch(r"Forward \d+", e.get("name", ""))]
        assert len(forwards) == micro_batches * steps, (rank, len(forwards))
        steps_seen = [e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#")]
        assert steps_seen == meta["profiled_step_annotations"]
