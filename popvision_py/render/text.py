"""Terminal text: each block a title, then an aligned table (numbers right, text left) or key figures."""

from __future__ import annotations

import pandas as pd

from popvision_py.render.document import Block, Document
from popvision_py.render.format import cells, numeric_columns, value

MAX_ROWS = 40
MAX_CELL = 60


def _clip(text: str) -> str:
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


def table(frame: pd.DataFrame, max_rows: int | None = MAX_ROWS, clip: bool = True) -> list[str]:
    """An aligned table; ``max_rows`` rows at most, then a line saying how many were left out."""
    if frame.shape[1] == 0:
        return ["  (nothing)"]
    rows = cells(frame, max_rows)
    if clip:
        rows = [[_clip(c) for c in r] for r in rows]
    header = [str(c) for c in frame.columns]
    widths = [max([len(header[i])] + [len(r[i]) for r in rows]) for i in range(len(header))]
    right = numeric_columns(frame)

    def line(values: list[str]) -> str:
        return "  " + "  ".join(v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right)).rstrip()

    out = [line(header), "  " + "  ".join("-" * w for w in widths)]
    out += [line(r) for r in rows]
    if not len(frame):
        out.append("  (no rows)")
    elif max_rows is not None and len(frame) > max_rows:
        out.append(f"  ... {len(frame) - max_rows:,} more rows (use --format csv or json for all of them)")
    return out


def figures(data: dict) -> list[str]:
    width = max((len(k) for k in data), default=0)
    return [f"  {k.ljust(width)}  {value(v)}" for k, v in data.items()]


def block(b: Block) -> list[str]:
    lines = [b.title, "=" * len(b.title)]
    if isinstance(b.data, dict):
        lines += figures(b.data)
    elif b.key == "summary.insights":
        previous = None
        for r in b.data.itertuples(index=False):
            if r.finding != previous:  # several fixes for one finding: say the finding once
                lines.append(f"  [{r.severity}] {r.topic}: {r.finding}")
            previous = r.finding
            if r.suggestion:
                lines.append(f"      fix:    {r.suggestion}")
            if r.effect:
                lines.append(f"      effect: {r.effect}")
    else:
        lines += table(b.data)
    return lines


def render(doc: Document) -> bytes:
    lines = [doc.title, "Profile" + ("s" if len(doc.profiles) > 1 else "") + ": " + "  vs  ".join(doc.profiles), ""]
    for b in doc.visible():
        lines += block(b) + [""]
    return ("\n".join(lines).rstrip() + "\n").encode()
