"""The committed sample profiles: they read back, keep the conventions, and tell their story."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine.conventions import check_profile

SAMPLES = Path(__file__).resolve().parents[2] / "sample_profiles"


@pytest.mark.parametrize("folder", sorted(p.parent.name for p in SAMPLES.glob("*/profile.pop")))
def test_sample_profile_keeps_the_conventions(folder):
    check_profile(SAMPLES / folder / "profile.pop")


def test_the_out_of_memory_sample_has_tiles_over_capacity():
    tables = check_profile(SAMPLES / "bert_large_out_of_memory" / "profile.pop")
    per_tile = tables["tile_memory"].groupby(["ipu", "tile"])["bytes"].sum()
    assert (per_tile > 638_976).any()


def test_the_offloaded_sample_moves_optimiser_state_through_remote_buffers():
    tables = check_profile(SAMPLES / "mnist_offload_optimiser" / "profile.pop")
    kinds = set(tables["exchanges"]["kind"].astype(str))
    assert "remote_buffer" in kinds
