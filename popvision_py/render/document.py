"""The data of a report before it is rendered: sections of titled tables and key figures.

``build_report`` and ``build_comparison`` ask the analysis API and collect the answers in a ``Document``; the
renderers (text, md, json, csv, html) only format a Document. Tests check the Document without rendering anything.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from popvision_py.version import __version__
from popvision_py.analysis.imported import ranks as imported
from popvision_py.analysis.imported.bound import BOUND_PCT
from popvision_py.analysis.imported.stragglers import LATE_PCT
from popvision_py.analysis.ipu import tiles as tile_answers
from popvision_py.analysis.host.instances import differences
from popvision_py.analysis.ipu.operations import IMPORTED_NO_BLOCKS
from popvision_py.analysis.ipu.programs import NO_PROGRAM
from popvision_py.analysis.common.tables import TABLE_COLUMNS, Table
from popvision_py.render.format import value as shown, verification
from popvision_py.render.gpu_words import bound_items, straggler_items, worth_items
from popvision_py.render.many_ranks import at_many_ranks, named_ranks, of_ranks
from popvision_py.render.rank_words import compared_in_rank_words, in_rank_words

SECTIONS = ("summary", "memory", "liveness", "stages", "exchange", "operations", "programs", "tiles", "system",
            "critical-path", "gpu")
# `popvision compare` sets the device's figures side by side, not the ops, the program trees, each tile's balance
# or the host's timelines
COMPARED = ("summary", "memory", "liveness", "stages", "exchange")


@dataclass
class ReportBlock:
    """One titled item of a report: a table (``Table`` or DataFrame) or key figures (dict). ``key`` is
    stable: ``section.name``.

    ``hidden`` blocks carry data only figures use (the HTML page); other formats leave them out.
    The text, Markdown and JSON renderers read a Table's arrays; CSV and HTML use ``frame()``.
    A table with ``items`` is read as a list by the text, Markdown and HTML renderers (a heading and
    detail lines per row; ``empty`` says why there is none); JSON and CSV keep the table.
    """

    key: str
    title: str
    data: Table | pd.DataFrame | dict[str, Any]
    hidden: bool = False
    items: list[tuple[str, list[str]]] | None = None
    empty: str = ""
    tree: bool = False  # rows are nodes with ``node`` / ``parent`` / ``depth``: text indents them, JSON nests them
    # what text, Markdown and HTML show in place of the data: a table of many ranks (``at_many_ranks``), an imported
    # trace's figures in a rank's words (``in_rank_words``); JSON and CSV keep data
    shown: Table | dict[str, Any] | None = None
    # a block of what an imported trace cannot have (tiles, named tensors, a compiled program), only a note saying so
    # (``rank_words.UNREAD``): text, Markdown and HTML leave it out, JSON and CSV keep it with its note
    unread: bool = False

    def table(self) -> Table | pd.DataFrame | dict[str, Any]:
        """What a reader's format shows of a block: ``shown`` where set, else the data."""
        return self.data if self.shown is None else self.shown

    def frame(self) -> pd.DataFrame:
        """A table block's data as a DataFrame."""
        return self.data.frame() if isinstance(self.data, Table) else self.data

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
    blocks: list[ReportBlock] = field(default_factory=list)
    generator: str = f"popvision_py {__version__}"
    rank_words: bool = False  # an imported trace's report: its HTML figures say rank for IPU, ns for cycles
    ranks: Any = None  # and each of its IPUs' rank, as the traces name them (``ranks.rank_numbers``)

    def add(self, key: str, title: str, data: Any, hidden: bool = False,
            items: list[tuple[str, list[str]]] | None = None, empty: str = "", tree: bool = False) -> None:
        if dataclasses.is_dataclass(data) and not isinstance(data, type):
            data = {f.name: getattr(data, f.name) for f in dataclasses.fields(data)}
        self.blocks.append(ReportBlock(key, title, data, hidden, items, empty, tree))

    def visible(self) -> list[ReportBlock]:
        return [b for b in self.blocks if not b.hidden]

    def read(self) -> list[ReportBlock]:
        """The blocks text, Markdown and HTML show a reader: the visible ones but an imported trace's ``unread``,
        unless those are all there is (``--section tiles`` of an imported trace: its note says why it is empty)."""
        visible = self.visible()
        read = [b for b in visible if not b.unread]
        return read if read else visible

    def sections(self) -> list[str]:
        seen: list[str] = []
        for b in self.blocks:
            if b.section not in seen:
                seen.append(b.section)
        return seen


def chosen(section: str, sections: tuple[str, ...] = SECTIONS) -> tuple[str, ...]:
    """The sections ``--section`` names (``all`` is every one of ``sections``)."""
    return sections if section == "all" else (section,)


def build_report(report: Any, section: str = "all", figures: bool = False) -> Document:
    """Collect the answers of ``report`` (a ``Report``) for ``section``; ``figures`` adds hidden data for plots.

    ``overview`` (the terminal's default) answers the four questions and the findings on one screen;
    ``all`` is every section, each block once (the host input, which the stages and the exchange
    sections both hold, is in the stages')."""
    doc = Document("report", f"popvision report: {report.run.get('model', '?')}", [str(report.path)])
    if section == "overview":
        _overview(doc, report)
        return doc
    names, built = chosen(section), {}
    # every table is read: the others decoded while the trace is folded (``prefetch_beside_trace``)
    build = {**_SECTION_BUILDERS, "prefetch": lambda doc, r, figures: prefetch_beside_trace(r)}
    # an import's tables are let go after each section, none prefetched (``one_at_a_time``)
    alone = one_at_a_time(report, section)
    for name in _built_order(report, section, names, prefetch=not alone):
        before = len(doc.blocks)
        build[name](doc, report, figures)
        built[name] = doc.blocks[before:]
        report.hand_back(tables=alone)  # the section's answers and freed pages, not left for the next one to grow on
    doc.blocks = [b for name in names for b in built[name] if section != "all" or b.key != "exchange.host_input"]
    ranks = imported.ranks_of(report) if report.imported else None
    at_many_ranks(doc.blocks, ranks)
    if report.imported:
        in_rank_words(doc.blocks, (report.run.get("import") or {}).get("schedule"), ranks)
        doc.rank_words, doc.ranks = True, ranks
    return doc


def _built_order(report: Any, section: str, names: tuple[str, ...], prefetch: bool = True) -> list[str]:
    """The order ``build_report`` builds ``names`` in (shown in their order), ``"prefetch"`` where it prefetches. The
    GPU section of a GPU trace first, its peak on nothing else (``--section all``, 10 GB in 4 ranks: 1,075 MiB with it
    last, 693 first; in 4,096 ranks 414 MiB in its place, 385 first); then the System section, which reads no table
    of the profile, before they are decoded (10 GB in 4 ranks: 367-370 MiB, not 416-421)."""
    if section != "all":
        return list(names)
    first = ["gpu"] if "gpu" in names and not report.gpu.missing() else []
    first += ["system"] if "system" in names else []
    return [*first, *(["prefetch"] if prefetch else []), *(n for n in names if n not in first)]


def one_at_a_time(report: Any, section: str) -> bool:
    """Whether ``--section all`` lets each section's tables go once it is built, neither prefetching nor holding
    them (``Report.hand_back(tables=True)``): an import's, whose trace is folded in a moment, so that nothing is
    gained decoding the tables beside it, and whose sections read their steps a piece at a time where no other
    answer holds them (``Report.step_pieces``). A table two sections read whole is read twice."""
    return section == "all" and bool(report.imported)


def prefetch_beside_trace(report: Any) -> None:
    """Decode the tables the sections read whole in a background thread while the trace is folded
    (``Report.prefetch``). Not an imported GPU trace's ``kernels``: the GPU section reads it a rank's row groups
    at a time (``gpu_ranks``), so decoded whole here it was only held through every section (5 GB of traces:
    the report's peak 1.39-1.44 GiB against 1.15-1.16 without it, the same document)."""
    report.prefetch([n for n in TABLE_COLUMNS if n not in ("trace", "kernels") and n in report.profile.tables])


# What `popvision report PROFILE --section NAME` adds to the overview, in the overview's last block
MORE = {"summary": "every summary figure and the tile insights", "memory": "memory per IPU, tile and variable",
        "liveness": "memory live at each step", "stages": "each stage's time, the bubble, a better split",
        "exchange": "time by phase, exchange by kind, bandwidth", "operations": "each op's cycles and FLOPs",
        "programs": "the program tree", "tiles": "tile balance", "system": "the host processes' timelines",
        "critical-path": "what set the step time, its culprit and what-ifs",
        "gpu": "a GPU trace's kernels: what bound each step, idle, compute, overlaps, launches, beside HTA's",
        "all": "everything"}
# ... for an imported trace, in its words: it has no tiles, variables, FLOPs or blocks to split
IMPORTED_MORE = {"summary": "every summary figure", "memory": "memory per rank and by category",
                 "stages": "each stage's time and the bubble", "exchange": "time by phase, communication by kind and "
                 "per rank", "operations": "each operator's time by phase"}


def _overview(doc: Document, r: Any) -> None:
    """The four questions (fits? how fast? which stage? what does exchange cost?), the findings, what next."""
    s = r.summary.figures()
    st = r.stages.figures()
    ex = r.exchange.figures()
    unit = "rank" if r.imported else "IPU"
    if not r.memory_recorded:
        fits = f"{imported.NOT_RECORDED}: {imported.WHY_NOT_RECORDED}"
    elif r.imported:
        rank = imported.ranks_of(r)[s.worst_ipu]
        fits = (f"peak {s.worst_tile_bytes / 2**20:,.1f} MiB allocated on rank {rank}"
                + (f", of {s.bytes_per_tile / 2**20:,.1f} MiB" if imported.capacity_known(r.run) else
                   "; the traces do not give the device's memory (import --device-memory GIB)"))
    elif s.fits:
        fits = (f"yes: the fullest tile (IPU {s.worst_ipu} tile {s.worst_tile}) holds {s.worst_tile_bytes:,} of "
                f"{s.bytes_per_tile:,} bytes ({100.0 * s.worst_tile_bytes / s.bytes_per_tile:.1f}%)")
    else:
        fits = (f"no: {s.oom_tiles:,} tiles over memory, the fullest (IPU {s.worst_ipu} tile {s.worst_tile}) "
                f"{s.worst_tile_bytes:,} of {s.bytes_per_tile:,} bytes")
    per = "micro-batches" if r.imported else "samples"
    rate = s.throughput_samples_per_s
    if r.imported and not imported.pipelined(r.run):  # each rank its own batches: steps, not one rank's micro-batches
        per, rate = "steps", 1.0 / s.step_s if s.step_s > 0 else float("nan")
    speed = (f"{s.step_s * 1e3:,.3g} ms a step" + ("" if r.imported else f" ({s.step_cycles:,.0f} cycles)") + ", "
             + (f"{rate:,.0f}" if rate >= 100 else f"{rate:,.3g}") + f" {per}/s")
    if st.num_stages > 1 and st.bottleneck_stage is not None and st.bottleneck_stage >= 0:
        stage = (f"stage {st.bottleneck_stage} is the bottleneck, {st.imbalance:.2f}x the mean stage; "
                 f"{unit}s idle {st.bubble_pct:.1f}% (ideal {st.ideal_bubble_pct:.1f}%)")
    elif r.imported and not imported.pipelined(r.run):  # each rank its own "stage" of the whole model
        schedule = (r.run.get("import") or {}).get("schedule") or "data parallel"
        stage = f"no pipeline to balance ({schedule}: each rank runs the whole model); ranks idle {ex.idle_pct:.1f}%"
    else:
        stage = f"one stage: no pipeline to balance; {unit}s idle {ex.idle_pct:.1f}%"
    doc.add("overview.answers", "Overview", {"fits": fits, "speed": speed, "stages": stage,
                                             "exchange": _moving(ex, r.imported)})
    doc.add("overview.insights", "Findings", r.answer("summary.insights"))
    # an imported run has no tiles or program tree; only an imported run may hold GPU kernels
    shown = [name for name in MORE if (name not in ("programs", "tiles") or not r.imported)
             and (name != "gpu" or r.imported)]
    doc.add("overview.more", "More: popvision report PROFILE --section NAME",
            {name: (IMPORTED_MORE.get(name, MORE[name]) if r.imported else MORE[name]) for name in shown})


def _moving(ex: Any, imported_run: bool) -> str:
    """The overview's share of the busy time spent moving data (``exchange.figures``): an IPU's exchange, sync and
    streaming; an imported trace's communication, and apart from it a GPU's copies and sets (its ``stream`` phase),
    which are not communication between ranks."""
    busy = max(ex.total_cycles - ex.idle_cycles, 1)
    computes = f" ({ex.compute_pct:.1f}% of all time computes)"
    if not imported_run:
        moving = ex.exchange_cycles + ex.sync_cycles + ex.stream_cycles
        return f"{100.0 * moving / busy:.1f}% of the busy time is exchange, sync and streaming{computes}"
    said = f"{100.0 * (ex.exchange_cycles + ex.sync_cycles) / busy:.1f}% of the busy time is communication"
    if ex.stream_cycles:
        said += f", {100.0 * ex.stream_cycles / busy:.1f}% the GPU's copies and sets"
    return said + computes


def _summary_figures(r: Any) -> Any:
    """The summary's figures; a profile whose memory is not recorded has none of memory, never a number."""
    s = r.summary.figures()
    unrecorded = imported.unrecorded_summary_fields(r.run)
    return {**dataclasses.asdict(s), **dict.fromkeys(unrecorded, imported.NOT_RECORDED)} if unrecorded else s


def _meaningless(doc: Document, key: str, title: str, sentence: str) -> None:
    """A section that has no meaning for this profile (an imported trace's tiles, say): one line."""
    doc.add(key, title, Table({}), items=[], empty=sentence)


def _summary(doc: Document, r: Any, figures: bool) -> None:
    doc.add("summary.figures", "Summary", _summary_figures(r))
    doc.add("summary.insights", "Insights", r.answer("summary.insights"))
    _tile_insights(doc, r)


def _tile_insights(doc: Document, r: Any) -> None:
    """Graph Analyser's insights beside the summary's: FP32 variables, the fullest tiles, memory over tiles."""
    fullest = "The five fullest tiles and what fills them"
    histogram = f"Memory over tiles: tiles' peak bytes in bins (tile memory {int(r.target['bytes_per_tile']):,} bytes)"
    if r.imported:  # none of the three means anything for ranks: one line says why, once
        _meaningless(doc, "summary.tile_insights", "FP32 variables, the fullest tiles, memory over tiles",
                     f"{imported.NO_VARIABLES} {imported.NO_TILES}")
        return
    inferred = r.insights.dtypes()[1]
    doc.add("summary.fp32_variables", "FP32 variables that could be FP16" + (
        " (types inferred from the run configuration: a schema-1 profile does not record them)" if inferred else ""),
        r.answer("insights.fp32_variables"))
    head, cats, tile_vars = (r.answer(f"insights.{n}") for n in ("fullest_tiles", "fullest_tile_categories",
                                                                   "fullest_tile_variables"))
    doc.add("summary.fullest_tiles", fullest, head, items=_fullest_items(head, cats, tile_vars),
            empty="the profile has no tiles")
    doc.add("summary.fullest_tile_categories", "The fullest tiles: bytes by category", cats)
    doc.add("summary.fullest_tile_variables", "The fullest tiles: largest variables at each tile's peak step",
            tile_vars)
    doc.add("summary.memory_histogram", histogram, r.answer("insights.histogram"))


def _fullest_items(head: Table, cats: Table, tile_vars: Table) -> list[tuple[str, list[str]]]:
    """Each fullest tile as a heading and two lines: its bytes by category, its largest variables."""
    items = []
    for rank, ipu, tile, total, pct, step in zip(*(head[c].tolist() for c in (
            "rank", "ipu", "tile", "total_bytes", "used_pct", "peak_step"))):
        mine = np.flatnonzero(cats["rank"] == rank)
        parts = [f"{c} {b:,}" + (" (always-live)" if a else "") for c, a, b in zip(
            cats["category"][mine].tolist(), cats["always_live"][mine].tolist(), cats["bytes"][mine].tolist())]
        ours = np.flatnonzero(tile_vars["rank"] == rank)
        names = [f"{n} ({c}{', ' + d if d else ''}) {b:,}" for n, c, d, b in zip(
            tile_vars["name"][ours].tolist(), tile_vars["category"][ours].tolist(), tile_vars["dtype"][ours].tolist(),
            tile_vars["bytes_on_tile"][ours].tolist())]
        items.append((f"{rank}. IPU {ipu} tile {tile}: {total:,} bytes ({pct:.1f}% of the tile), peak at step {step}",
                      [f"by category: {'; '.join(parts) or 'nothing'}",
                       f"largest variables: {'; '.join(names) or 'none'}"]))
    return items


def _memory(doc: Document, r: Any, figures: bool) -> None:
    if r.memory_recorded:
        doc.add("memory.by_ipu", "Memory per IPU", r.answer("memory.by_ipu"))
    else:
        _meaningless(doc, "memory.by_ipu", "Memory per IPU", imported.NO_MEMORY)
    if r.imported:
        _meaningless(doc, "memory.distribution", "Memory per tile: distribution over tiles", imported.NO_TILES)
    else:
        doc.add("memory.distribution", "Memory per tile: distribution over tiles", r.answer("memory.distribution"))
    if r.memory_recorded:
        doc.add("memory.by_category", "Memory by category", r.answer("memory.by_category"))
    else:
        _meaningless(doc, "memory.by_category", "Memory by category", imported.NO_MEMORY)
    if r.imported:
        _meaningless(doc, "memory.out_of_memory", "Out-of-memory tiles (largest excess first)", imported.NO_TILES)
        _meaningless(doc, "memory.largest_variables", "Largest variables", imported.NO_VARIABLES)
    else:
        doc.add("memory.out_of_memory", "Out-of-memory tiles (largest excess first)", r.answer("memory.out_of_memory"))
        doc.add("memory.largest_variables", "Largest variables", r.answer("memory.largest_variables", 20))
    _memory_depth(doc, r)
    if figures and r.memory_recorded:
        doc.add("memory.by_tile", "Memory per tile", r.memory.by_tile(), hidden=True)


def _memory_depth(doc: Document, r: Any) -> None:
    """Memory in depth: each IPU's five fullest tiles with what fills them, and their peaks over the steps."""
    fullest, worst = "The fullest tiles and the categories that fill them", "The fullest tiles over the program steps"
    if r.imported:
        _meaningless(doc, "memory.fullest_tiles", fullest, imported.NO_TILES)
        _meaningless(doc, "memory.worst_tiles", worst, imported.NO_TILES)
        return
    doc.add("memory.fullest_tiles", fullest, r.memory.depth.fullest(5))
    doc.add("memory.worst_tiles", worst + ": each tile's peak step", r.memory.depth.worst(5))


def _liveness(doc: Document, r: Any, figures: bool) -> None:
    if not r.memory_recorded:
        _meaningless(doc, "liveness.peaks", "Not-always-live memory peak per IPU", imported.NO_MEMORY)
        _meaningless(doc, "liveness.live_at_peak", "Largest variables live at each IPU's peak step",
                     imported.NO_VARIABLES)
        _meaningless(doc, "liveness.by_step", "Memory live at each program step", imported.NO_MEMORY)
        return
    peaks = r.answer("liveness.peaks")
    doc.add("liveness.peaks", "Not-always-live memory peak per IPU", peaks)
    if r.imported:  # (no named tensors: nothing live to list)
        _meaningless(doc, "liveness.live_at_peak", "Largest variables live at each IPU's peak step",
                     imported.NO_VARIABLES)
    else:
        at = list(zip(peaks["ipu"].tolist(), peaks["peak_step"].tolist()))
        live = [r.answer("liveness.live_at", ipu, step, 10) for ipu, step in at]
        table = Table({})
        sizes = [len(t) for t in live]
        if sum(sizes):  # stacked column by column: one table, not a concat of small ones
            table = Table({
                "ipu": np.repeat([ipu for ipu, _ in at], sizes), "step": np.repeat([step for _, step in at], sizes),
                **{c: np.concatenate([t[c] for t in live]) for c in live[0].names},
            })
        doc.add("liveness.live_at_peak", "Largest variables live at each IPU's peak step", table)
    doc.add("liveness.by_step", "Memory live at each program step", r.answer("liveness.by_step"))


def _stages(doc: Document, r: Any, figures: bool) -> None:
    doc.add("stages.figures", "Pipeline figures", r.stages.figures())
    if r.imported:
        _meaningless(doc, "stages.host_input", "Host input: the IPUs' wait for the host's data loaders",
                     imported.NO_HOST_CALLS)
        doc.add("stages.summary", "Stages: time per micro-batch, busy and idle", r.answer("stages.summary"))
        _meaningless(doc, "stages.best_split", "Best contiguous split of the blocks", imported.NO_BLOCKS)
        if figures:
            doc.add("stages.gantt", "Pipeline Gantt chart", r.stages.gantt(), hidden=True)
        return
    doc.add("stages.host_input", "Host input: the IPUs' wait for the host's data loaders", r.stages.host_input())
    doc.add("stages.summary", "Stages: time per micro-batch, busy and idle", r.answer("stages.summary"))
    split = r.stages.best_split()
    doc.add("stages.best_split", "Best contiguous split of the blocks", split.table)
    doc.add("stages.best_split_figures", "Best split: predicted time per step",
            {"current_step_cycles": split.current_step_cycles, "predicted_step_cycles": split.predicted_step_cycles,
             "gain_pct": split.gain_pct})
    doc.add("stages.blocks", "Blocks: cycles per micro-batch and memory", r.answer("stages.blocks"))
    if figures:
        doc.add("stages.gantt", "Pipeline Gantt chart", r.stages.gantt(), hidden=True)


def _exchange(doc: Document, r: Any, figures: bool) -> None:
    doc.add("exchange.figures", "Time by phase (IPU-cycles summed over IPUs)", r.exchange.figures())
    if r.imported:
        doc.add("exchange.communication", "Communication per rank: exposed and hidden behind compute",
                r.answer("exchange.communication"))
        _meaningless(doc, "exchange.host_input", "Host input: the IPUs' wait for the host's data loaders",
                     imported.NO_HOST_CALLS)
    else:
        doc.add("exchange.host_input", "Host input: the IPUs' wait for the host's data loaders",
                r.exchange.host_input())
    doc.add("exchange.by_kind", "Exchange by kind", r.answer("exchange.by_kind"))
    bandwidth = r.answer("exchange.bandwidth")
    sizeless = r.imported and imported.no_sizes(bandwidth)
    doc.add("exchange.bandwidth", "Achieved vs peak bandwidth", bandwidth, items=[] if sizeless else None,
            empty=imported.NO_SIZES if sizeless else "")  # (HTA's sampled NCCL kernels: a sentence, not 0 B/s)
    doc.add("exchange.matrix", "IPU-to-IPU matrix (-1 host, -2 streaming memory)", r.answer("exchange.matrix"))
    doc.add("exchange.costliest", "Costliest exchange steps", r.answer("exchange.costliest", 10))


def _operations(doc: Document, r: Any, figures: bool) -> None:
    doc.add("operations.figures", "Operations: IPU-cycles in ops, and FLOPs against the peak", r.operations.figures())
    doc.add("operations.by_op", "Operations: each op and pass over the run, costliest first",
            r.answer("operations.by_op"))
    if r.imported:
        _meaningless(doc, "operations.by_block", "Operations by block", IMPORTED_NO_BLOCKS)
    else:
        doc.add("operations.by_block", "Operations by block", r.answer("operations.by_block"))
    doc.add("operations.by_layer", "Operations by layer (an op's name before its last '/')",
            r.answer("operations.by_layer"))


def _system(doc: Document, r: Any, figures: bool) -> None:
    if not r.system.files():
        _meaningless(doc, "system.processes", "System timeline: host time per process", r.system.missing())
        return
    doc.add("system.processes", "System timeline: host time per process", r.answer("system.processes"))
    doc.add("system.by_name", "Where host time went: each event's count, total and share of wall time (events "
            "nest: a call's compile counts in both, so the shares may add past 100%)",
            r.answer("system.by_name"))
    doc.add("system.counters", "Counters: median, least and most", r.answer("system.counters"))


def _critical_path(doc: Document, r: Any, figures: bool) -> None:
    from popvision_py.analysis.pipeline.replay import ReplayError

    title = "Critical path across ranks: what set the step time"
    if r.critical_path.emulated:
        title = "Critical path through the supersteps: what set the run's time"
    try:
        doc.add("critical-path.figures", title, r.critical_path.figures())
    except ReplayError as exc:
        _meaningless(doc, "critical-path.figures", title, str(exc))
        return
    if r.critical_path.emulated:  # bulk-synchronous: each superstep's busiest IPU is on the path
        doc.add("critical-path.culprits", "Culprits: each IPU's micro-batch work made as light as the mean IPU's, "
                "re-timed", r.answer("critical_path.culprits"))
        doc.add("critical-path.by_ipu", "What each IPU set of the path (the busiest IPU of each superstep)",
                r.answer("critical_path.by_ipu"))
        return
    doc.add("critical-path.culprits", "Culprits: each rank's stages made as fast as the mean stage, re-timed",
            r.answer("critical_path.culprits"))
    doc.add("critical-path.whatif", "What if: the pipeline re-timed with its measured costs, for the run without the "
            "profiler (range: the costs of each recorded step, and the plain steps' spread either way)",
            r.answer("critical_path.whatif"))
    doc.add("critical-path.chain", "The chain, in time order (one measured step)", r.answer("critical_path.chain"))


def _programs(doc: Document, r: Any, figures: bool) -> None:
    title = "Program tree: each IPU's control program, its loops, segments, ops and steps"
    if r.imported:
        _meaningless(doc, "programs.tree", title, NO_PROGRAM)
        return
    doc.add("programs.tree", title, r.answer("programs.tree"), tree=True)


def _tiles(doc: Document, r: Any, figures: bool) -> None:
    if r.imported:
        _meaningless(doc, "tiles.by_ipu", "Tile balance per IPU: compute sets over the run", tile_answers.NO_TILES)
        return
    doc.add("tiles.by_ipu", "Tile balance per IPU: compute sets over the run", r.answer("tiles.by_ipu"))
    doc.add("tiles.balance", "Tile balance per compute set (worst balance first)", r.answer("tiles.balance"))
    doc.add("tiles.busiest", "Busiest tiles: most compute cycles over the run", r.answer("tiles.busiest", 10))


def add_instances(doc: Document, runs: list[tuple[str, Any]], first: Any) -> None:
    """A run of several instances: the summary figures that differ between their profiles, first in
    the document (``first`` is the first instance's open Report; the others are opened here)."""
    from popvision_py.analysis.report import Report  # opened only for a run of several instances

    summaries = [first.summary.figures()]
    for _, path in runs[1:]:
        with Report(path) as other:
            summaries.append(other.summary.figures())
    labels = [label for label, _ in runs]
    table = differences(labels, summaries)
    sentence = (f"The {len(runs)} instances' profiles give the same figures (each emulates the whole launch): "
                f"{labels[0]}'s report follows.")
    items = [(str(figure), [f"{label}: {shown(v)}" for label, v in zip(labels, values)])
             for figure, *values in zip(table["figure"], *(table[label] for label in labels))]
    doc.blocks.insert(0, ReportBlock("summary.instances", f"Instances of the run ({', '.join(labels)})", table,
                                     items=items, empty=sentence if not items else ""))


def add_verification(doc: Document, table: Table) -> None:
    """``popvision report --verify``: each fix re-emulated, measured beside predicted (``analysis.verify.COLUMNS``)."""
    doc.add("verify.fixes", "Fixes re-emulated: measured beside predicted", table, items=verification(table),
            empty="no fix to run: the insights suggest none with a command")


def _gpu(doc: Document, r: Any, figures: bool) -> None:
    """A GPU trace's kernels: popvision's figures within the profiled steps, then HTA 0.5's (docs/reports.md, "GPU")."""
    title = "GPU time per rank within the profiled steps: idle, compute, communication, memory"
    why = r.gpu.missing()
    if why:  # figures, not an empty table: the sentence is in every format, JSON's too
        doc.add("gpu.kernels", title, {"kernels": 0, "note": why})
        return
    by_rank = r.answer("gpu.by_rank")
    doc.add("gpu.by_rank", title, by_rank)
    doc.add("gpu.by_stream", "GPU time per stream within the profiled steps", r.answer("gpu.by_stream"))
    bounds, worth = r.answer("gpu.bounds"), r.answer("gpu.worth_a_look")
    # at many ranks the lists tell the ranks furthest past the median in compute, communication and idle time
    named, which = named_ranks(by_rank, ("compute_ns", "communication_ns", "idle_ns"))
    doc.add("gpu.bounds", f"What bound each step: its largest wait where it takes {BOUND_PCT:.0f}% of the step, "
            "else the GPU" + which, bounds, items=bound_items(of_ranks(bounds, named)), empty="no step")
    doc.add("gpu.worth_a_look", "The kernels worth a look: each rank's longest, and the short ones launched many "
            "times" + which, worth, items=worth_items(of_ranks(worth, named)),
            empty="no kernel in the profiled steps")
    late = r.answer("gpu.stragglers")
    doc.add("gpu.stragglers", f"Stragglers: the ranks ready for a step's collective more than {LATE_PCT:.0f}% of "
            "the median rank's time after it, and the step without them", late, items=straggler_items(late),
            empty="no rank was ready late for a collective (or the trace has no collective in a profiled step)")
    doc.add("gpu.kernels_by_name", "Each rank's 10 costliest kernels by name, within the profiled steps",
            r.answer("gpu.kernels_by_name", 10))
    doc.add("gpu.collectives", "Collectives per rank and process group: bytes, GPU time, bandwidth (nccl-tests' "
            "algbw and busbw, GB/s)", r.answer("gpu.collectives"))
    doc.add("gpu.phases", "Phases the trace's annotations name: each one's GPU time and the part another phase "
            "ran beside it (each rank's 20 longest)", r.answer("gpu.phases", 20))
    doc.add("gpu.phase_overlaps", "Phases run at once: the time a phase's kernels ran beside another's",
            r.answer("gpu.phase_overlaps"))
    doc.add("gpu.launch_summary", "Kernel launches per rank: runtime call, kernel, launch delay (HTA 0.5's)",
            r.answer("gpu.launch_summary"))
    hta = " as Holistic Trace Analysis 0.5 computes it"
    doc.add("gpu.temporal", "Temporal breakdown" + hta + " (first kernel to last, kernels launched before the "
            "last profiler step)", r.answer("gpu.temporal"))
    doc.add("gpu.kernel_types", "Kernel types and their overlaps, over all ranks" + hta, r.answer("gpu.kernel_types"))
    doc.add("gpu.overlap", "Communication-computation overlap per rank" + hta, r.answer("gpu.overlap"))
    doc.add("gpu.top_kernels", "Top kernels per rank and type" + hta + " (the 10 costliest up to 80% of the "
            "time, the rest as others)", r.answer("gpu.top_kernels"))
    doc.add("gpu.idle_breakdown", "Idle time per stream: host wait, kernel wait, other" + hta,
            r.answer("gpu.idle_breakdown"))


_SECTION_BUILDERS = {"summary": _summary, "memory": _memory, "liveness": _liveness, "stages": _stages,
                     "exchange": _exchange, "operations": _operations, "programs": _programs, "tiles": _tiles,
                     "system": _system, "critical-path": _critical_path, "gpu": _gpu}


def build_comparison(comparison: Any, section: str = "all") -> Document:
    """Collect a ``Comparison``'s run settings that differ and its side-by-side frames for ``section``."""
    a, b = comparison.a, comparison.b
    doc = Document("compare", f"popvision compare: {a.run.get('model', '?')} vs {b.run.get('model', '?')}",
                   [str(a.path), str(b.path)])
    doc.add("compare.profiles", "Profiles", {"a": str(a.path), "b": str(b.path),
                                             "a_model": a.run.get("model"), "b_model": b.run.get("model"),
                                             "a_strategy": a.run.get("strategy"), "b_strategy": b.run.get("strategy")})
    settings = comparison.configuration()
    doc.add("compare.configuration", "Configuration: the settings that differ" if len(settings)
            else "Configuration: a and b have the same settings", settings)
    unrecorded = [f"{side} ({r.path})" for side, r in (("a", a), ("b", b)) if not r.memory_recorded]
    for name in chosen(section, COMPARED):
        doc.add(f"{name}.comparison", f"{name.capitalize()}: a vs b", comparison.section(name))
        if unrecorded and name in ("summary", "memory", "liveness"):  # its figures of memory: "-", this says why
            _meaningless(doc, f"{name}.memory_not_recorded", f"{name.capitalize()}: memory not recorded",
                         f"{' and '.join(unrecorded)}: {imported.NO_MEMORY}")
    if a.imported and b.imported:
        ranks = imported.shared_ranks([a, b])
        compared_in_rank_words(doc.blocks, tuple((r.run.get("import") or {}).get("schedule") for r in (a, b)), ranks)
        doc.rank_words, doc.ranks = True, ranks
    return doc
