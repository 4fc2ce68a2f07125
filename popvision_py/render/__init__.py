"""Renderers: a report's data (``document.Document``) to text, Markdown, JSON, CSV or HTML, chosen by name.

``FORMATS`` maps each ``--format`` name to its renderer. Single-file formats return bytes; CSV
writes a folder of files. ``emit`` is what the CLI calls: to stdout, or atomically to ``-o PATH``; JSON
is written a block at a time as it is laid out.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

from typing import TYPE_CHECKING

from popvision_py.errors import PopvisionError

if TYPE_CHECKING:  # annotations only: `popvision sql` takes OutputError without the report's imports
    from popvision_py.render.document import Document


class OutputError(PopvisionError):
    """The chosen output cannot be produced where asked (e.g. HTML to a terminal)."""


def _text(doc: Document) -> bytes:
    from popvision_py.render import text
    return text.render(doc)


def _md(doc: Document) -> bytes:
    from popvision_py.render import markdown
    return markdown.render(doc)


def _json(doc: Document) -> bytes:
    from popvision_py.render import jsonout
    return jsonout.render(doc)


def _html(doc: Document) -> bytes:
    from popvision_py.render import html
    return html.render(doc)


# format name -> renderer to bytes; "csv" writes a folder instead (see emit)
FORMATS: dict[str, Callable[[Document], bytes] | None] = {
    "text": _text, "json": _json, "csv": None, "md": _md, "html": _html,
}
NEEDS_OUTPUT = {"csv": "a folder", "html": "a file"}


def emit(doc: Document, fmt: str, output: str | os.PathLike[str] | None) -> list[Path]:
    """Render ``doc`` as ``fmt`` to ``output`` (atomically) or stdout; returns the files written."""
    from popvision_py.format.atomic import atomic_output

    if fmt in NEEDS_OUTPUT and output is None:
        raise OutputError(f"--format {fmt} writes {NEEDS_OUTPUT[fmt]}: give it with -o PATH.")
    if fmt == "csv":
        from popvision_py.render import csvout
        if Path(output).exists() and not Path(output).is_dir():
            raise OutputError(f"Cannot write into {output}: it is not a folder; --format csv writes a folder of files.")
        return csvout.write(doc, output)
    pieces = _json_pieces(doc) if fmt == "json" else iter([FORMATS[fmt](doc)])
    if output is None:
        import click

        for piece in pieces:
            click.echo(piece, nl=False)  # bytes go to the binary stdout
        return []
    with atomic_output(output) as out:
        for piece in pieces:
            out.write(piece)
    return [Path(output)]


def _json_pieces(doc: Document) -> Iterator[bytes]:
    """JSON written as it is laid out, a block at a time (``jsonout.chunks``): a report of thousands of ranks is
    never held whole, as text or as objects."""
    from popvision_py.render import jsonout
    return jsonout.chunks(doc)
