"""System timeline files: what each host process did over time, one Parquet file per process.

The host's side of a run (PopVision's System Analyser view): compiling, weights to and from the
device, each model call, data loading and the wait for it, optimiser updates, and counters such as
samples per second. Each process writes ``<directory>/<process>.pvti.parquet`` (``instance-0``
under poprun, ``process-<pid>`` otherwise; ``rank-<r>`` for a PyTorch trace's CPU timeline written
by ``popvision import``; past 64 ranks the import writes every rank's rows into one file,
``ranks.pvti.parquet``: readers go by each row's ``process``). Any Parquet reader opens it; docs/profile-format.md,
"System timeline files", is the reference.

Columns (``SCHEMA``): ``process``, ``pid``, ``thread``, ``channel`` (``poptorch``, ``dataloader``,
``popdist``, ``pytorch``...), ``name``, ``kind`` (``span``, ``instant`` or ``counter``),
``start_ns`` and ``end_ns`` (wall-clock nanoseconds since the Unix epoch, ``time.time_ns()``, so
that processes align; an instant or a counter ends where it starts) and ``value`` (a counter's
value, NaN otherwise). The file's key-value metadata names the format (``format`` =
``popvision-system-timeline``, ``format_version`` = 1), the ``process``, its ``pid`` and, under
popdist, its ``instance``.

``SystemWriter`` writes row groups as rows arrive into an anonymous file in the destination folder,
published whole when it closes (``atomic.atomic_output``): a process killed mid-run leaves nothing.
``read_system`` checks a file and says in one sentence (``SystemFileError``, exit code 2) what is
wrong with a file that is not one. ``find_system_files`` is where the reports and the dashboard
look for a profile's files.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from popvision_py.errors import PopvisionError
from popvision_py.format.atomic import atomic_output
from popvision_py.format.arrays import arrow, numbers, to_arrow
from popvision_py.format.runs import INSTANCE
from popvision_py.version import __version__

FORMAT = "popvision-system-timeline"
FORMAT_VERSION = 1
SUFFIX = ".pvti.parquet"
SYSTEM_FOLDER = "system"  # <folder of a profile>/system/ is looked in first
KINDS = ("span", "instant", "counter")
STRING_COLUMNS = ("process", "thread", "channel", "name", "kind")
ROW_GROUP_ROWS = 65_536  # rows a writer buffers before it writes a row group
PARQUET_OPTIONS: dict[str, Any] = {"compression": "zstd", "compression_level": 3, "write_page_checksum": True}
MAX_NS = 2**62  # about the year 2116: a time beyond is not a clock's

# The channels and event names popvision's PopTorch records (docs/poptorch.md, "System timeline"), which
# the reports look for by name.
POPTORCH, DATALOADER, POPDIST, PYTORCH = "poptorch", "dataloader", "popdist", "pytorch"
ANNOTATION = "annotation"  # an imported trace's annotations of no step, pass or communication: phases it names
GPU_STREAM = "GPU stream "  # + the stream: an imported rank's annotations of its GPU's track (gpu_user_annotation)
COMPILE = "compile"
WEIGHTS_TO_DEVICE = "weights to device"
MODEL_CALL = "model call"
SAMPLES_PER_SECOND = "samples per second"  # a counter after each training model call
INFERENCE_SAMPLES_PER_SECOND = "samples per second (inference)"  # the same after an inference model's call
DATA_LOADING = "data loading"
WAIT_FOR_DATA = "wait for data"
EPOCH = "epoch"  # an instant: the training loop starts a pass over its DataLoader
OPTIMIZER_UPDATE = "optimizer update"
GRADIENT_REDUCTION = "gradient reduction"  # popdist: the instances averaging their gradients before an update
WEIGHTS_TO_HOST = "weights to host"

SCHEMA = pa.schema([
    pa.field("process", pa.string(), nullable=False),
    pa.field("pid", pa.int64(), nullable=False),
    pa.field("thread", pa.string(), nullable=False),
    pa.field("channel", pa.string(), nullable=False),
    pa.field("name", pa.string(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("start_ns", pa.int64(), nullable=False),
    pa.field("end_ns", pa.int64(), nullable=False),
    pa.field("value", pa.float64(), nullable=False),
])


class SystemFileError(PopvisionError):
    """A system timeline file that cannot be read: missing, not Parquet, not one, or holding bad values."""


def how_to_record(profile: str | os.PathLike[str]) -> str:
    """The one line the reports and the dashboard show for a profile without system timeline files."""
    folder = Path(profile).parent
    above = folder.parent if folder.name else folder
    if INSTANCE.match(above.name):  # DIR/instance-I/MODEL/profile.pop: the launch's folder
        above = above.parent
    return (f"No system timeline beside {profile}: a PopTorch script records one per process under "
            f"PVTI_OPTIONS='{{\"enable\":\"true\",\"directory\":\"{above}\"}}' (docs/poptorch.md), or give "
            f"--system PATH.")


def metadata(process: str, pid: int, instance: int | None = None) -> dict[bytes, bytes]:
    """The file-level key-value metadata of a process's file."""
    meta = {b"format": FORMAT.encode(), b"format_version": str(FORMAT_VERSION).encode(),
            b"process": process.encode(), b"pid": str(int(pid)).encode(),
            b"generator": f"popvision_py {__version__}".encode()}
    if instance is not None:
        meta[b"instance"] = str(int(instance)).encode()
    return meta


class SystemWriter:
    """One process's file: ``write`` batches of rows (columns), ``close`` publishes it whole.

    Rows are written in row groups of ``row_group_rows`` as they come, into an anonymous file in the
    destination folder (nothing is named until ``close``), so memory stays flat over a long run. A
    writer left by an exception (``with`` block) or ``abort`` publishes nothing.
    """

    def __init__(self, path: str | os.PathLike[str], process: str, pid: int, instance: int | None = None,
                 row_group_rows: int = ROW_GROUP_ROWS, *, tidy: bool = True, sync_folder: bool = True) -> None:
        self.path = Path(path)
        self.rows = 0
        self._schema = SCHEMA.with_metadata(metadata(process, pid, instance))
        self._row_group_rows = max(int(row_group_rows), 1)
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._stack = contextlib.ExitStack()
        # ``tidy``, ``sync_folder``: ``atomic_output``'s (a writer of many files in one folder, once)
        handle = self._stack.enter_context(atomic_output(self.path, streams=False, tidy=tidy,
                                                         sync_folder=sync_folder))
        self._parquet = pq.ParquetWriter(handle, self._schema, **PARQUET_OPTIONS)

    def write(self, columns: Mapping[str, Any] | pa.Table) -> None:
        """Append rows: every column of ``SCHEMA`` (arrays of one length, or a Table), checked as a reader would."""
        table = columns if isinstance(columns, pa.Table) else pa.Table.from_arrays(
            [to_arrow(columns[name]) for name in SCHEMA.names], names=SCHEMA.names)
        table = table.select(SCHEMA.names).cast(SCHEMA)
        check_values(table, str(self.path), self.rows)
        self.rows += table.num_rows
        self._pending.append(table)
        self._pending_rows += table.num_rows
        while self._pending_rows >= self._row_group_rows:
            self._write_group(self._row_group_rows)

    def _write_group(self, rows: int) -> None:
        pending = pa.concat_tables(self._pending).combine_chunks() if len(self._pending) > 1 else self._pending[0]
        group, rest = pending.slice(0, rows), pending.slice(rows)
        self._parquet.write_table(group.replace_schema_metadata(self._schema.metadata), row_group_size=rows)
        self._pending = [rest] if rest.num_rows else []
        self._pending_rows = rest.num_rows

    def close(self) -> None:
        """Write what is left and publish the file at its path (atomically)."""
        if self._parquet is None:
            return
        try:
            if self._pending_rows:
                self._write_group(self._pending_rows)
            self._parquet.close()
        except BaseException as exc:
            self._parquet = None
            self._stack.__exit__(type(exc), exc, exc.__traceback__)
            raise
        self._parquet = None
        self._stack.close()

    def abort(self) -> None:
        """Discard everything: no file is published (an earlier one at the path stays)."""
        if self._parquet is None:
            return
        with contextlib.suppress(Exception):
            self._parquet.close()
        self._parquet = None
        discard = RuntimeError("aborted")
        self._stack.__exit__(RuntimeError, discard, None)

    def __enter__(self) -> SystemWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        if kind is None:
            self.close()
        else:
            self.abort()


def write_system(path: str | os.PathLike[str], columns: Mapping[str, Any] | pa.Table, process: str, pid: int,
                 instance: int | None = None) -> Path:
    """A whole file from columns at once (``popvision import``, the benchmarks); returns its path."""
    with SystemWriter(path, process, pid, instance) as writer:
        writer.write(columns)
    return Path(path)


@dataclass(frozen=True)
class SystemFile:
    """One file, read and checked: its metadata and its rows (``SCHEMA``'s columns, strings as dictionaries)."""

    path: Path
    process: str
    pid: int
    instance: int | None
    table: pa.Table


def read_system(path: str | os.PathLike[str]) -> SystemFile:
    """Read one system timeline file; ``SystemFileError`` (one sentence) if it is not a good one."""
    path, process, pid, instance = _checked(path)
    return SystemFile(path, process, pid, instance, _whole(path))


def read_system_pieces(path: str | os.PathLike[str], rows: int) -> Iterator[pa.Table]:
    """One file's rows, checked as ``read_system`` checks them, in pieces of whole processes of about ``rows`` rows
    each (a piece ends at the first change of process at or past ``rows``; a file of at most ``rows`` rows, of one row
    group or of one process, is one piece), without the file's metadata. What ``host.events.load_files`` gathers a
    run at a time: the import's one file of every rank (``ranks.pvti.parquet``, 811,008 events at 10 GB in 4,096
    ranks), read whole, held 32 MiB of rows at once, and its sort as much again."""
    path = _checked(path)[0]
    where = str(path)
    try:
        with _opened(path) as file:
            meta = file.metadata
            changes = _process_changes(file) if meta.num_rows > rows and meta.num_row_groups > 1 else ()
            if not len(changes):  # one piece: the file read as ``read_system`` reads it
                yield _rows(file, where).replace_schema_metadata(None)
                return
            sizes = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
            starts = np.r_[0, np.cumsum(sizes)]
            for a, b in _cuts(changes, meta.num_rows, rows):
                first = int(np.searchsorted(starts, a, "right")) - 1
                last = int(np.searchsorted(starts, b, "left"))
                table = file.read_row_groups(range(first, last), columns=list(SCHEMA.names), use_threads=False)
                if table.num_rows != starts[last] - starts[first]:
                    raise SystemFileError(f"{where} is corrupt: its row groups {first} to {last - 1} decode to "
                                          f"{table.num_rows:,} rows, not the {int(starts[last] - starts[first]):,} "
                                          f"its footer declares.")
                table = table.slice(a - int(starts[first]), b - a).replace_schema_metadata(None)
                check_values(table, where, a)
                yield table
    except (pa.ArrowException, OSError) as exc:
        raise SystemFileError(f"{where} is corrupt ({_first(exc)}).") from None


def _process_changes(file: pq.ParquetFile) -> np.ndarray:
    """The rows where the file's ``process`` differs from the row before: each process's rows begin at one where the
    file keeps them together (the import writes a rank's rows after the rank before's)."""
    column = file.read(columns=["process"], use_threads=False).unify_dictionaries().combine_chunks()["process"]
    codes = column.chunk(0).indices.to_numpy(zero_copy_only=False) if column.num_chunks else np.zeros(0, np.int32)
    return np.flatnonzero(codes[1:] != codes[:-1]) + 1


def _cuts(changes: np.ndarray, total: int, rows: int) -> list[tuple[int, int]]:
    """Pieces [a, b) of ``total`` rows, each ending at the first of ``changes`` at or past ``rows`` rows from its
    start (the last at ``total``)."""
    cuts, a = [], 0
    while a < total:
        at = int(np.searchsorted(changes, a + rows, "left"))
        b = int(changes[at]) if at < len(changes) else total
        cuts.append((a, b))
        a = b
    return cuts


def _checked(path: str | os.PathLike[str]) -> tuple[Path, str, int, int | None]:
    """A file's path, process, pid and instance, once its bytes, footer, metadata and schema are those of a system
    timeline; ``SystemFileError`` (one sentence) otherwise."""
    path = Path(path)
    where = str(path)
    if not path.exists():
        raise SystemFileError(f"{where} does not exist.")
    if not path.is_file():
        raise SystemFileError(f"{where} is not a file; a system timeline is a {SUFFIX} file, one per process.")
    try:
        size = path.stat().st_size
        with open(path, "rb") as raw:
            head = raw.read(4)
            raw.seek(max(size - 4, 0))
            tail = raw.read(4)
    except OSError as exc:
        raise SystemFileError(f"{where} cannot be read: {exc.strerror or exc}.") from None
    if size == 0:
        raise SystemFileError(f"{where} is empty: a process that was killed before it wrote its timeline leaves "
                              f"none, never an empty one.")
    if head != b"PAR1":
        raise SystemFileError(f"{where} is not a Parquet file, so not a system timeline.")
    if tail != b"PAR1" or size < 12:
        raise SystemFileError(f"{where} is cut short: its Parquet footer is missing.")
    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise SystemFileError(f"{where} is corrupt: its Parquet footer cannot be read ({_first(exc)}).") from None
    with parquet:
        meta = {k.decode("utf-8", "replace"): v.decode("utf-8", "replace")
                for k, v in (parquet.schema_arrow.metadata or {}).items()}
        if meta.get("format") != FORMAT:
            raise SystemFileError(f"{where} is a Parquet file but not a popvision system timeline (its metadata names "
                                  f"no format {FORMAT}).")
        if meta.get("format_version") != str(FORMAT_VERSION):
            raise SystemFileError(f"{where} is a system timeline of version {meta.get('format_version', '?')[:20]}; "
                                  f"this popvision reads version {FORMAT_VERSION}.")
        process, pid, instance = meta.get("process", ""), _integer(meta.get("pid")), meta.get("instance")
        if not process or pid is None or (instance is not None and _integer(instance) is None):
            raise SystemFileError(f"{where}: its metadata lacks the process, its pid or a whole instance number.")
        schema = parquet.schema_arrow
        for want in SCHEMA:
            if want.name not in schema.names:
                raise SystemFileError(f"{where} lacks the column {want.name!r} of a system timeline.")
            got = schema.field(want.name).type
            base = got.value_type if pa.types.is_dictionary(got) else got
            if base not in (want.type, pa.large_string() if want.type == pa.string() else want.type):
                raise SystemFileError(f"{where}: column {want.name!r} holds {base}, not {want.type}.")
    return path, process, int(pid), None if instance is None else int(instance)


def _whole(path: Path) -> pa.Table:
    """A checked file's rows (``_checked``), read whole (``_rows``)."""
    try:
        with _opened(path) as file:
            return _rows(file, str(path))
    except (pa.ArrowException, OSError) as exc:
        raise SystemFileError(f"{path} is corrupt ({_first(exc)}).") from None


def _opened(path: Path) -> pq.ParquetFile:
    """A checked file opened for its rows: strings as dictionaries, every page against its checksum."""
    return pq.ParquetFile(path, read_dictionary=list(STRING_COLUMNS), page_checksum_verification=True)


def _rows(file: pq.ParquetFile, where: str) -> pa.Table:
    """Every row of an opened file (``_opened``), as many as its footer declares, and their values checked."""
    declared = file.metadata.num_rows
    table = file.read(columns=list(SCHEMA.names), use_threads=False)  # a small file: threads cost more
    if table.num_rows != declared:
        raise SystemFileError(f"{where} is corrupt: it decodes to {table.num_rows:,} rows, not the "
                              f"{declared:,} its footer declares.")
    check_values(table, where)
    return table


def check_values(table: pa.Table, where: str, first_row: int = 0) -> None:
    """The values a system timeline allows; ``SystemFileError`` naming the first bad row otherwise."""
    for name in SCHEMA.names:
        if table[name].null_count:
            row = _first_row(pc.is_null(table[name]))
            raise SystemFileError(f"{where}: row {first_row + row:,} has no {name}.")
    codes = _kind_codes(table["kind"])
    if (codes < 0).any():
        row = int(np.argmax(codes < 0))
        raise SystemFileError(f"{where}: row {first_row + row:,} is of kind {table['kind'][row].as_py()!r}, not one "
                              f"of {', '.join(KINDS)}.")
    start, end = numbers(table["start_ns"]), numbers(table["end_ns"])
    bad = (start < 0) | (start >= MAX_NS) | (end >= MAX_NS)
    if bad.any():
        row = int(np.argmax(bad))
        raise SystemFileError(f"{where}: row {first_row + row:,} has a time out of range ({int(start[row])} to "
                              f"{int(end[row])} ns); times are nanoseconds since 1970 (time.time_ns()).")
    span = codes == 0
    bad = np.where(span, end < start, end != start)
    if bad.any():
        row = int(np.argmax(bad))
        what = "ends before it starts" if span[row] else f"is an {KINDS[codes[row]]} whose end_ns is not its start_ns"
        raise SystemFileError(f"{where}: row {first_row + row:,} {what}.")
    value = numbers(table["value"])
    bad = (codes == 2) & ~np.isfinite(value)
    if bad.any():
        row = int(np.argmax(bad))
        raise SystemFileError(f"{where}: row {first_row + row:,} is a counter without a finite value.")


def read_system_files(paths: Sequence[str | os.PathLike[str]]) -> list[SystemFile]:
    """Each file read and checked, in the order given."""
    return [read_system(p) for p in paths]


def files_in(folder: Path) -> list[Path]:
    """The system timeline files directly in ``folder``, by name."""
    try:
        return sorted(p for p in folder.iterdir() if p.name.endswith(SUFFIX) and p.is_file())
    except OSError:
        return []


def find_system_files(profile: str | os.PathLike[str],
                      given: Sequence[str | os.PathLike[str]] | None = None) -> list[Path]:
    """The system timeline files of ``profile``, or those ``given`` (``--system``: files or folders).

    Without ``given``, the first of these folders that holds any: ``<profile's folder>/system/``,
    the profile's folder, its parent (a PopTorch run writes ``DIR/training/profile.pop``; with
    ``PVTI_OPTIONS``' directory ``DIR`` its timelines lie in ``DIR``), and for an instance's profile
    of a poprun launch (``DIR/instance-I/MODEL/profile.pop``) the launch's folder ``DIR``. None
    found: an empty list.
    A folder given is searched the same way (``F/system/``, then ``F``); one holding none, or a
    path that does not exist, is a ``SystemFileError``.
    """
    if given:
        found: list[Path] = []
        for item in given:
            path = Path(item)
            if path.is_dir():
                inside = files_in(path / SYSTEM_FOLDER) or files_in(path)
                if not inside:
                    raise SystemFileError(f"--system {item} holds no system timeline file (*{SUFFIX}).")
                found += inside
            elif path.exists():
                found.append(path)
            else:
                raise SystemFileError(f"--system {item} does not exist.")
        unique: dict[Path, Path] = {}
        for p in found:
            unique.setdefault(p.resolve(), p)
        return list(unique.values())
    folder = Path(profile).parent
    candidates = [folder / SYSTEM_FOLDER, folder, folder.parent]
    if INSTANCE.match(folder.parent.name):
        candidates.append(folder.parent.parent)
    for candidate in candidates:
        inside = files_in(candidate)
        if inside:
            return inside
    return []


def _integer(text: str | None) -> int | None:
    try:
        return int(text) if text is not None and text.strip().lstrip("-").isdigit() else None
    except ValueError:
        return None


def _kind_codes(kind: pa.ChunkedArray) -> np.ndarray:
    """Each row's kind as an index into ``KINDS``, -1 for any other (a dictionary column is looked up
    through its dictionary, not decoded)."""
    kinds = arrow(list(KINDS))
    out = []
    for chunk in kind.chunks:
        if pa.types.is_dictionary(chunk.type):
            lut = numbers(pc.index_in(chunk.dictionary, value_set=kinds), missing=-1)
            out.append(np.append(lut, -1).astype(np.int8)[numbers(chunk.indices)])
        else:
            out.append(numbers(pc.index_in(chunk, value_set=kinds), missing=-1).astype(np.int8))
    return np.concatenate(out) if out else np.zeros(0, np.int8)


def _first_row(mask: pa.ChunkedArray | pa.Array) -> int:
    return int(np.argmax(numbers(mask))) if len(mask) else 0


def _first(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__
