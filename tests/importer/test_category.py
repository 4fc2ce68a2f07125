"""A string column of the import's tables as dictionary codes (``tables.category``): the column Arrow's
dictionary_encode makes of the strings, whether it is small (made once for every rank that has it) or not."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from popvision_py.importer import tables
from popvision_py.importer.tables import SMALL_COLUMN_ROWS, category

WORDS = ["forward", "backward", "idle", "forward", "update", "never used"]  # "forward" twice: one word


@pytest.mark.parametrize("rows", [0, 1, 30, SMALL_COLUMN_ROWS, SMALL_COLUMN_ROWS + 1, 5000])
def test_a_column_is_the_dictionary_encoding_of_its_words(rows):
    # GIVEN codes into words, one word listed twice and one never used
    codes = np.random.default_rng(rows).integers(0, len(WORDS) - 1, rows)
    # WHEN made into a column twice
    first, again = category(codes, WORDS), category(codes.copy(), list(WORDS))
    # THEN each is the strings dictionary-encoded: the same rows, the dictionary in order of first appearance
    expected = pc.dictionary_encode(pa.array([WORDS[c] for c in codes.tolist()], pa.string()))
    for column in (first, again):
        assert column.dictionary.equals(expected.dictionary)
        assert column.indices.cast(pa.int32()).equals(expected.indices.cast(pa.int32()))


def test_the_same_small_column_of_another_rank_is_made_once():
    # GIVEN a small column's codes, and another rank's same codes (another array) and words (another list)
    tables._small_category.cache_clear()
    codes = np.array([2, 0, 2, 1])
    made = category(codes, WORDS)
    # WHEN the other rank's is made THEN it is the first one, looked up, not made again
    assert category(np.array([2, 0, 2, 1]), list(WORDS)) is made
    assert tables._small_category.cache_info().hits == 1
    # AND other codes are a column of their own: "update" first
    other = category(np.array([4, 0]), WORDS)
    assert other.to_pylist() == ["update", "forward"] and other.dictionary.to_pylist() == ["update", "forward"]
