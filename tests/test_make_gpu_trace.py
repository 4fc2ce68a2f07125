"""benchmarks/make_gpu_trace.py: synthetic GPU traces are Kineto's shape at the size asked for, every kernel, copy
and set launched by a runtime call of its correlation id, the ids unique and the steps numbered on."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import make_gpu_trace  # noqa: E402


def test_synthetic_gpu_traces_are_a_data_parallel_runs_at_the_size_asked(tmp_path: Path) -> None:
    # GIVEN a 2-rank run of 2 layers, all-reduced a layer at a time, written to 0.3 MB
    summary = make_gpu_trace.make(tmp_path / "gpu", total_mb=0.3, ranks=2, layers=2, bucket=1, jobs=1)
    # THEN the files come to the size within 1 %, and each is JSON with Kineto's header
    assert abs(summary["bytes"] - 0.3e6) < 0.01 * 0.3e6
    copies = summary["copies"]
    for rank in (0, 1):
        trace = json.loads((tmp_path / "gpu" / f"rank{rank}.json").read_text())
        assert trace["distributedInfo"] == {"backend": "nccl", "rank": rank, "world_size": 2}
        events = trace["traceEvents"]
        assert len(events) == summary["files"][rank]["events"]
        kinds = Counter(e.get("cat") for e in events)
        # AND per step: 2 copies in and sets, 2 x 2 forward kernels, 2 x 3 backward, 2 all-reduces, 3 updates
        assert kinds["kernel"] == copies * (4 + 6 + 2 + 3) and kinds["gpu_memcpy"] == copies
        assert kinds["gpu_memset"] == 2 * copies
        # AND every GPU activity has a runtime call of its correlation id (and one flow pair), each id once
        gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
        calls = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"}
        assert len(calls) == len(gpu) == kinds["cuda_runtime"]
        assert all(calls[e["args"]["correlation"]]["ts"] < e["ts"] for e in gpu)
        assert sorted(e["id"] for e in events if e["ph"] == "s") == sorted(calls)
        # AND the NCCL kernels carry their collective's args, on a stream of their own
        nccl = [e for e in gpu if e["name"].startswith("ncclDevKernel")]
        assert len(nccl) == 2 * copies and {e["args"]["stream"] for e in nccl} == {20}
        assert nccl[0]["args"]["Process Group Ranks"] == "[0, 1]" and nccl[0]["args"]["In msg nelems"] > 0
        # AND the steps are numbered on, each copy one span later; the External ids unique
        steps = sorted((e["ts"], e["name"]) for e in events if e.get("name", "").startswith("ProfilerStep#"))
        assert [name for _, name in steps] == [f"ProfilerStep#{n}" for n in range(1, copies + 1)]
        assert steps[1][0] - steps[0][0] == summary["span_us"]
        ops = [e["args"]["External id"] for e in events if e.get("cat") in ("cpu_op", "user_annotation")]
        assert len(ops) == len(set(ops))


def test_copies_cut_one_total_into_more_ranks_each_naming_its_own(tmp_path: Path) -> None:
    # GIVEN 16 ranks of 4 MB together, 4 of them written and the rest copies
    summary = make_gpu_trace.make_copies(tmp_path / "gpu", total_mb=4.0, ranks=16, distinct=4, layers=2, bucket=1,
                                         jobs=1)
    # THEN there are 16 files, over the size by less than a step a rank (a rank holds whole steps), and rank r is
    # rank r % 4's events, naming rank r of 16
    step = summary["files"][0]["bytes"] / summary["files"][0]["steps"]
    assert len(summary["files"]) == 16 and 4e6 <= summary["bytes"] < 4e6 + 16 * step
    for rank in (0, 5, 15):
        trace = json.loads((tmp_path / "gpu" / f"rank{rank}.json").read_text())
        original = json.loads((tmp_path / "gpu" / f"rank{rank % 4}.json").read_text())
        assert trace["distributedInfo"] == {"backend": "nccl", "rank": rank, "world_size": 16}
        assert trace["traceEvents"] == original["traceEvents"]
