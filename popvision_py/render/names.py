"""An import's ranks and trace files in a line, however many (``popvision info``, ``popvision import``'s message,
the dashboard's Summary): ranks that run on without a gap as a range, else the first few and how many more;
files that share a folder and a name's pattern as that pattern. No imports but the standard library's: ``info``
loads nothing heavy."""

from __future__ import annotations

import re
from pathlib import PurePath

SHOWN_FILES = 4  # an import's ranks and trace files named one by one up to this many, else summed up


def ranks_named(ranks: list) -> str:
    """Ranks in a few words, the word included: ``rank 3``, ``ranks 0, 1, 2, 3``, ``ranks 0 to 1,023`` where more
    than ``SHOWN_FILES`` run on without a gap, else ``ranks 0, 2, 5, 9 and 1,020 more``."""
    ranks = [int(r) for r in ranks]
    word = "rank" if len(ranks) == 1 else "ranks"
    if len(ranks) > SHOWN_FILES and ranks == list(range(ranks[0], ranks[0] + len(ranks))):
        return f"ranks {ranks[0]:,} to {ranks[-1]:,}"
    return f"{word} {', '.join(map(str, ranks[:SHOWN_FILES]))}" + (
        f" and {len(ranks) - SHOWN_FILES:,} more" if len(ranks) > SHOWN_FILES else "")


def files_named(files: list) -> str:
    """Trace files in a few words: each one up to ``SHOWN_FILES``; else, where they share a folder and a name's
    pattern (digits as ``<n>``), that and the first two names and the last, else the first two files and the
    last: ``traces/rank<n>.json (rank0.json, rank1.json ... rank1023.json)``."""
    files = [str(f) for f in files]
    if len(files) <= SHOWN_FILES:
        return ", ".join(files)
    folders = {str(PurePath(f).parent) for f in files}
    patterns = {re.sub(r"\d+", "<n>", PurePath(f).name) for f in files}
    if len(folders) == 1 and len(patterns) == 1:
        folder, names = folders.pop(), [PurePath(f).name for f in (*files[:2], files[-1])]
        where = "" if folder == "." else f"{folder}/"
        return f"{where}{patterns.pop()} ({names[0]}, {names[1]} ... {names[2]})"
    return f"{', '.join(files[:2])} ... {files[-1]}"
