"""Plotly figures for the HTML report: pure functions, DataFrame in, figure out."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from popvision_py.render.rank_words import KIND_WORDS, NS_PER_MS, PHASE_WORDS

PHASE_COLOURS = {"compute": "#2b8cbe", "exchange": "#f03b20", "sync": "#feb24c", "stream": "#31a354", "idle": "#d9d9d9"}
PASS_COLOURS = {"forward": "#2b8cbe", "backward": "#e6550d", "update": "#756bb1"}


def _layout(fig: go.Figure, title: str, x: str, y: str) -> go.Figure:
    fig.update_layout(title=title, xaxis_title=x, yaxis_title=y, template="plotly_white", height=380,
                      margin=dict(l=60, r=20, t=50, b=50), legend=dict(orientation="h"))
    return fig


def memory_by_ipu(by_ipu: pd.DataFrame) -> go.Figure:
    ipus = [f"IPU {i}" for i in by_ipu["ipu"]]
    fig = go.Figure([
        go.Bar(name="always-live", x=ipus, y=by_ipu["always_live_bytes"]),
        go.Bar(name="not-always-live", x=ipus, y=by_ipu["not_always_live_bytes"]),
        go.Scatter(name="capacity", x=ipus, y=by_ipu["capacity_bytes"], mode="markers", marker_symbol="line-ew-open",
                   marker=dict(size=30, color="black")),
    ])
    fig.update_layout(barmode="stack")
    return _layout(fig, "Memory per IPU", "IPU", "bytes")


def tile_map(by_tile: pd.DataFrame, bytes_per_tile: int) -> go.Figure:
    grid = by_tile.pivot(index="ipu", columns="tile", values="total_bytes")
    fig = go.Figure(go.Heatmap(z=grid.to_numpy(), x=grid.columns, y=[f"IPU {i}" for i in grid.index],
                               colorscale="Viridis", zmin=0, zmax=max(bytes_per_tile, float(grid.max().max() or 0)),
                               colorbar=dict(title="bytes")))
    return _layout(fig, f"Memory per tile (capacity {bytes_per_tile:,} bytes)", "tile", "")


def tile_histogram(by_tile: pd.DataFrame, bytes_per_tile: int) -> go.Figure:
    fig = go.Figure([go.Histogram(x=g["total_bytes"], name=f"IPU {i}", opacity=0.7)
                     for i, g in by_tile.groupby("ipu")])
    fig.add_vline(x=bytes_per_tile, line_dash="dash", annotation_text="capacity")
    fig.update_layout(barmode="overlay")
    return _layout(fig, "Distribution of memory over tiles", "bytes", "tiles")


LINES = 32  # past this many IPUs (ranks) the liveness figure is a band over them and the fullest few as lines
FULLEST_LINES = 3


MAX_STEPS = 2_000  # steps a memory figure draws of a line: past them, each run of steps by its peaks


def peaks_of_runs(frame: pd.DataFrame, by: str, columns: Sequence[str],
                  keep: np.ndarray | None = None) -> tuple[pd.DataFrame, int]:
    """``frame`` (rows in order within each ``by`` group, a step a row) as a line a group draws it: where a group
    has more than ``MAX_STEPS`` rows, each run of ``width`` of them (the fewest that leave at most ``MAX_STEPS``
    runs) by its row of the most of each of ``columns``, the peaks a memory figure must not lose, and the rows
    ``keep`` marks. Returns those rows and ``width`` (1: every row)."""
    longest = int(frame.groupby(by).size().max()) if len(frame) else 0
    width = -(-longest // MAX_STEPS)
    if width <= 1:
        return frame, 1
    frame = frame.reset_index(drop=True)
    runs = frame.assign(_run=frame.groupby(by).cumcount().to_numpy() // width).groupby([by, "_run"])
    rows = [runs[c].idxmax().to_numpy() for c in columns] + ([np.flatnonzero(keep)] if keep is not None else [])
    return frame.loc[np.unique(np.concatenate(rows))], width


def liveness(by_step: pd.DataFrame, most: int = LINES) -> go.Figure:
    """Memory live at each program step, a line an IPU; past ``most`` IPUs (ranks), the least, median and most
    over them at each step as a band, and the ``FULLEST_LINES`` IPUs of the highest peaks as lines. Past
    ``MAX_STEPS`` steps, each run of steps by its peak (``peaks_of_runs``): a 10 GB import's 835,000 steps drew
    22 MB of page."""
    title = "Memory live over program steps (always-live + not-always-live)"
    ipus = by_step["ipu"].nunique()
    if ipus <= most:
        by_step, width = peaks_of_runs(by_step, "ipu", ("total_bytes",))
        fig = go.Figure([go.Scatter(x=g["step"], y=g["total_bytes"], name=f"IPU {i}", mode="lines",
                                    hovertext=g["name"]) for i, g in by_step.groupby("ipu")])
        return _layout(fig, title + _each_point(width), "program step", "bytes")
    band = by_step.groupby("step")["total_bytes"].agg(["min", "median", "max"])
    fullest = by_step.groupby("ipu")["total_bytes"].max().sort_values(ascending=False, kind="stable")
    shown, width = peaks_of_runs(by_step[by_step["ipu"].isin(fullest.index[:FULLEST_LINES])], "ipu",
                                 ("total_bytes",))
    band, band_width = peaks_of_runs(band.reset_index().assign(ipu=0), "ipu", ("max",))
    band = band.set_index("step")
    title += _each_point(max(width, band_width))
    fig = go.Figure([
        go.Scatter(x=band.index, y=band["max"], name="most", mode="lines", line=dict(width=0, color="#9ecae1")),
        go.Scatter(x=band.index, y=band["min"], name="least", mode="lines", fill="tonexty",
                   line=dict(width=0, color="#9ecae1")),
        go.Scatter(x=band.index, y=band["median"], name="median", mode="lines", line=dict(color="#3182bd")),
        *[go.Scatter(x=g["step"], y=g["total_bytes"], name=f"IPU {i}", mode="lines", hovertext=g["name"])
          for i, g in shown.groupby("ipu")]])
    return _layout(fig, f"{title}: the least, median and most over {ipus:,} IPUs, the {FULLEST_LINES} fullest as lines",
                   "program step", "bytes")


def _each_point(width: int) -> str:
    """What a thinned line's point stands for, said on its figure."""
    return f" · each point the most of {width:,} steps" if width > 1 else ""


def stage_times(summary: pd.DataFrame) -> go.Figure:
    rows = summary[summary["pass"].isin(list(PASS_COLOURS))]
    fig = go.Figure([go.Bar(name=p, x=[f"stage {s}" for s in g["stage"]], y=g["cycles_per_micro_batch"],
                            marker_color=PASS_COLOURS[p]) for p, g in rows.groupby("pass", sort=False)])
    fig.update_layout(barmode="stack")
    return _layout(fig, "Cycles per micro-batch per stage", "stage", "cycles")


def gantt(bars: pd.DataFrame, max_bars: int = 5000) -> go.Figure:
    bars = bars.head(max_bars)
    fig = go.Figure([go.Bar(name=p, y=[f"IPU {i}" for i in g["ipu"]], x=g["end_cycle"] - g["start_cycle"],
                            base=g["start_cycle"], orientation="h", marker_color=PASS_COLOURS.get(p, "#999"),
                            text=g["micro_batch"].astype(str), hovertext=[f"stage {s} mb {m}" for s, m in
                                                                          zip(g["stage"], g["micro_batch"])])
                     for p, g in bars.groupby("pass", sort=False)])
    fig.update_layout(barmode="overlay")
    fig.update_yaxes(autorange="reversed")
    return _layout(fig, "Pipeline: forward and backward per micro-batch", "cycle", "")


def phases(figures: dict, imported: bool = False) -> go.Figure:
    """The time by phase summed over the IPUs (``exchange.figures``); an ``imported`` trace's over its ranks, in ms."""
    if imported:
        names = list(PHASE_WORDS)
        fig = go.Figure(go.Bar(x=[PHASE_WORDS[n] for n in names],
                               y=[figures.get(f"{n}_cycles", 0) / NS_PER_MS for n in names],
                               marker_color=[PHASE_COLOURS[n] for n in names]))
        return _layout(fig, "Time by phase, summed over the ranks", "phase", "ms")
    names = ["compute", "exchange", "sync", "stream", "idle"]
    fig = go.Figure(go.Bar(x=names, y=[figures.get(f"{n}_cycles", 0) for n in names],
                           marker_color=[PHASE_COLOURS[n] for n in names]))
    return _layout(fig, "Time by phase (IPU-cycles)", "phase", "cycles")


def exchange_by_kind(by_kind: pd.DataFrame, imported: bool = False) -> go.Figure:
    """Each exchange kind's cycles, its bytes as the bars' text; an ``imported`` trace's kinds in PyTorch's words
    (none of an IPU's own), in ms."""
    if imported:
        mine = by_kind[by_kind["kind"].astype(str).isin(list(KIND_WORDS))]
        fig = go.Figure(go.Bar(x=mine["kind"].astype(str).map(KIND_WORDS), y=mine["cycles"] / NS_PER_MS,
                               text=mine["bytes"], name="ms"))
        return _layout(fig, "Communication by kind (text: bytes)", "kind", "ms")
    fig = go.Figure(go.Bar(x=by_kind["kind"], y=by_kind["cycles"], text=by_kind["bytes"], name="cycles"))
    return _layout(fig, "Exchange cycles by kind (text: bytes)", "kind", "cycles")


MATRIX_CELLS = 64  # an exchange matrix of more IPUs (ranks) than this is drawn over groups of consecutive ones


def exchange_matrix(matrix: pd.DataFrame, most: int = MATRIX_CELLS) -> go.Figure:
    """Bytes from each source to each destination; past ``most`` IPUs (ranks) a side, each cell a group of
    consecutive ones ("IPU 0-63"), its bytes summed, so that 4,096 ranks draw 64 x 64 cells, not 16 million."""
    names = {-1: "host", -2: "streaming memory"}
    ipus = np.unique(np.concatenate([matrix["src_ipu"].to_numpy(), matrix["dst_ipu"].to_numpy()]))
    ipus = ipus[ipus >= 0]
    size = max(1, -(-len(ipus) // most)) if len(ipus) > most else 1

    def cell(i: np.ndarray) -> np.ndarray:  # host and streaming memory keep their own cells
        i = np.asarray(i, np.int64)
        return np.where(i < 0, i, np.searchsorted(ipus, i) // size)

    def label(c: int) -> str:
        if c < 0:
            return names[c]
        first, last = ipus[c * size], ipus[min(len(ipus), (c + 1) * size) - 1]
        return f"IPU {first}" if size == 1 else f"IPU {first}-{last}"

    cells = pd.DataFrame({"src": cell(matrix["src_ipu"]), "dst": cell(matrix["dst_ipu"]), "bytes": matrix["bytes"]})
    grid = cells.pivot_table(index="src", columns="dst", values="bytes", aggfunc="sum", fill_value=0)
    fig = go.Figure(go.Heatmap(z=grid.to_numpy(), x=[label(c) for c in grid.columns],
                               y=[label(i) for i in grid.index], colorscale="Blues", colorbar=dict(title="bytes")))
    title = "Bytes from source to destination" + (f" (groups of {size} IPUs)" if size > 1 else "")
    return _layout(fig, title, "destination", "source")


def program_tree(tree: pd.DataFrame, max_nodes: int = 3000) -> go.Figure:
    """The program tree as an icicle: each node's width its total cycles, coloured by its phase; the
    program steps left out when the tree is larger than ``max_nodes`` (their op's box stands for them)."""
    if len(tree) > max_nodes:
        op_nodes = tree.index[(tree["kind"] == "sequence") & (tree["op"] != "")]
        tree = tree[~tree["parent"].isin(op_nodes)]
    fig = go.Figure(go.Icicle(ids=tree["node"].astype(str), parents=tree["parent"].where(tree["parent"] >= 0, "")
                              .astype(str).replace("-1", ""), labels=tree["name"], values=tree["total_cycles"],
                              branchvalues="total",
                              marker=dict(colors=[PHASE_COLOURS.get(p, "#999") for p in tree["phase"]]),
                              maxdepth=4, tiling=dict(orientation="v")))
    return _layout(fig, "Program tree: total cycles per node (click a box to open it)", "", "")
def operations(by_layer: pd.DataFrame, n: int = 20, imported: bool = False) -> go.Figure:
    """The ``n`` costliest layers' cycles over the run, by phase (``operations.by_layer``, costliest first); an
    ``imported`` trace's operators' ms, by its phases."""
    rows = by_layer.head(n).iloc[::-1]  # costliest at the top
    if imported:
        fig = go.Figure([go.Bar(name=PHASE_WORDS[phase], y=rows["layer"], x=rows[f"{phase}_cycles"] / NS_PER_MS,
                                orientation="h", marker_color=PHASE_COLOURS[phase])
                         for phase in ("compute", "exchange", "stream")])
        fig.update_layout(barmode="stack")
        return _layout(fig, f"Time of the {min(n, len(by_layer))} costliest operators, by phase", "ms", "")
    fig = go.Figure([go.Bar(name=phase, y=rows["layer"], x=rows[f"{phase}_cycles"], orientation="h",
                            marker_color=PHASE_COLOURS[phase]) for phase in ("compute", "exchange", "sync", "stream")])
    fig.update_layout(barmode="stack")
    return _layout(fig, f"Cycles of the {min(n, len(by_layer))} costliest layers, by phase", "cycles", "")


def comparison(frame: pd.DataFrame, title: str, n: int = 30) -> go.Figure:
    # identifiers have no difference, and a figure new on one side no relative one: neither is a bar
    changed = frame[(frame["difference"] != 0) & frame["difference_pct"].notna()].copy()
    changed = changed.reindex(changed["difference_pct"].abs().sort_values(ascending=False).index).head(n)
    fig = go.Figure(go.Bar(x=changed["difference_pct"], y=changed["figure"], orientation="h"))
    return _layout(fig, title + " (largest relative differences, b vs a)", "difference %", "")


def tile_balance(balance: pd.DataFrame) -> go.Figure:
    """Each compute set's imbalance (max / mean tile cycles) against its share of the run: the costly and
    unbalanced ones are top right."""
    fig = go.Figure([go.Scatter(x=g["run_pct"], y=g["imbalance"], mode="markers", name=f"IPU {i}",
                                text=g["name"].astype(str), hovertemplate="%{text}<br>%{x:.2f} % of the run, "
                                "imbalance %{y:.2f}<extra></extra>") for i, g in balance.groupby("ipu")])
    return _layout(fig, "Tile balance per compute set", "share of the run, %", "imbalance (max / mean tile cycles)")
