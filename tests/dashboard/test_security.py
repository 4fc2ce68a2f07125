"""What the dashboard serves and to whom: only the named profiles, on 127.0.0.1 by default, and
nothing a request sends reaches the file system or stops the server."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from dashboards import ids
from dashboards.app import create_app

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_profiles" / "mnist_pipelined" / "profile.pop"
SECRET = "popvision-secret-marker"


@pytest.fixture()
def client(tmp_path: Path):
    # A file next to the served profile that no request may ever read.
    (tmp_path / "secret.txt").write_text(SECRET)
    app = create_app([str(SAMPLE)])
    return app, app.server.test_client()


@pytest.mark.parametrize("url", [
    "/assets/../secret.txt",
    "/assets/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
    "/_dash-component-suites/dash/../../../../../../etc/passwd",
    "/_dash-component-suites/dash/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
    "/memory?profile=/etc/passwd",
    "//etc/passwd",
])
def test_no_url_reads_a_file_outside_the_app(client, url):
    _, http = client
    response = http.get(url)
    assert b"root:x:0:0" not in response.data and SECRET.encode() not in response.data
    assert http.get("/").status_code == 200  # and the server goes on serving


MEMORY_TILE_MAP_CALLBACK = {
    "output": f"..{ids.MEMORY_TILE_MAP}.figure...{ids.MEMORY_TILE_TITLE}.children..."
              f"{ids.MEMORY_TILE_BREAKDOWN}.figure...{ids.MEMORY_TILE_VARIABLES}.children...{ids.MEMORY_SELECTED}.data..",
    "outputs": [{"id": i, "property": p} for i, p in (
        (ids.MEMORY_TILE_MAP, "figure"), (ids.MEMORY_TILE_TITLE, "children"),
        (ids.MEMORY_TILE_BREAKDOWN, "figure"), (ids.MEMORY_TILE_VARIABLES, "children"), (ids.MEMORY_SELECTED, "data"))],
    "changedPropIds": [f"{ids.MEMORY_IPU}.value"],
}


def tile_map_request(ipu, profile) -> str:
    return json.dumps({
        **MEMORY_TILE_MAP_CALLBACK,
        "inputs": [{"id": ids.MEMORY_IPU, "property": "value", "value": ipu},
                   {"id": ids.MEMORY_COLOUR_BY, "property": "value", "value": "peak"},
                   {"id": ids.MEMORY_VARIABLE, "property": "value", "value": None}],
        "state": [{"id": ids.MEMORY_SELECTED, "property": "data", "value": None},
                  {"id": ids.PROFILE, "property": "value", "value": profile}],
    })


@pytest.mark.parametrize("body", [
    "not json", "[1, 2]", "{}", '{"output": "no-such-component.figure"}',
    json.dumps({**MEMORY_TILE_MAP_CALLBACK, "inputs": "ipu 0"}),
])
def test_a_malformed_callback_request_gets_400_and_the_server_goes_on(client, body):
    _, http = client
    response = http.post("/_dash-update-component", data=body, content_type="application/json")
    assert response.status_code == 400
    assert response.data.startswith(b"Bad callback request: ")
    assert http.post("/_dash-update-component", data=tile_map_request(0, "a"),
                     content_type="application/json").status_code == 200


def test_a_profile_key_from_the_browser_never_becomes_a_path(client):
    # GIVEN a request naming a path instead of "a" or "b"
    _, http = client
    response = http.post("/_dash-update-component", data=tile_map_request(2, "../../../etc/passwd"),
                         content_type="application/json")
    # THEN it is answered from the served profile A (mnist's IPU 2, its fullest tile is 284)
    assert response.status_code == 200
    assert "tile 284" in response.get_data(as_text=True)


def test_values_a_page_never_sends_give_an_error_response_not_a_crash(client):
    _, http = client
    for ipu in ("abc", 99, {"x": 1}):
        response = http.post("/_dash-update-component", data=tile_map_request(ipu, "a"),
                             content_type="application/json")
        assert response.status_code >= 400
    assert http.get("/").status_code == 200


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _serve(*args: str) -> tuple[subprocess.Popen, str]:
    """Start `popvision dashboard` and wait until it says where it listens."""
    server = subprocess.Popen(
        [sys.executable, "-m", "popvision_py.cli", "dashboard", str(SAMPLE), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )
    said = ""
    deadline = time.monotonic() + 60
    while "popvision dashboard on" not in said and time.monotonic() < deadline:
        line = server.stderr.readline()
        if not line:
            break
        said += line
    return server, said


def _answers(url: str, wait: float = 30) -> bool:
    """Whether ``url`` answers 200, trying for ``wait`` seconds while the server starts."""
    deadline = time.monotonic() + wait
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.status == 200
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)


def test_the_server_binds_127_0_0_1_by_default():
    port = _free_port()
    server, said = _serve("--port", str(port))
    try:
        assert f"http://127.0.0.1:{port}/" in said and "Warning" not in said
        assert _answers(f"http://127.0.0.1:{port}/")
        # another loopback address of this machine is not served: the socket is bound to 127.0.0.1 only
        assert not _answers(f"http://127.0.0.2:{port}/", wait=0)
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_binding_elsewhere_warns_in_the_terminal():
    port = _free_port()
    server, said = _serve("--host", "127.0.0.2", "--port", str(port))
    try:
        assert "Warning: listening on 127.0.0.2" in said
        assert _answers(f"http://127.0.0.2:{port}/")
    finally:
        server.terminate()
        server.wait(timeout=30)
