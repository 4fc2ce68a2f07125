"""Exit status of every command that reads a profile, counted over many real processes.

    python benchmarks/exit_status.py [--runs 1000] [--workers 2] [--commands info,sql] [--minutes M]

For each command (``info``, ``report``, ``sql``, ``export-trace``, ``compare``) it runs ``--runs``
processes on a good profile (``sample_profiles/mnist_pipelined/profile.pop``: the success path,
exit 0) and ``--runs`` on broken copies of it made in a temporary folder (the error path, exit 2),
every other run each: the copy cut to half its length (refused at open), and the copy with a byte
flipped in the trace table's pages (refused part way through reading the table with pyarrow,
whose thread pools are alive then: the path on which the interpreter's teardown could abort the
process, exit 134), or for ``info``, which reads no pages, in the table's footer. It prints a
Markdown table of the exit codes seen per command and path, and the runs whose stderr held a
traceback or "terminate called". The runs are interleaved (each command and path in turn), so
``--minutes`` (stop starting runs after that long) or a Ctrl-C leaves counts balanced across the
table, which then says how many ran. docs/reliability.md keeps the figures. Exit status 1 if any
run ended with a code other than its path's.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_profiles" / "mnist_pipelined" / "profile.pop"
COMMANDS = ("info", "report", "sql", "export-trace", "compare")
EXPECTED = {"success": 0, "error": 2}
QUERY = "SELECT count(*), sum(end_cycle - start_cycle) FROM trace"


def popvision() -> list[str]:
    """The installed `popvision` beside this interpreter, else the module."""
    script = Path(sys.executable).with_name("popvision")
    return [str(script)] if script.exists() else [sys.executable, "-m", "popvision_py.cli"]


def broken_copies(folder: Path) -> dict[str, Path]:
    """Broken copies of the sample: cut to half its length, one byte of the trace table's pages flipped,
    one byte of its footer flipped."""
    data = SAMPLE.read_bytes()
    with zipfile.ZipFile(SAMPLE) as archive:
        info = archive.getinfo("trace.parquet")
    # the member (stored) starts after its local header: 30 bytes, the name, the extra field
    header = data[info.header_offset: info.header_offset + 30]
    start = info.header_offset + 30 + int.from_bytes(header[26:28], "little") + int.from_bytes(header[28:30], "little")
    end = start + info.compress_size
    footer = int.from_bytes(data[end - 8: end - 4], "little")  # Parquet: footer, its length, "PAR1"
    copies = {"truncated": data[: len(data) // 2],
              "pages": flipped(data, start + 4 + info.compress_size // 8),  # the first column chunk's pages
              "footer": flipped(data, end - 8 - footer // 2)}
    for name, content in copies.items():
        (folder / f"{name}.pop").write_bytes(content)
    return {name: folder / f"{name}.pop" for name in copies}


def flipped(data: bytes, at: int) -> bytes:
    changed = bytearray(data)
    changed[at] ^= 0xFF
    return bytes(changed)


# the broken copies each command's error path alternates between: one refused at open, one refused
# while pyarrow reads (`info` reads no pages: its second is the damaged footer, refused as it opens)
BROKEN = {"info": ("truncated", "footer")}
BROKEN_ELSE = ("truncated", "pages")


def arguments(command: str, profile: Path, out: Path) -> list[str]:
    return {
        "info": ["info", str(profile)],
        "report": ["report", str(profile)],
        "sql": ["sql", str(profile), QUERY],
        "export-trace": ["export-trace", str(profile), "-o", str(out), "-q"],
        "compare": ["compare", str(profile), str(SAMPLE)],
    }[command]


def run_one(job: tuple[str, str, int, Path, Path]) -> tuple[str, str, int, str]:
    command, path, k, profile, folder = job
    out = folder / f"{command}-{path}-{k}.json"
    done = subprocess.run([*popvision(), *arguments(command, profile, out)], capture_output=True, text=True,
                          timeout=120)
    out.unlink(missing_ok=True)
    bad = "traceback" if "Traceback" in done.stderr else "terminate" if "terminate called" in done.stderr else ""
    return command, path, done.returncode, bad


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="runs per command and path (default 1000)")
    parser.add_argument("--workers", type=int, default=2, help="processes run at once (default 2)")
    parser.add_argument("--commands", default=",".join(COMMANDS), help="comma-separated (default all five)")
    parser.add_argument("--minutes", type=float, help="start no run after this many minutes (default: no limit)")
    given = parser.parse_args()
    commands = [c for c in given.commands.split(",") if c]
    with tempfile.TemporaryDirectory(prefix="popvision-exit-") as tmp:
        folder = Path(tmp)
        good = folder / "profile.pop"
        shutil.copyfile(SAMPLE, good)
        broken = broken_copies(folder)
        # interleaved, so that each command's runs meet the same load on the machine
        jobs = [(c, path, k, good if path == "success" else broken[BROKEN.get(c, BROKEN_ELSE)[k % 2]], folder)
                for k in range(given.runs) for c in commands for path in ("success", "error")]
        codes: dict[tuple[str, str], collections.Counter] = collections.defaultdict(collections.Counter)
        noise: collections.Counter = collections.Counter()
        began = time.perf_counter()
        deadline = began + 60 * given.minutes if given.minutes else float("inf")
        pending = iter(jobs)
        lock = threading.Lock()
        done = [0]

        def work() -> None:
            while time.perf_counter() < deadline:
                with lock:
                    job = next(pending, None)
                if job is None:
                    return
                command, path, code, bad = run_one(job)
                if deadline == 0:  # interrupted: the run met the Ctrl-C too
                    return
                with lock:
                    codes[command, path][code] += 1
                    noise[command, path, bad] += bool(bad)
                    done[0] += 1
                    if done[0] % 500 == 0:
                        print(f"{done[0]:,} runs, {time.perf_counter() - began:,.0f} s", file=sys.stderr, flush=True)

        workers = [threading.Thread(target=work, daemon=True) for _ in range(given.workers)]
        for worker in workers:
            worker.start()
        try:
            for worker in workers:
                worker.join()
        except KeyboardInterrupt:  # the table of the runs made so far
            deadline = 0
        seconds = time.perf_counter() - began
    made = f"{done[0]:,} runs" + ("" if done[0] == len(jobs) else f" of the {len(jobs):,} planned")
    print(f"`python benchmarks/exit_status.py --runs {given.runs} --workers {given.workers}"
          f"{'' if given.commands == ','.join(COMMANDS) else ' --commands ' + given.commands}"
          f"{f' --minutes {given.minutes:g}' if given.minutes else ''}`: {made} in {seconds:,.0f} s\n")
    print("| command | path | runs | exit codes seen | tracebacks | \"terminate called\" |")
    print("| --- | --- | ---: | --- | ---: | ---: |")
    wrong = 0
    for command in commands:
        for path in ("success", "error"):
            seen = codes[command, path]
            wrong += sum(n for code, n in seen.items() if code != EXPECTED[path])
            text = ", ".join(f"{code}: {n:,}" for code, n in sorted(seen.items()))
            print(f"| {command} | {path} | {sum(seen.values()):,} | {text} | {noise[command, path, 'traceback']} | "
                  f"{noise[command, path, 'terminate']} |")
    print(f"\n{wrong} run(s) ended with another exit code than their path's (0 success, 2 error).")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
