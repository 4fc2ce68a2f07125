"""A profile's columns between NumPy and Arrow, and their values checked as they are decoded.

``numbers`` and ``arrow`` move whole columns between NumPy and Arrow through their buffers (pyarrow's
own conversions import pandas); ``check_arrays`` and ``check_values`` hold each decoded batch to the
schema (``values``: the rules, and the checks that need no decoding). Each check is a vectorised pass
over whole columns (Arrow's min/max first, NumPy only to find the first bad row of a column that has
one); a violation is one sentence naming the table, the column and the first bad row.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa  # pyarrow.compute is imported by the checks that decode: opening a profile needs none

from popvision_py.errors import PopvisionError, ValueRangeError
from popvision_py.format import schema as S
from popvision_py.format.values import limits

_DTYPES = {pa.int8(): np.int8, pa.int16(): np.int16, pa.int32(): np.int32, pa.int64(): np.int64,
           pa.uint8(): np.uint8, pa.uint16(): np.uint16, pa.uint32(): np.uint32, pa.uint64(): np.uint64,
           pa.float32(): np.float32, pa.float64(): np.float64, pa.bool_(): np.bool_}


def numbers(column: pa.ChunkedArray | pa.Array, missing: int | None = None) -> np.ndarray:
    """A column of numbers or booleans as one NumPy array, read from its buffers (a view where it is
    one chunk of numbers without nulls): pyarrow's to_numpy imports pandas (0.2-0.4 s), which the
    engine's writes, `popvision export-trace`, `import` and `sql` do without. Nulls read as
    ``missing`` where it is given (``index_in``'s misses, say); a column holding nulls without it, or
    of another type, is converted by to_numpy."""
    if isinstance(column, pa.ChunkedArray):
        if column.num_chunks == 0:
            return np.zeros(0, _DTYPES.get(column.type, np.int64))
        parts = [numbers(chunk, missing) for chunk in column.chunks]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)
    if column.type not in _DTYPES or (column.null_count and (missing is None or pa.types.is_boolean(column.type))):
        return column.to_numpy(zero_copy_only=False)
    if len(column) == 0:
        return np.zeros(0, _DTYPES[column.type])
    start, stop = column.offset, column.offset + len(column)
    validity, data = column.buffers()[:2]
    if pa.types.is_boolean(column.type):
        bits = (np.unpackbits(np.frombuffer(data, np.uint8), bitorder="little") if data is not None
                else np.zeros(0, np.uint8))
        return bits[start:stop].astype(bool)
    values = np.frombuffer(data, _DTYPES[column.type])[start:stop]
    if column.null_count:
        valid = np.unpackbits(np.frombuffer(validity, np.uint8), bitorder="little")[start:stop].astype(bool)
        return np.where(valid, values, missing)
    return values


def arrow(values: np.ndarray | list[str]) -> pa.Array:
    """NumPy numbers or booleans (a view of them), or a list of strings, as an Arrow array, built from
    buffers: ``pa.array`` imports pandas (0.2-0.4 s), which `popvision export-trace` does without."""
    if isinstance(values, list):
        encoded = [str(v).encode() for v in values]
        offsets = np.zeros(len(encoded) + 1, np.int64)
        np.cumsum([len(e) for e in encoded], out=offsets[1:])
        if offsets[-1] < 2**31:  # string's own 32-bit offsets: no cast from large_string (0.1 ms an array)
            return pa.Array.from_buffers(pa.string(), len(encoded), [
                None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b"".join(encoded))])
        return pa.Array.from_buffers(pa.large_string(), len(encoded), [
            None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]).cast(pa.string())
    values = np.ascontiguousarray(values)
    if values.dtype == np.bool_:
        bits = np.packbits(values, bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)])


def words(values: np.ndarray) -> pa.Array:
    """NumPy strings (few distinct ones: phases, names) as an Arrow dictionary in the order of first
    appearance, as ``dictionary_encode`` makes it, without pa.array; anything but strings (a None, a
    number) is left to pa.array, which says what is wrong with it."""
    try:
        distinct, first, inverse = np.unique(values, return_index=True, return_inverse=True)
    except TypeError:  # None among strings: not comparable
        return pa.array(values)
    if not all(isinstance(w, str) for w in distinct.tolist()):
        return pa.array(values)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(order), np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    return pa.DictionaryArray.from_arrays(arrow(rank[inverse.reshape(-1)]), arrow(distinct[order].tolist()))


def to_arrow(values: Any) -> pa.Array | pa.ChunkedArray:
    """A column as a writer is handed it, as Arrow: NumPy numbers and strings without pa.array
    (``arrow``, ``words``), an Arrow array as it is, anything else (lists) by pa.array."""
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values
    if isinstance(values, np.ndarray) and values.dtype.kind in "iufb":
        return arrow(values)
    if isinstance(values, np.ndarray) and values.dtype.kind in "UO":
        return words(values)
    return pa.array(values)


def extremes(data: pa.Table | pa.RecordBatch) -> dict[str, tuple[int, int]]:
    """(min, max) of each integer column of ``data`` that has rows, by name: one Arrow pass each, shared
    by the check against the footer's statistics and the check against the schema."""
    import pyarrow.compute as pc
    out = {}
    for name, column in zip(data.schema.names, data.columns):
        if pa.types.is_integer(column.type) and len(column) > column.null_count:
            pair = pc.min_max(column).as_py()
            out[name] = (pair["min"], pair["max"])
    return out


def check_arrays(data: pa.Table | pa.RecordBatch) -> None:
    """What ``validate(full=True)`` guards beyond decoding with page checksums, at a fraction of its
    cost: dictionary indices within their dictionary (a damaged page header can leave them past its
    end), and the offsets and UTF-8 of string columns; numbers are valid whatever their bits.
    Raises pa.ArrowInvalid."""
    import pyarrow.compute as pc
    data.validate()
    for column in data.columns:
        for chunk in column.chunks if isinstance(column, pa.ChunkedArray) else [column]:
            if pa.types.is_dictionary(chunk.type):
                chunk.dictionary.validate(full=True)
                pair = pc.min_max(chunk.indices).as_py() if len(chunk) else {"min": None}
                if pair["min"] is not None and not 0 <= pair["min"] <= pair["max"] < len(chunk.dictionary):
                    raise pa.ArrowInvalid(f"dictionary indices from {pair['min']} to {pair['max']} for a dictionary "
                                          f"of {len(chunk.dictionary)} values")
            elif not (pa.types.is_integer(chunk.type) or pa.types.is_floating(chunk.type)
                      or pa.types.is_boolean(chunk.type)):
                chunk.validate(full=True)


def check_values(spec: S.TableSchema, data: pa.Table | pa.RecordBatch, declared: Mapping[str, int], where: str, *,
                 first_row: int = 0, whole: bool = False, known: Mapping[str, tuple[int, int]] | None = None,
                 error: type[PopvisionError] = ValueRangeError) -> None:
    """Check the columns of ``spec`` present in ``data`` (rows ``first_row`` on of the table).

    ``declared``: the manifest's figures (``bounds``) the columns' ``below`` and ``high`` name.

    ``whole``: ``data`` is the whole table, so ``spec.key`` (no two rows alike) is checked too.

    ``known``: the integer columns' (min, max) already computed (``extremes``), not computed again.
    """
    import pyarrow.compute as pc
    present = set(data.schema.names)
    table = spec.name
    for column in spec.columns:
        if column.name not in present:
            continue
        values = data.column(column.name)
        name = f"Column {table}.{column.name} of {where}"
        if values.null_count:
            row = int(np.flatnonzero(numbers(values.is_null()))[0])  # is_null has no nulls of its own
            raise error(f"{name} is null at row {first_row + row:,}; it may not be null.")
        rule = column.values
        if rule.codes is not None:
            _check_codes(values, rule.codes, f"{name}", first_row, error)
            continue
        if not pa.types.is_integer(values.type) or len(values) == 0:
            continue
        low, high, high_note = limits(rule, declared)
        if low is None and high is None:
            continue
        pair = known.get(column.name) if known is not None else None
        least, most = pair if pair is not None else extremes(data.select([column.name]))[column.name]
        if low is not None and least < low:
            row = int(np.flatnonzero(numbers(values) < low)[0])
            raise error(f"{name} holds {numbers(values)[row]} at row {first_row + row:,}, below its least value {low}.")
        if high is not None and most > high:
            row = int(np.flatnonzero(numbers(values) > high)[0])
            raise error(f"{name} holds {numbers(values)[row]:,} at row {first_row + row:,}, above its largest "
                        f"value {high:,}{high_note}.")
    for earlier, later in spec.ordered:
        if earlier in present and later in present and len(data):
            before = pc.less(data.column(later), data.column(earlier))
            if pc.any(before).as_py():
                row = int(np.flatnonzero(numbers(before))[0])
                a, b = data.column(earlier)[row].as_py(), data.column(later)[row].as_py()
                raise error(f"Column {table}.{later} of {where} holds {b:,} at row {first_row + row:,}, "
                            f"less than its {earlier} {a:,}.")
    if whole and spec.key and all(k in present for k in spec.key) and len(data) > 1:
        if ascending([numbers(data.column(k)) for k in spec.key]):
            return  # as written: no two rows can be alike
        keys = [numbers(data.column(k)).astype(np.int64) for k in spec.key]
        order = np.lexsort(keys[::-1])
        same = np.ones(len(order) - 1, bool)
        for k in keys:
            same &= k[order][1:] == k[order][:-1]
        if same.any():
            row = int(order[1:][same].min())
            shown = ", ".join(f"{k} {int(v[row])}" for k, v in zip(spec.key, keys))
            raise error(f"Table {table} of {where} repeats its row for {shown} at row {first_row + row:,}; "
                        f"{' and '.join(spec.key)} identify a row.")


KEY_BLOCK = 1 << 16  # rows compared at a time by ascending


def ascending(keys: list[np.ndarray], strict: bool = True) -> bool:
    """Whether the rows of ``keys`` (columns, first the most significant) are in strictly ascending order, so that
    no two are alike (or, not ``strict``, in ascending order, alike rows together). ``KEY_BLOCK`` rows at a time, in
    the columns' own types: what it holds is a block's booleans, not the int64 copies and the order a sort of every
    row needs (a 10 GB import's programs: about 33 MiB)."""
    rows = len(keys[0])
    for a in range(0, rows - 1, KEY_BLOCK):
        b = min(a + KEY_BLOCK, rows - 1)
        ahead = None
        for key in reversed(keys):
            this, following = key[a:b], key[a + 1:b + 1]
            if ahead is None:
                ahead = following > this if strict else following >= this
            else:
                ahead = (following > this) | ((following == this) & ahead)
        if not ahead.all():
            return False
    return True


def _check_codes(values: pa.ChunkedArray | pa.Array, codes: tuple[str, ...], name: str, first_row: int,
                 error: type[PopvisionError]) -> None:
    import pyarrow.compute as pc
    chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
    offset = first_row
    for chunk in chunks:
        if not pa.types.is_dictionary(chunk.type):
            chunk = pc.dictionary_encode(chunk)  # another writer's plain strings
        # only the dictionary (a few distinct values, not rows) is compared, as Python strings:
        # pa.array and a string array's to_numpy import pandas, which the engine's writes avoid;
        # rows are looked at only if it holds an unknown code
        allowed = set(codes)
        known = np.array([value in allowed for value in chunk.dictionary.cast(pa.string()).to_pylist()], bool)
        if not known.all():
            bad = np.isin(numbers(chunk.indices), np.flatnonzero(~known))
            if bad.any():
                row = int(np.flatnonzero(bad)[0])
                raise error(f"{name} holds the unknown value {chunk[row].as_py()!r} at row {offset + row:,}; "
                            f"it may hold {', '.join(codes)}.")
        offset += len(chunk)
