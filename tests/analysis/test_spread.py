"""``common.spread``: a per-rank table at many ranks as each figure's spread and the ranks furthest past its
median."""

from __future__ import annotations

import numpy as np

from popvision_py.analysis.common.spread import outlier_ranks, spread


def test_each_figure_gives_its_spread_and_the_ranks_furthest_past_its_median():
    # GIVEN 100 ranks numbered 1000 on: compute 10 each but rank 1042's 25; idle 0 to 99; a figure with a gap
    rank = np.arange(1000, 1100)
    compute = np.full(100, 10.0)
    compute[42] = 25.0
    idle = np.arange(100.0)
    gap = np.where(rank % 2 == 0, 4.0, np.nan)
    # WHEN it is told in a few rows
    t = spread(rank, {"compute_ns": compute, "idle_ns": idle, "gap": gap})
    # THEN each row is a figure: its count, least, median, 90th percentile and most
    assert t["figure"].tolist() == ["compute_ns", "idle_ns", "gap"]
    assert t["ranks"].tolist() == [100, 100, 50]
    assert t["min"].tolist() == [10, 0, 4] and t["max"].tolist() == [25, 99, 4]
    assert t["p50"].tolist() == [10, 49.5, 4] and t["p90"][1] == np.percentile(idle, 90)
    # AND the ranks past the median, the highest first, by their share past it; none where all are alike
    assert t["highest"][0] == "1042 (+150.0%)"
    assert t["highest"][1] == (f"1099 ({100 * (99 / 49.5 - 1):+.1f}%), 1098 ({100 * (98 / 49.5 - 1):+.1f}%), "
                               f"1097 ({100 * (97 / 49.5 - 1):+.1f}%)")
    assert t["highest"][2] == ""
    # AND the ranks named, each once
    assert outlier_ranks(rank, {"compute_ns": compute, "idle_ns": idle, "again": compute}).tolist() == [
        1042, 1099, 1098, 1097]
