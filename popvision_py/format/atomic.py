"""Atomic file output: a result appears whole at its path, or not at all.

The bytes go to an anonymous file (``O_TMPFILE``) in the destination's folder, so a process
killed mid-write, even by SIGKILL, leaves nothing behind; only when everything is written and
fsynced is the file given a name and renamed over the destination. Two writers racing for the
same path each publish a whole file; the last rename wins, they never interleave.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from popvision_py.errors import ProfileWriteError


def _open_anonymous(folder: Path) -> tuple[BinaryIO, Path | None]:
    """An unnamed file in ``folder`` where the OS supports it, else a hidden named one."""
    if hasattr(os, "O_TMPFILE"):
        try:
            fd = os.open(folder, os.O_TMPFILE | os.O_RDWR, 0o644)
            return os.fdopen(fd, "w+b"), None
        except OSError:
            pass  # file system without O_TMPFILE support: fall back to a named file
    named = folder / f".{secrets.token_hex(8)}.partial"
    fd = os.open(named, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
    return os.fdopen(fd, "w+b"), named


_AT_FDCWD = -100
_AT_SYMLINK_FOLLOW = 0x400


def _name_anonymous(handle: BinaryIO, named: Path) -> None:
    """Give the anonymous file a name; copy it into a new named file where linking fails."""
    libc = ctypes.CDLL(None, use_errno=True)
    source = f"/proc/self/fd/{handle.fileno()}".encode()
    # os.link calls link(2), which does not follow /proc/self/fd links: linkat(2) does.
    if libc.linkat(_AT_FDCWD, source, _AT_FDCWD, os.fsencode(named), _AT_SYMLINK_FOLLOW) == 0:
        return
    handle.seek(0)
    with open(named, "xb") as copy:
        shutil.copyfileobj(handle, copy, 1 << 22)
        copy.flush()
        os.fsync(copy.fileno())


def _publish(handle: BinaryIO, named: Path | None, destination: Path) -> None:
    handle.flush()
    os.fsync(handle.fileno())
    if named is None:
        named = destination.parent / f".{secrets.token_hex(8)}.partial"
        try:
            _name_anonymous(handle, named)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(named)
            raise
    try:
        os.replace(named, destination)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(named)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable
        dir_fd = os.open(destination.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """Yield a binary file; on a clean exit it replaces ``path`` atomically, else vanishes.

    The folder is created if needed. Any exception (KeyboardInterrupt included) discards the
    partial output and leaves an earlier file at ``path`` untouched.
    """
    destination = Path(path)
    if destination.is_dir():
        raise ProfileWriteError(f"Cannot write {destination}: it is a directory.")
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
        handle, named = _open_anonymous(destination.parent)
    except OSError as exc:
        raise ProfileWriteError(f"Cannot write {destination}: {exc.strerror or exc}.") from exc
    published = False
    try:
        yield handle
        try:
            _publish(handle, named, destination)
        except OSError as exc:
            raise ProfileWriteError(f"Cannot write {destination}: {exc.strerror or exc}.") from exc
        published = True
    finally:
        handle.close()
        if named is not None and not published:
            with contextlib.suppress(OSError):
                os.unlink(named)
