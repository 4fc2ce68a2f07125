"""The ranking and the Pareto front of `popvision tune`'s rows, on figures a person can check."""

from __future__ import annotations

import numpy as np
import pandas as pd

from popvision_py.format.tunefile import COLUMNS
from popvision_py.tune.table import pareto, ranked


def rows(*specs: tuple[str, str, int, float | None, int | None]) -> pd.DataFrame:
    """Rows (key, status, IPUs, samples/s, headroom bytes), every other column a placeholder."""
    frame = pd.DataFrame([{"key": key, "status": status, "reason": "", "rank": None, "samples_per_second": speed,
                           "seconds_per_step": None, "worst_tile_pct": None, "headroom_bytes": room,
                           "fits": status == "ok", "ipus": ipus, "pareto": False, "is_start": False, "changes": "",
                           "command": "", "request": "{}", "seconds": 0.0}
                          for key, status, ipus, speed, room in specs], columns=COLUMNS.names)
    frame["samples_per_second"] = frame["samples_per_second"].astype(float)
    frame["headroom_bytes"] = pd.array(frame["headroom_bytes"], dtype="Int64")
    return frame


def test_ranks_follow_throughput_then_ipus_then_headroom_and_the_front_is_what_nothing_beats() -> None:
    # GIVEN five candidates that fit, one out of memory (the fastest) and one refused, shuffled
    given = rows(("g", "rejected", 1, None, None), ("a", "ok", 1, 100.0, 1000), ("f", "oom", 1, 300.0, -50),
                 ("d", "ok", 4, 120.0, 500), ("e", "ok", 4, 200.0, 10), ("b", "ok", 2, 150.0, 700),
                 ("h", "ok", 1, 100.0004, 2000))
    # WHEN they are ranked
    out = ranked(given)
    # THEN the ones that fit come first, fastest first; a and h tie to a thousandth, h has more headroom
    assert list(out["key"]) == ["e", "b", "d", "h", "a", "f", "g"]
    assert list(out["rank"].astype(object).where(out["rank"].notna(), None)) == [1, 2, 3, 4, 5, None, None]
    # AND the front is h (1 IPU), b (2 IPUs), e (4 IPUs): d is slower than b on more IPUs, a ties h after it,
    # f is faster than all but does not fit
    assert set(out.loc[out["pareto"], "key"]) == {"h", "b", "e"}


def test_pareto_among_ok_rows_only() -> None:
    # GIVEN speeds on IPUs, the fastest row not ok
    ipus = np.array([1, 2, 2, 4, 8])
    speed = np.array([10.0, 30.0, 20.0, 25.0, 99.0])
    ok = np.array([True, True, True, True, False])
    # THEN the front is 1 IPU (10) and 2 IPUs (30): 20 and 25 are beaten by 30 on as few IPUs
    assert list(pareto(ipus, speed, ok)) == [True, True, False, False, False]
    assert not pareto(ipus, speed, np.zeros(5, bool)).any()
