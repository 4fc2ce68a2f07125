"""Ctrl-C during `popvision run --profile`'s write, counted over many real processes.

    python benchmarks/ctrl_c_write.py [--runs 200] [--delays 0,0.05,0.15] [--model resnet50]

Each run starts `popvision run MODEL --profile` into a folder holding an earlier profile, waits until
the process has a file open in that folder (its spools: the write has begun), waits the next of
``--delays`` seconds, and sends SIGINT as a terminal's Ctrl-C does. It counts the exit codes (130 when
the interrupt won, 0 when the write finished first; anything else, a signal's negative code above
all, is a crash) and checks the folder holds one whole profile and no temporary file. It prints a
Markdown table per delay; docs/reliability.md keeps the figures. Exit status 1 on any crash.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EARLIER = ROOT / "sample_profiles" / "mnist_pipelined" / "profile.pop"


def writing_into(pid: int, folder: Path) -> bool:
    """Process ``pid`` has a file open in ``folder``."""
    fds = Path(f"/proc/{pid}/fd")
    try:
        links = [os.readlink(fd) for fd in fds.iterdir()]
    except OSError:  # the process ended, or a descriptor closed while listed
        return False
    return any(link.startswith(f"{folder}/") for link in links)


def one_run(model: str, delay: float, scratch: Path) -> tuple[int, str]:
    """One interrupted run: its exit code and what was wrong with it ('' if nothing)."""
    folder = scratch / "profile"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    shutil.copy(EARLIER, folder / "profile.pop")
    run = subprocess.Popen([sys.executable, "-m", "popvision_py.cli", "run", model, "--profile", "--profile-dir",
                            str(folder), "-q"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                           cwd=ROOT, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    while not writing_into(run.pid, folder) and run.poll() is None:
        time.sleep(0.005)
    time.sleep(delay)
    run.send_signal(signal.SIGINT)
    err = run.communicate(timeout=120)[1]
    wrong = []
    if "Traceback" in err or "terminate called" in err:
        wrong.append(err.strip().splitlines()[-1])
    if sorted(p.name for p in folder.iterdir()) != ["profile.pop"]:
        wrong.append("a temporary file was left")
    return run.returncode, "; ".join(wrong)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="runs per delay")
    parser.add_argument("--delays", default="0,0.05,0.15", help="seconds from the write's start to the Ctrl-C")
    parser.add_argument("--model", default="resnet50")
    args = parser.parse_args()
    crashed = False
    print("| delay (s) | runs | exit 130 (interrupted) | exit 0 (the write won) | other | wrong output |")
    print("| --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as scratch:
        for delay in (float(d) for d in args.delays.split(",")):
            codes: collections.Counter[int] = collections.Counter()
            wrong = 0
            for _ in range(args.runs):
                code, what = one_run(args.model, delay, Path(scratch))
                codes[code] += 1
                wrong += bool(what)
                if code not in (0, 130) or what:
                    print(f"<!-- exit {code}: {what} -->", file=sys.stderr)
            other = sum(n for code, n in codes.items() if code not in (0, 130))
            crashed |= bool(other or wrong)
            others = ", ".join(f"{code}: {n}" for code, n in sorted(codes.items()) if code not in (0, 130))
            print(f"| {delay:g} | {args.runs} | {codes[130]} | {codes[0]} | {others or 0} | {wrong} |", flush=True)
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
