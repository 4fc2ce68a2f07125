"""The CLI run with its stderr on a pseudo-terminal, where its progress bars show."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def stderr_on_a_terminal(args: list[str]) -> str:
    """``popvision ARGS`` with stderr on a pseudo-terminal 120 columns wide; what it wrote there. It must succeed."""
    pty = pytest.importorskip("pty")
    fcntl, termios = pytest.importorskip("fcntl"), pytest.importorskip("termios")
    master, slave = pty.openpty()
    # a terminal 120 columns wide (a new pseudo-terminal has 0 columns, where tqdm draws nothing)
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    process = subprocess.Popen([sys.executable, "-m", "popvision_py.cli", *map(str, args)], cwd=ROOT, stderr=slave,
                               stdout=subprocess.DEVNULL)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert process.wait(timeout=300) == 0, b"".join(chunks).decode(errors="replace")[-2000:]
    return b"".join(chunks).decode(errors="replace")
