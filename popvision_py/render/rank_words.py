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
WORDS = ((re.compile(r"IPU-cycles"), "ns"), (re.compile(r"\bIPU-to-IPU\b"), "rank-to-rank"),
         (re.compile(r"\bIPUs\b"), "ranks"), (re.compile(r"\bIPU\b"), "rank"), (re.compile(r"\bcycles\b"), "ns"),
         (re.compile(r"\bCycles\b"), "Time (ns)"))
# In the names of key figures and columns, word by word (between underscores)
NAME_WORDS = {"ipu": "rank", "ipus": "ranks", "cycles": "ns"}
# Key figures named apart from their words
NAMES = {"num_ipus": "ranks", "worst_ipu": "fullest_rank", "worst_tile_bytes": "fullest_rank_bytes",
         "bytes_per_tile": "device_bytes",
         # an imported program step is a piece of a rank's time line under one name, cut where the name or the phase
         # changes: its "executions" are not calls or kernels (10 NCCL kernels were 262 of them)
         "executions": "stretches"}
# A tile's figures: a rank has no tiles (the report says so once, in the memory section). Of the key figures, the
# worst tile's bytes are the fullest rank's; in a table of ranks, each row's total already.
TILE_FIGURES = ("worst_tile", "oom_tiles", "max_tile_bytes")
TILE_COLUMNS = (*TILE_FIGURES, "worst_tile_bytes")


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
    inside = (array >= 0) & (array < len(ranks))
    named = np.where(inside, ranks[np.clip(array, 0, len(ranks) - 1)], array)
    return named if array.ndim else named.item()


def in_rank_words(blocks: list[Any], schedule: str | None = None,
                  ranks: np.ndarray | None = None) -> None:  # document.ReportBlocks (below it)
    """Each block's title, and what text, Markdown and HTML show of its key figures or table (``shown``), in a
    rank's words; the data JSON and CSV write is left as it is. ``schedule``: what PyTorch ran (the import's
    ``schedule``), shown for the ``strategy`` key figure, an IPU's word the import maps it to ("sharded" for a
    data-parallel run). ``ranks``: each IPU's rank (``ranks.rank_numbers``), shown for its IPU."""
    for b in blocks:
        b.title = in_words(b.title)
        if b.items is not None or b.tree:
            continue
        shown = b.table()
        if isinstance(shown, dict):
            ran = {"strategy": schedule} if schedule and "strategy" in shown else {}
            if shown.get("bottleneck_stage") == -1:  # no micro-batch to time a stage by (a data-parallel run)
                ran["bottleneck_stage"] = "none: no pipeline"
            b.shown = {("schedule" if k == "strategy" and k in ran else name(k)): ran.get(k, as_ranks(k, v, ranks))
                       for k, v in shown.items() if k not in TILE_FIGURES}
        elif isinstance(shown, Table) and "figure" in shown.names and "p50" in shown.names:
            # a spread of many ranks (``at_many_ranks``): a row a figure, named in the ``figure`` column
            figure = np.asarray(shown["figure"], dtype=object)
            keep = ~np.isin(figure, TILE_COLUMNS)
            b.shown = Table({k: np.asarray([name(str(f)) for f in figure[keep]], dtype=object) if k == "figure"
                             else np.asarray(v)[keep] for k, v in shown.columns.items()})
        elif isinstance(shown, Table):
            b.shown = Table({name(k): as_ranks(k, v, ranks) for k, v in shown.columns.items()
                             if k not in TILE_COLUMNS})
        else:  # a DataFrame
            b.shown = Table({name(str(k)): as_ranks(str(k), np.asarray(shown[k]), ranks) for k in shown.columns
                             if k not in TILE_COLUMNS})


# In a comparison of two imported traces, the rows of figures a trace has none of: a tile's, FLOPs (the traces count
# none), syncs, and the exchange kinds of an IPU alone (within a chip, to the host, to remote buffers)
NOT_IMPORTED = ("tile", "tiles", "flop", "flops", "sync", "internal", "host", "remote_buffer")
KIND_WORDS = {"inter_ipu": "point-to-point", "all_reduce": "collective"}  # an imported trace's exchange kinds


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
    """Which compared figures an imported trace has (not ``NOT_IMPORTED``'s), and their names in a rank's words
    (``figure_name``), for the figures kept."""
    keep = np.array([not any(word in NOT_IMPORTED or any(part in NOT_IMPORTED for part in word.split("_"))
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
