"""Terminal text: each block a title, then an aligned table (numbers right, text left) or key figures."""

from __future__ import annotations

from typing import TYPE_CHECKING

from popvision_py.analysis.common.answer import Table
from popvision_py.render.format import column_arrays, column_names, formatted_columns, numeric_columns, value

if TYPE_CHECKING:  # annotations only: `popvision sql` renders its table without the report's imports (pandas)
    import pandas as pd

    from popvision_py.render.document import Document, ReportBlock

MAX_ROWS = 40
MAX_CELL = 60
MAX_TREE_LINES = 200


def _clip(text: str) -> str:
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


def table(frame: Table | pd.DataFrame, max_rows: int | None = MAX_ROWS, clip: bool = True) -> list[str]:
    """An aligned table; ``max_rows`` rows at most, then a line saying how many were left out."""
    header = column_names(frame)
    if not header:
        return ["  (nothing)"]
    arrays = column_arrays(frame)
    columns = formatted_columns(frame, max_rows, arrays)
    if clip:
        columns = [[c if len(c) <= MAX_CELL else _clip(c) for c in column] for column in columns]
    # each column padded to its width in one pass, then the rows joined: no per-cell width lookups
    padded = []
    for name, column, right in zip(header, columns, numeric_columns(frame, arrays)):
        width = max(len(name), max(map(len, column), default=0))
        pad = str.rjust if right else str.ljust
        padded.append([pad(name, width), "-" * width] + [pad(c, width) for c in column])
    out = ["  " + "  ".join(row).rstrip() for row in zip(*padded)]
    out[1] = "  " + "  ".join(column[1] for column in padded)
    if not len(frame):
        out.append("  (no rows)")
    elif max_rows is not None and len(frame) > max_rows:
        out.append(f"  ... {len(frame) - max_rows:,} more rows (use --format csv or json for all of them)")
    return out


def tree(data: Table | pd.DataFrame, max_lines: int = MAX_TREE_LINES) -> list[str]:
    """A tree block (``ReportBlock.tree``) indented by depth, one node a line: its name, repeats, kind, cycles of
    one execution x executions = total (share of its IPU). The steps of an op are left to its line, and
    if that is still over ``max_lines`` lines, the ops to their segment's line (all of them are in
    --format json and csv)."""
    columns = {c: list(data[c]) for c in ("parent", "depth", "kind", "name", "repeats", "executions", "cycles",
                                          "total_cycles", "share_pct", "detail", "op")}
    op = [bool(o) for o in columns["op"]]
    op_node = [kind == "sequence" and o for kind, o in zip(columns["kind"], op)]
    under_op = [parent >= 0 and op_node[parent] for parent in columns["parent"]]
    shown_ = [not u for u in under_op]
    left = "each op's steps"
    if sum(shown_) > max_lines:
        shown_ = [not (u or o) for u, o in zip(under_op, op)]
        left = "each segment's ops and steps"
    lines = [f"  ({left} are in --format json and csv)"]
    for show, parent, depth, kind, name, repeats, runs, cycles, total, share, detail, _ in zip(
            shown_, *columns.values()):
        if not show:
            continue
        if len(lines) > max_lines:
            lines.append(f"  ... {sum(shown_) - max_lines:,} more nodes (use --format csv or json for all of them)")
            break
        times = f" x{repeats:,}" if kind == "repeat" or repeats != 1 else ""
        lines.append(f"  {'  ' * depth}{name}{times}  [{kind}]  {cycles:,} cycles x {runs:,} = {total:,} "
                     f"({share:.1f}%)" + (f"  ({detail})" if detail else ""))
    return lines if len(lines) > 1 else ["  (no rows)"]


def figures(data: dict) -> list[str]:
    width = max((len(k) for k in data), default=0)
    return [f"  {k.ljust(width)}  {value(v)}" for k, v in data.items()]


def block(b: ReportBlock) -> list[str]:
    lines = [b.title, "=" * len(b.title)]
    if isinstance(b.data, dict):
        lines += figures(b.table())
    elif b.key in ("summary.insights", "overview.insights"):
        previous = None
        for severity, topic, finding, suggestion, effect, command in zip(
                *(list(b.data[c]) for c in ("severity", "topic", "finding", "suggestion", "effect", "command"))):
            if finding != previous:  # several fixes for one finding: say the finding once
                lines.append(f"  [{severity}] {topic}: {finding}")
            previous = finding
            if suggestion:
                lines.append(f"      fix:    {suggestion}")
            if effect:
                lines.append(f"      effect: {effect}")
            if command:
                lines.append(f"      run:    {command}")
    elif b.tree and b.items is None:
        lines += tree(b.data)
    elif b.items is not None:
        for head, details in b.items:
            lines += [f"  {head}"] + [f"      {line}" for line in details]
        if not b.items:
            lines.append(f"  ({b.empty})")
    else:
        lines += table(b.table())
    return lines


def render(doc: Document) -> bytes:
    lines = [doc.title, "Profile" + ("s" if len(doc.profiles) > 1 else "") + ": " + "  vs  ".join(doc.profiles), ""]
    for b in doc.read():
        lines += block(b) + [""]
    return ("\n".join(lines).rstrip() + "\n").encode()
