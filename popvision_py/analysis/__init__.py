"""The analysis library: one stateless module per report, and the ``Report`` facade that feeds them.

Each module holds plain functions (tables in, DataFrame or frozen dataclass out, explicit column
lists); ``report.Report`` reads each table once, caches it and hands it to those functions. See
docs/api.md for the contract and docs/reports.md for the formulas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from popvision_py.analysis.compare import Comparison
    from popvision_py.analysis.report import Report

__all__ = ["Comparison", "Report", "compare", "open"]


def open(path):  # noqa: A001 - mirrors popvision_py.open
    """Open a profile.pop and return its ``Report`` facade."""
    from popvision_py.analysis.report import Report

    return Report(path)


def compare(a, b):
    """Compare two profiles (paths or Reports); returns a ``Comparison``."""
    from popvision_py.analysis.compare import Comparison

    return Comparison(a, b)


def __getattr__(name: str):
    if name == "Report":
        from popvision_py.analysis.report import Report

        return Report
    if name == "Comparison":
        from popvision_py.analysis.compare import Comparison

        return Comparison
    raise AttributeError(name)
