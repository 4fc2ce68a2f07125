"""`popvision report --scheduler`: the GPU figures' pass over the ranks made on a real Dask cluster's workers (a
``LocalCluster`` of two worker processes, one thread each) gives the report a report here gives, byte for byte; the
kernels table is cut into parts of whole ranks; a worker that cannot do its part is one sentence."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import popvision_py
from popvision_py.analysis.imported import gpu_cluster
from popvision_py.analysis.imported.gpu_ranks import RankRange
from popvision_py.errors import ClusterError
from popvision_py.importer import find_traces, import_traces
from popvision_py.importer import profile as importer_profile
from tests.importer import test_import_cluster
from tests.importer.test_import_cluster import free_port, invoke

# the scheduler's health endpoint takes another port when 8787 is taken (another cluster): no news
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:Port .* is already in use:UserWarning")]

ROOT = Path(__file__).resolve().parents[2]
RANKS = 12
cluster = test_import_cluster.cluster  # the fixture: two worker processes of one thread each


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> Path:
    """A 12-rank DDP run on GPUs (benchmarks/make_gpu_trace.py), rank 5 slow, imported with row groups of 100
    kernels written 30 rows at a time: most ranks' kernels span several groups, and some groups hold two ranks'."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import make_gpu_trace

    folder = tmp_path_factory.mktemp("gpu_cluster")
    make_gpu_trace.make(folder / "traces", total_mb=1.5, ranks=RANKS, layers=2, bucket=1, jobs=1, slow_rank=5)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(importer_profile, "KERNEL_GROUP_ROWS", 100)
        patch.setattr(importer_profile, "SLICE_ROWS", 30)
        import_traces(find_traces([folder / "traces"]), folder / "out" / "profile.pop", jobs=1)
    return folder / "out" / "profile.pop"


def group_ipus(path: Path) -> list[set[int]]:
    """Each row group's IPUs, read from the kernels table itself."""
    with popvision_py.open(path) as report:
        profile = report.profile
        return [set(np.asarray(next(profile.iter_batches("kernels", ["ipu"], row_groups=[g]))["ipu"]).tolist())
                for g in range(profile.metadata("kernels").num_row_groups)]


def expected_parts(held: list[set[int]], rows: list[int], most: int) -> list[tuple[int, int, range]]:
    """The parts worked out a group at a time: a cut may fall past any group's last IPU; the rows before a cut are
    those of the groups whose IPUs all come before it; each share's end is cut at the first cut past it; a part's
    groups are those holding any of its IPUs."""
    total = sum(rows)
    cuts = sorted({max(ipus) + 1 for ipus in held[:-1]} - {RANKS})
    before = {c: sum(r for ipus, r in zip(held, rows) if max(ipus) < c) for c in cuts}
    firsts = sorted({next(c for c in cuts if before[c] >= total * k / most)
                     for k in range(1, most) if any(before[c] >= total * k / most for c in cuts)})
    bounds = [0, *firsts, RANKS]
    out = []
    for a, b in zip(bounds, bounds[1:]):
        mine = [g for g, ipus in enumerate(held) if any(a <= i < b for i in ipus)]
        out.append((a, b, range(mine[0], mine[-1] + 1)))
    return out


def test_the_parts_are_whole_ranks_of_about_equal_kernels(imported):
    # GIVEN the import's kernels table: a rank's rows over several row groups, most groups shared by two ranks
    held = group_ipus(imported)
    assert len(held) > 12 and sum(len(ipus) > 1 for ipus in held) > 6
    with popvision_py.open(imported) as report:
        profile = report.profile
        rows = [profile.metadata("kernels").row_group(g).num_rows for g in range(len(held))]
        # WHEN cut into at most 8, 3 and 1 parts
        found = {most: gpu_cluster.parts(profile, RANKS, most) for most in (8, 3, 1)}
    # THEN the parts worked out here from each group's IPUs and rows: whole ranks one after the other, every rank in
    # one, with the groups holding their rows (a group at an edge in both parts); at most 1: the whole table
    for most in (8, 3):
        parts = found[most]
        assert [(p.first, p.stop, p.groups) for p in parts] == expected_parts(held, rows, most)
        assert 2 <= len(parts) <= most and parts[0].first == 0 and parts[-1].stop == RANKS
        assert all(before.stop == after.first for before, after in zip(parts, parts[1:]))
    assert found[1] == [RankRange(0, RANKS, range(len(held)))]
    # and the shares come out about equal: no part holds more than twice its share and two groups
    share = sum(rows) / 8
    assert max(sum(rows[g] for g in p.groups) for p in found[8]) <= 2 * share + 2 * max(rows)


def test_the_report_on_the_cluster_is_the_report_here(imported, tmp_path, cluster):
    # GIVEN the 12-rank import, a rank of it slow
    here, there = tmp_path / "here.json", tmp_path / "there.json"
    # WHEN reported in full here, and with the GPU figures made on the cluster's two workers
    local = invoke("report", imported, "--section", "all", "--format", "json", "-o", here)
    assert local.exit_code == 0, local.output
    prefixes = cluster.scheduler.task_prefixes
    before = prefixes["part_task"].state_counts["memory"] if "part_task" in prefixes else 0
    remote = invoke("report", imported, "--section", "all", "--format", "json", "-o", there, "--scheduler",
                    cluster.scheduler_address)
    assert remote.exit_code == 0, remote.output
    # THEN the same report, byte for byte, its GPU figures made by several tasks of the cluster (a part of whole
    # ranks each), and its straggler named
    assert here.read_bytes() == there.read_bytes()
    with popvision_py.open(imported) as report:
        made = len(gpu_cluster.parts(report.profile, RANKS, gpu_cluster.PARTS_A_WORKER * 2))
    assert made > 1 and prefixes["part_task"].state_counts["memory"] - before == made
    assert b'"stragglers"' in here.read_bytes()


def test_the_api_on_the_cluster_gives_each_figure_of_the_report_here(imported, cluster):
    # GIVEN the import opened twice, one of them with a client of the cluster
    from distributed import Client

    with popvision_py.open(imported) as here, popvision_py.open(imported) as there, Client(cluster) as client:
        there.cluster = client
        # WHEN a figure is asked for alone, then the figures a report shows
        alone_here, alone_there = here.gpu.collectives(), there.gpu.collectives()
        # THEN each is the one made here
        assert len(alone_here) == RANKS and alone_here.equals(alone_there)
        for name in ("by_rank", "bounds", "worth_a_look", "arrivals", "kernel_types", "phases"):
            a, b = getattr(here.gpu, name)(), getattr(there.gpu, name)()
            assert len(a) and a.equals(b), name
    # and an emulated profile (no kernels) gives the empty figures it gives here
    sample = ROOT / "sample_profiles" / "pytorch_gpipe" / "profile.pop"
    with popvision_py.open(sample) as here, popvision_py.open(sample) as there, Client(cluster) as client:
        there.cluster = client
        assert here.gpu.by_rank().equals(there.gpu.by_rank())


def test_a_worker_that_sees_another_profile_at_the_path_is_one_sentence(imported, tmp_path, cluster):
    # GIVEN the import copied to a path, opened there, and then another profile put at that path (the workers open
    # the path again: they would read another file)
    from distributed import Client

    path = tmp_path / "profile.pop"
    shutil.copy(imported, path)
    other = tmp_path / "other.pop"
    sample = ROOT / "sample_profiles" / "pytorch_gpipe" / "profile.pop"
    shutil.copy(sample, other)
    with popvision_py.open(path) as report, Client(cluster) as client:
        report.cluster = client
        os.replace(other, path)
        # WHEN its GPU figures are made on the cluster
        with pytest.raises(ClusterError) as raised:
            report.gpu.by_rank()
    # THEN one sentence, naming the path
    text = str(raised.value)
    assert f"sees another profile at {path.resolve()}" in text and "at the same path" in text
    assert "\n" not in text


def test_a_worker_that_does_not_see_the_profile_or_runs_another_version_is_one_sentence(imported, tmp_path):
    # GIVEN a part of the import, as a task is handed it
    with popvision_py.open(imported) as report:
        view, made = report.gpu, gpu_cluster.fingerprint(report.profile.manifest)
        given = (RankRange(0, RANKS, range(1)), view.window(), view.last_step_starts(), view.spans(), {"by_rank": ()},
                 False)
    # WHEN a worker runs it where the profile is not, or runs another version of popvision
    with pytest.raises(ClusterError) as missing:
        gpu_cluster.part_task(str(tmp_path / "gone" / "profile.pop"), made, *given, popvision_py.__version__)
    with pytest.raises(ClusterError) as version:
        gpu_cluster.part_task(str(imported), made, *given, "0.0.1")
    # THEN one sentence each, saying what to do
    assert "does not see" in str(missing.value) and "storage every worker sees" in str(missing.value)
    assert "runs popvision" in str(version.value) and "install the same version" in str(version.value)


def test_a_scheduler_that_is_not_there_or_an_empty_address_is_one_sentence(imported, tmp_path):
    # GIVEN an address nothing listens at, and an empty one; WHEN the report is asked for on them
    address = f"tcp://127.0.0.1:{free_port()}"
    results = [invoke("report", imported, "--section", "gpu", "-o", tmp_path / "r.txt", "--scheduler", given)
               for given in (address, " ")]
    # THEN one sentence each, exit code 2, nothing written
    said = (f"Error: No Dask scheduler answers at {address}", "Error: --scheduler is empty")
    for result, words in zip(results, said):
        assert result.exit_code == 2, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(words), result.output
    assert not (tmp_path / "r.txt").exists()


def test_the_dashboard_on_the_cluster_shows_the_figures_made_here(imported, cluster, monkeypatch):
    # GIVEN the dashboard started on the import with the cluster's address (its server not run: the test asks the
    # served data what the GPU page asks it)
    import dash

    from dashboards import data

    asked = []

    def run(app, **kwargs):
        report = data.current().report()
        prefixes = cluster.scheduler.task_prefixes
        before = prefixes["part_task"].state_counts["memory"] if "part_task" in prefixes else 0
        asked.append((report.cluster is not None, report.gpu.by_rank(), report.gpu.stragglers()))
        asked.append(prefixes["part_task"].state_counts["memory"] - before)

    monkeypatch.setattr(dash.Dash, "run", run)
    result = invoke("dashboard", imported, "--scheduler", cluster.scheduler_address)
    assert result.exit_code == 0, result.output
    # THEN its GPU figures were made by the cluster's tasks, and are those made here
    (held, by_rank, stragglers), tasks = asked
    with popvision_py.open(imported) as here:
        assert held and tasks > 1 and by_rank.equals(here.gpu.by_rank()) and stragglers.equals(here.gpu.stragglers())
    assert len(by_rank) == RANKS and 5 in set(stragglers["rank"])


def test_the_dashboard_with_no_scheduler_there_is_one_sentence(imported, monkeypatch):
    # GIVEN an address nothing listens at; WHEN the dashboard is started with it
    import dash

    started = []
    monkeypatch.setattr(dash.Dash, "run", lambda self, **kw: started.append(kw))
    address = f"tcp://127.0.0.1:{free_port()}"
    result = invoke("dashboard", imported, "--scheduler", address)
    # THEN one sentence, exit code 2, no server started
    assert result.exit_code == 2 and result.output.startswith(f"Error: No Dask scheduler answers at {address}")
    assert len(result.output.strip().splitlines()) == 1 and started == []
