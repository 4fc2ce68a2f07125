"""Program tree: each IPU's control program as Poplar lays it out, collapsible, with a search.

The tree is the analysis's (``programs.tree``): the runs, device iterations and gradient
accumulation ``Repeat`` loops, the stage segments, the ops and their program steps, each with its
cycles, repeats and ops, coloured by phase as the execution trace is. A search shows the nodes
whose name or op holds the words, with their ancestors, opened.
"""

from __future__ import annotations

from typing import Any

import dash
import numpy as np
from dash import Input, Output, dcc, html

from dashboards import components as c
from dashboards import data, ids
from dashboards.figures import programs as figures
from dashboards.figures.style import PHASE_COLOURS
from popvision_py.analysis.ipu import programs

dash.register_page(__name__, path="/programs", name="Program tree", title="popvision · program tree", order=5.6,
                   icon="⊢")

# The page's description for an IPU profile (False) and one imported from PyTorch traces (True)
DESCRIPTION = {False: "Each IPU's control program: the loops over runs, device iterations and micro-batches, each "
                      "stage's forward and backward, its ops and their program steps. Click a line to open or close "
                      "it; search to find an op or a step.",
               True: "The control program a compiler builds for each device: PyTorch launches kernels instead."}
ALL_IPUS = "all"
# The most nodes a tree shows at once. The browser's cost of drawing nested components grows faster than
# their number: Chromium took 25 s to draw bert-large's 789 nodes on one IPU (2,575 components), 2 s for
# its 222 without the ops' program steps. Beyond, an op's steps are left to its line, then the deepest
# levels stay out until the rest fits; a search or one IPU shows what was left out.
MAX_NODES = 250


def layout(**_query: str) -> html.Div:
    legend = [html.Span([html.Span(className="program-swatch", style={"background": colour}), phase],
                        className="program-legend-item") for phase, colour in PHASE_COLOURS.items() if phase != "idle"]
    return html.Div(
        [
            c.page_header("Program tree", DESCRIPTION[False], description_id=ids.PROGRAMS_DESCRIPTION),
            html.Div(id=ids.PROGRAMS_FIGURES, className="cards-slot"),
            c.section(
                "Program tree",
                html.Div(
                    [
                        html.Label("IPU", htmlFor=ids.PROGRAMS_IPU),
                        dcc.Dropdown(id=ids.PROGRAMS_IPU, clearable=False, className="dropdown"),
                        html.Label("search", htmlFor=ids.PROGRAMS_SEARCH),
                        dcc.Input(id=ids.PROGRAMS_SEARCH, type="search", debounce=True, placeholder="op or step name",
                                  className="search-input"),
                        html.Span(legend, className="program-legend"),
                    ],
                    className="controls",
                ),
                html.Div(id=ids.PROGRAMS_FOUND, className="section-note"),
                dcc.Loading(html.Div(id=ids.PROGRAMS_TREE, className="program-tree")),
                note="A line: the node, its repeats per run of its parent, cycles of one execution × executions = "
                     "its total, its share of the IPU's cycles, and its ops.",
                section_id=ids.PROGRAMS_SECTION,
            ),
            c.section("Program tree", c.one_line(programs.NO_PROGRAM, ids.PROGRAMS_NO_PROGRAM),
                      section_id=ids.PROGRAMS_NOTE, hidden=True),
        ]
    )


@dash.callback(
    Output(ids.PROGRAMS_FIGURES, "children"),
    Output(ids.PROGRAMS_IPU, "options"),
    Output(ids.PROGRAMS_IPU, "value"),
    Output(ids.PROGRAMS_SECTION, "style"),
    Output(ids.PROGRAMS_NOTE, "style"),
    Output(ids.PROGRAMS_DESCRIPTION, "children"),
    Input(ids.PROFILE, "value"),
)
def render_header(profile: str | None):
    """Key figures and the IPUs to choose; an imported trace: its one line instead."""
    report = data.report(profile)
    if report.imported:
        return None, [], None, c.HIDDEN, c.shown(True), DESCRIPTION[True]
    tree = report.programs.tree()
    loops = tree[tree["kind"] == "repeat"].drop_duplicates("name").set_index("name")["repeats"]
    ipus = sorted(set(tree["ipu"].tolist()))
    figures_ = c.cards([
        ("IPUs", c.fmt_int(len(ipus))),
        ("program steps", c.fmt_int(int((tree["step"] >= 0).sum()))),
        ("ops", c.fmt_int(int(tree.loc[tree["depth"] == 0, "ops"].sum()))),
        ("runs", c.fmt_int(loops.get("runs (host calls)", 1))),
        ("device iterations", c.fmt_int(loops.get("device iterations", 1)), "per run"),
        ("gradient accumulation", c.fmt_int(loops.get("gradient accumulation", 1)), "micro-batches per iteration"),
    ])
    options = [{"label": "every IPU", "value": ALL_IPUS}] + c.ipu_options(ipus)
    return figures_, options, ipus[0] if ipus else ALL_IPUS, c.shown(True), c.HIDDEN, DESCRIPTION[False]


@dash.callback(
    Output(ids.PROGRAMS_TREE, "children"),
    Output(ids.PROGRAMS_FOUND, "children"),
    Input(ids.PROGRAMS_IPU, "value"),
    Input(ids.PROGRAMS_SEARCH, "value"),
    Input(ids.PROFILE, "value"),
)
def render_tree(ipu: int | str | None, words: str | None, profile: str | None):
    """The chosen IPU's tree (or every IPU's), only the matches of a search and their ancestors."""
    report = data.report(profile)
    if report.imported or ipu is None:
        return None, ""
    table = report.answer("programs.tree")
    mask = np.ones(len(table), bool) if ipu == ALL_IPUS else np.asarray(table["ipu"]) == int(ipu)
    words = (words or "").strip().lower()
    keep = mask & programs.search(table, words)
    frame = report.programs.tree()
    found = ""
    if words:
        hits = int((mask & programs.matches(table, words)).sum())
        found = f"{hits:,} node{'' if hits == 1 else 's'} match “{words}”" if hits else f"No node matches “{words}”."
    keep, left_out = within_budget(table, keep)
    if left_out:
        where = "search" if ipu != ALL_IPUS else "choose one IPU or search"
        found = " ".join(filter(None, [found, f"Over {MAX_NODES:,} nodes: {left_out}; {where} to see them."]))
    return figures.tree(frame, keep, words), found


def within_budget(table: Any, keep: np.ndarray, most: int | None = None) -> tuple[np.ndarray, str]:
    """``keep`` cut to at most ``most`` nodes (``MAX_NODES``): first each op's program steps, then the
    deepest levels, until the rest fits; and what was left out, in words ("" when nothing was)."""
    most = MAX_NODES if most is None else most
    if keep.sum() <= most:
        return keep, ""
    parent = np.asarray(table["parent"])
    op_node = (np.asarray(table["kind"]) == "sequence") & (np.asarray(table["op"]) != "")
    keep = keep & ~((parent >= 0) & op_node[np.maximum(parent, 0)])
    if keep.sum() <= most:
        return keep, "each op's program steps are left to its line"
    depth = np.asarray(table["depth"])
    kept_at = np.cumsum(np.bincount(depth[keep], minlength=int(depth.max()) + 1))  # nodes kept to each depth
    deepest = max(int(np.searchsorted(kept_at, most, side="right")) - 1, 0)
    return keep & (depth <= deepest), f"nodes deeper than level {deepest} are left out"

