"""Checks of a profile's values against the schema's declarations (``schema.Values``,
``TableSchema.ordered``, ``TableSchema.key``) and of the manifest's sizes, shared by the reader (on open
and as tables are decoded) and the writer (so the engine cannot write what the reader refuses).

Each check is a vectorised pass over whole columns (Arrow's min/max first, NumPy only to find the
first bad row of a column that has one); a violation is one sentence naming the table, the column
and the first bad row.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa  # pyarrow.compute is imported by the checks that decode: opening a profile needs none

from popvision_py.errors import PopvisionError, ValueRangeError
from popvision_py.format import schema as S

# Manifest target and run sizes: (key, smallest, largest). The largest keep ids within their columns'
# types (ipu is int16) and products of sizes within int64.
TARGET_SIZES = (("num_ipus", 1, 2**15 - 1), ("tiles_per_ipu", 1, 2**31 - 1), ("bytes_per_tile", 1, 2**40))
RUN_SIZES = (("micro_batch_size", 1, 2**31 - 1), ("gradient_accumulation", 1, 2**31 - 1),
             ("device_iterations", 1, 2**31 - 1), ("replication_factor", 1, 2**15 - 1), ("runs", 1, 2**31 - 1))
MAX_CLOCK_HZ = 1e12
MAX_STAGES = 2**15 - 1  # the stage columns are int16


_JSON_NAMES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "list", dict: "object"}


def _json_type(value: Any) -> str:
    return "null" if value is None else _JSON_NAMES.get(type(value), type(value).__name__)


def _fits(value: Any, kinds: tuple[type, ...]) -> bool:
    if isinstance(value, bool):
        return bool in kinds
    if isinstance(value, int) and float in kinds:
        return True
    return isinstance(value, kinds)


def check_manifest(manifest: Any, where: str, error: type[PopvisionError] = ValueRangeError,
                   shape: S.Shape = S.MANIFEST_SHAPE) -> None:
    """Check a parsed manifest against ``shape`` (``schema.MANIFEST_SHAPE``) as a whole: every required
    key present, every key the shape names of its JSON type, down to each stage of the run and each
    table's entry. Else ``error``, one sentence naming the key by its path (``run.stages[1].ipu``)."""
    stack: list[tuple[Any, S.Shape, str]] = [(manifest, shape, "")]
    while stack:
        value, expected, path = stack.pop()
        if not _fits(value, expected.kinds):
            names = " or ".join(_JSON_NAMES[k] for k in expected.kinds)
            if not path:
                raise error(f"{where} is not a JSON {names}.")
            raise error(f"{where} has {path!r} of type {_json_type(value)}, expected {names}.")
        children: list[tuple[Any, S.Shape, str]] = []
        if isinstance(value, dict):
            for name, (field, required) in (expected.fields or {}).items():
                if name in value:
                    children.append((value[name], field, f"{path}.{name}" if path else name))
                elif required:
                    raise error(f"{where} lacks the key {(f'{path}.{name}' if path else name)!r}.")
            if expected.values is not None:
                children += [(item, expected.values, f"{path}.{name}" if path else str(name))
                             for name, item in value.items()]
        elif isinstance(value, list) and expected.items is not None:
            children += [(item, expected.items, f"{path}[{i}]") for i, item in enumerate(value)]
        stack.extend(reversed(children))  # the first wrong key in the file's order is the one named


def check_manifest_sizes(target: Mapping[str, Any], run: Mapping[str, Any], where: str,
                         error: type[PopvisionError] = ValueRangeError) -> None:
    """Sizes > 0 and within bounds, the clock finite and positive: else ``error`` naming the field."""
    for what, mapping, sizes in (("target", target, TARGET_SIZES), ("run configuration", run, RUN_SIZES)):
        for key, low, high in sizes:
            value = mapping.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and not low <= value <= high:
                raise error(f"The {what} in {where} has {key} = {value}; it must be between {low:,} and {high:,}.")
    stages = run.get("stages")
    if isinstance(stages, list) and len(stages) > MAX_STAGES:
        raise error(f"The run configuration in {where} lists {len(stages):,} stages; it may list at most "
                    f"{MAX_STAGES:,} (stage ids are 16-bit).")
    clock = target.get("clock_hz")
    if isinstance(clock, (int, float)) and not isinstance(clock, bool) and not (
            math.isfinite(clock) and 0 < clock <= MAX_CLOCK_HZ):
        raise error(f"The target in {where} has clock_hz = {clock}; it must be a finite frequency above 0 "
                    f"and at most {MAX_CLOCK_HZ:g} Hz.")


def bounds(target: Mapping[str, Any], run: Mapping[str, Any], rows: Mapping[str, int]) -> dict[str, int]:
    """The figures of ``schema.BOUNDS`` a checked manifest declares: its target's sizes, its run's
    counts and, of the tables in ``rows`` (rows by table: the writer knows them only at the end),
    the rows of programs, ops and variables."""
    out = {"num_ipus": int(target["num_ipus"]), "tiles_per_ipu": int(target["tiles_per_ipu"]),
           "stages": len(run["stages"]), "runs": int(run.get("runs", 1)),
           "device_iterations": int(run["device_iterations"]),
           "gradient_accumulation": int(run["gradient_accumulation"])}
    for name, table in (("program_steps", "programs"), ("ops", "ops"), ("variables", "variables")):
        if table in rows:
            out[name] = int(rows[table])
    return out


def check_declared(declared: Mapping[str, int], trace_rows: int, where: str,
                   error: type[PopvisionError] = ValueRangeError) -> None:
    """The run's counts against the trace that records them: every micro-batch of every iteration of
    every run has a row, so runs x device_iterations x gradient_accumulation is at most its rows
    (an empty trace records nothing). This bounds every id of the trace by the file's own size."""
    slots = declared["runs"] * declared["device_iterations"] * declared["gradient_accumulation"]
    if trace_rows and slots > trace_rows:
        raise error(f"The run configuration in {where} declares {slots:,} micro-batches (runs x device_iterations "
                    f"x gradient_accumulation) but its trace has {trace_rows:,} rows; each has at least one.")


def _bound(value: int | str | None, declared: Mapping[str, int]) -> tuple[int | None, str]:
    if isinstance(value, str):
        if value not in declared:  # a table's rows the writer does not know yet: checked when it does
            return None, ""
        return declared[value], f" ({S.BOUNDS[value]} is {declared[value]:,})"
    return value, ""


def limits(rule: S.Values, declared: Mapping[str, int]) -> tuple[int | None, int | None, str]:
    """A column's least and largest value under ``declared`` (None: no such bound), and the words
    that say where the largest comes from."""
    below, below_note = _bound(rule.below, declared)
    high, high_note = _bound(rule.high, declared)
    if below is not None:
        high, high_note = below - 1, below_note
    return rule.low, high, high_note


def statistics(metadata: Any, group: int, column: str) -> tuple[int, int] | None:
    """(min, max) of an integer column in one row group, as its footer states them; None without."""
    schema = metadata.schema
    for index in range(metadata.num_columns):
        if schema.column(index).name == column:
            stats = metadata.row_group(group).column(index).statistics
            if stats is None or not stats.has_min_max or not isinstance(stats.min, int):
                return None
            return int(stats.min), int(stats.max)
    return None


def statistics_violation(spec: S.TableSchema, metadata: Any,
                         declared: Mapping[str, int]) -> tuple[int, str, str] | None:
    """The first integer column whose footer statistics (``pq.FileMetaData``) leave its values:
    (row group, column, what is wrong), or None; nothing is decoded. A row group without
    statistics is checked as its pages are decoded (``check_values``)."""
    for column in spec.columns:
        if not pa.types.is_integer(column.type):
            continue
        low, high, high_note = limits(column.values, declared)
        if low is None and high is None:
            continue
        for group in range(metadata.num_row_groups):
            stated = statistics(metadata, group, column.name)
            if stated is None:
                continue
            if low is not None and stated[0] < low:
                return group, column.name, f"below its least value {low}"
            if high is not None and stated[1] > high:
                return group, column.name, f"above its largest value {high:,}{high_note}"
    return None


def check_statistics(spec: S.TableSchema, metadata: Any, declared: Mapping[str, int], where: str,
                     error: type[PopvisionError] = ValueRangeError) -> None:
    """``error`` if a column's footer statistics leave its values (``statistics_violation``)."""
    bad = statistics_violation(spec, metadata, declared)
    if bad is not None:
        group, column, what = bad
        raise error(f"Column {spec.name}.{column} of {where} holds values {what}, in row group {group} "
                    f"(its footer's statistics).")


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


SQL_REFUSAL = "popvision refuses column "  # how a checked view's error starts: then "TABLE.COLUMN"


def _sql_name(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def sql_checked(spec: S.TableSchema, names: list[str], declared: Mapping[str, int]) -> list[str]:
    """SQL select expressions that give each of ``names`` (a member's stored columns) as it is, or
    stop the query with DuckDB's ``error()`` at a value ``check_values`` would refuse: a null, a
    number outside its least and largest values, a code the schema does not know, a row of an
    ordered pair out of order (each column of the pair checked with its partner, as the reader
    does). The error's text is ``SQL_REFUSAL`` and ``table.column``; the reader's own check then
    finds the first bad row for the sentence (``MemberFileSystem.refusal``).

    Each test is made once: a null fails any comparison (``CASE WHEN NULL`` takes the ``ELSE``), so
    ``IS NOT NULL`` is written only for a column with no other comparison; and both columns of an ordered
    pair take the pair's one condition, without the bounds the order implies (``0 <= start <= end
    <= most`` holds all six of start's and end's).

    A query that does not use a column drops its expression, so it reads and checks only what it
    uses; a column the schema does not declare is passed through unchecked.
    """
    columns = {column.name: column for column in spec.columns}
    tests = {name: _own_tests(columns[name], declared) for name in names if name in columns}
    for earlier, later in spec.ordered:
        if earlier in tests and later in tests:
            both = _pair_tests(columns[earlier], columns[later], declared)
            tests[earlier] = tests[later] = both
    out = []
    for name in names:
        quoted = _sql_name(name)
        if name not in tests:
            out.append(quoted)
            continue
        refusal = f"{SQL_REFUSAL}{spec.name}.{name}".replace("'", "''")
        out.append(f"CASE WHEN {' AND '.join(tests[name])} THEN {quoted} ELSE error('{refusal}') END AS {quoted}")
    return out


def _bounds(column: S.Column, declared: Mapping[str, int]) -> tuple[int | None, int | None]:
    """The column's least and largest value when it is an integer column, else (None, None)."""
    if column.values.codes is not None or not pa.types.is_integer(column.type):
        return None, None
    low, high, _ = limits(column.values, declared)
    return low, high


def _own_tests(column: S.Column, declared: Mapping[str, int]) -> list[str]:
    """The SQL tests of one column's values alone (see ``sql_checked``)."""
    quoted = _sql_name(column.name)
    if column.values.codes is not None:
        words = ", ".join(chr(39) + c.replace(chr(39), chr(39) * 2) + chr(39) for c in column.values.codes)
        # IS NOT NULL kept though IN fails on a null too: a lone IN list becomes a join in DuckDB's plan,
        # which projection pushdown does not drop (a query not using the column would read it)
        return [f"{quoted} IS NOT NULL", f"{quoted} IN ({words})"]
    low, high = _bounds(column, declared)
    tests = ([f"{quoted} >= {low}"] if low is not None else []) + ([f"{quoted} <= {high}"] if high is not None else [])
    return tests or [f"{quoted} IS NOT NULL"]


def _pair_tests(earlier: S.Column, later: S.Column, declared: Mapping[str, int]) -> list[str]:
    """The one condition of an ordered pair: ``later >= earlier``, with each column's own tests but
    those the order implies (earlier's largest value, if later's is no larger; later's least, if
    earlier's is no smaller)."""
    (e_low, e_high), (l_low, l_high) = _bounds(earlier, declared), _bounds(later, declared)
    if None not in (e_high, l_high) and l_high <= e_high:
        e_high = None
    if None not in (e_low, l_low) and e_low >= l_low:
        l_low = None
    e, l_ = _sql_name(earlier.name), _sql_name(later.name)
    tests = [test for test, bound in ((f"{e} >= {e_low}", e_low), (f"{e} <= {e_high}", e_high),
                                      (f"{l_} >= {l_low}", l_low), (f"{l_} <= {l_high}", l_high)) if bound is not None]
    if earlier.values.codes is not None:
        tests += _own_tests(earlier, declared)
    if later.values.codes is not None:
        tests += _own_tests(later, declared)
    return [*tests, f"{l_} >= {e}"]
