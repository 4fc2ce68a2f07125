"""`tune.parquet`: the result of `popvision tune`, one row per candidate configuration.

One Parquet file, written atomically, read by `popvision tune --resume`, `popvision sql` and the
dashboard's What-if page. Its key-value metadata holds ``popvision.tune`` (JSON): the model, the
system, the starting configuration's command, the search's settings and the best candidate's
profile path.

Columns (``COLUMNS`` is the schema; a file missing one, or with another type, is refused in one
sentence):

- ``key``: the candidate's configuration as canonical JSON (sorted keys), unique per file; the
  resume key.
- ``status``: ``ok`` (emulated, fits), ``oom`` (emulated, does not fit), ``rejected`` (refused by
  the planner or by the cheap memory estimate before emulation) or ``error`` (the emulator failed).
- ``reason``: one sentence for anything but ``ok``; empty for ``ok``.
- ``rank``: 1 for the fastest candidate that fits, then down; null for candidates that do not fit.
- ``samples_per_second``, ``seconds_per_step``, ``worst_tile_pct`` (the worst tile's bytes as a
  percentage of a tile's memory), ``headroom_bytes`` (a tile's memory less the worst tile's
  bytes; negative when it does not fit): null for candidates not emulated.
- ``fits``: the emulator's verdict (false when not emulated).
- ``ipus``: IPUs the candidate uses (stages' IPUs x tensor shards x replicas).
- ``pareto``: on the Pareto front of throughput against IPUs among candidates that fit.
- ``is_start``: the starting configuration (the model's defaults plus the options given).
- ``changes``: the changes from the starting configuration, as `popvision run` flags.
- ``command``: the exact `popvision run ...` command that runs the candidate.
- ``request``: the candidate's ``engine.runner.RunRequest`` fields as JSON (without ``profile``
  and ``progress``), so ``RunRequest(**json.loads(request))`` re-runs it.
- ``seconds``: wall-clock seconds the candidate's evaluation took.

The range columns (``RANGE_COLUMNS``) hold what `popvision run`'s sensitivity pass gives, for the
candidates whose ranges were computed (the rows `popvision tune` shows), null on every other row:

- ``fit_verdict``: ``fits``, ``does not fit`` or ``borderline`` (the worst tile's range crosses a
  tile's memory).
- ``throughput_low``, ``throughput_high``: samples/s at the ends of the emulator's assumptions.
- ``worst_tile_pct_low``, ``worst_tile_pct_high``: the worst tile's range, % of a tile.

They are always written, and optional on reading: a file written before ranges existed lacks them
and reads with them null (not computed). One present with another type is refused like any column.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from popvision_py.errors import PopvisionError
from popvision_py.format.atomic import atomic_output
from popvision_py.format.schema import FIT_VERDICTS

STATUSES = ("ok", "oom", "rejected", "error")
METADATA_KEY = b"popvision.tune"
TUNE_SCHEMA_VERSION = 1

COLUMNS = pa.schema([
    pa.field("key", pa.string(), nullable=False),
    pa.field("status", pa.string(), nullable=False),
    pa.field("reason", pa.string(), nullable=False),
    pa.field("rank", pa.int64()),
    pa.field("samples_per_second", pa.float64()),
    pa.field("seconds_per_step", pa.float64()),
    pa.field("worst_tile_pct", pa.float64()),
    pa.field("headroom_bytes", pa.int64()),
    pa.field("fits", pa.bool_(), nullable=False),
    pa.field("ipus", pa.int64(), nullable=False),
    pa.field("pareto", pa.bool_(), nullable=False),
    pa.field("is_start", pa.bool_(), nullable=False),
    pa.field("changes", pa.string(), nullable=False),
    pa.field("command", pa.string(), nullable=False),
    pa.field("request", pa.string(), nullable=False),
    pa.field("seconds", pa.float64(), nullable=False),
])
RANGE_COLUMNS = pa.schema([
    pa.field("fit_verdict", pa.string()),
    pa.field("throughput_low", pa.float64()),
    pa.field("throughput_high", pa.float64()),
    pa.field("worst_tile_pct_low", pa.float64()),
    pa.field("worst_tile_pct_high", pa.float64()),
])
SCHEMA = pa.schema([*COLUMNS, *RANGE_COLUMNS])


class TuneFileError(PopvisionError):
    """A tune result that cannot be read: not Parquet, not a tune result, or a column missing or mistyped."""


def write_tune(path: str | os.PathLike[str], rows: pd.DataFrame, meta: dict[str, Any]) -> None:
    """Write ``rows`` (the COLUMNS, in any order, and the RANGE_COLUMNS: null where absent) and ``meta`` to
    ``path`` atomically."""
    missing = [name for name in COLUMNS.names if name not in rows.columns]
    if missing:
        raise ValueError(f"tune rows lack the columns {', '.join(missing)}")
    unknown = set(rows["status"]) - set(STATUSES)
    if unknown:
        raise ValueError(f"tune rows have unknown statuses {sorted(unknown)}")
    unknown = set(rows["fit_verdict"].dropna()) - set(FIT_VERDICTS) if "fit_verdict" in rows else set()
    if unknown:
        raise ValueError(f"tune rows have unknown fit verdicts {sorted(unknown)}")
    rows = rows.reindex(columns=SCHEMA.names)
    rows["fit_verdict"] = rows["fit_verdict"].astype(object).where(rows["fit_verdict"].notna(), None)
    table = pa.Table.from_pandas(rows, schema=SCHEMA, preserve_index=False)
    table = table.replace_schema_metadata({
        METADATA_KEY: json.dumps({"version": TUNE_SCHEMA_VERSION, **meta}, sort_keys=True).encode()})
    with atomic_output(path) as handle:
        pq.write_table(table, handle)


def read_tune(path: str | os.PathLike[str]) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The rows (COLUMNS and RANGE_COLUMNS, nullable numbers as floats / pandas' nullable ints, a verdict
    not computed as None) and the metadata of a tune result."""
    try:
        table = pq.read_table(path)
    except FileNotFoundError:
        raise TuneFileError(f"{path} does not exist.") from None
    except IsADirectoryError:
        raise TuneFileError(f"{path} is a folder, not a tune result (a .parquet file `popvision tune -o` "
                            f"wrote).") from None
    except (pa.ArrowException, OSError) as exc:
        raise TuneFileError(f"{path} is not a readable Parquet file ({str(exc).splitlines()[0]}).") from None
    raw = (table.schema.metadata or {}).get(METADATA_KEY)
    if raw is None:
        raise TuneFileError(f"{path} is a Parquet file but not a tune result (no {METADATA_KEY.decode()} metadata).")
    try:
        meta = json.loads(raw)
    except ValueError:
        raise TuneFileError(f"{path}: its {METADATA_KEY.decode()} metadata is not JSON.") from None
    if not isinstance(meta, dict) or meta.get("version") != TUNE_SCHEMA_VERSION:
        raise TuneFileError(f"{path} is a tune result of version "
                            f"{meta.get('version') if isinstance(meta, dict) else '?'}"
                            f"; this popvision reads version {TUNE_SCHEMA_VERSION}.")
    for want in SCHEMA:
        if want.name not in table.column_names:
            if want in RANGE_COLUMNS:  # written before ranges existed: not computed
                table = table.append_column(want, pa.nulls(table.num_rows, want.type))
                continue
            raise TuneFileError(f"{path} is not a complete tune result: the column {want.name!r} is missing.")
        got = table.schema.field(want.name).type
        if got != want.type:
            raise TuneFileError(f"{path}: column {want.name!r} is {got}, not {want.type}.")
    rows = table.select(SCHEMA.names).to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)
    rows["fit_verdict"] = rows["fit_verdict"].astype(object).where(rows["fit_verdict"].notna(), None)
    bad = set(rows["status"]) - set(STATUSES)
    if bad:
        raise TuneFileError(f"{path}: unknown candidate status {sorted(bad)[0]!r}.")
    odd = set(rows["fit_verdict"].dropna()) - set(FIT_VERDICTS)
    if odd:
        raise TuneFileError(f"{path}: unknown fit verdict {sorted(odd)[0]!r}.")
    if rows["key"].duplicated().any():
        raise TuneFileError(f"{path}: a candidate appears twice ({rows['key'][rows['key'].duplicated()].iloc[0]}).")
    return rows, meta
