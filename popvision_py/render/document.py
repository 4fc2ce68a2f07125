"""The data of a report before it is rendered: sections of titled tables and key figures.

``build_report`` and ``build_comparison`` ask the analysis API and collect the answers in a
``Document``; the renderers (text, md, json, csv, html) only format a Document. Tests check the
Document without rendering anything.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from popvision_py import __version__

SECTIONS = ("summary", "memory", "liveness", "stages", "exchange")


@dataclass
class Block:
    """One titled item: a table (DataFrame) or key figures (dict). ``key`` is stable: ``section.name``.

    ``hidden`` blocks carry data only figures use (the HTML page); other formats leave them out.
    """

    key: str
    title: str
    data: pd.DataFrame | dict[str, Any]
    hidden: bool = False

    @property
    def section(self) -> str:
        return self.key.split(".", 1)[0]

    @property
    def name(self) -> str:
        return self.key.split(".", 1)[1]


@dataclass
class Document:
    """A report (one profile) or a comparison (two): ``kind`` is ``"report"`` or ``"compare"``."""

    kind: str
    title: str
    profiles: list[str]
    blocks: list[Block] = field(default_factory=list)
    generator: str = f"popvision_py {__version__}"

    def add(self, key: str, title: str, data: Any, hidden: bool = False) -> None:
        if dataclasses.is_dataclass(data) and not isinstance(data, type):
            data = {f.name: getattr(data, f.name) for f in dataclasses.fields(data)}
        self.blocks.append(Block(key, title, data, hidden))

    def visible(self) -> list[Block]:
        return [b for b in self.blocks if not b.hidden]

    def sections(self) -> list[str]:
        seen: list[str] = []
        for b in self.blocks:
            if b.section not in seen:
                seen.append(b.section)
        return seen


def chosen(section: str) -> tuple[str, ...]:
    """The sections ``--section`` names (``all`` is every one)."""
    return SECTIONS if section == "all" else (section,)


def build_report(report: Any, section: str = "all", figures: bool = False) -> Document:
    """Collect the answers of ``report`` (a ``Report``) for ``section``; ``figures`` adds hidden data for plots."""
    doc = Document("report", f"popvision report: {report.run.get('model', '?')}", [str(report.path)])
    for name in chosen(section):
        _SECTION_BUILDERS[name](doc, report, figures)
    return doc


def _summary(doc: Document, r: Any, figures: bool) -> None:
    doc.add("summary.figures", "Summary", r.summary.figures())
    doc.add("summary.insights", "Insights", r.summary.insights())


def _memory(doc: Document, r: Any, figures: bool) -> None:
    doc.add("memory.by_ipu", "Memory per IPU", r.memory.by_ipu())
    doc.add("memory.distribution", "Memory per tile: distribution over tiles", r.memory.distribution())
    doc.add("memory.by_category", "Memory by category", r.memory.by_category())
    doc.add("memory.out_of_memory", "Out-of-memory tiles (largest excess first)", r.memory.out_of_memory())
    doc.add("memory.largest_variables", "Largest variables", r.memory.largest_variables(20))
    if figures:
        doc.add("memory.by_tile", "Memory per tile", r.memory.by_tile(), hidden=True)


def _liveness(doc: Document, r: Any, figures: bool) -> None:
    peaks = r.liveness.peaks()
    doc.add("liveness.peaks", "Not-always-live memory peak per IPU", peaks)
    at = list(zip(peaks["ipu"].tolist(), peaks["peak_step"].tolist()))
    live = [r.liveness._live_at_columns(ipu, step, 10) for ipu, step in at]  # arrays: no frame per IPU
    frame = pd.DataFrame()
    sizes = [len(f["var_id"]) for f in live]
    if sum(sizes):  # stacked column by column: one frame, not a concat of small ones
        frame = pd.DataFrame({
            "ipu": np.repeat([ipu for ipu, _ in at], sizes), "step": np.repeat([step for _, step in at], sizes),
            **{c: np.concatenate([f[c] for f in live]) for c in live[0]},
        })
    doc.add("liveness.live_at_peak", "Largest variables live at each IPU's peak step", frame)
    doc.add("liveness.by_step", "Memory live at each program step", r.liveness.by_step())


def _stages(doc: Document, r: Any, figures: bool) -> None:
    doc.add("stages.figures", "Pipeline figures", r.stages.figures())
    doc.add("stages.summary", "Stages: time per micro-batch, busy and idle", r.stages.summary())
    split = r.stages.best_split()
    doc.add("stages.best_split", "Best contiguous split of the blocks", split.stages)
    doc.add("stages.best_split_figures", "Best split: predicted time per step",
            {"current_step_cycles": split.current_step_cycles, "predicted_step_cycles": split.predicted_step_cycles,
             "gain_pct": split.gain_pct})
    doc.add("stages.blocks", "Blocks: cycles per micro-batch and memory", r.stages.blocks())
    if figures:
        doc.add("stages.gantt", "Pipeline Gantt chart", r.stages.gantt(), hidden=True)


def _exchange(doc: Document, r: Any, figures: bool) -> None:
    doc.add("exchange.figures", "Time by phase (IPU-cycles summed over IPUs)", r.exchange.figures())
    doc.add("exchange.by_kind", "Exchange by kind", r.exchange.by_kind())
    doc.add("exchange.bandwidth", "Achieved vs peak bandwidth", r.exchange.bandwidth())
    doc.add("exchange.matrix", "IPU-to-IPU matrix (-1 host, -2 streaming memory)", r.exchange.matrix())
    doc.add("exchange.costliest", "Costliest exchange steps", r.exchange.costliest(10))


_SECTION_BUILDERS = {"summary": _summary, "memory": _memory, "liveness": _liveness, "stages": _stages,
                     "exchange": _exchange}


def build_comparison(comparison: Any, section: str = "all") -> Document:
    """Collect a ``Comparison``'s side-by-side frames for ``section``."""
    a, b = comparison.a, comparison.b
    doc = Document("compare", f"popvision compare: {a.run.get('model', '?')} vs {b.run.get('model', '?')}",
                   [str(a.path), str(b.path)])
    doc.add("compare.profiles", "Profiles", {"a": str(a.path), "b": str(b.path),
                                             "a_model": a.run.get("model"), "b_model": b.run.get("model"),
                                             "a_strategy": a.run.get("strategy"), "b_strategy": b.run.get("strategy")})
    for name in chosen(section):
        doc.add(f"{name}.comparison", f"{name.capitalize()}: a vs b", comparison.section(name))
    return doc
