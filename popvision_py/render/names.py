"""An import's ranks and trace files in a line, however many: the first named, the rest counted (``popvision
info``, ``popvision import``'s message, the dashboard's Summary). No imports: ``info`` loads nothing heavy."""

from __future__ import annotations

SHOWN_FILES = 4  # an import's ranks and trace files named one by one up to this many, else counted


def ranks_named(ranks: list) -> str:
    """Ranks named one by one up to ``SHOWN_FILES``, the rest counted: ``0, 1, 2, 3 and 1,020 more``."""
    return ", ".join(map(str, ranks[:SHOWN_FILES])) + (
        f" and {len(ranks) - SHOWN_FILES:,} more" if len(ranks) > SHOWN_FILES else "")


def files_named(files: list) -> str:
    """Files named one by one up to ``SHOWN_FILES``, else the first two and the last: ``a, b ... z``."""
    return ", ".join(files) if len(files) <= SHOWN_FILES else f"{', '.join(files[:2])} ... {files[-1]}"
