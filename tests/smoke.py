"""Every command once, as a user runs it, with this interpreter's packages: `make smoke-oldest` runs it on the
oldest Python with the lowest versions pyproject.toml declares (docs/development.md, "Test matrix").

    python tests/smoke.py FOLDER

run, report (every section, each format), info, sql, compare, export-trace, import (the committed
PyTorch traces), tune (a few candidates), the dashboard's first page over HTTP from a real server,
and, where torch is installed, poprun with a PopDist script. Each command must exit 0; what it
printed is checked where one line tells that it worked. Exit status 1 names the first command that
did not.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from importlib.util import find_spec
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_profiles" / "mnist_pipelined" / "profile.pop"
TRACES = ROOT / "sample_profiles" / "pytorch_gpipe" / "traces"
POPDIST_SCRIPT = ROOT / "examples" / "tutorial_mnist.py"


class SmokeError(Exception):
    """A command that failed, with what it printed."""


def popvision(*args: str | Path, cwd: Path) -> str:
    """Run ``popvision ARGS`` in a subprocess; its stdout, or a SmokeError with its stderr."""
    command = [sys.executable, "-m", "popvision_py.cli", *map(str, args)]
    started = time.monotonic()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600)
    shown = " ".join(map(str, args))
    print(f"{time.monotonic() - started:6.1f} s  popvision {shown}", flush=True)
    if done.returncode != 0:
        raise SmokeError(f"popvision {shown} exited {done.returncode}:\n{done.stderr[-4000:]}")
    return done.stdout


def expect(text: str, part: str, what: str) -> None:
    if part not in text:
        raise SmokeError(f"{what}: {part!r} not in its output:\n{text[-2000:]}")


def dashboard_first_page(profile: Path, cwd: Path) -> None:
    """A real `popvision dashboard` serves its shell and renders the first page (the pages callback
    for "/", as the browser asks for it), and stops on SIGTERM."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    server = subprocess.Popen([sys.executable, "-m", "popvision_py.cli", "dashboard", str(profile), "--port",
                               str(port)], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(1200):
            if server.poll() is not None:
                raise SmokeError(f"popvision dashboard exited {server.returncode}")
            try:
                with urllib.request.urlopen(f"{base}/", timeout=30) as page:
                    shell = page.read().decode()
                break
            except urllib.error.HTTPError:
                raise
            except OSError:
                time.sleep(0.1)
        else:
            raise SmokeError("popvision dashboard did not answer in 120 s")
        expect(shell, "react-entry-point", "the dashboard's page")
        with urllib.request.urlopen(f"{base}/_dash-dependencies", timeout=30) as answer:
            callbacks = json.load(answer)
        pages = next(c for c in callbacks if "_pages_content" in c["output"])
        values = {"pathname": "/", "search": "", "hash": "", "href": f"{base}/"}
        # as the browser sends it: "..a.children...b.data.." is the outputs a.children and b.data
        multi = pages["output"].startswith("..")
        outputs = [dict(zip(("id", "property"), part.rsplit(".", 1)))
                   for part in pages["output"].strip(".").split("...")]
        body = json.dumps({
            "output": pages["output"], "outputs": outputs if multi else outputs[0],
            "inputs": [{**i, "value": values.get(i["property"])} for i in pages["inputs"]],
            "state": [{**s, "value": values.get(s["property"])} for s in pages["state"]],
            "changedPropIds": ["_pages_location.pathname"],
        }).encode()
        request = urllib.request.Request(f"{base}/_dash-update-component", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as answer:
            rendered = answer.read().decode()
        expect(rendered, "Summary and insights", "the first page's callback")  # the Summary page's header
    except (SmokeError, urllib.error.HTTPError) as exc:
        server.terminate()
        raise SmokeError(f"popvision dashboard: {exc}\n{server.communicate(timeout=30)[1][-4000:]}") from None
    server.terminate()
    server.communicate(timeout=30)
    print(f"{time.monotonic() - started:6.1f} s  popvision dashboard {profile} (the first page over HTTP)", flush=True)


def main(folder: Path) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    run = folder / "run"
    profile = run / "profile.pop"
    try:
        expect(popvision("run", "mnist", "--profile", "--profile-dir", run, cwd=folder), "profile", "popvision run")
        expect(popvision("report", profile, "--section", "all", cwd=folder), "Program tree", "popvision report")
        for fmt in ("json", "md"):
            popvision("report", profile, "--section", "all", "--format", fmt, cwd=folder)
        popvision("report", profile, "--format", "html", "-o", folder / "report.html", cwd=folder)
        popvision("report", profile, "--format", "csv", "-o", folder / "csv", cwd=folder)
        expect(popvision("info", profile, cwd=folder), "trace", "popvision info")
        expect(popvision("sql", profile, "SELECT count(*) AS steps FROM programs", cwd=folder), "steps",
               "popvision sql")
        popvision("compare", SAMPLE, profile, cwd=folder)
        popvision("export-trace", profile, "-o", folder / "trace.json", cwd=folder)
        json.loads((folder / "trace.json").read_text())
        imported = folder / "imported"
        popvision("import", TRACES, "-o", imported, cwd=folder)
        popvision("report", imported / "profile.pop", "--section", "all", cwd=folder)
        popvision("tune", "mnist", "--max-candidates", "4", "--top", "2", "--workers", "1", "--quiet",
                  "-o", folder / "tune.parquet", "--profile-dir", folder / "tune-profile", cwd=folder)
        dashboard_first_page(profile, folder)
        if find_spec("torch") is not None:
            # the PopDist example as two instances of two replicas each, profiled by `popvision run`
            started = time.monotonic()
            done = subprocess.run([Path(sys.executable).with_name("poprun"), "--num-instances", "2",
                                   "--num-replicas", "4", sys.executable, "-m", "popvision_py.cli", "run",
                                   POPDIST_SCRIPT, "--profile",
                                   "--profile-dir", folder / "poprun"], cwd=folder, capture_output=True, text=True,
                                  timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
            print(f"{time.monotonic() - started:6.1f} s  poprun ... popvision run {POPDIST_SCRIPT.name} --profile",
                  flush=True)
            if done.returncode != 0:
                raise SmokeError(f"poprun exited {done.returncode}:\n{done.stderr[-4000:]}")
            if not list((folder / "poprun").rglob("profile.pop")):
                raise SmokeError(f"poprun wrote no profile under {folder / 'poprun'}:\n{done.stderr[-4000:]}")
        else:
            print("         poprun: skipped (torch is not installed)", flush=True)
    except SmokeError as exc:
        print(f"smoke: FAILED: {exc}", file=sys.stderr)
        return 1
    print("smoke: every command worked")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/smoke.py FOLDER")
    sys.exit(main(Path(sys.argv[1]).resolve()))
