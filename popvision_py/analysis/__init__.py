"""The analysis library: one stateless module per report, and the ``Report`` facade that feeds them.

Each module holds plain functions (tables in, DataFrame or frozen dataclass out, explicit column
lists); ``report.Report`` reads each table once, caches it and hands it to those functions; the
views it hands out (``report.summary``, ``report.memory``, ...) are in ``analysis.views``. See
docs/api.md for the contract and docs/reports.md for the formulas.

A profile is opened one way: ``popvision_py.open(path, system=None)`` (and two compared with
``popvision_py.compare(a, b)``); this package names the classes they return.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from popvision_py.analysis.compare import Comparison
    from popvision_py.analysis.report import Report

__all__ = ["Comparison", "Report"]


def __getattr__(name: str):
    if name == "Report":
        from popvision_py.analysis.report import Report

        return Report
    if name == "Comparison":
        from popvision_py.analysis.compare import Comparison

        return Comparison
    raise AttributeError(name)
