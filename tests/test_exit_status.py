"""The exit status scripts see: 0 on success, 2 on a refused profile, whatever the interpreter's teardown
does (it could abort with SIGABRT, exit 134, after the right sentence: apache/arrow#34314).

benchmarks/exit_status.py counts 1,000 runs a path for each reading command (docs/reliability.md);
this runs the same script on a smaller count, as real `popvision` processes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def test_info_and_sql_exit_0_or_2_and_nothing_else():
    # GIVEN the sample profile, and broken copies of it refused at open and part way through a read
    # WHEN `info` and `sql` run 20 times on each path, two at a time
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "exit_status.py"), "--runs", "20",
                           "--commands", "info,sql"], capture_output=True, text=True, timeout=280)
    # THEN every success exits 0, every refusal exits 2, and no run printed a traceback or an abort
    assert done.returncode == 0, done.stdout + done.stderr
    rows = re.findall(r"^\| (info|sql) \| (success|error) \| 20 \| ([^|]+) \| (\d+) \| (\d+) \|$", done.stdout, re.M)
    assert sorted((command, path) for command, path, *_ in rows) == [
        ("info", "error"), ("info", "success"), ("sql", "error"), ("sql", "success")], done.stdout
    for command, path, codes, tracebacks, aborts in rows:
        assert codes.strip() == ("0: 20" if path == "success" else "2: 20"), (command, path, codes)
        assert (tracebacks, aborts) == ("0", "0")
    assert "0 run(s) ended with another exit code" in done.stdout
