"""One line: this interpreter's Python and the versions of the packages the test matrix varies
(`make test-matrix`, `make smoke-oldest`; docs/development.md records the line of each environment)."""

from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError, version

PACKAGES = ("numpy", "pandas", "pyarrow", "duckdb", "dash", "click", "dask", "torch")


def installed(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "-"


if __name__ == "__main__":
    print(f"Python {platform.python_version()}, " + ", ".join(f"{name} {installed(name)}" for name in PACKAGES))
