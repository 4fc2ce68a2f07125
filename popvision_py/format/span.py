"""One member of profile.pop as a read-only, seekable file of its own, read with ``pread``; and the
container's descriptor those reads go through (``Container``); a member's Parquet file read whole
(``read_whole``).

Both the reader (through ``pa.PythonFile``, for pyarrow's Parquet reader) and ``MemberFileSystem``
(for DuckDB's) read a member through ``MemberFile``: the member's bytes are ``pread`` from the
container on each read, never mapped, so a file another process truncates under the reader gives a
short read (and an error) instead of killing the process with SIGBUS.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any


class Container:
    """The open profile.pop's descriptor, read with ``pread`` and closed with this object.

    The standard library's ``os.pread`` rather than pyarrow's ``OSFile``: only recent pyarrow opens an
    ``OSFile`` on a descriptor (25 does; 15, the floor, takes a path only, and its ``fileno()`` fails).
    """

    # Linux reads at most this many bytes in one call (a longer read returns short)
    _MAX_READ = 0x7FFFF000

    def __init__(self, handle: int) -> None:
        self._handle = handle

    @property
    def closed(self) -> bool:
        return self._handle < 0

    def fileno(self) -> int:
        if self._handle < 0:
            raise ValueError("I/O operation on a closed file")
        return self._handle

    def read_at(self, nbytes: int, offset: int) -> bytes:
        """``nbytes`` from ``offset`` on (fewer where the file ends first), the file's position untouched."""
        parts = []
        while nbytes > 0:
            part = os.pread(self.fileno(), min(nbytes, self._MAX_READ), offset)
            if not part:
                break
            parts.append(part)
            nbytes -= len(part)
            offset += len(part)
        return b"".join(parts)

    def close(self) -> None:
        if self._handle >= 0:
            handle, self._handle = self._handle, -1
            os.close(handle)


class MemberFile:
    """``size`` bytes of a container from ``offset`` on, as a read-only, seekable file.

    ``read_at(offset, nbytes)`` reads the container (a ``pread``: the container has no position of
    its own to share). A reader may share one handle between threads, each doing seek-then-read:
    the position is kept per OS thread (a native thread calling into Python may get a new thread
    state, and so a new ``threading.local``, on every call), so another thread's seek never moves
    this one's read.
    """

    def __init__(self, read_at: Callable[[int, int], bytes], name: str, offset: int, size: int,
                 verify: Callable[[int, bytes], None] | None = None, footer_start: int = 0) -> None:
        self.name, self.size = name, size
        self._read_at, self._offset = read_at, offset
        # called with (start, bytes) of a read that starts below the footer, before the bytes are
        # returned (the reader checked the footer at open)
        self._verify, self._footer_start = verify, footer_start
        self._positions: dict[int, int] = {}
        self.closed = False

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def tell(self) -> int:
        return self._positions.get(threading.get_ident(), 0)

    def seek(self, position: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.tell(), 2: self.size}[whence]
        position = min(max(base + position, 0), self.size)
        self._positions[threading.get_ident()] = position
        return position

    def read(self, nbytes: int | None = -1) -> bytes:
        start = self.tell()
        left = self.size - start
        nbytes = left if nbytes is None or nbytes < 0 else min(nbytes, left)
        self._positions[threading.get_ident()] = start + nbytes
        data = self._read_at(self._offset + start, nbytes)
        if self._verify is not None and start < self._footer_start:
            self._verify(start, data)  # the very bytes handed back are the ones checked
        return data

    def close(self) -> None:
        self.closed = True

    def __enter__(self) -> MemberFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_whole(parquet: Any, columns: list[str] | None = None) -> Any:
    """``parquet.read(columns=...)`` (a pyarrow ParquetFile) that also reads a file of no row group (a
    table written empty) as its schema's empty table: pyarrow 18.0's ``read()`` fails on one."""
    if parquet.metadata.num_row_groups:
        return parquet.read(columns=columns)
    empty = parquet.schema_arrow.empty_table()
    return empty.select(columns) if columns is not None else empty
