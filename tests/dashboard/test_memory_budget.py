"""The dashboard's memory does not grow with the trace: its largest views asked of a 1M-row and a 4M-row
profile, each served in a subprocess under an address-space limit (``budget_probe.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("budget_probe.py")
LIMIT = 3 << 30  # RLIMIT_AS: address space, not resident memory (thread stacks and arenas count)
RAW_ROWS = 1_500_000  # rows a view reads at once, scaled from 4M to these profiles as a billion rows needs it
GROWTH = 64 << 20  # what 3M more trace rows may add to the peak: a whole-trace index alone would be ~90 MB


def _profile(folder: Path, rows: int) -> Path:
    path = folder / f"{rows}.pop"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "make_large_profile.py"), str(path), "--rows", str(rows),
                    "--device-iterations", "10"], check=True, capture_output=True, cwd=ROOT)
    return path


def _probe(path: Path) -> dict:
    done = subprocess.run([sys.executable, str(PROBE), str(path), str(LIMIT), str(RAW_ROWS)], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def probes(tmp_path_factory) -> dict[int, dict]:
    folder = tmp_path_factory.mktemp("budget")
    return {rows: _probe(_profile(folder, rows)) for rows in (1_000_000, 4_000_000)}


def test_every_largest_view_is_answered_under_the_limit(probes):
    # GIVEN the dashboard of a 4M-row profile under a 3 GiB address-space limit, reading at most 1.5M rows at once
    big = probes[4_000_000]
    # WHEN the whole run, zooms from half the run to single steps, 64 tiles in time, the tile balance in view,
    # the operations and a click on one, and the program tree are asked for
    # THEN every one is answered (a MemoryError past the limit would be a 500)
    assert {name: status for name, (status, _, _) in big["answers"].items()} == {
        name: 200 for name in big["answers"]}
    # and the views that need the whole run's rows say so in one line, offering the zoom that fits
    assert big["answers"]["tiles_whole_run"][1] and big["answers"]["balance_whole_run"][1]
    assert not big["answers"]["tiles_fitting"][1]
    assert not any(big["answers"][name][1] for name in ("timeline", "zoom_1/2", "zoom_1/16384"))
    start, end = big["fits"]
    assert 0 < end - start


def test_memory_does_not_grow_with_the_trace(probes):
    # GIVEN the same views asked of 1M and of 4M trace rows
    small, big = probes[1_000_000], probes[4_000_000]
    # THEN the larger trace's peak RSS is within 64 MiB of the smaller's (the trace's rows are read a window at a time)
    assert big["peak_rss_bytes"] - small["peak_rss_bytes"] < GROWTH, (small["peak_rss_bytes"], big["peak_rss_bytes"])
