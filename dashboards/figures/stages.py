"""The Stages page's figures: the pipeline's Gantt chart, cycles and busy time per stage, and the suggested
split (``stage_cycles`` is also the Compare page's stage cycles)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from dashboards.figures.ranks import MANY_RANKS, busy_heatmap
from dashboards.figures.style import CAPACITY_COLOUR, IPUS, PASS_COLOURS, PHASE_COLOURS, Naming, empty, styled


def micro_batch_labels(gantt: pd.DataFrame) -> pd.Series:
    """'F3' / 'B3' / 'U': the tutorial's labels, micro-batches numbered from 1 through the run."""
    micro_batches = int(gantt["micro_batch"].max()) + 1 if len(gantt) else 1
    number = gantt["iteration"].astype(int) * micro_batches + gantt["micro_batch"].astype(int) + 1
    initial = gantt["pass"].astype(str).str[0].str.upper()
    return initial.where(gantt["micro_batch"] < 0, initial + number.astype(str))


def stages_gantt(gantt: pd.DataFrame, max_bars: int = 3000, naming: Naming = IPUS) -> go.Figure:
    """Forward/backward Gantt chart per IPU (``stages.gantt()``), as the PopTorch tutorial draws it.

    The first iteration is in view (double-click shows all drawn). Only the first iterations that
    fit in ``max_bars`` bars are drawn: a long run repeats the same pattern, and a browser slows
    down past a few thousand bars; the x-axis title says how many are shown.
    """
    if gantt.empty:
        return empty("No pipeline stages in this profile.")
    ipus = np.unique(gantt["ipu"].to_numpy())
    if len(ipus) > MANY_RANKS:  # a row per rank would be thousands of pixels of pale bars: a heat map instead
        divisor, unit = naming.scale
        return busy_heatmap(np.searchsorted(ipus, gantt["ipu"].to_numpy()), gantt["start_cycle"].to_numpy(),
                            gantt["end_cycle"].to_numpy(), [naming.label(i) for i in ipus],
                            (int(gantt["start_cycle"].min()), int(gantt["end_cycle"].max())),
                            lambda t: np.asarray(t) / divisor, "running a forward or backward pass", unit)
    iterations = np.sort(gantt["iteration"].unique())
    per_iteration = max(1, math.ceil(len(gantt) / len(iterations)))
    shown = iterations[: max(1, max_bars // per_iteration)]
    frame = gantt[gantt["iteration"].isin(shown)].copy()
    frame["label"] = micro_batch_labels(frame)
    frame["ipu_label"] = frame["ipu"].map(naming.label)
    frame["pass"] = frame["pass"].astype(str)
    show_text = len(frame) <= max_bars
    divisor, unit = naming.scale  # an imported trace's bars in ms
    number = "%{base:,} – %{x:,}" if divisor == 1 else "%{base:,.3f} – %{x:,.3f}"
    fig = go.Figure()
    for pass_name in [p for p in PASS_COLOURS if p in set(frame["pass"])]:
        part = frame[frame["pass"] == pass_name]
        fig.add_trace(
            go.Bar(
                y=part["ipu_label"],
                x=_scaled(part["end_cycle"] - part["start_cycle"], divisor),
                base=_scaled(part["start_cycle"], divisor),
                orientation="h",
                name=pass_name,
                marker=dict(color=PASS_COLOURS[pass_name], line=dict(color="white", width=1)),
                text=part["label"] if show_text else None,
                textposition="inside",
                insidetextanchor="middle",
                textangle=0,
                textfont=dict(color="white", size=11),
                customdata=np.stack([part["stage"], part["iteration"], part["micro_batch"], part["label"]], axis=-1),
                hovertemplate=("%{customdata[3]}: stage %{customdata[0]}, " + pass_name
                               + "<br>iteration %{customdata[1]}, micro-batch %{customdata[2]}"
                               + "<br>" + unit + " " + number + " long<extra>%{y}</extra>"),
            )
        )
    labels = sorted(frame["ipu"].unique())
    fig.update_yaxes(categoryorder="array", categoryarray=[naming.label(i) for i in labels][::-1])
    first = frame[frame["iteration"] == frame["iteration"].min()]
    total = int(gantt.attrs.get("iterations", len(iterations)))  # a long trace's bars are its first iterations'
    note = "" if len(shown) == total else f" (the first {len(shown):,} of {total:,} iterations)"
    fig.update_xaxes(title=unit + note, range=[float(frame["start_cycle"].min()) / divisor,
                                               float(first["end_cycle"].max()) / divisor])
    return styled(fig, barmode="overlay", bargap=0.2, height=max(240, 100 + 60 * len(labels)),
                  uniformtext=dict(minsize=8, mode="hide"))


def _scaled(values: pd.Series, divisor: float) -> pd.Series:
    """``values`` in the axis's unit (``Naming.scale``): cycles as they are, an imported trace's ns in ms."""
    return values if divisor == 1 else values / divisor


def _stage_labels(frame: pd.DataFrame, naming: Naming = IPUS) -> pd.Series:
    """'stage 1 · IPU 1' (or 'stage 1 · Rank 1') for each row of a ``stages.summary()`` frame."""
    return "stage " + frame["stage"].astype(str) + " · " + frame["ipu"].map(naming.label)


def stage_imbalance(summary: pd.DataFrame, bottleneck_stage: int | None = None, naming: Naming = IPUS) -> go.Figure:
    """Cycles per micro-batch of each stage and pass (``stages.summary()``), the bottleneck outlined. Passes
    that run once per step (its ``per`` column: the weight update) are not per micro-batch, so not drawn."""
    if "per" in summary:
        summary = summary[summary["per"].astype(str) != "step"]
    if summary.empty:
        return empty("No stages.")
    frame = summary.copy()
    frame["pass"] = frame["pass"].astype(str)
    frame["stage_label"] = _stage_labels(frame, naming)
    divisor, unit = naming.scale
    order = list(dict.fromkeys(frame.sort_values("stage")["stage_label"]))
    fig = go.Figure()
    for pass_name in [p for p in PASS_COLOURS if p in set(frame["pass"])]:
        part = frame[frame["pass"] == pass_name]
        outline = np.where(part["stage"] == bottleneck_stage, 3, 0)
        fig.add_trace(go.Bar(x=part["stage_label"], y=_scaled(part["cycles_per_micro_batch"], divisor), name=pass_name,
                             marker=dict(color=PASS_COLOURS[pass_name],
                                         line=dict(color=CAPACITY_COLOUR, width=outline)),
                             hovertemplate="%{x} " + pass_name + "<br>%{y:,} " + unit
                                           + " per micro-batch<extra></extra>"))
    fig.update_xaxes(categoryorder="array", categoryarray=order)
    fig.update_yaxes(title=f"{unit} per micro-batch")
    return styled(fig, barmode="stack", height=340,
                  legend=dict(traceorder="normal", orientation="h", y=1.02, yanchor="bottom", x=0))


def stage_utilisation(summary: pd.DataFrame, naming: Naming = IPUS) -> go.Figure:
    """Busy and idle cycles of each stage's IPU over the run: the pipeline's bubble, per stage."""
    if summary.empty:
        return empty("No stages.")
    passes = summary["pass"].astype(str)
    # The analysis gives each stage an "all" row (its IPU's whole run) beside the per-pass rows.
    frame = summary[passes == "all"] if (passes == "all").any() else summary.drop_duplicates(["stage"])
    frame = frame.sort_values("stage")
    if len(frame) > MANY_RANKS:
        return utilisation_spread(frame, naming)
    labels = _stage_labels(frame, naming)
    divisor, unit = naming.scale
    fig = go.Figure()
    fig.add_trace(go.Bar(x=labels, y=_scaled(frame["busy_cycles"], divisor), name="busy",
                         marker_color=PHASE_COLOURS["compute"]))
    fig.add_trace(go.Bar(x=labels, y=_scaled(frame["idle_cycles"], divisor), name="idle",
                         marker_color=PHASE_COLOURS["idle"]))
    # What is neither the stage's passes nor waiting (host calls, streams of no stage), so that
    # every bar reaches the run's length, as busy + idle + other does on the IPU.
    other = frame["total_cycles"] - frame["busy_cycles"] - frame["idle_cycles"]
    other_name = "other (no stage's pass)" if naming.imported else "other (host I/O, no stage)"
    fig.add_trace(go.Bar(x=labels, y=_scaled(other, divisor), name=other_name, marker_color=PHASE_COLOURS["stream"]))
    fig.update_yaxes(title=unit)
    return styled(fig, barmode="stack", height=300)


def utilisation_spread(frame: pd.DataFrame, naming: Naming = IPUS, named: int = 3) -> go.Figure:
    """``stage_utilisation`` past ``MANY_RANKS`` stages: a bar each would be a pixel wide, so the stages are
    sorted by busy time, the busiest first, and drawn as areas (busy, idle, other) along that order: the
    distribution over the stages, each stage on hover, the ``named`` busiest named above it."""
    frame = frame.sort_values(["busy_cycles", "stage"], ascending=[False, True], kind="stable")
    divisor, unit = naming.scale
    labels = _stage_labels(frame, naming).to_numpy(object)
    at = np.arange(len(frame))
    other = frame["total_cycles"] - frame["busy_cycles"] - frame["idle_cycles"]
    fig = go.Figure()
    for values, name, colour in ((frame["busy_cycles"], "busy", PHASE_COLOURS["compute"]),
                                 (frame["idle_cycles"], "idle", PHASE_COLOURS["idle"]),
                                 (other, "other (no stage's pass)" if naming.imported else "other (host I/O, no stage)",
                                  PHASE_COLOURS["stream"])):
        fig.add_trace(go.Scatter(x=at, y=_scaled(values, divisor), name=name, stackgroup="time", mode="lines",
                                 line=dict(width=0.5, color=colour), customdata=labels,
                                 hovertemplate="%{customdata}: %{y:,.3f} " + unit + " " + name + "<extra></extra>"))
    busiest = _scaled(frame["busy_cycles"], divisor).to_numpy()[:named]
    for k, (label, y) in enumerate(zip(labels[:named], busiest)):
        fig.add_annotation(x=k, y=float(y), text=str(label), showarrow=True, arrowhead=1, ax=40 + 30 * k, ay=-25)
    fig.update_xaxes(title=f"{len(frame):,} stages, the busiest first (hover for each)")
    fig.update_yaxes(title=unit)
    return styled(fig, height=300)


def stage_cycles(summary: pd.DataFrame) -> pd.DataFrame:
    """[stage, cycles_per_micro_batch] with a stage's forward and backward laid end to end, to draw
    a stage as one bar (``stages.summary()`` has a row per stage and pass)."""
    work = summary[summary["pass"].astype(str).isin(["forward", "backward"])]
    return work.groupby("stage", as_index=False)["cycles_per_micro_batch"].sum()


def split_comparison(current: pd.DataFrame, suggested: pd.DataFrame) -> go.Figure:
    """Cycles per micro-batch per stage now and with the suggested split (``stages.best_split()``).

    ``current``: [stage, cycles_per_micro_batch] (forward and backward summed per stage);
    ``suggested``: ``best_split().stages``.
    """
    fig = go.Figure()
    fig.add_trace(go.Bar(x="stage " + current["stage"].astype(str), y=current["cycles_per_micro_batch"],
                         name="current split", marker_color="#A0A7B4"))
    fig.add_trace(go.Bar(x="stage " + suggested["stage"].astype(str), y=suggested["cycles_per_micro_batch"],
                         name="suggested split", marker_color="#3FA672",
                         customdata=suggested["blocks"].map(_blocks_text),
                         hovertemplate="%{x}: %{y:,} cycles<br>blocks %{customdata}<extra>suggested</extra>"))
    fig.update_yaxes(title="cycles per micro-batch")
    return styled(fig, barmode="group", height=300)


def _blocks_text(blocks: object) -> str:
    if isinstance(blocks, (list, tuple, np.ndarray)):
        return ", ".join(str(b) for b in blocks)
    return str(blocks)
