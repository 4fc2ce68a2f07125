"""A job's traces at any rank count: an import of many small ranks holds every rank, leaves nothing behind
(no spill file, no file open), raises the limit on open files it needs, says so in one sentence where it
cannot, prints no line that grows with the ranks, and trims its heap at its phases' ends, not each rank; the
trace's levels of detail are the same whether its rows are held to the end or binned as they come."""

from __future__ import annotations

import collections
import json
import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from popvision_py.format import levels, open_profile
from popvision_py.format.levels import LevelFold
import popvision_py.importer as importer
from popvision_py.importer import find_traces, import_traces, parts, ranges, read_traces
from tests.importer.test_import_ranges import assert_same
from tests.terminal import stderr_on_a_terminal

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import make_gpu_trace  # noqa: E402

pytestmark = pytest.mark.slow
RANKS = 64


@pytest.fixture(scope="module")
def many_ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """64 GPU ranks of a data-parallel run, one profiler step each (about 32 KB a rank)."""
    folder = tmp_path_factory.mktemp("ranks") / "traces"
    make_gpu_trace.make(folder, total_mb=1.0, ranks=RANKS, layers=2, bucket=1, jobs=1)
    return folder


def cli(*args: object, files: tuple[int, int] | None = None) -> subprocess.CompletedProcess:
    """``popvision ARGS`` in a process of its own, its limit on open files (soft, hard) set first where given."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def limit() -> None:
        if files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, files)

    return subprocess.run([sys.executable, "-m", "popvision_py.cli", *map(str, args)], capture_output=True,
                          text=True, env=env, preexec_fn=limit, timeout=300)


def test_an_import_of_many_ranks_holds_each_rank_and_prints_no_line_that_grows_with_them(many_ranks, tmp_path):
    # GIVEN 64 ranks, and a limit on open files (100) under what they need (64 + 256) but a hard limit above it
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < RANKS + 256:
        pytest.skip(f"the hard limit on open files ({hard}) is under what the import needs")
    # WHEN they are imported
    result = cli("import", many_ranks, "-o", tmp_path / "out", "-q", files=(100, hard))
    # THEN the import raised the limit and wrote every rank: an IPU, a kernels' and a trace's rows, a timeline each
    assert result.returncode == 0, result.stderr
    with open_profile(tmp_path / "out" / "profile.pop") as profile:
        assert profile.run["import"]["ranks"] == list(range(RANKS)) and profile.target["num_ipus"] == RANKS
        for table in ("kernels", "trace", "programs", "tile_memory", "trace_levels"):
            assert np.unique(profile.read_table(table)["ipu"]).tolist() == list(range(RANKS)), table
    # AND nothing else is left beside the profile: no spill file, in the output's folder or its parent
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["profile.pop", "system"]
    assert len(list((tmp_path / "out" / "system").iterdir())) == RANKS
    # AND what it prints names the ranks in a few words, as info names them and their files
    assert "ranks 0 to 63" in result.stdout and max(map(len, result.stdout.splitlines())) < 200
    info = cli("info", tmp_path / "out" / "profile.pop")
    assert info.returncode == 0, info.stderr
    assert "ranks 0 to 63" in info.stdout and f"{many_ranks}/rank<n>.json" in info.stdout
    assert max(map(len, info.stdout.splitlines())) < 200


def test_an_import_on_a_terminal_shows_the_ranks_read_then_the_ranks_written(many_ranks, tmp_path):
    # WHEN 64 ranks are imported with a terminal to show the progress on
    shown = stderr_on_a_terminal(["import", many_ranks, "-o", tmp_path / "out"]).replace("\r", "\n")
    # THEN the bar counts the ranks read, then the ranks written, each out of the 64
    reading = [m.start() for m in re.finditer(r"Reading traces: +\d+%.*\b\d+/64\b", shown)]
    writing = [m.start() for m in re.finditer(r"Writing profile: +\d+%.*\b\d+/64\b", shown)]
    assert reading and writing and max(reading) < min(writing), shown[-2000:]
    # AND with -q it shows nothing
    assert stderr_on_a_terminal(["import", many_ranks, "-o", tmp_path / "quiet", "-q"]) == ""


def test_an_import_of_many_ranks_leaves_no_file_open(many_ranks, tmp_path):
    # GIVEN the files this process has open
    before = sorted(os.listdir("/proc/self/fd")) if Path("/proc/self/fd").is_dir() else None
    if before is None:
        pytest.skip("no /proc/self/fd here to count open files")
    # WHEN 64 ranks are imported in it
    import_traces(find_traces([str(many_ranks)]), tmp_path / "out" / "profile.pop", jobs=1)
    # THEN it has the same files open once the profile and the timelines are written: every spill file closed
    assert len(os.listdir("/proc/self/fd")) <= len(before)


def counted_trims(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each trim of the heap from now on (libc's malloc_trim counted in its place), none counted before (nor the
    resident set a reader of byte ranges measures its growth from: this process's, once it reads its next range)."""
    trims: list[int] = []
    monkeypatch.setattr(parts, "_TRIM", [trims.append])
    monkeypatch.setattr(parts, "_CHURNED", [0])
    monkeypatch.setattr(ranges, "_HEAP", {"resident": 0, "read": 0})
    return trims


def test_the_heap_is_trimmed_once_the_bytes_counted_pass_churn_bytes(monkeypatch):
    # GIVEN trims counted, and CHURN_BYTES of 8 MiB
    trims = counted_trims(monkeypatch)
    assert parts.CHURN_BYTES == 8 << 20
    # WHEN 3 MiB are churned twice THEN the heap is not trimmed (6 MiB)
    parts.release_memory(3 << 20)
    parts.release_memory(3 << 20)
    assert trims == []
    # WHEN 3 MiB more (9 MiB) THEN it is trimmed, and the count starts again
    parts.release_memory(3 << 20)
    assert len(trims) == 1
    parts.release_memory(7 << 20)
    assert len(trims) == 1
    # AND a call that counts nothing (a phase's end) trims at once, and starts the count again
    parts.release_memory()
    assert len(trims) == 2
    parts.release_memory(7 << 20)
    assert len(trims) == 2


def test_an_import_of_small_ranks_trims_the_heap_at_its_phases_ends_not_each_rank(many_ranks, tmp_path,
                                                                                   monkeypatch):
    # GIVEN 64 ranks of about 32 KB (what each one's read and write make and drop is under CHURN_BYTES in all)
    trims = counted_trims(monkeypatch)
    # WHEN they are imported in this process
    import_traces(find_traces([str(many_ranks)]), tmp_path / "out" / "profile.pop", jobs=1)
    # THEN the heap is trimmed once the ranks are read, once the profile is written and once their timelines are:
    # three times, not four times a rank
    assert len(trims) == 3


def test_small_ranks_read_whole_by_workers_are_the_ranks_read_range_by_range(many_ranks, tmp_path, monkeypatch):
    # GIVEN 64 small ranks, each of one byte range
    paths = find_traces([str(many_ranks)])
    assert all(ranges.one_range(ranges.rank_ranges(p)[0]) for p in paths)
    # WHEN they are read here, range by range, and by two processes, each rank whole (their 1 MB is read in
    # processes only past IN_PROCESS_BYTES), both spilled beside the output
    here = read_traces(paths, jobs=1, spill=tmp_path)
    monkeypatch.setattr(importer, "IN_PROCESS_BYTES", 0)
    planned_here: list[str] = []  # the files this process planned (the workers' calls are counted in theirs)
    plan_plain = ranges.plan_plain
    monkeypatch.setattr(ranges, "plan_plain", lambda path, size: planned_here.append(str(path)) or plan_plain(
        path, size))
    there = read_traces(paths, jobs=2, spill=tmp_path)
    # THEN every rank is the same, column for column, its columns mapped from one file the ranks share
    assert [t.rank for t in there] == list(range(RANKS))
    # AND each small file was planned by the worker that read it, not read here first to plan it
    assert planned_here == []
    for a, b in zip(here, there):
        assert_same(a, b, but=("spill",))
    assert all(t.spill is not None for t in there) and len({id(t.spill.shared) for t in there}) == 1


def test_too_few_files_to_open_is_one_sentence_and_no_profile(many_ranks, tmp_path):
    # GIVEN a hard limit of 100 open files, under the 64 + 256 the import needs
    # WHEN 64 ranks are imported
    result = cli("import", many_ranks, "-o", tmp_path / "out", "-q", files=(100, 100))
    # THEN it says so in one sentence, exit code 2, and writes nothing
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "320 open files" in lines[0] and "ulimit -n 320" in lines[0], result.stderr
    assert not (tmp_path / "out").exists()


def test_levels_are_the_same_held_to_the_end_or_binned_as_rows_come(monkeypatch):
    # GIVEN 60 IPUs' rows coming in three batches that widen the run (the fold's bins widen with them), a
    # tenth of them of no cycles, on the edge of a bin of 64 cycles (counted at a wider bin, not a narrower)
    rng = np.random.default_rng(50)
    batches = []
    for k in (1, 4, 40):
        n = 5_000
        start = rng.integers(0, k * 10**6, n)
        end = start + rng.integers(0, 20_000, n)
        edge = rng.random(n) < 0.1
        start = np.where(edge, start // 64 * 64, start)
        end = np.where(edge, start, end)
        batches.append((rng.integers(0, 60, n), rng.integers(0, 5, n), start, end))

    def folded() -> object:
        fold = LevelFold()
        for batch in batches:
            fold.add(*batch)
        return fold.result()

    held = folded()
    # WHEN the same rows are binned as they come (nothing held), and held but binned 7 IPUs at a time
    monkeypatch.setattr(levels, "HELD_ROWS", 0)
    binned = folded()
    monkeypatch.setattr(levels, "HELD_ROWS", 1 << 21)
    monkeypatch.setattr(levels, "CHUNK_CELLS", 7 * levels.N_PHASE * 600)
    chunked = folded()
    # THEN the three tables are the same, and each level's cycles sum to the rows'
    assert held.equals(binned) and held.equals(chunked) and held.num_rows > 0
    cycles = sum(int((e - s).sum()) for _, _, s, e in batches)
    frame = held.to_pandas()
    assert (frame.groupby("level")["cycles"].sum() == cycles).all()


def test_a_small_file_the_fast_path_does_not_take_is_read_in_workers_as_in_this_process(tmp_path, monkeypatch):
    # GIVEN two small ranks, each naming traceEvents twice (10 operators in each array): the fast path refuses it,
    # so the worker that plans it falls back to the streaming parser, which reads both arrays
    from popvision_py.importer import read_traces

    def ops(first: int) -> str:
        return json.dumps([{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10 * k, "dur": 5, "pid": 1,
                            "tid": 1} for k in range(first, first + 10)])

    for rank in (0, 1):
        (tmp_path / f"rank{rank}.json").write_text(
            f'{{"schemaVersion": 1, "distributedInfo": {{"rank": {rank}, "world_size": 2}}, "traceEvents": {ops(0)}, '
            f'"traceEvents": {ops(10)}}}')
    paths = sorted(tmp_path.glob("rank*.json"))
    assert all(ranges.small_plain(p) for p in paths)
    with pytest.raises(ranges.Fallback, match="traceEvents named twice"):
        ranges.read_small(str(paths[0]))
    # WHEN they are read by two processes, and in this one
    monkeypatch.setattr(importer, "IN_PROCESS_BYTES", 0)
    there, here = read_traces(paths, jobs=2), read_traces(paths, jobs=1)
    # THEN each rank is the same, its 20 operators read
    assert [t.rank for t in there] == [0, 1] and all(t.events == 20 for t in there)
    for a, b in zip(there, here):
        assert_same(a, b)


def test_small_ranks_read_a_few_to_a_task_keep_their_order_their_fallbacks_and_their_first_error(many_ranks, tmp_path,
                                                                                                  monkeypatch):
    # GIVEN 40 of the small ranks, rank 3 gzipped (read by byte ranges, not with the small ones) and rank 7 naming
    # traceEvents twice (the fast path refuses it: the streaming parser reads it, in a task of its own)
    import gzip

    from popvision_py.importer import _Rank, _small_batch

    folder = tmp_path / "traces"
    folder.mkdir()
    for rank in range(40):
        text = (many_ranks / f"rank{rank}.json").read_bytes()
        if rank == 3:
            (folder / f"rank{rank:02d}.json.gz").write_bytes(gzip.compress(text))
            continue
        if rank == 7:
            head, events = text.split(b'"traceEvents"', 1)
            text = head + b'"traceEvents": [], "traceEvents"' + events
        (folder / f"rank{rank:02d}.json").write_bytes(text)
    paths = find_traces([str(folder)])
    refused = ranges.read_smalls([str(p) for p in paths[6:9]])
    assert isinstance(refused[1], ranges.Fallback) and all(r.events > 0 for r in (refused[0], refused[2]))
    # WHEN the next small ranks are taken for one task: those before the gzipped one, up to the bytes asked
    queue = collections.deque(_Rank(p) for p in paths)
    two = paths[0].stat().st_size + paths[1].stat().st_size
    assert [r.path for r in _small_batch(queue, two)] == paths[:2]
    assert [r.path for r in _small_batch(queue, 10 * two)] == paths[2:3] and _small_batch(queue, 10 * two) == []
    # AND all of them are read by two processes, several to a task (four tasks a process at least), and here
    monkeypatch.setattr(importer, "IN_PROCESS_BYTES", 0)
    tasks: list[int] = []  # the ranks of each task of small ones
    batch = importer._small_batch

    def counted(queue, share):
        taken = batch(queue, share)
        tasks.append(len(taken))
        return taken

    monkeypatch.setattr(importer, "_small_batch", counted)
    there, here = read_traces(paths, jobs=2, spill=tmp_path), read_traces(paths, jobs=1, spill=tmp_path)
    # THEN every rank is read, in order, the same either way
    assert [t.rank for t in there] == list(range(40))
    assert sum(tasks) == 39 and max(tasks) > 1 and len([n for n in tasks if n]) >= 8  # all but the gzipped
    for a, b in zip(here, there):
        assert_same(a, b, but=("spill",))
    # AND a truncated rank among them is the import's one sentence, naming it, whatever the ranks read after it
    (folder / "rank05.json").write_bytes(paths[5].read_bytes()[:-200])
    with pytest.raises(importer.TraceError, match="rank05.json ends before its JSON does"):
        read_traces(paths, jobs=2, spill=tmp_path)


def runs_handed_out(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """The runs of ranks (first, stop) the import hands to its forked processes, as it hands them."""
    from popvision_py.importer import forked

    submitted: list[tuple[int, int]] = []

    class Counted(forked.ProcessPoolExecutor):
        def submit(self, fn, /, *args, **kwargs):
            if fn is forked._cut_run:  # a run of ranks (not the task that starts the processes)
                submitted.append(args)
            return super().submit(fn, *args, **kwargs)

    monkeypatch.setattr(forked, "ProcessPoolExecutor", Counted)
    return submitted


def test_many_small_ranks_cut_by_a_forked_process_give_the_profile_cut_here(many_ranks, tmp_path, monkeypatch):
    from popvision_py.importer import forked, profile
    from tests.importer.test_import_cluster import assert_same as same_output, members

    # GIVEN 64 small ranks, of which ranks 10, 11 and 40 count as large (cut here, between the runs), runs of at most
    # 5 ranks, and row groups of 50 rows (25 of kernels), so that row groups fill inside runs
    monkeypatch.setattr(forked, "FORKED_PAST", 8)
    monkeypatch.setattr(forked, "RUN_RANKS", 5)
    monkeypatch.setattr(forked, "rank_rows", lambda t: forked.SMALL_ROWS + 1 if t.rank in (10, 11, 40) else 1)
    monkeypatch.setattr(profile, "ROW_GROUP_ROWS", 50)
    monkeypatch.setattr(profile, "KERNEL_GROUP_ROWS", 25)
    submitted = runs_handed_out(monkeypatch)
    paths = find_traces([str(many_ranks)])
    # WHEN they are imported with one job (every rank cut here) and with two (a forked process, and this one)
    import_traces(paths, tmp_path / "here" / "profile.pop", jobs=1)
    assert submitted == []
    import_traces(paths, tmp_path / "there" / "profile.pop", jobs=2)
    # THEN the profiles are the same, byte for byte, and so are the ranks' CPU timelines
    same_output(tmp_path / "here", tmp_path / "there")
    import pyarrow as pa
    import pyarrow.parquet as pq

    trace = members(tmp_path / "there" / "profile.pop")["trace.parquet"]
    assert pq.ParquetFile(pa.BufferReader(trace)).metadata.num_row_groups > 3
    # AND the forked process was handed runs of the small ranks, each within a stretch between the large ones
    runs = [(0, 5), (5, 10), (12, 17), (17, 22), (22, 27), (27, 32), (32, 37), (37, 40)]
    runs += [(a, min(a + 5, RANKS)) for a in range(41, RANKS, 5)]
    assert submitted and set(submitted) <= set(runs) and len(set(submitted)) == len(submitted)


def test_a_run_of_items_packed_gives_each_item_back_and_is_written_whole_only_where_its_items_agree():
    from popvision_py.importer.forked import PackedTable
    from popvision_py.importer.tables import Coded, LazyColumn

    def items(second_dtype: type) -> list[dict]:
        return [{"ipu": np.array([0, 0, 0]), "name": Coded(np.array([1, 0, 1]), ("a", "b")),
                 "level": LazyColumn(3, lambda a, b: np.arange(a, b) * 10)},
                {"ipu": np.array([], np.int64), "name": Coded(np.array([], np.int64), ()),
                 "level": np.array([], np.int64)},
                {"ipu": np.array([1, 1], second_dtype), "name": Coded(np.array([0, 0]), ("c",)),
                 "level": np.array([7, 8])}]

    for dtype, whole in ((np.int64, True), (np.int32, False)):
        packed = PackedTable()
        for columns in items(dtype):
            packed.add(columns)
        packed.join()
        assert packed.rows == [3, 0, 2]
        # each item's columns back, of their own type, its names through its own words
        back = list(packed.items())
        assert [c["ipu"].dtype for c in back] == [np.int64, np.int64, dtype]
        assert [c["ipu"].tolist() for c in back] == [[0, 0, 0], [], [1, 1]]
        assert [[c["name"].words[k] for k in c["name"].codes] for c in back] == [["b", "a", "b"], [], ["c", "c"]]
        assert [c["level"].tolist() for c in back] == [[0, 10, 20], [], [7, 8]]
        # written as one only where every item's columns are alike (a column of two types would be cast)
        assert (packed.uniform() == ("ipu", "name", "level")) is whole


DIES_FROM = {"rank": 0}  # the first rank of the first run a forked process dies on (``_killed``)


def _killed(first: int, stop: int):
    """A forked process's run: cut as ever before rank ``DIES_FROM``, then the process dies (as one killed for
    memory would)."""
    from popvision_py.importer import forked

    if first >= DIES_FROM["rank"]:
        os._exit(9)
    return forked._cut_here(range(first, stop))


@pytest.mark.parametrize("dies_from", [0, 30])
def test_a_forked_process_that_dies_is_one_sentence_and_leaves_the_earlier_profile(many_ranks, tmp_path, monkeypatch,
                                                                                     dies_from):
    from click.testing import CliRunner

    from popvision_py.cli import main
    from popvision_py.importer import forked

    # GIVEN an earlier import in OUT, then the 64 small ranks cut by a forked process that dies on its first run, or
    # on the first from rank 30
    out = tmp_path / "out"
    assert CliRunner().invoke(main, ["import", str(many_ranks), "-o", str(out), "-q", "--jobs", "1"]).exit_code == 0
    before = (out / "profile.pop").read_bytes()
    monkeypatch.setattr(forked, "FORKED_PAST", 8)
    monkeypatch.setattr(forked, "RUN_RANKS", 5)
    monkeypatch.setattr(forked, "_cut_run", _killed)
    monkeypatch.setitem(DIES_FROM, "rank", dies_from)
    # WHEN they are imported again with two jobs
    result = CliRunner().invoke(main, ["import", str(many_ranks), "-o", str(out), "-q", "--jobs", "2"])
    # THEN one sentence naming the first rank its run held, exit code 2, and the earlier profile as it was
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert re.search(r"A process cutting the ranks' rows died \(killed, or out of memory\) before rank \d+ was "
                     r"written\.", lines[0]), lines[0]
    assert (out / "profile.pop").read_bytes() == before


CTRL_C_AS_THE_CUT_STARTS = """
import os, signal, sys
from popvision_py.importer import forked
forked.FORKED_PAST, forked.RUN_RANKS = 8, 5
submit = forked.ProcessPoolExecutor.submit

def submit_then_ctrl_c(pool, fn, *args, **kwargs):
    future = submit(pool, fn, *args, **kwargs)
    if fn is int:  # the pool's first task: its processes forked, now a Ctrl-C to every process of the group
        os.killpg(os.getpgid(0), signal.SIGINT)
    return future

forked.ProcessPoolExecutor.submit = submit_then_ctrl_c
from popvision_py.cli import main
sys.argv = ["popvision", "import", *sys.argv[1:]]
main()
"""


def test_a_ctrl_c_as_the_forked_processes_start_is_the_commands_one_sentence(many_ranks, tmp_path):
    # GIVEN an earlier import in OUT
    out = tmp_path / "out"
    assert cli("import", many_ranks, "-o", out, "-q", "--jobs", "1").returncode == 0
    before = (out / "profile.pop").read_bytes()
    # WHEN the 64 small ranks are imported again by two jobs, and a Ctrl-C reaches every process of the command just
    # as the processes that cut the ranks' rows have been forked
    run = subprocess.run([sys.executable, "-c", CTRL_C_AS_THE_CUT_STARTS, str(many_ranks), "-o", str(out), "-q",
                          "--jobs", "2"], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         start_new_session=True, timeout=300)
    # THEN the command says it was interrupted and exits 130, no process prints a traceback, the earlier profile stays
    assert run.returncode == 130, run.stdout + run.stderr
    assert "Traceback" not in run.stdout + run.stderr and run.stderr.strip() == "Interrupted.", run.stderr
    assert (out / "profile.pop").read_bytes() == before


@pytest.mark.parametrize("kind", ["gpipe", "interleaved"])
def test_a_cpu_pipelines_ranks_cut_by_a_forked_process_give_the_profile_cut_here(recorded, kind, tmp_path, monkeypatch):
    from popvision_py.importer import forked
    from tests.importer.test_import_cluster import assert_same as same_output

    # GIVEN a real pipeline's CPU traces (4 gloo ranks whose sends and receives are matched across ranks), each rank a
    # run of its own handed to the forked process
    monkeypatch.setattr(forked, "FORKED_PAST", 0)
    monkeypatch.setattr(forked, "RUN_RANKS", 1)
    submitted = runs_handed_out(monkeypatch)
    paths = find_traces([str(recorded(kind).folder)])
    # WHEN imported with one job and with two
    import_traces(paths, tmp_path / "here" / "profile.pop", jobs=1)
    import_traces(paths, tmp_path / "there" / "profile.pop", jobs=2)
    # THEN the same profile byte for byte, the same CPU timelines, and the forked process was handed ranks
    same_output(tmp_path / "here", tmp_path / "there")
    assert submitted and set(submitted) <= {(r, r + 1) for r in range(4)}
