"""Checks of a profile against the schema's declarations (``schema.Values``, ``TableSchema.ordered``,
``TableSchema.key``) that decode nothing: the manifest's shape and sizes, the bounds its figures set,
the footers' statistics, and the SQL that makes DuckDB check values as it reads them. Shared by the
reader (on open), ``memberfs`` and the writer (so the engine cannot write what the reader refuses);
the checks of decoded columns are ``arrays``'. No pyarrow: `popvision sql` opens a profile without it.

A violation is one sentence naming the table and the column.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

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
    index = _column_index(metadata, column)
    return None if index is None else _stated(metadata.row_group(group).column(index).statistics)


def _column_index(metadata: Any, column: str) -> int | None:
    schema = metadata.schema
    return next((i for i in range(metadata.num_columns) if schema.column(i).name == column), None)


def _stated(stats: Any) -> tuple[int, int] | None:
    if stats is None or not stats.has_min_max or not isinstance(stats.min, int):
        return None
    return int(stats.min), int(stats.max)


def statistics_violation(spec: S.TableSchema, metadata: Any,
                         declared: Mapping[str, int]) -> tuple[int, str, str] | None:
    """The first integer column whose footer statistics (``pq.FileMetaData`` or ``footer.Footer``) leave
    its values: (row group, column, what is wrong), or None; nothing is decoded. A row group without
    statistics is checked as its pages are decoded (``arrays.check_values``)."""
    bounded = []
    for column in spec.columns:
        low, high, high_note = limits(column.values, declared)
        index = _column_index(metadata, column.name) if column.is_integer else None
        if index is not None and (low is not None or high is not None):
            bounded.append((column.name, index, low, high, high_note))
    found = []
    # row group by row group (each group's metadata fetched once: a billion-row trace has 1,421 of them)
    for group in range(metadata.num_row_groups):
        chunks = metadata.row_group(group)
        for order, (name, index, low, high, high_note) in enumerate(bounded):
            stated = _stated(chunks.column(index).statistics)
            if stated is None:
                continue
            if low is not None and stated[0] < low:
                found.append((order, group, name, f"below its least value {low}"))
            elif high is not None and stated[1] > high:
                found.append((order, group, name, f"above its largest value {high:,}{high_note}"))
    # the first column in the schema's order that has one, at its first row group
    return min(found)[1:] if found else None


def check_statistics(spec: S.TableSchema, metadata: Any, declared: Mapping[str, int], where: str,
                     error: type[PopvisionError] = ValueRangeError) -> None:
    """``error`` if a column's footer statistics leave its values (``statistics_violation``)."""
    bad = statistics_violation(spec, metadata, declared)
    if bad is not None:
        group, column, what = bad
        raise error(f"Column {spec.name}.{column} of {where} holds values {what}, in row group {group} "
                    f"(its footer's statistics).")


SQL_REFUSAL = "popvision refuses column "  # how a checked view's error starts: then "TABLE.COLUMN"


def _sql_name(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def sql_checked(spec: S.TableSchema, names: list[str], declared: Mapping[str, int]) -> list[str]:
    """SQL select expressions that give each of ``names`` (a member's stored columns) as it is, or
    stop the query with DuckDB's ``error()`` at a value ``check_values`` would refuse: a null, a
    number outside its least and largest values, a code the schema does not know, a row of an
    ordered pair out of order (each column of the pair checked with its partner, as the reader
    does). The error's text is ``SQL_REFUSAL`` and ``table.column``; the reader's own check then
    finds the first bad row for the sentence (``MemberFileSystem.refusal``). A 64-bit column's ``ELSE``
    also states its bounds to DuckDB (``_bounded``).

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
        text = f"{SQL_REFUSAL}{spec.name}.{name}".replace("'", "''")
        refused = _bounded(columns[name], declared, f"error('{text}')")
        out.append(f"CASE WHEN {' AND '.join(tests[name])} THEN {quoted} ELSE {refused} END AS {quoted}")
    return out


def _bounded(column: S.Column, declared: Mapping[str, int], refusal: str) -> str:
    """The ``ELSE`` of a column's check: ``refusal`` (an ``error()``), which for a 64-bit column also states
    the column's bounds to DuckDB's optimizer.

    A ``CASE`` has the union of its branches' statistics, and none if a branch has none, as ``error()`` has.
    Given the bounds (``CASE WHEN error() IS NULL THEN least ELSE largest END``: the error still raised
    where the row is refused), DuckDB knows what the check guarantees, that the values lie within them
    (the footer's statistics, merged in, can only widen that), and computes differences and sums of
    cycles and bytes without checking each for overflow: ``sum(end_cycle - start_cycle)`` over a
    billion rows 5.25 -> 4.63 s, unchecked 4.51 s. Not for the narrower id columns (``ipu``, ``step``):
    grouped by a key of known small range, DuckDB hashes perfectly with compressed keys, which measured
    slower than its plain hashing (0.27 against 0.22 s at 50M rows; docs/performance.md).
    """
    low, high = _bounds(column, declared)
    if column.type_name != "int64" or low is None or high is None:
        return refusal
    return f"(CASE WHEN {refusal} IS NULL THEN CAST({low} AS BIGINT) ELSE CAST({high} AS BIGINT) END)"


def _bounds(column: S.Column, declared: Mapping[str, int]) -> tuple[int | None, int | None]:
    """The column's least and largest value when it is an integer column, else (None, None)."""
    if column.values.codes is not None or not column.is_integer:
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
