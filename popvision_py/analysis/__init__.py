"""The analysis library: a profile's questions answered as DataFrames and dataclasses, behind the
``Report`` facade.

The facade, at the top of the package: ``report.Report`` opens a profile, reads each table once,
caches it and hands it to the analyzers; the views it hands out (``report.summary``,
``report.memory``, ...) are in ``views`` (``report.gpu`` in ``gpu_view``); ``compare`` sets two
profiles side by side; ``verify`` runs the findings' fixes for real. Below it, the analyzers live in
rooms by concern, each a package whose ``__init__`` says what lives there and what it may import
(tests/test_architecture.py checks it):

- ``common``: the tables as the analyzers take them and the answer's ``Table``;
- ``trace``: the execution trace folded in streaming passes, its supersteps, its zoomable timeline;
- ``ipu``: the views of a chip's run: memory, liveness, tiles, programs, exchange, operations;
- ``host``: the host's processes: input wait, system timelines, poprun's instances;
- ``imported``: what PyTorch profiler traces answer besides the common views;
- ``pipeline``: stages, and an imported pipeline re-timed (replay, critical path, what-if);
- ``findings``: the summary, the insights and their fixes.

A room imports only the rooms listed before it here (``findings`` any of them; ``pipeline`` not
``ipu`` or ``host``), never the facade. Each analyzer holds plain functions: tables in, DataFrame or
frozen dataclass out, explicit column lists. See docs/api.md for the contract and docs/reports.md
for the formulas.

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
