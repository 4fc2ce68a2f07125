"""Markdown: a heading per section, a pipe table (or figure list) per block."""

from __future__ import annotations

import pandas as pd

from popvision_py.render.document import Document
from popvision_py.analysis.common.answer import Table
from popvision_py.render.format import cells, column_names, heading, numeric_columns, value

MAX_ROWS = 200


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(frame: Table | pd.DataFrame) -> list[str]:
    names = column_names(frame)
    if not names or not len(frame):
        return ["*(no rows)*"]
    header = "| " + " | ".join(_escape(c) for c in names) + " |"
    rule = "| " + " | ".join("---:" if number else "---" for number in numeric_columns(frame)) + " |"
    out = [header, rule] + ["| " + " | ".join(_escape(c) for c in r) + " |" for r in cells(frame, MAX_ROWS)]
    if len(frame) > MAX_ROWS:
        out += ["", f"*... {len(frame) - MAX_ROWS:,} more rows (use `--format csv` or `json` for all of them)*"]
    return out


def insights(data: Table | pd.DataFrame) -> list[str]:
    """One item per finding and fix; the command that applies a fix in a code block, ready to copy."""
    out: list[str] = []
    for severity, topic, finding, suggestion, effect, command in zip(
            *(list(data[c]) for c in ("severity", "topic", "finding", "suggestion", "effect", "command"))):
        out.append(f"- **{severity}** ({topic}): {finding}")
        if suggestion:
            out.append(f"  - Fix: {suggestion}")
        if effect:
            out.append(f"  - Effect: {effect}")
        if command:
            out += ["", "    ```", f"    {command}", "    ```", ""]
    return out


def render(doc: Document) -> bytes:
    lines = [f"# {doc.title}", "", "Profile" + ("s" if len(doc.profiles) > 1 else "") + ": "
             + " vs ".join(f"`{p}`" for p in doc.profiles), ""]
    section = None
    for b in doc.read():
        if b.section != section:
            section = b.section
            lines += [f"## {heading(section)}", ""]
        lines += [f"### {b.title}", ""]
        if isinstance(b.data, dict):
            lines += ["| figure | value |", "| --- | ---: |"]
            lines += [f"| {k} | {_escape(value(v))} |" for k, v in b.table().items()]
        elif b.key in ("summary.insights", "overview.insights"):
            lines += insights(b.data)
        elif b.items is not None:
            for head, details in b.items:
                lines += [f"- **{_escape(head)}**"] + [f"  - {_escape(line)}" for line in details]
            if not b.items:
                lines.append(f"*({b.empty})*")
        else:
            lines += table(b.table())
        lines.append("")
    return ("\n".join(lines).rstrip() + "\n").encode()
