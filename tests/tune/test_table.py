"""The ranking, the Pareto front, the rows ranged and the text of `popvision tune`'s rows, on figures a person
can check."""

from __future__ import annotations

import numpy as np
import pandas as pd

from popvision_py.format.tunefile import COLUMNS
from popvision_py.tune.evaluate import RANGE_FIELDS
from popvision_py.tune.table import pareto, ranged_keys, ranked, render


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


def test_rows_without_range_columns_rank_as_before_with_their_ranges_null() -> None:
    # GIVEN rows of a result written before ranges existed (no range columns)
    given = rows(("a", "ok", 1, 100.0, 1000), ("b", "ok", 2, 150.0, 700))
    assert not set(RANGE_FIELDS) & set(given.columns)
    # WHEN they are ranked
    out = ranked(given)
    # THEN the ranking is the central estimates', and every range column is there, null (not computed)
    assert list(out["key"]) == ["b", "a"]
    assert list(out.columns) == [*COLUMNS.names, *RANGE_FIELDS]
    assert out[list(RANGE_FIELDS)].isna().all().all()
    assert list(out["fit_verdict"]) == [None, None]


def test_the_rows_ranged_are_the_table_the_front_and_the_closest_when_none_fits() -> None:
    # GIVEN six that fit (the start ranked 5th), one out of memory and one refused
    given = rows(("a", "ok", 1, 100.0, 1000), ("b", "ok", 2, 150.0, 700), ("c", "ok", 4, 200.0, 10),
                 ("d", "ok", 4, 120.0, 500), ("s", "ok", 4, 110.0, 500), ("f", "oom", 1, 300.0, -50),
                 ("g", "rejected", 1, None, None))
    given.loc[given["key"] == "s", "is_start"] = True
    out = ranked(given)
    # THEN with the top 2 shown: c and b, the start s, and the front's a (1 IPU); not d, f or g
    assert ranged_keys(out, 2) == ["c", "b", "s", "a"]
    # AND when none fits, the closest that do not (least over first) are ranged, never a refused one
    none_fit = ranked(rows(("x", "oom", 1, 10.0, -10), ("y", "oom", 1, 20.0, -500), ("z", "oom", 1, 30.0, -20),
                           ("w", "oom", 1, 40.0, -900), ("r", "rejected", 1, None, None)))
    assert sorted(ranged_keys(none_fit, 10)) == ["x", "y", "z"]


def ranged(frame: pd.DataFrame, key: str, verdict: str, speed: tuple[float, float], tile: tuple[float, float],
           central_tile: float) -> None:
    """Give row ``key`` its verdict and ranges (and its central worst tile)."""
    at = frame["key"] == key
    frame["fit_verdict"] = frame.get("fit_verdict", pd.Series(None, index=frame.index, dtype=object))
    frame.loc[at, "fit_verdict"] = verdict
    frame.loc[at, ["throughput_low", "throughput_high"]] = speed
    frame.loc[at, ["worst_tile_pct_low", "worst_tile_pct_high", "worst_tile_pct"]] = (*tile, central_tile)


def test_a_borderline_best_is_marked_in_its_row_and_the_text_names_the_fastest_that_surely_fits() -> None:
    # GIVEN a best candidate whose worst tile is 97.7% of a tile, 96.3% to 100.4% at the assumptions' ends,
    # and a second that fits at every end
    given = rows(("best", "ok", 4, 4_708_954.5, 15_000), ("second", "ok", 4, 4_602_560.8, 307_000),
                 ("third", "ok", 4, 1_000.0, 400_000))
    for name in RANGE_FIELDS[1:]:
        given[name] = float("nan")
    given["worst_tile_pct"] = given["worst_tile_pct"].astype(float)
    ranged(given, "best", "borderline", (3_210_000.0, 5_200_000.0), (96.3, 100.4), 97.7)
    ranged(given, "second", "fits", (3_150_000.0, 5_080_000.0), (49.5, 53.6), 50.9)
    given["command"] = "popvision run m --" + given["key"]
    given["request"] = "{}"
    out = ranked(given)
    # WHEN the table is rendered
    text = render(out, {"model": "m", "system": "IPU-POD4"}, top=3)
    lines = text.splitlines()
    # THEN the best's row says borderline with its range, the second's yes, the third (not ranged) its central yes
    best = next(line for line in lines if line.startswith("   1"))
    assert best.split()[2:7] == ["3,210,000", "to", "5,200,000", "-", "borderline"]  # no start: no "vs start"
    assert next(line for line in lines if line.startswith("   2")).split()[6] == "yes"
    assert next(line for line in lines if line.startswith("   3")).split()[2:5] == ["-", "-", "yes"]
    # AND the text says the best is borderline, and which is the fastest that fits at every end
    assert ("The best candidate (#1) is BORDERLINE: at the ends of the assumptions its worst tile is 96.3% to 100.4% "
            "of a tile, so it may not fit (its central estimate, 97.7%, fits).") in lines
    assert ("The fastest that fits at every end is #2: 4,602,560.8 samples/s (0.98x the best), "
            "popvision run m --second") in lines
