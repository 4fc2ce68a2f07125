"""Byte-compile a checkout's packages before its commands are timed in fresh processes.

An installed package has its modules compiled once (pip writes the ``.pyc`` files); a checkout run
with ``PYTHONDONTWRITEBYTECODE`` set (the machine this project is developed on sets it) compiles every popvision
module again in each process: 0.1-0.2 s of a `popvision sql` that takes 1 s, against a DuckDB
whose library is compiled. The benchmarks that time whole commands call ``compile_tree`` on each
checkout first, so that both sides start as an installed tool does.
"""

from __future__ import annotations

import compileall
from pathlib import Path

PACKAGES = ("popvision_py", "dashboards", "engine")


def compile_tree(root: Path) -> None:
    """Write the ``.pyc`` files of ``root``'s packages (those missing or stale only)."""
    for name in PACKAGES:
        if (root / name).is_dir():
            compileall.compile_dir(root / name, quiet=1)
