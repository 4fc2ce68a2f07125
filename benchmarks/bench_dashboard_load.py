"""The dashboard under load: several users clicking through every page at once, for a while.

Usage::

    .venv/bin/python benchmarks/bench_dashboard_load.py [PROFILE] [--users 8] [--seconds 120 | --minutes 60]
        [--server cli | gunicorn] [--workers 1] [--threads 8] [--rows 50000000] [--json OUT]

Without PROFILE it writes one with ``benchmarks/make_large_profile.py --rows ROWS`` (50M trace rows by
default, about 9 MB, some seconds) into a temporary folder.

1. **Serve.** ``--server cli``: ``popvision dashboard PROFILE`` (Flask's threaded server, as users
   run it); ``--server gunicorn``: ``gunicorn -w WORKERS --threads THREADS
   'popvision_py.cli.dashboard:wsgi("PROFILE")'`` (docs/dashboard.md, "Behind a production server").
2. **Record real payloads.** Headless Chromium opens every page of the navigation in turn and waits
   until its callbacks are done; Chrome's network log gives the body of every POST to
   ``/_dash-update-component`` the renderer sent (the page's initial callbacks, chained ones with the
   values the server answered), in the order it sent them.
3. **Load.** ``--users`` threads, each a user with its own connection, replay those bodies page by
   page, one request at a time as a page's callbacks arrive, each user starting on another page,
   until the time is up. Every answer must be 200 (or Dash's 204, "no update") with a JSON body:
   anything else is an error. Each request's latency is kept by callback (its ``output``).
4. **Memory.** The server's resident size (its processes', gunicorn's master and workers summed) is
   sampled every 5 s: at the start of the load, the middle and the end, and the most.

It prints the slowest callbacks' median and 95th percentile, the errors and the RSS, and with
``--json`` writes them all. ``--minutes 60`` is the long session; the default is two minutes.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CALLBACK_PATH = "/_dash-update-component"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve(profile: Path, port: int, server: str, workers: int, threads: int) -> subprocess.Popen:
    """Start the dashboard on ``profile`` and return once it answers its first page."""
    if server == "cli":
        args = [str(BIN / "popvision"), "dashboard", str(profile), "--port", str(port)]
    else:
        args = [str(BIN / "gunicorn"), "-w", str(workers), "--threads", str(threads), "-b", f"127.0.0.1:{port}",
                "--timeout", "300",
                f"popvision_py.cli.dashboard:wsgi({str(profile)!r})"]
    process = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server ended: {process.stderr.read()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as answer:
                if answer.status == 200:
                    return process
        except OSError:
            time.sleep(0.5)
    raise SystemExit("the server did not answer within 10 minutes")


def rss_bytes(pid: int) -> int:
    """Resident bytes of ``pid`` and its descendants (gunicorn's workers)."""
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        try:
            with open(f"/proc/{current}/status") as status:
                total += next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as children:
                    todo.extend(int(c) for c in children.read().split())
        except (OSError, StopIteration):
            continue
    return total


def pages(port: int) -> list[str]:
    """The navigation's pages (their paths), from the app's layout."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/_dash-layout") as answer:
        layout = json.load(answer)
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            props = node.get("props", {})
            ident = props.get("id") if isinstance(props, dict) else None
            if isinstance(ident, dict) and ident.get("type") == "nav-link" and props.get("href") not in found:
                found.append(props["href"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(layout)
    return found


def record(port: int, paths: list[str], quiet_s: float = 2.0,
           page_s: float = 120.0) -> dict[str, list[tuple[str, bytes]]]:
    """Each page's callback bodies as headless Chromium sends them on opening it."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = shutil.which("chromium") or shutil.which("chromium-browser") or ""
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1600,1000"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))
    bodies: dict[str, list[tuple[str, bytes]]] = {}
    try:
        for path in paths:
            driver.get(f"http://127.0.0.1:{port}{path}")
            sent, pending, last, start = [], set(), time.monotonic(), time.monotonic()
            while time.monotonic() - start < page_s:
                for entry in driver.get_log("performance"):
                    message = json.loads(entry["message"])["message"]
                    params = message.get("params", {})
                    url = urllib.parse.urlsplit(params.get("request", {}).get("url", ""))
                    if message["method"] == "Network.requestWillBeSent" and url.path == CALLBACK_PATH:
                        pending.add(params["requestId"])
                        target = url.path + (f"?{url.query}" if url.query else "")  # Dash 4 adds ?endId=
                        sent.append((params["requestId"], target, params["request"].get("postData")))
                        last = time.monotonic()
                    elif message["method"] in ("Network.loadingFinished", "Network.loadingFailed"):
                        if params["requestId"] in pending:
                            pending.discard(params["requestId"])
                            last = time.monotonic()
                if not pending and sent and time.monotonic() - last > quiet_s:
                    break
                time.sleep(0.2)
            page = []
            for request_id, target, data in sent:
                if data is None:  # a body Chrome did not keep in its log: asked for
                    data = driver.execute_cdp_cmd("Network.getRequestPostData", {"requestId": request_id})["postData"]
                page.append((target, data.encode()))
            bodies[path] = page
    finally:
        driver.quit()
    return bodies


class User(threading.Thread):
    """One simulated user: the pages' recorded callbacks, page after page, until ``deadline``."""

    def __init__(self, index: int, port: int, bodies: dict[str, list[tuple[str, bytes]]], deadline: float) -> None:
        super().__init__(daemon=True)
        self.port, self.deadline = port, deadline
        order = list(bodies)
        self.order = order[index % len(order):] + order[:index % len(order)]
        self.bodies = bodies
        self.latencies: dict[str, list[float]] = defaultdict(list)
        self.errors: list[str] = []
        self.requests = 0

    def run(self) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        while time.monotonic() < self.deadline:
            for path in self.order:
                for target, body in self.bodies[path]:
                    if time.monotonic() >= self.deadline:
                        return
                    name = f"{path} {json.loads(body)['output'][:90]}"
                    start = time.perf_counter()
                    try:
                        connection.request("POST", target, body, {"Content-Type": "application/json"})
                        answer = connection.getresponse()
                        data = answer.read()
                        elapsed = time.perf_counter() - start
                        if answer.status == 200:
                            json.loads(data)
                        elif answer.status != 204:
                            raise ValueError(f"HTTP {answer.status}: {data[:200]!r}")
                    except (OSError, ValueError, http.client.HTTPException) as exc:
                        self.errors.append(f"{name}: {exc}")
                        connection.close()
                        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
                        continue
                    self.requests += 1
                    self.latencies[name].append(elapsed)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def load(port: int, pid: int, bodies: dict[str, list[tuple[str, bytes]]], users: int, seconds: float) -> dict:
    """Run the users for ``seconds``, sampling the server's RSS every 5 s; the figures."""
    deadline = time.monotonic() + seconds
    crowd = [User(i, port, bodies, deadline) for i in range(users)]
    samples: list[tuple[float, int]] = []
    start = time.monotonic()
    for user in crowd:
        user.start()
    while any(user.is_alive() for user in crowd):
        samples.append((time.monotonic() - start, rss_bytes(pid)))
        time.sleep(min(5.0, max(0.1, deadline - time.monotonic())) if time.monotonic() < deadline else 0.5)
    samples.append((time.monotonic() - start, rss_bytes(pid)))
    latencies: dict[str, list[float]] = defaultdict(list)
    for user in crowd:
        for name, values in user.latencies.items():
            latencies[name].extend(values)
    callbacks = {name: {"count": len(v), "median_s": statistics.median(v), "p95_s": percentile(v, 0.95),
                        "max_s": max(v)} for name, v in latencies.items()}
    middle = min(samples, key=lambda s: abs(s[0] - samples[-1][0] / 2))
    return {"users": users, "seconds": round(time.monotonic() - start, 1),
            "requests": sum(u.requests for u in crowd), "errors": [e for u in crowd for e in u.errors],
            "callbacks": callbacks, "rss_bytes": {"start": samples[0][1], "middle": middle[1], "end": samples[-1][1],
                                                  "most": max(s[1] for s in samples)},
            "rss_samples": samples}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profile", nargs="?", type=Path)
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=120.0, help="how long the users click (default 120)")
    parser.add_argument("--minutes", type=float, help="the long session: minutes instead of --seconds")
    parser.add_argument("--server", choices=("cli", "gunicorn"), default="cli")
    parser.add_argument("--workers", type=int, default=1, help="gunicorn's worker processes")
    parser.add_argument("--threads", type=int, default=8, help="gunicorn's threads per worker")
    parser.add_argument("--rows", type=int, default=50_000_000, help="trace rows of the profile made without PROFILE")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args(argv)
    seconds = args.minutes * 60 if args.minutes else args.seconds
    folder = Path(tempfile.mkdtemp(prefix="bench-dashboard-load-"))
    profile = args.profile
    if profile is None:
        profile = folder / "large.pop"
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "make_large_profile.py"), str(profile),
                        "--rows", str(args.rows)], check=True)
    port = free_port()
    began = time.monotonic()
    server = serve(profile, port, args.server, args.workers, args.threads)
    try:
        print(f"serving {profile} ({args.server}) after {time.monotonic() - began:.1f} s", file=sys.stderr)
        paths = pages(port)
        bodies = record(port, paths)
        print(f"recorded {sum(map(len, bodies.values()))} callbacks over {len(paths)} pages: "
              + ", ".join(f"{p} {len(b)}" for p, b in bodies.items()), file=sys.stderr)
        figures = load(port, server.pid, bodies, args.users, seconds)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
    figures.update(profile=str(profile), server=args.server, workers=args.workers, threads=args.threads,
                   pages={p: len(b) for p, b in bodies.items()})
    slowest = sorted(figures["callbacks"].items(), key=lambda item: item[1]["p95_s"], reverse=True)
    print(f"{args.users} users for {figures['seconds']:.0f} s: {figures['requests']:,} callbacks, "
          f"{len(figures['errors'])} errors")
    print("| callback | count | median | p95 | max |\n| --- | ---: | ---: | ---: | ---: |")
    for name, c in slowest[:8]:
        print(f"| `{name}` | {c['count']:,} | {c['median_s'] * 1000:,.0f} ms | {c['p95_s'] * 1000:,.0f} ms | "
              f"{c['max_s'] * 1000:,.0f} ms |")
    rss = figures["rss_bytes"]
    print("server RSS: " + ", ".join(f"{k} {v / 2**20:,.0f} MiB" for k, v in rss.items()))
    for error in figures["errors"][:5]:
        print("error:", error)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 1 if figures["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
