"""A string column of the import's tables as dictionary codes: a column of many ranks' slices held as codes into
one vocabulary (``tables.Coded``, ``tables.Vocabulary``, ``profile.Batched``) and made a row group at a time, the
column Arrow's dictionary_encode makes of the strings."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from popvision_py.importer import tables
from popvision_py.importer.tables import Vocabulary, coded

WORDS = ["forward", "backward", "idle", "forward", "update", "never used"]  # "forward" twice: one word


def category(codes, words):
    """A column made as the writer's batching makes it: one slice's codes into ``words``, made into Arrow."""
    vocabulary = Vocabulary()
    return vocabulary.arrow(vocabulary.codes(coded(np.asarray(codes), words)))


@pytest.mark.parametrize("rows", [0, 1, 30, 256, 257, 5000])
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


def test_another_ranks_same_words_are_looked_up_not_coded_again():
    # GIVEN a vocabulary that has coded one rank's words, and another rank's same words (another tuple)
    vocabulary = Vocabulary()
    first = vocabulary.codes(coded(np.array([2, 0, 2, 1]), tuple(WORDS)))
    looked_up = []
    vocabulary._code = lambda word: looked_up.append(word)  # a word coded again would be looked up here
    # WHEN the other rank's codes are coded THEN its words' codes are the first rank's, none coded again
    assert vocabulary.codes(coded(np.array([2, 0, 2, 1]), tuple(list(WORDS)))).tolist() == first.tolist()
    assert not looked_up
    # AND other codes are a column of their own: "update" first
    other = vocabulary.arrow(vocabulary.codes(coded(np.array([4, 0]), tuple(WORDS))))
    assert other.to_pylist() == ["update", "forward"] and other.dictionary.to_pylist() == ["update", "forward"]


class Table:
    """A table writer's stand-in: the row groups it is handed (``write``), as Batched hands them."""

    def __init__(self, row_group_rows: int) -> None:
        self.row_group_rows, self.written, self.closed = row_group_rows, [], False

    def write(self, columns: dict) -> None:
        self.written.append(columns)

    def close(self) -> None:
        self.closed = True


def _ranks_rows(ranks: int, rows: int) -> list[dict]:
    """Each rank's slice of a table: a number column and a string column as codes into the rank's own words (its
    names in its own order, one it never uses, and a name of its own)."""
    rng = np.random.default_rng(rows)
    out = []
    for rank in range(ranks):
        words = (f"rank {rank} only", *rng.permutation(["add", "mm", "relu", "nccl"]).tolist(), "unused")
        codes = rng.integers(0, 5, rows)
        out.append({"ipu": np.full(rows, rank, np.int64), "name": tables.coded(codes, words)})
    return out


@pytest.mark.parametrize("ranks,rows", [(300, 3), (300, 255), (300, 256), (300, 700), (5000, 1)])
def test_coded_slices_of_many_ranks_are_written_as_the_strings_dictionary_encoded_a_row_group_at_a_time(ranks, rows):
    from popvision_py.importer.profile import HELD_SLICES, Batched

    # GIVEN 300 ranks' slices whose string column is codes into each rank's own words (or 5,000 of a row each: more
    # than HELD_SLICES joins of HELD_SLICES slices, which are joined in turn)
    slices = _ranks_rows(ranks, rows)
    table = Table(row_group_rows=4096 if rows > 3 else 1 << 20)
    batched = Batched(table)
    # WHEN handed to the table a slice at a time and closed
    for columns in slices:
        batched.write(columns)
        assert len(batched.slices) <= 2 * HELD_SLICES  # small slices joined as they come, not held apart
    batched.close()
    # THEN the row groups hold every row in order, each at most a row group's rows (the last: the rest)
    assert table.closed
    ipu = np.concatenate([np.asarray(g["ipu"]) for g in table.written])
    assert ipu.tolist() == [r for r in range(ranks) for _ in range(rows)]
    assert all(len(g["ipu"]) < table.row_group_rows + rows for g in table.written)
    # AND each row group's strings are the rows' own words, dictionary-encoded as Arrow encodes the strings
    at = 0
    for group in table.written:
        n = len(group["ipu"])
        words = [w for s in slices for w in (s["name"].words[c] for c in s["name"].codes.tolist())][at:at + n]
        expected = pc.dictionary_encode(pa.array(words, pa.string()))
        assert isinstance(group["name"], pa.DictionaryArray)
        assert group["name"].dictionary.equals(expected.dictionary)
        assert group["name"].indices.equals(expected.indices)
        at += n
    assert at == ranks * rows


def test_a_vocabulary_gives_a_word_one_code_whatever_the_slice_that_brings_it():
    # GIVEN two slices' words in different orders, one listing a word twice
    vocabulary = tables.Vocabulary()
    first = vocabulary.codes(tables.coded(np.array([0, 1, 2]), ("mm", "add", "mm")))
    second = vocabulary.codes(tables.coded(np.array([1, 0, 2]), ("add", "relu", "mm")))
    # THEN each word has one code, in the order the words came
    assert vocabulary.words == ["mm", "add", "relu"]
    assert first.tolist() == [0, 1, 0] and second.tolist() == [2, 1, 0]
    # AND a run of codes made into Arrow is category's column of the same words
    column = vocabulary.arrow(np.concatenate([first, second]))
    assert column.equals(pc.dictionary_encode(pa.array(["mm", "add", "mm", "relu", "add", "mm"])))
    assert column.to_pylist() == ["mm", "add", "mm", "relu", "add", "mm"]
