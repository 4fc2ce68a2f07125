"""The dashboard behind gunicorn, as docs/dashboard.md says to run it: the app's factory
(``popvision_py.cli.dashboard:wsgi``) serves the pages and their callbacks from each worker, and a
bad profile stops gunicorn with its one sentence."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_profiles" / "mnist_pipelined" / "profile.pop"
GUNICORN = shutil.which("gunicorn", path=str(Path(sys.executable).parent))
pytestmark = pytest.mark.skipif(GUNICORN is None, reason="needs gunicorn (pip install -e .[server])")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def gunicorn(profile: Path, port: int, workers: int) -> subprocess.Popen:
    return subprocess.Popen([GUNICORN, "-w", str(workers), "--threads", "2", "-b", f"127.0.0.1:{port}",
                             f"popvision_py.cli.dashboard:wsgi({str(profile)!r})"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def get(port: int, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body,
                                     headers={"Content-Type": "application/json"} if body else {})
    with urllib.request.urlopen(request, timeout=60) as answer:
        return answer.status, answer.read()


def test_gunicorn_serves_the_pages_and_their_callbacks_with_two_workers() -> None:
    # GIVEN gunicorn serving the mnist pipelined sample through the factory, with two workers
    port = free_port()
    server = gunicorn(SAMPLE, port, workers=2)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, server.communicate()[1]
            try:
                status, _ = get(port, "/memory")
                break
            except OSError:
                assert time.monotonic() < deadline, "gunicorn did not answer within 2 minutes"
                time.sleep(0.5)
        # WHEN a browser's requests arrive, many times over (spread over the workers)
        answers, layouts = [], []
        page = {"output": ".._pages_content.children..._pages_store.data..",
                "outputs": [{"id": "_pages_content", "property": "children"},
                            {"id": "_pages_store", "property": "data"}],
                "inputs": [{"id": "_pages_location", "property": "pathname", "value": "/stages"},
                           {"id": "_pages_location", "property": "search", "value": ""}],
                "changedPropIds": ["_pages_location.pathname"], "state": []}
        for _ in range(12):
            layouts.append(get(port, "/_dash-layout")[1])
            status, data = get(port, "/_dash-update-component", json.dumps(page).encode())
            answers.append((status, json.loads(data)["response"]["_pages_store"]["data"]["title"]))
        # THEN every answer is the Stages page, and every layout's header names the profile served
        assert answers == [(200, "popvision · stages")] * 12
        assert all(b"mnist pipelined" in layout for layout in layouts)
    finally:
        server.terminate()
        server.wait(timeout=60)


def test_a_bad_profile_stops_gunicorn_with_its_sentence(tmp_path: Path) -> None:
    # GIVEN a file that is not a profile
    bad = tmp_path / "profile.pop"
    bad.write_text("not a profile")
    # WHEN gunicorn loads the factory on it
    server = gunicorn(bad, free_port(), workers=1)
    _, stderr = server.communicate(timeout=120)
    # THEN gunicorn stops (its code for an application that failed to load), the sentence in its log, no traceback
    assert server.returncode == 4
    assert f"Error: {bad} is not a profile.pop (not a ZIP container)." in stderr.splitlines()
    assert "Traceback" not in stderr
