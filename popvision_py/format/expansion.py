"""What a profile may make the reader allocate, checked from its Parquet footers before anything is decoded.

Parquet compresses a column of one repeated value to almost nothing: a table of a billion constant
rows is a few megabytes on disk and tens of gigabytes decoded (a decompression bomb). Every figure
here comes from the footers the reader parsed at open (rows, each column chunk's values, its
physical type and its uncompressed bytes), so the check costs no decoding:

- ``decoded_bytes``: what a table decodes to at most, its column chunks' values times their widths.
  Strings are counted as the reader decodes them, as dictionaries (``dictionary_columns``: never one
  copy per row, whatever the Parquet encoding), so the count is an upper bound for every column.
- ``check_expansion``: a profile may decode to at most ``limit()`` bytes per byte of its file, plus
  ``FREE_BYTES`` (so that a tiny profile of regular tables never trips it); beyond, one sentence.
- ``check_key_rows``: a table with a key (``schema.TableSchema.key``: programs', liveness' ``(ipu, step)``)
  holds at most as many rows as the manifest's figures give its key values, since a key is unique.

``MAX_EXPANSION`` is set from the committed samples and benchmark profiles (docs/reliability.md,
"Decompression bombs"): the most any of them decodes to is 274 times its size; a real profile
beyond the limit is read with ``--max-expansion`` or ``POPVISION_MAX_EXPANSION`` (``inf``: no limit).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

from popvision_py.errors import ExpansionError
from popvision_py.format import schema as S
from popvision_py.format.values import limits

ENV = "POPVISION_MAX_EXPANSION"
# Decoded bytes per byte of the file. The largest of the real profiles measured is 274 (the
# bert_large_out_of_memory sample; a 50M-row make_large_profile.py trace: 250): 3.6 times below. A
# bomb written with pyarrow's defaults (constant rows, zstd) decodes to over 1,000 times its size,
# one written to be small to tens of thousands of times.
MAX_EXPANSION = 1_000.0
FREE_BYTES = 64 << 20  # what any profile may decode to: more than any committed sample's 49 MB
# bytes per value of each Parquet physical type (BYTE_ARRAY: a dictionary index, its values counted apart)
_WIDTH = {"BOOLEAN": 1 / 8, "INT32": 4, "INT64": 8, "INT96": 12, "FLOAT": 4, "DOUBLE": 8, "BYTE_ARRAY": 4}


def limit() -> float:
    """The decoded bytes a profile may hold per byte of its file: ``POPVISION_MAX_EXPANSION`` if set
    (``--max-expansion`` sets it), else ``MAX_EXPANSION``; ExpansionError if it is not a number >= 1."""
    text = os.environ.get(ENV, "").strip()
    if not text:
        return MAX_EXPANSION
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value >= 1:  # NaN too
        raise ExpansionError(f"{ENV} is {text!r}; it must be a number of at least 1 (or inf for no limit).")
    return value


def dictionary_columns(footer: Any) -> list[str]:
    """The paths of the byte-array (string) columns, to be decoded as dictionaries: one copy of each
    distinct value, however the file encodes them (a plain string column is one copy per row)."""
    if not footer.num_row_groups:
        return []
    group = footer.row_group(0)
    return [group.column(c).path_in_schema for c in range(group.num_columns)
            if group.column(c).physical_type == "BYTE_ARRAY"]


def decoded_bytes(footer: Any) -> int:
    """The most a table decodes to, from its footer: each column chunk's values (nulls included) times
    its type's width, plus the uncompressed bytes of string chunks (their dictionaries and values)."""
    total = 0.0
    for g in range(footer.num_row_groups):
        group = footer.row_group(g)
        for c in range(group.num_columns):
            chunk = group.column(c)
            kind = chunk.physical_type
            width = chunk.type_length if kind == "FIXED_LEN_BYTE_ARRAY" else _WIDTH.get(kind, 8)
            total += chunk.num_values * width
            if kind == "BYTE_ARRAY":
                total += chunk.total_uncompressed_size
    return int(total)


def check_expansion(footers: Mapping[str, Any], file_bytes: int, where: str) -> None:
    """ExpansionError, in one sentence, if the tables would decode to more than ``limit()`` times
    ``file_bytes`` plus ``FREE_BYTES``."""
    allowed = limit()
    decoded = sum(decoded_bytes(f) for f in footers.values())
    if decoded <= FREE_BYTES + allowed * file_bytes:
        return
    largest = max(footers, key=lambda t: decoded_bytes(footers[t]))
    raise ExpansionError(
        f"{where} would decode to {_size(decoded)}, {decoded / file_bytes:,.0f} times its {_size(file_bytes)} "
        f"(its {largest} table declares {footers[largest].num_rows:,} rows), beyond the {allowed:,g} times its "
        f"size that popvision reads; if it is a real profile and not a decompression bomb, read it with "
        f"popvision --max-expansion FACTOR or {ENV}.")


def check_key_rows(footers: Mapping[str, Any], declared: Mapping[str, int], where: str) -> None:
    """ExpansionError if a table with a key holds more rows than the manifest's figures allow its key
    values (each key value at most once: liveness' ``(ipu, step)`` below num_ipus x program steps)."""
    for name, spec in S.TABLES.items():
        if not spec.key or name not in footers:
            continue
        columns = {c.name: c for c in spec.columns}
        most, words = 1, []
        for key in spec.key:
            low, high, _ = limits(columns[key].values, declared)
            if low is None or high is None:
                break
            most *= max(high - low + 1, 0)
            words.append(f"{key} {low:,} to {high:,}")
        else:
            rows = footers[name].num_rows
            if rows > most:
                raise ExpansionError(
                    f"Table {name} of {where} declares {rows:,} rows, more than the {most:,} its manifest allows "
                    f"(one row per {', '.join(spec.key)}: {' and '.join(words)}).")


def _size(nbytes: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if nbytes < 1000 or unit == "TB":
            return f"{nbytes:,.0f} {unit}" if unit == "B" else f"{nbytes:,.1f} {unit}"
        nbytes /= 1000
    raise AssertionError("unreachable")
