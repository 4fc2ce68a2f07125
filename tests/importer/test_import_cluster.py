"""`popvision import --scheduler`: the ranks read on a real Dask cluster's workers (a ``LocalCluster`` of two worker
processes, one thread each) give the profile a local import gives, member for member; a bad trace is the same
sentence; a scheduler that is not there, or an address of another form, is one sentence and exit code 2."""

from __future__ import annotations

import gzip
import json
import shutil
import socket
import sys
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from popvision_py.cli import main

# the scheduler's health endpoint takes another port when 8787 is taken (another cluster): no news
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:Port .* is already in use:UserWarning")]

ROOT = Path(__file__).resolve().parents[2]


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def cluster():
    """Two worker processes of one thread each, as `dask worker --nworkers 2 --nthreads 1` starts them."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as local:
        yield local


@pytest.fixture(scope="module")
def gpu_traces(tmp_path_factory):
    """A 2-rank DDP run on GPUs (benchmarks/make_gpu_trace.py), about 2 MB: every kernel launched by a runtime
    call, NCCL kernels with their args, copies and sets on three streams."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import make_gpu_trace

    folder = tmp_path_factory.mktemp("gpu") / "traces"
    make_gpu_trace.make(folder, total_mb=2, ranks=2, jobs=1)
    return folder


def members(path: Path) -> dict[str, bytes]:
    """Every member of a profile.pop, its manifest's creation time taken out (the one run-specific field)."""
    with zipfile.ZipFile(path) as z:
        found = {name: z.read(name) for name in z.namelist()}
    manifest = json.loads(found["manifest.json"])
    assert manifest.pop("created")
    found["manifest.json"] = json.dumps(manifest, sort_keys=True).encode()
    return found


def both(traces, tmp_path, cluster) -> tuple[Path, Path]:
    """The same traces imported here and on the cluster: the two output folders."""
    here, there = tmp_path / "here", tmp_path / "there"
    local = invoke("import", *traces, "-o", here)
    assert local.exit_code == 0, local.output
    on_cluster = invoke("import", *traces, "-o", there, "--scheduler", cluster.scheduler_address)
    assert on_cluster.exit_code == 0, on_cluster.output
    # the same lines printed, the folder's name aside
    assert on_cluster.output.replace(str(there), "OUT") == local.output.replace(str(here), "OUT")
    return here, there


def assert_same(here: Path, there: Path) -> None:
    """Every table of the two profiles byte for byte, the manifests equal but their creation times, every rank's
    CPU timeline byte for byte, and nothing else left beside the profile (no scratch folder)."""
    a, b = members(here / "profile.pop"), members(there / "profile.pop")
    assert sorted(a) == sorted(b) and "kernels.parquet" in a
    for name in a:
        assert a[name] == b[name], name
    timelines = sorted(p.name for p in (here / "system").iterdir())
    assert timelines == sorted(p.name for p in (there / "system").iterdir()) and timelines
    for name in timelines:
        assert (here / "system" / name).read_bytes() == (there / "system" / name).read_bytes(), name
    assert sorted(p.name for p in there.iterdir()) == ["profile.pop", "system"]
    assert not list(there.parent.glob(".popvision-import-*"))


def reduced(cluster) -> int:
    """The ranks the cluster's workers have read so far (``reduce_rank`` tasks whose result came)."""
    prefix = cluster.scheduler.task_prefixes.get("reduce_rank")
    return 0 if prefix is None else prefix.state_counts["memory"]


def test_gpu_traces_on_the_cluster_give_the_local_profile(gpu_traces, tmp_path, cluster):
    # GIVEN two GPU-style rank traces, WHEN imported here and with --scheduler on two worker processes
    before = reduced(cluster)
    here, there = both([gpu_traces], tmp_path, cluster)
    # THEN the profiles are the same, and the workers read the ranks (a task each)
    assert_same(here, there)
    assert reduced(cluster) - before == 2


def test_gzipped_traces_named_by_relative_paths_on_the_cluster(gpu_traces, tmp_path, cluster, monkeypatch):
    # GIVEN the GPU traces gzipped, named relative to this folder (the workers run elsewhere: they are given
    # absolute paths)
    for p in gpu_traces.iterdir():
        (tmp_path / f"{p.name}.gz").write_bytes(gzip.compress(p.read_bytes()))
    monkeypatch.chdir(tmp_path)
    here, there = both(["rank0.json.gz", "rank1.json.gz"], tmp_path, cluster)
    # THEN the same profile, and its files are named as given
    assert_same(here, there)
    with zipfile.ZipFile(there / "profile.pop") as z:
        assert json.loads(z.read("manifest.json"))["run"]["import"]["files"] == ["rank0.json.gz", "rank1.json.gz"]


def test_cpu_pipeline_traces_on_the_cluster_give_the_local_profile(recorded, tmp_path, cluster):
    # GIVEN a real 4-rank GPipe run recorded on the CPU (gloo), WHEN imported here and on the cluster
    here, there = both([recorded("gpipe").folder], tmp_path, cluster)
    # THEN the same profile: its stages, micro-batches and passes as the local import found them
    assert_same(here, there)
    with zipfile.ZipFile(there / "profile.pop") as z:
        run = json.loads(z.read("manifest.json"))["run"]
    assert run["import"]["ranks"] == [0, 1, 2, 3] and run["import"]["schedule"] == "GPipe"


def assert_cut_rank_refused_alike(traces: Path, rank: str, tmp_path: Path, cluster) -> None:
    """``traces`` with ``rank`` (its file's name) cut short in the middle of its events, imported here and on the
    cluster: both refuse it in the same one sentence naming it, exit code 2, and write nothing (no scratch folder
    left)."""
    folder = tmp_path / "cut"
    shutil.copytree(traces, folder)
    data = (folder / rank).read_bytes()
    (folder / rank).write_bytes(data[:len(data) // 2])
    local = invoke("import", folder, "-o", tmp_path / "here")
    remote = invoke("import", folder, "-o", tmp_path / "there", "--scheduler", cluster.scheduler_address)
    assert local.exit_code == remote.exit_code == 2, remote.output
    assert remote.output == local.output and len(remote.output.strip().splitlines()) == 1
    assert rank in remote.output
    assert not (tmp_path / "there").exists() and not list(tmp_path.glob(".popvision-import-*"))


def test_a_bad_trace_is_the_same_sentence_on_the_cluster(gpu_traces, tmp_path, cluster):
    # GIVEN rank 1 cut short, WHEN imported here and on the cluster, THEN the same one sentence, nothing written
    assert_cut_rank_refused_alike(gpu_traces, "rank1.json", tmp_path, cluster)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_scheduler_that_is_not_there_is_one_sentence(gpu_traces, tmp_path):
    # GIVEN an address nothing listens at, WHEN imported with it
    address = f"tcp://127.0.0.1:{free_port()}"
    result = invoke("import", gpu_traces, "-o", tmp_path / "out", "--scheduler", address)
    # THEN one sentence naming it (tune's), exit code 2, nothing written
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: No Dask scheduler answers at {address}"), result.output
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".popvision-import-*"))


@pytest.mark.parametrize("args, words", [
    (["--scheduler", "127.0.0.1:8786"], "--scheduler takes a Dask scheduler's address as tcp://HOST:PORT"),
    (["--scheduler", " "], "--scheduler is empty"),
    (["--scheduler", "tcp://127.0.0.1:1", "--jobs", "2"], "--jobs sets the processes of an import on this machine"),
])
def test_a_scheduler_address_of_another_form_is_one_sentence(gpu_traces, tmp_path, args, words):
    result = invoke("import", gpu_traces, "-o", tmp_path / "out", *args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], result.output
    assert not (tmp_path / "out").exists()


def test_a_worker_that_does_not_see_a_file_says_so(gpu_traces, tmp_path):
    # GIVEN the task a worker runs, called here as a worker calls it
    from popvision_py.importer.cluster import reduce_rank
    from popvision_py.importer.read import TraceError
    from popvision_py.version import __version__

    trace = str(gpu_traces / "rank0.json")
    # WHEN the trace, or the scratch folder, is not on its storage, or it runs another popvision
    cases = [(str(tmp_path / "gone.json"), str(tmp_path), __version__, "does not see gone.json"),
             (trace, str(tmp_path / "gone"), __version__, "the output's folder must lie on storage every worker"),
             (trace, str(tmp_path), "0.0.0", "install the same version on every worker")]
    for path, scratch, version, words in cases:
        with pytest.raises(TraceError, match=words):
            reduce_rank(path, Path(path).name, scratch, 0, version)
    # THEN nothing is written; and a rank it sees is one file of its columns, named by its place
    assert list(tmp_path.iterdir()) == []
    result = reduce_rank(trace, "rank0.json", str(tmp_path), 3, __version__)
    assert [p.name for p in tmp_path.iterdir()] == ["rank-000003.columns"] == [result["file"]]
    assert (tmp_path / result["file"]).stat().st_size == result["bytes"] > 0
    assert result["meta"]["path"] == "rank0.json" and result["meta"]["rank"] == 0


def test_a_worker_of_two_threads_reads_its_ranks_one_at_a_time(gpu_traces, tmp_path):
    # GIVEN one worker process of two threads (`dask worker` starts one thread a core unless told otherwise)
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=True,
                                  dashboard_address=None) as threaded:
        # WHEN the two ranks are imported on it (both tasks run at once; the reader's buffer is the process's)
        here, there = both([gpu_traces], tmp_path, threaded)
    # THEN the profile is the local one's
    assert_same(here, there)


@pytest.fixture(scope="module")
def small_ranks(tmp_path_factory):
    """40 small GPU ranks (about 25 kB each)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import make_gpu_trace

    folder = tmp_path_factory.mktemp("small") / "traces"
    make_gpu_trace.make(folder, total_mb=1.0, ranks=40, layers=2, bucket=1, jobs=1)
    return folder


def test_many_small_ranks_are_read_a_few_to_a_task_and_give_the_local_profile(small_ranks, tmp_path, cluster):
    # GIVEN 40 small GPU ranks
    folder = small_ranks
    prefixes = cluster.scheduler.task_prefixes
    before = {name: prefixes[name].state_counts["memory"] if name in prefixes else 0
              for name in ("reduce_rank", "reduce_ranks")}
    # WHEN imported here and on the cluster's two workers
    here, there = both([folder], tmp_path, cluster)
    # THEN the same profile, and the workers read the ranks a few to a task (about four tasks a worker: 8 to 10 as
    # the ranks' sizes fall), none of one rank
    from popvision_py.importer.cluster import tasks

    assert_same(here, there)
    cut = tasks(sorted(folder.glob("rank*.json")), 2)
    assert 8 <= len(cut) <= 10 and min(len(t) for t in cut) > 1 and sum(len(t) for t in cut) == 40
    assert prefixes["reduce_ranks"].state_counts["memory"] - before["reduce_ranks"] == len(cut)
    assert prefixes.get("reduce_rank") is None or prefixes["reduce_rank"].state_counts["memory"] == before[
        "reduce_rank"]


def test_a_tasks_ranks_are_consecutive_small_plain_traces_up_to_a_share_of_the_bytes(tmp_path):
    from popvision_py.importer.cluster import tasks

    # GIVEN 10 plain traces of 1 kB, then a gzipped one, then 3 of 1 kB, and one too large to be read whole
    paths = []
    for k in range(15):
        path = tmp_path / f"rank{k}.json{'.gz' if k == 10 else ''}"
        data = b"{}" + b" " * 998
        path.write_bytes(gzip.compress(data) if k == 10 else data if k != 14 else b" " * (64 << 20))
        paths.append(path)
    # WHEN cut into tasks for 1 worker: a share of the small bytes (13 kB) / 4 = 3,250 bytes a task
    cut = tasks(paths, 1)
    # THEN three small traces a task, in order; the gzipped and the large one alone; the small ones after the
    # gzipped one a task of their own
    assert cut == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9], [10], [11, 12, 13], [14]]


def test_a_bad_small_rank_read_with_others_is_the_same_sentence_on_the_cluster(small_ranks, tmp_path, cluster):
    # GIVEN the 40 small ranks, rank 7 (inside a task of several) cut short, WHEN imported here and on the cluster,
    # THEN the same one sentence naming rank7.json, nothing written
    assert_cut_rank_refused_alike(small_ranks, "rank7.json", tmp_path, cluster)
