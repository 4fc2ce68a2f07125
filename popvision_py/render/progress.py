"""A progress bar on the trace's summary pass: the one long read of `report` and `dashboard` on a large
profile (a billion rows take about half a minute on two cores), on a terminal only."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterable, Iterator
from typing import Any

BAR_DELAY_S = 1.0  # a pass shorter than this shows no bar


@contextlib.contextmanager
def reading_trace(reports: Iterable[Any], what: str = "Reading the trace") -> Iterator[None]:
    """While inside, the summary pass of each of ``reports`` (``analysis.report.Report``) moves one bar on
    stderr, counted in trace rows. The bar shows only on a terminal and only once the pass has taken a
    second (a small profile's report prints nothing more), and is cleared when done."""
    from tqdm import tqdm

    reports = list(reports)
    total = sum(report.profile.num_rows("trace") for report in reports)
    lock = threading.Lock()  # the pass's workers report from their own threads
    with tqdm(total=total, desc=what, unit=" rows", unit_scale=True, file=sys.stderr, disable=None, delay=BAR_DELAY_S,
              leave=False) as bar:

        def folded(rows: int) -> None:
            with lock:
                bar.update(rows)

        for report in reports:
            report.trace_progress = folded
        try:
            yield
        finally:
            for report in reports:
                report.trace_progress = None
