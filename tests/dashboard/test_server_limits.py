"""The dashboard server's limits, against a real `popvision dashboard` process: request bodies are
capped, a malformed callback is a 400 and one log line, a foreign Host header is refused while the
server listens on loopback, and a profile that fails validation stops the server from starting."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from dashboards.app import MAX_BODY_BYTES, create_app
from popvision_py.format import open_profile

from .test_security import tile_map_request

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_profiles" / "mnist_pipelined" / "profile.pop"
CALLBACK = "/_dash-update-component"
OVERSIZED = 100 * 1024 * 1024  # more than the 93 MB body that once took the server from 233 MB to 1 GB


class Server:
    """A `popvision dashboard` subprocess and every line it writes on stderr."""

    def __init__(self, *args: str) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "popvision_py.cli", "dashboard", *args, "--port", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        )
        self.lines: list[str] = []
        self._new_line = threading.Condition()
        threading.Thread(target=self._collect, daemon=True).start()
        self.wait_for_line("popvision dashboard on")
        # that line comes just before the socket is bound: wait until it accepts connections
        for _ in range(600):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=5).close()
                break
            except ConnectionRefusedError:
                assert self.process.poll() is None, self.lines
                threading.Event().wait(0.1)

    def _collect(self) -> None:
        for line in self.process.stderr:
            with self._new_line:
                self.lines.append(line.rstrip("\n"))
                self._new_line.notify_all()

    def wait_for_line(self, text: str, after: int = 0) -> int:
        """The index of the first line from ``after`` on that contains ``text`` (waits for it)."""
        with self._new_line:
            found = self._new_line.wait_for(
                lambda: any(text in line for line in self.lines[after:]) or self.process.poll() is not None, 120)
            assert found and any(text in line for line in self.lines[after:]), (text, self.lines)
            return after + next(i for i, line in enumerate(self.lines[after:]) if text in line)

    def lines_of(self, send) -> list[str]:
        """The lines the server logs while answering ``send()``; a Host-refused request marks their end."""
        start = len(self.lines)
        result = send()
        # Each request's lines are written before its answer is sent, so once the marker's refusal
        # is in the log, every line of the request before it is too.
        status, _ = self.request("/", host="end-of-request.invalid")
        assert status == 403
        end = self.wait_for_line("end-of-request.invalid", after=start)
        return result, self.lines[start:end]

    def request(self, path: str, body: bytes | None = None, host: str | None = None) -> tuple[int, str]:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=body,
                                         headers={"Content-Type": "application/json"} if body is not None else {})
        if host is not None:
            request.add_unredirected_header("Host", host)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def peak_memory_bytes(self) -> int:
        """The server's peak resident size so far (VmHWM)."""
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))) * 1024

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def server():
    running = Server(str(SAMPLE))
    # GIVEN a server that has served the first page and a callback (its working set is built)
    assert running.request("/")[0] == 200
    assert running.request(CALLBACK, tile_map_request(0, "a").encode())[0] == 200
    yield running
    running.stop()


def _raw_post(port: int, headers: str, body_chunks, chunked: bool = False) -> str:
    """POST over a raw socket, sending as much of the body as the server takes; its status line ('' if none)."""
    with socket.create_connection(("127.0.0.1", port), timeout=120) as connection:
        connection.sendall(f"POST {CALLBACK} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                           f"Content-Type: application/json\r\n{headers}\r\n".encode())
        try:
            for chunk in body_chunks:
                connection.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n" if chunked else chunk)
            if chunked:
                connection.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed without reading the rest: what the limit is for
        try:
            return connection.recv(4096).decode(errors="replace").partition("\r\n")[0]
        except ConnectionResetError:
            return ""


def _body(total: int):
    chunk = b"[" + b"0," * (512 * 1024 - 1) + b"0]"  # 1 MiB of JSON-looking text
    for _ in range(total // len(chunk)):
        yield chunk


def test_a_body_over_the_limit_is_refused_before_it_is_read(server):
    # WHEN a callback declares a 100 MB body (and waits before sending it)
    status_line, logged = server.lines_of(lambda: _raw_post(server.port, f"Content-Length: {OVERSIZED}\r\n", []))
    # THEN the answer is 413, with one line in the log naming the size and the limit
    assert status_line.startswith("HTTP/1.1 413 ")
    assert logged == [f"Refused a request from 127.0.0.1 for {CALLBACK}: {OVERSIZED:,} bytes is over the limit of "
                      f"{MAX_BODY_BYTES:,} bytes."]


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_100_mb_body_does_not_grow_the_server(server, chunked):
    # GIVEN the server's peak memory so far
    before = server.peak_memory_bytes()
    # WHEN a client sends a whole 100 MB callback body, declared or chunked (no length given)
    headers = "Transfer-Encoding: chunked\r\n" if chunked else f"Content-Length: {OVERSIZED}\r\n"
    status_line = _raw_post(server.port, headers, _body(OVERSIZED), chunked=chunked)
    # THEN it is refused (or cut off once the server has refused it), its peak memory grows by far
    # less than the body (it read at most the 1 MiB limit), and it goes on serving
    assert status_line.startswith("HTTP/1.1 413 ") or status_line == ""
    assert server.peak_memory_bytes() - before < 20 * 1024 * 1024
    assert server.request("/")[0] == 200


def test_a_real_callback_is_far_below_the_limit(server):
    # The largest body the pages sent over every request of test_browser.py was 1,369 bytes (a tile
    # click like this one, a trace zoom); the limit is over 700 times that.
    assert len(tile_map_request(0, "a")) * 700 < MAX_BODY_BYTES
    assert server.request(CALLBACK, tile_map_request(1, "a").encode())[0] == 200


MALFORMED = {
    "not json": b"not json",
    "nested beyond the stack": b"[" * 100_000 + b"]" * 100_000,
    "inputs that are not properties": json.dumps(
        {**json.loads(tile_map_request(0, "a")), "inputs": [1]}).encode(),
    "no inputs": json.dumps({**json.loads(tile_map_request(0, "a")), "inputs": []}).encode(),
    "outputs that are not properties": json.dumps(
        {**json.loads(tile_map_request(0, "a")), "outputs": "x"}).encode(),
    "an IPU the profile lacks": tile_map_request(99, "a").encode(),
    "text for an IPU": tile_map_request("abc", "a").encode(),
}


@pytest.mark.parametrize("body", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_callback_is_400_and_one_log_line(server, body):
    # WHEN a callback request no page sends arrives
    (status, answer), logged = server.lines_of(lambda: server.request(CALLBACK, body))
    # THEN it is answered 400 in one sentence, the log has exactly one line about it (no traceback)
    assert status == 400 and answer.startswith("Bad callback request: ") and answer.count("\n") == 0
    assert len(logged) == 1 and "Traceback" not in logged[0], logged
    assert logged[0].startswith(("Refused a request from 127.0.0.1", "Callback request from 127.0.0.1"))
    # AND the server goes on answering real callbacks
    assert server.request(CALLBACK, tile_map_request(0, "a").encode())[0] == 200


@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "127.0.0.1.evil.example", "localhost.evil"])
def test_a_foreign_host_header_is_refused(server, host):
    # WHEN a page of another site, its name rebound to 127.0.0.1, asks this server for the dashboard
    (status, answer), logged = server.lines_of(lambda: server.request("/", host=host.format(port=server.port)))
    # THEN it is refused, in one sentence and one log line
    assert status == 403 and "start it with --host" in answer
    assert len(logged) == 1 and "its Host header is" in logged[0]


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "[::1]:{port}", "localhost"])
def test_loopback_host_headers_are_served(server, host):
    status, _ = server.request("/", host=host.format(port=server.port))
    assert status == 200


def test_a_server_opened_with_host_serves_any_host_name(tmp_path: Path):
    # GIVEN an app built for `--host 0.0.0.0` (people reach it by names this process cannot know)
    http = create_app([str(SAMPLE)], host="0.0.0.0").server.test_client()
    # THEN a request naming another host is served; the default app refuses it
    assert http.get("/", headers={"Host": "ipu-box.lab:8050"}).status_code == 200
    default = create_app([str(SAMPLE)]).server.test_client()
    assert default.get("/", headers={"Host": "ipu-box.lab:8050"}).status_code == 403


def _flip_page_byte(source: Path, table: str, target: Path) -> Path:
    """A copy of ``source`` with one byte flipped inside the first page of ``table`` (its first column's)."""
    with open_profile(source) as profile:
        offset, _ = profile.member_span(table)
        chunk = profile.metadata(table).row_group(0).column(0)
        # the first page's last byte (its data, past its header, whatever the header's length): the byte before
        # the data page when a dictionary page comes first, else the chunk's last (one page)
        last = chunk.data_page_offset - 1 if chunk.dictionary_page_offset else \
            chunk.data_page_offset + chunk.total_compressed_size - 1
    data = bytearray(source.read_bytes())
    data[offset + last] ^= 0xFF
    target.write_bytes(bytes(data))
    return target


@pytest.mark.parametrize("table", ["variables", "trace"])
@pytest.mark.parametrize("position", ["A", "B"])
def test_a_profile_that_fails_validation_stops_the_start(tmp_path: Path, table: str, position: str):
    # GIVEN a profile that opens (its container, manifest and schema are sound) but whose table data
    # fails its page checksum, as `popvision report` finds
    broken = _flip_page_byte(SAMPLE, table, tmp_path / "profile.pop")
    assert subprocess.run([sys.executable, "-m", "popvision_py.cli", "info", str(broken)], cwd=ROOT,
                          capture_output=True).returncode == 0
    # WHEN the dashboard is started on it (alone, or as the profile to compare with)
    profiles = [str(broken)] if position == "A" else [str(SAMPLE), str(broken)]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = subprocess.run([sys.executable, "-m", "popvision_py.cli", "dashboard", *profiles, "--port", str(port)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    # THEN it says so in one sentence, exits 2, and no server ever started
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"Error: Table {table} of {broken} is corrupt (could not verify page integrity, CRC checksum "
        f"verification failed for page_ordinal 0)."]
    assert "popvision dashboard on" not in done.stderr


def test_a_profile_broken_under_a_running_app_is_a_500_and_one_log_line(tmp_path: Path, caplog):
    # GIVEN an app serving a profile whose variables fail their checksum (the CLI refuses it at
    # start; an app built directly, or a file changed under the server, meets it only in a callback)
    broken = _flip_page_byte(SAMPLE, "variables", tmp_path / "profile.pop")
    http = create_app([str(broken)]).server.test_client()
    # WHEN a page asks for a tile's variables
    with caplog.at_level("WARNING"):
        response = http.post(CALLBACK, data=tile_map_request(0, "a"), content_type="application/json")
    # THEN the server says it failed (500, not the client's 400), in one log line naming the table
    assert response.status_code == 500 and str(broken) not in response.get_data(as_text=True)
    assert len(caplog.records) == 1 and caplog.records[0].exc_info is None
    assert "CorruptProfileError: Table variables of" in caplog.records[0].getMessage()


def test_a_truncated_profile_stops_the_start(tmp_path: Path):
    # GIVEN the sample cut at half its length
    truncated = tmp_path / "profile.pop"
    truncated.write_bytes(SAMPLE.read_bytes()[: SAMPLE.stat().st_size // 2])
    # WHEN the dashboard is started on it THEN one sentence, exit 2, and no server
    done = subprocess.run([sys.executable, "-m", "popvision_py.cli", "dashboard", str(truncated), "--port", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and str(truncated) in lines[0], lines
