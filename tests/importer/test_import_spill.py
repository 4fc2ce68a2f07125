"""Each rank's columns spilled to disk as they are read (importer/spill.py): what is read and written is what
an import held in memory makes, however small the pieces it is cut into; and the spill files are gone after
an import, good or refused."""

from __future__ import annotations

import gc
import gzip
import os
import sys
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pytest
from click.testing import CliRunner

from popvision_py.importer import find_traces, profile, ranges, read_traces, spill, timeline
from popvision_py.importer.parts import bucket_max, merge_intervals
from popvision_py.importer.spill_files import SpillFile
from popvision_py.importer.profile import write_profile
from tests.importer.test_import_ranges import SAMPLE, assert_same

ROOT = Path(__file__).resolve().parents[2]
TABLES = ("trace", "programs", "exchanges", "liveness", "tile_cycles", "tile_memory", "trace_levels")


def test_runs_unioned_a_stretch_of_time_at_a_time_are_their_union(tmp_path):
    # GIVEN three runs of sorted disjoint intervals, which overlap and touch across runs
    out = SpillFile(tmp_path)
    runs = [np.array([[0, 5], [10, 12], [30, 31]]), np.array([[4, 11], [12, 12], [40, 50]]),
            np.array([[20, 20], [31, 35]])]
    # WHEN they are unioned two intervals at a time
    ref = spill.union_runs(runs, out, batch=2)
    out.freeze()
    # THEN the union is [0, 12), the lone [20, 20), [30, 35) (touching joins) and [40, 50)
    assert out.array(ref).tolist() == [[0, 12], [20, 20], [30, 35], [40, 50]]


def test_arrays_appended_in_one_write_lie_where_appended_one_by_one(tmp_path):
    # GIVEN a rank's kinds of arrays: int8 and int64 columns, an empty one, rows of two and of thirteen
    arrays = [np.arange(5, dtype=np.int8), np.arange(3, dtype=np.int64) * 7, np.zeros(0, np.int32),
              np.array([[1, 2], [3, 4]]), np.zeros((0, 13), np.int64), np.arange(26).reshape(2, 13)]
    # WHEN they are appended to one file one by one, and to another all in one write
    one_by_one, at_once = SpillFile(tmp_path), SpillFile(tmp_path)
    refs = [one_by_one.append(a) for a in arrays]
    together = at_once.append_all(arrays)
    # THEN each lies at the same place, of the same dtype and shape, and the files are as long
    assert together == refs and at_once.size == one_by_one.size
    at_once.freeze()
    for values, ref in zip(arrays, together):
        read = at_once.array(ref)
        assert read.dtype == values.dtype and read.tolist() == values.tolist()


@pytest.mark.parametrize("batch", [1, 7, 1000])
def test_random_runs_unioned_and_reduced_in_stretches_are_what_one_pass_makes(batch, tmp_path):
    # GIVEN 30 runs of random intervals and of random memory samples (each run merged, or reduced, on its own)
    rng = np.random.default_rng(batch)
    runs, samples = [], []
    for _ in range(30):
        start = rng.integers(0, 100_000, 40)
        runs.append(merge_intervals(np.stack([start, start + rng.integers(0, 3_000, 40)], axis=1)))
        samples.append(bucket_max(rng.integers(0, 200_000, 50), rng.integers(0, 5, 50)))  # ties: the first wins
    out, scratch = SpillFile(tmp_path), SpillFile(tmp_path)
    # WHEN they are unioned and reduced `batch` rows at a time
    union = spill.union_runs(runs, out, batch)
    ts, nbytes = spill.bucket_runs(samples, out, scratch, batch)
    out.freeze()
    # THEN the results are those of the whole at once, in the runs' order
    assert np.array_equal(out.array(union), merge_intervals(np.concatenate(runs)))
    whole = bucket_max(np.concatenate([t for t, _ in samples]), np.concatenate([b for _, b in samples]))
    assert np.array_equal(out.array(ts), whole[0]) and np.array_equal(out.array(nbytes), whole[1])


def gpu_style(folder: Path) -> Path:
    """The sample's traces rewritten as a GPU trace (kernels, NCCL kernels: make_large_trace --gpu-style)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import make_large_trace

    make_large_trace.grow(SAMPLE, folder, total_mb=6, gpu=True)
    return folder


def synthetic_gpu(folder: Path) -> Path:
    """Synthetic GPU traces (make_gpu_trace.py): runtime launches joined by correlation, NCCL kernels, three streams."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import make_gpu_trace

    make_gpu_trace.make(folder, total_mb=1.2, ranks=2, layers=3, bucket=2, jobs=1)
    return folder


@pytest.mark.parametrize("kind", ["cpu", "gpu", "synthetic-gpu"])
def test_an_import_spilled_in_small_pieces_writes_the_tables_of_one_held_in_memory(kind, tmp_path, monkeypatch):
    # GIVEN the sample's traces (or their GPU rewrite, or synthetic GPU traces), inflated, cut into ranges of 64 KiB
    if kind == "synthetic-gpu":
        folder = synthetic_gpu(tmp_path / "traces")
    elif kind == "gpu":
        folder = gpu_style(tmp_path / "traces")
    else:
        folder = tmp_path / "traces"
        folder.mkdir()
        for path in sorted(SAMPLE.iterdir()):
            (folder / path.name.removesuffix(".gz")).write_bytes(gzip.decompress(path.read_bytes()))
    paths = find_traces([str(folder)])
    monkeypatch.setattr(ranges, "RANGE_BYTES", 64 << 10)
    # WHEN they are read into memory and written in one window a rank, and read spilled (rows merged,
    # reduced and copied 50 at a time, the kernels sorted and joined to their launches 50 at a time, read back 7
    # at a time) and written in windows of 40 busy rows (or kernels)
    whole = read_traces(paths, jobs=1)
    write_profile(tmp_path / "whole" / "profile.pop", whole, name="x", busy_rows=1 << 40)
    monkeypatch.setattr(spill, "BATCH_ROWS", 50)
    monkeypatch.setattr(timeline.Reach, "BLOCK", 7)
    monkeypatch.setattr(profile, "SLICE_ROWS", 70)
    spilled = read_traces(paths, jobs=1, spill=tmp_path)
    assert all(t.spill is not None for t in spilled)
    assert all(len(ranges.rank_ranges(p)[0].ranges) > 3 for p in paths)  # each rank several parts
    write_profile(tmp_path / "spilled" / "profile.pop", spilled, name="x", busy_rows=40)
    # THEN each rank's columns are the same, and so is every table
    for a, b in zip(whole, spilled):
        assert_same(a, b, but=("spill",))
    assert sum(len(t.busy) + len(t.kernels) for t in spilled) > 4 * 50  # more rows than a batch: the pieces were many
    from popvision_py.format import open_profile

    with open_profile(tmp_path / "whole" / "profile.pop") as a, open_profile(tmp_path / "spilled" / "profile.pop") as b:
        for table in (*TABLES, "kernels"):
            assert a.read_table(table).equals(b.read_table(table)), table
        if kind != "cpu":  # the GPU's own timeline was spilled and joined too
            assert a.read_table("kernels").num_rows > 4 * 50
        if kind == "synthetic-gpu":  # every kernel, copy and set joined to its launch
            assert pc.min(a.read_table("kernels").column("launch_start_cycle")).as_py() >= 0
        assert a.run == b.run


def spill_files(folder: Path) -> list[str]:
    """Files of ``folder`` this process still has open or mapped (an anonymous spill file shows as
    ``folder/#123 (deleted)``)."""
    seen = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue
    with open("/proc/self/maps") as maps:
        seen += [line.split(maxsplit=5)[-1].strip() for line in maps if len(line.split()) > 5]
    return [s for s in seen if s.startswith(str(folder))]


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc (Linux)")
def test_no_spill_file_is_left_after_an_import_or_a_refused_one(tmp_path):
    # GIVEN a folder with an earlier import, and the sample's traces with a rank of another run (its clock a
    # day later), whose fault shows only once every rank has been read and spilled
    from popvision_py.cli import main as cli

    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["import", str(SAMPLE), "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    bad = tmp_path / "bad"
    bad.mkdir()
    for path in sorted(SAMPLE.iterdir()):
        (bad / path.name).write_bytes(path.read_bytes())
    text = gzip.decompress((bad / "rank3.json.gz").read_bytes()).decode()
    base = text.index('"baseTimeNanoseconds": ') + len('"baseTimeNanoseconds": ')
    digits = text[base:].split(",")[0].split("\n")[0].strip()
    (bad / "rank3.json.gz").write_bytes(gzip.compress(text.replace(
        f'"baseTimeNanoseconds": {digits}', f'"baseTimeNanoseconds": {int(digits) + 86_400 * 10**9}', 1).encode()))
    # WHEN it is imported over the earlier one
    result = CliRunner().invoke(cli, ["import", str(bad), "-o", str(out), "-q"])
    gc.collect()
    # THEN it is one sentence and exit 2, the earlier import is as it was, and no spill file is left: none in
    # the folder, none open or mapped
    assert result.exit_code == 2, result.output
    assert "are not traces of one run" in result.output and "Traceback" not in result.output
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert spill_files(out) == [] and spill_files(tmp_path) == []


@pytest.mark.parametrize("batch", [1, 4, 1000])
def test_launches_joined_to_their_operators_a_stretch_at_a_time_are_those_joined_at_once(batch, tmp_path):
    # GIVEN two threads' operators nested four deep (and modules), in parts cut at random, and launches at random
    # moments on either thread, some inside no operator
    from popvision_py.importer import kernels

    rng = np.random.default_rng(batch)
    ops = []
    for thread in (5, 9):
        for top in range(30):
            lo, hi = top * 1000, top * 1000 + 900
            for depth in range(4):  # each inside the one before
                ops.append((lo, hi, thread, depth + 2 * thread, depth % 2))
                lo, hi = lo + int(rng.integers(1, 50)), hi - int(rng.integers(1, 50))
    ops = np.array(ops, np.int64)[rng.permutation(len(ops))]
    launches = np.stack([rng.permutation(400), rng.integers(0, 30_000, 400), np.zeros(400, np.int64),
                         rng.integers(0, 3, 400), rng.choice([5, 9], 400)], axis=1)
    launches[:, 2] = launches[:, 1] + 3
    cut_ops, cut_launches = np.sort(rng.choice(len(ops), 5)), np.sort(rng.choice(len(launches), 5))
    places = np.arange(len(launches))[:, None]
    op_runs = [r[np.argsort(r[:, 0], kind="stable")] for r in np.split(ops, cut_ops)]
    launch_runs = [r[np.argsort(r[:, 1], kind="stable")] for r in np.split(np.hstack([launches, places]), cut_launches)]
    names = [f"n{k}" for k in range(24)]
    code = kernels.name_codes(names)[0]
    # WHEN they are joined a stretch of `batch` rows at a time, and all at once
    scratch = SpillFile(tmp_path)
    refs = spill.launches_with_ops(launch_runs, op_runs, code, scratch, batch)
    scratch.freeze()
    ids, rest = spill.merged_launches([scratch.array(r) for r in refs], tmp_path, batch)
    whole = kernels.sorted_launches(kernels.launch_ops(launches, ops))
    # THEN each launch has the same operator and module, the names mapped alike
    assert np.array_equal(ids, whole[:, 0])
    assert np.array_equal(rest[:, 3:5], np.where(whole[:, 4:6] >= 0, code[whole[:, 4:6]], -1))
    assert (rest[:, 3] >= 0).sum() > 100 and (rest[:, 3] < 0).any()
