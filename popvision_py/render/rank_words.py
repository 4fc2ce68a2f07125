"""A report of an imported trace in a rank's words, for people (text, Markdown, HTML): its titles, key figures and
columns say rank for IPU and ns for cycles (an imported trace's cycle is one ns), and the figures of tiles, which
a rank has none of, are left out. JSON and CSV keep the profile's own names (``docs/reports.md``), so that a
script reads an imported report and an IPU report alike."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from popvision_py.analysis.common.tables import Table

# In titles, in this order: an IPU's cycles are a rank's ns
WORDS = ((re.compile(r" \(-1 host, -2 streaming memory\)"), ""), (re.compile(r"Achieved vs peak"), "Achieved"),
         (re.compile(r"IPU-cycles"), "ns"),
         (re.compile(r"\bIPU-to-IPU\b"), "rank-to-rank"), (re.compile(r"\bIPUs\b"), "ranks"),
         (re.compile(r"\bIPU\b"), "rank"), (re.compile(r"\bcycles\b"), "ns"),
         (re.compile(r"\bCycles\b"), "Time (ns)"))
# In the names of key figures and columns, word by word (between underscores)
NAME_WORDS = {"ipu": "rank", "ipus": "ranks", "cycles": "ns"}
# Key figures named apart from their words
NAMES = {"num_ipus": "ranks", "worst_ipu": "fullest_rank", "worst_tile_bytes": "fullest_rank_bytes",
         "bytes_per_tile": "device_bytes",
         # the time line's phases: communication the rank waits for, and a GPU's copies and sets
         "exchange_cycles": "exposed_comm_ns", "exchange_pct": "exposed_comm_pct", "stream_cycles": "copies_ns",
         "stream_pct": "copies_pct",
         # an imported program step is a piece of a rank's time line under one name, cut where the name or the phase
         # changes: its "executions" are not calls or kernels (10 NCCL kernels were 262 of them)
         "executions": "stretches",
         # a rank's CPU time line (the system section): its model calls are its profiler steps
         "model_calls": "steps"}
# A tile's figures: a rank has no tiles (the report says so once, in the memory section). Of the key figures, the
# worst tile's bytes are the fullest rank's; in a table of ranks, each row's total already.
TILE_FIGURES = ("worst_tile", "oom_tiles", "max_tile_bytes")
# Figures and columns a trace has none of: FLOPs (the traces count none), syncs (a GPU does not synchronise its ranks
# as an IPU's BSP does) and an IPU link's peak bandwidth; of an operator, also its id, block and variables (the traces
# name no tensors). JSON and CSV keep them, empty
NO_SUCH = (*TILE_FIGURES, "total_flops", "flop_utilisation_pct", "precision", "peak_flops_per_s_per_ipu",
           "sync_cycles", "sync_pct", "peak_bytes_per_s", "efficiency_pct",
           # the re-timing of supersteps: a rank runs none (the critical path re-times an imported run's stages)
           "balanced_step_cycles", "balance_gain_pct",
           # PopTorch's samples-per-second counter, of a process's model calls
           "samples_per_second")
NO_SUCH_COLUMNS = (*NO_SUCH, "worst_tile_bytes")  # a key figure's worst tile's bytes are the fullest rank's
NO_SUCH_OPERATOR = ("op_id", "block", "flops", "flops_per_s", "peak_pct", "variables", "variable_bytes",
                    "always_live_bytes")
# The blocks of what an imported trace cannot have (tiles, named tensors, a compiled program, an IPU's host calls,
# blocks to split), each only a note saying so: left out of text, Markdown and HTML (``ReportBlock.unread``); the memory
# section's tile distribution is kept, to say once that a rank has no tiles
UNREAD = ("summary.tile_insights", "memory.out_of_memory", "memory.largest_variables", "memory.fullest_tiles",
          "memory.worst_tiles", "liveness.live_at_peak", "stages.host_input", "stages.best_split",
          "exchange.host_input", "operations.by_block", "programs.tree", "tiles.by_ipu",
          # the import writes no counters to a rank's CPU time line
          "system.counters")
# The import's program step types (an operator's kind) and exchange kinds in PyTorch's words; an IPU's own exchange
# kinds (within a chip, to the host, to remote buffers) an imported trace has none of
PROGRAM_KINDS = {"compute_set": "compute", "global_exchange": "point-to-point", "all_reduce": "collective",
                 "stream_copy": "copy or set"}
KIND_WORDS = {"inter_ipu": "point-to-point", "all_reduce": "collective"}
# The time line's phases: communication the rank waits for, and a GPU's copies and sets (no syncs: a GPU does not
# synchronise its ranks as an IPU's BSP does)
PHASE_WORDS = {"compute": "compute", "exchange": "exposed communication", "stream": "copies and sets", "idle": "idle"}
IPU_KINDS = ("internal", "host", "remote_buffer")
# An imported trace's time axes in ms (its cycle is a ns): plotly's ticks read ns as "1.4B"
NS_PER_MS = 1e6
ITSELF = "a rank to itself: its collectives over its group, or its transfers to a peer the traces do not name"


def in_words(title: str) -> str:
    """``title`` with rank for IPU and ns for cycles, its first letter as it was."""
    text = title
    for pattern, word in WORDS:
        text = pattern.sub(word, text)
    return text[:1].upper() + text[1:] if title[:1].isupper() else text


def name(key: str) -> str:
    """A key figure's or column's name in a rank's words."""
    return NAMES.get(key) or "_".join(NAME_WORDS.get(word, word) for word in key.split("_"))


IPU_NUMBER = re.compile(r"\bIPU (\d+)(?:-(\d+))?\b")  # "IPU 3", or a group of them "IPU 0-63"


def figure_in_words(fig: Any, ranks: np.ndarray | None = None) -> Any:
    """A plotly figure of the HTML report in a rank's words: its title, its axes' titles, and the names and
    category labels of its traces ("IPU 3" is "rank 3", or the rank ``ranks`` gives IPU 3: "rank 103"); its numbers
    are left as they are. Returns ``fig``."""
    def rank(number: str) -> str:
        n = int(number)
        return str(ranks[n]) if ranks is not None and n < len(ranks) else number

    def words(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        value = IPU_NUMBER.sub(lambda m: f"IPU {rank(m[1])}" + (f"-{rank(m[2])}" if m[2] else ""), value)
        return in_words(value)

    fig.layout.title.text = words(fig.layout.title.text)
    for axis in (fig.layout.xaxis, fig.layout.yaxis):
        axis.title.text = words(axis.title.text)
    for trace in fig.data:
        trace.name = words(trace.name)
        for attr in ("x", "y"):
            values = getattr(trace, attr, None)
            if values is not None and len(values) and isinstance(values[0], str):
                setattr(trace, attr, [words(v) for v in values])
    return fig


def as_ranks(key: str, values: Any, ranks: np.ndarray | None) -> Any:
    """A key figure's or column's values, where it holds IPUs (``ipu``, ``src_ipu``, ``worst_ipu``...), as the ranks
    the traces name them (``ranks``: each IPU's): an import of ranks 8 to 15 holds IPUs 0 to 7. The host (-1) and
    anything not an IPU are left as they are."""
    if ranks is None or "ipu" not in key.split("_") or not len(ranks):
        return values
    array = np.asarray(values)
    if array.dtype.kind not in "iu":
        return values
    if _same(ranks):
        return array if array.ndim else array.item()
    inside = (array >= 0) & (array < len(ranks))
    named = np.where(inside, ranks[np.clip(array, 0, len(ranks) - 1)], array)
    return named if array.ndim else named.item()


def _same(ranks: np.ndarray) -> bool:
    """Whether each IPU is the rank of its number (ranks 0 to N-1, as most jobs): the values need no mapping, and no
    copy of a long table's column is made for it."""
    return bool(np.array_equal(ranks, np.arange(len(ranks))))


def in_rank_words(blocks: list[Any], schedule: str | None = None,
                  ranks: np.ndarray | None = None) -> None:  # document.ReportBlocks (below it)
    """Each block's title, and what text, Markdown and HTML show of its key figures or table (``shown``), in a
    rank's words; the data JSON and CSV write is left as it is. ``schedule``: what PyTorch ran (the import's
    ``schedule``), shown for the ``strategy`` key figure, an IPU's word the import maps it to ("sharded" for a
    data-parallel run). ``ranks``: each IPU's rank (``ranks.rank_numbers``), shown for its IPU."""
    for b in blocks:
        b.title = in_words(b.title)
        b.unread = b.key in UNREAD
        if b.items is not None or b.tree:
            continue
        shown = b.table()
        if isinstance(shown, dict):
            ran = {"strategy": schedule} if schedule and "strategy" in shown else {}
            if shown.get("bottleneck_stage") == -1:  # no micro-batch to time a stage by (a data-parallel run)
                ran["bottleneck_stage"] = "none: no pipeline"
            b.shown = {("schedule" if k == "strategy" and k in ran else name(k)): ran.get(k, as_ranks(k, v, ranks))
                       for k, v in shown.items() if k not in NO_SUCH}
            continue
        if isinstance(shown, Table) and "figure" in shown.names and "p50" in shown.names:
            # a spread of many ranks (``at_many_ranks``): a row a figure, named in the ``figure`` column
            figure = np.asarray(shown["figure"], dtype=object)
            keep = ~np.isin(figure, NO_SUCH_COLUMNS)
            b.shown = Table({k: np.asarray([name(str(f)) for f in figure[keep]], dtype=object) if k == "figure"
                             else np.asarray(v)[keep] for k, v in shown.columns.items()})
            continue
        if b.key.startswith("exchange."):
            shown = _peers_and_kinds(b, shown, ranks)
        elif b.key.startswith("operations.") and "kind" in _names(shown):
            shown = _with(shown, "kind", [PROGRAM_KINDS.get(str(k), str(k)) for k in np.asarray(shown["kind"])])
        left_out = (*NO_SUCH_COLUMNS, *NO_SUCH_OPERATOR) if b.key.startswith("operations.") else NO_SUCH_COLUMNS
        columns = _columns(shown)
        if "layer" in columns and "name" in columns and b.key == "operations.by_op" and np.array_equal(
                np.asarray(columns["layer"]).astype(str), np.asarray(columns["name"]).astype(str)):
            left_out = (*left_out, "layer")  # every operator's layer its name (no "/" in them): a column again
        b.shown = Table({name(k): as_ranks(k, v, ranks) for k, v in columns.items() if k not in left_out})


def _names(shown: Any) -> list[str]:
    return shown.names if isinstance(shown, Table) else [str(c) for c in shown.columns]


def _with(shown: Any, column: str, values: Any) -> Table:
    """``shown`` (a Table or DataFrame) as a Table, ``column`` replaced by ``values``."""
    return Table({k: (np.asarray(values, dtype=object) if k == column else np.asarray(v))
                  for k, v in _columns(shown).items()})


def _columns(shown: Any) -> dict[str, Any]:
    """A Table's or DataFrame's columns by name, as arrays."""
    return dict(shown.columns) if isinstance(shown, Table) else {str(c): np.asarray(shown[c]) for c in shown.columns}


def unnamed_peers(src: Any, dst: Any, names: Any, collective: Any) -> tuple[np.ndarray, np.ndarray]:
    """Which point-to-point transfers' source and which destination are a peer the traces do not name (a NCCL
    kernel without its ``c10d::send`` or ``recv_``: the import stores such a transfer from and to its own rank): the
    source of a receive, the destination of anything else (a send, a SendRecv kernel)."""
    alone = ~np.asarray(collective, bool) & (np.asarray(src) == np.asarray(dst)) & (np.asarray(src) >= 0)
    name = np.char.lower(np.asarray(names, dtype=str))
    receives = (np.char.find(name, "recv") >= 0) & (np.char.find(name, "send") < 0)
    return alone & receives, alone & ~receives


def _peers_and_kinds(b: Any, shown: Any, ranks: np.ndarray | None) -> Any:
    """An exchange block's rows in PyTorch's words: its kinds as ``KIND_WORDS`` names them, no row of an IPU's own
    kinds (``IPU_KINDS``), and a point-to-point transfer's peer the traces do not name (its kernel's rank on both
    ends: HTA's sampled traces' SendRecv kernels) as no rank ("-"), said in the title."""
    names, columns = _names(shown), _columns(shown)
    keep = np.ones(len(shown), bool)
    if "kind" in names:
        kind = np.asarray(columns["kind"]).astype(str)
        keep = ~np.isin(kind, IPU_KINDS)
        columns = {**columns, "kind": np.asarray([KIND_WORDS.get(k, k) for k in kind], dtype=object)}
    if {"src_ipu", "dst_ipu"} <= set(names) and "kind" not in names:  # the rank-to-rank matrix: whose is unknown
        src, dst = np.asarray(columns["src_ipu"]), np.asarray(columns["dst_ipu"])
        if ((src == dst) & (src >= 0)).any():
            b.title += f" ({ITSELF})"
    elif {"src_ipu", "dst_ipu"} <= set(names):
        src, dst = np.asarray(columns["src_ipu"]), np.asarray(columns["dst_ipu"])
        collective = np.asarray(columns["kind"]) == "collective"
        no_src, no_dst = unnamed_peers(src, dst, columns.get("name", np.full(len(src), "")), collective)
        group = collective & (src == dst)  # a collective is stored to its own rank: it goes to its process group
        if (no_src | no_dst | group).any():  # the ends named by rank here: a column with no rank is not one of IPUs
            columns = {**columns, "src_ipu": np.where(no_src, np.nan, as_ranks("src_ipu", src, ranks)),
                       "dst_ipu": np.where(no_dst | group, np.nan, as_ranks("dst_ipu", dst, ranks))}
            said = [words for words, found in (("a collective's group", group.any()),
                                               ("a peer the traces do not name", (no_src | no_dst).any())) if found]
            b.title += f" (-: {', or '.join(said)})"
    return Table({k: np.asarray(v)[keep] for k, v in columns.items()})


# In a comparison of two imported traces, the rows of figures a trace has none of: a tile's, FLOPs (the traces count
# none), syncs, and the exchange kinds of an IPU alone (within a chip, to the host, to remote buffers)
NOT_IMPORTED = ("tile", "tiles", "flop", "flops", "sync", *IPU_KINDS)


def no_pipeline(figures: np.ndarray, values: np.ndarray) -> np.ndarray:
    """A trace's compared values, its ``bottleneck_stage`` of -1 (no micro-batch to time a stage by: a data-parallel
    run) shown as no value ("-", as its imbalance and bubble are), not as a stage numbered -1; the column stays one
    of numbers."""
    none = (figures == "bottleneck_stage") & (values == -1)
    return np.where(none, np.nan, values) if none.any() else values


def figure_name(figure: str, ranks: np.ndarray | None) -> str:
    """A compared figure's name (``compare.section``'s: ``ipu 3 total_bytes``, ``inter_ipu cycles``) in a rank's
    words: each word as a report names it, an IPU by its rank, an exchange kind in PyTorch's words."""
    words = figure.split(" ")
    out = []
    for k, word in enumerate(words):
        if word == "ipu" and k + 1 < len(words) and words[k + 1].isdigit():
            out.append("rank")
            continue
        if k and words[k - 1] == "ipu" and word.isdigit():
            out.append(str(as_ranks("ipu", int(word), ranks)))
            continue
        out.append(KIND_WORDS.get(word) or name(word))
    return " ".join(out)


def rank_figures(figures: list[str], ranks: np.ndarray | None) -> tuple[np.ndarray, list[str]]:
    """Which compared figures an imported trace has (not ``NOT_IMPORTED``'s, nor ``NO_SUCH``'s), and their names in a
    rank's words (``figure_name``), for the figures kept."""
    keep = np.array([f not in NO_SUCH and not any(word in NOT_IMPORTED or any(part in NOT_IMPORTED
                                                                               for part in word.split("_"))
                                                  for word in f.split(" ")) for f in figures], bool)
    return keep, [figure_name(f, ranks) for f, kept in zip(figures, keep) if kept]


def compared_in_rank_words(blocks: list[Any], schedules: tuple[Any, Any], ranks: np.ndarray | None) -> None:
    """``build_comparison``'s blocks of two imported traces as their reports say them (``in_rank_words``): the
    titles, each compared figure's and setting's name (``figure_name``), the schedule PyTorch ran for the
    ``strategy`` an IPU's word maps it to, and no row of a figure a trace has none of (``NOT_IMPORTED``). ``ranks``:
    each IPU's rank where the two traces hold the same ranks, else None (their IPU numbers); JSON and CSV keep
    the data as it is."""
    for b in blocks:
        b.title = in_words(b.title)
        shown = b.table()
        if isinstance(shown, dict):
            b.shown = {k.replace("strategy", "schedule"): schedules["ab".index(k[0])] if k.endswith("strategy")
                       else v for k, v in shown.items()}
            continue
        columns = list(getattr(shown, "columns", [])) if not isinstance(shown, Table) else shown.names
        if "figure" in columns:
            keep, named = rank_figures([str(f) for f in np.asarray(shown["figure"], dtype=object)], ranks)
            kept = np.asarray(shown["figure"], dtype=object)[keep]
            b.shown = Table({c: (np.asarray(named, object) if c == "figure" else
                                 no_pipeline(kept, np.asarray(shown[c])[keep]) if c in ("a", "b")
                                 else np.asarray(shown[c])[keep]) for c in columns})
        elif "setting" in columns:
            b.shown = Table({c: (np.asarray([name(str(v)) for v in shown[c]], object) if c == "setting"
                                 else np.asarray(shown[c])) for c in columns})
