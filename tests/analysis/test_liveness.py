"""Liveness on the balanced profile: B1's 200 activation bytes live from its forward (step 0) to its backward (1)."""

from __future__ import annotations

import pytest

from popvision_py.analysis.ipu.liveness import BY_STEP_COLUMNS, LIVE_AT_COLUMNS, PEAK_COLUMNS
from popvision_py.errors import OutOfRangeError


def test_by_step(balanced):
    s = balanced.liveness.by_step(0)
    assert list(s.columns) == BY_STEP_COLUMNS
    assert list(s["name"]) == ["B1/fwd", "B1/bwd", "B1/update"]
    assert list(s["not_always_live_bytes"]) == [200, 200, 0]
    assert list(s["total_bytes"]) == [1000, 1000, 800]
    assert list(s["worst_tile_bytes"]) == [250, 250, 200]
    assert (s["capacity_bytes"] == 4000).all()


def test_peaks(balanced):
    p = balanced.liveness.peaks()
    assert list(p.columns) == PEAK_COLUMNS
    assert list(p["peak_step"]) == [0, 0] and list(p["not_always_live_bytes"]) == [200, 200]
    assert list(p["name"]) == ["B1/fwd", "B2/fwd"]


def test_live_at(balanced):
    at_bwd = balanced.liveness.live_at(0, 1)
    assert list(at_bwd.columns) == LIVE_AT_COLUMNS
    assert set(at_bwd["name"]) == {"IPU0/code", "B1/weight", "B1/activation"}
    at_update = balanced.liveness.live_at(0, 2)
    assert set(at_update["name"]) == {"IPU0/code", "B1/weight"}
    with pytest.raises(OutOfRangeError):
        balanced.liveness.live_at(0, 3)
