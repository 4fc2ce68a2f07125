"""Atomic file output: a result appears whole at its path, or not at all.

The bytes go to an anonymous file (``O_TMPFILE``) in the destination's folder, so a process
killed mid-write, even by SIGKILL, leaves nothing behind; only when everything is written and
fsynced is the file given a name and renamed over the destination. Two writers racing for the
same path each publish a whole file; the last rename wins, they never interleave.

Every output file holds an exclusive ``flock`` for as long as its writer lives. A writer killed
between naming its file and the rename leaves a ``.<hex>.partial`` file behind: nobody holds its
lock any more, and the next write into that folder removes it (``remove_stale_partials``).

``folder_lock`` serialises whole writers (``popvision run --profile``) over one folder.

What is at the destination decides how it is written (``output_target``, the one rule every
command's ``-o`` follows): nothing there or a regular file is replaced atomically as above; a
character device or a FIFO (``-o /dev/null``, ``-o /dev/stdout``, a named pipe) is written into,
streamed, as ``cp`` and ``tee`` do, and never renamed over; a directory, a block device, a socket
or a symbolic link to a file is refused in one sentence. Nothing that is not a regular file is
ever replaced.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import secrets
import re
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from popvision_py.errors import ProfileWriteError


PARTIAL_SUFFIX = ".partial"


def _open_anonymous(folder: Path) -> tuple[BinaryIO, Path | None]:
    """An unnamed file in ``folder`` where the OS supports it, else a hidden named one; locked
    (``flock``) for as long as this process has it open, so its name, once it has one, is known live."""
    if hasattr(os, "O_TMPFILE"):
        try:
            fd = os.open(folder, os.O_TMPFILE | os.O_RDWR, 0o644)
            _lock_if_possible(fd)
            return os.fdopen(fd, "w+b"), None
        except OSError:
            pass  # file system without O_TMPFILE support: fall back to a named file
    named = folder / f".{secrets.token_hex(8)}{PARTIAL_SUFFIX}"
    fd = os.open(named, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
    _lock_if_possible(fd)
    return os.fdopen(fd, "w+b"), named


def _lock_if_possible(fd: int) -> None:
    """flock a fresh file of ours; a file system without flock leaves it unlocked (then its stale
    partial file is never taken for dead either: see remove_stale_partials)."""
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def remove_stale_partials(folder: Path) -> list[Path]:
    """Remove the ``.partial`` files in ``folder`` that no live writer holds; returns them.

    A live writer holds its file's lock from before the file has a name, so a partial file whose
    lock can be taken belongs to a writer that was killed.
    """
    removed = []
    try:
        candidates = [p for p in folder.iterdir() if p.name.startswith(".") and p.name.endswith(PARTIAL_SUFFIX)]
    except OSError:
        return removed
    for path in candidates:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # still the file we locked (not renamed away and replaced meanwhile)?
            if os.path.samestat(os.fstat(fd), os.lstat(path)):
                os.unlink(path)
                removed.append(path)
        except OSError:
            pass  # locked: a live writer's
        finally:
            os.close(fd)
    return removed


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


def _publish(handle: BinaryIO, named: Path | None, destination: Path, sync_folder: bool = True) -> None:
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
    if sync_folder:
        synced_folder(destination.parent)


def synced_folder(folder: Path) -> None:
    """Make the renames into ``folder`` durable (its own fsync): after a file's, or once after many files'."""
    with contextlib.suppress(OSError):
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


FILE = "file"      # output_target: nothing there yet, or a regular file: replaced atomically
STREAM = "stream"  # a character device or a FIFO: written into, never replaced

# the process's own streams by name: a symlink chain to fd 1 and 2 (a terminal, a pipe or a file
# the shell opened), written into as the shell's redirection would be
_OWN_STREAM = re.compile(r"/dev/(stdout|stderr|fd/\d+)|/proc/(self|thread-self)/fd/\d+")


def output_target(path: str | os.PathLike[str], *, streams: bool = True) -> str:
    """How ``path`` is written: FILE (atomically) or STREAM (into a device or FIFO, as ``cp`` does).

    ProfileWriteError, one sentence, for anything that must not be replaced and cannot be written
    into: a directory, a block device, a socket, a symbolic link to a file or to nothing (replacing
    it would break the link, writing through it would write somewhere not named), and, with
    ``streams=False`` (a profile, which must be a file that can be read back), a device or FIFO too.
    """
    destination = Path(path)
    try:
        link = os.lstat(destination)
    except FileNotFoundError:
        return FILE
    except NotADirectoryError:
        blocking = next((p for p in destination.parents if p.exists() and not p.is_dir()), destination.parent)
        raise ProfileWriteError(f"Cannot write {destination}: {blocking} is a file, not a directory.") from None
    except OSError as exc:
        raise write_error(destination, exc) from exc
    try:
        mode = os.stat(destination).st_mode if stat.S_ISLNK(link.st_mode) else link.st_mode
    except FileNotFoundError:
        raise ProfileWriteError(f"Cannot write {destination}: it is a symbolic link to nothing; give the path "
                                f"of a file.") from None
    except OSError as exc:
        raise write_error(destination, exc) from exc
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        if streams:
            return STREAM
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a character device"
        raise ProfileWriteError(f"Cannot write {destination}: it is {kind}; a profile is written to a regular file.")
    if stat.S_ISLNK(link.st_mode) and stat.S_ISREG(mode):
        if streams and _OWN_STREAM.fullmatch(os.path.abspath(destination)):
            return STREAM
        raise ProfileWriteError(f"Cannot write {destination}: it is a symbolic link to a file; give the file's "
                                f"own path ({os.path.realpath(destination)}).")
    kind = ("a directory" if stat.S_ISDIR(mode) else "a block device" if stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else None)
    if kind is not None:
        files = "regular files, character devices and FIFOs" if streams else "a regular file"
        raise ProfileWriteError(f"Cannot write {destination}: it is {kind}; popvision writes only {files}.")
    return FILE


def check_output(path: str | os.PathLike[str], *, streams: bool = True) -> None:
    """ProfileWriteError now, before any work, where ``path`` could not be written later."""
    destination = Path(path)
    if output_target(destination, streams=streams) == STREAM:
        if not os.access(destination, os.W_OK):
            raise ProfileWriteError(f"Cannot write {destination}: permission denied.")
        return
    blocking = next((p for p in destination.parents if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise ProfileWriteError(f"Cannot write {destination}: {blocking} is a file, not a directory.")
    check_writable(destination.parent)


@contextlib.contextmanager
def _streamed(destination: Path) -> Iterator[BinaryIO]:
    """Write into a device or FIFO in place (opening a FIFO waits for its reader, as ``cp`` does)."""
    try:
        handle = open(destination, "wb", buffering=1 << 20)  # noqa: SIM115 - closed below
    except OSError as exc:
        raise write_error(destination, exc) from exc
    try:
        try:
            yield handle
            handle.flush()
        except BrokenPipeError:
            pass  # the reader left (`... -o /dev/stdout | head`): what it wanted was written
        except OSError as exc:
            raise write_error(destination, exc) from exc
    finally:
        with contextlib.suppress(OSError):
            handle.close()


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str], *, streams: bool = True, tidy: bool = True,
                  sync_folder: bool = True) -> Iterator[BinaryIO]:
    """Yield a binary file; on a clean exit it replaces ``path`` atomically, else vanishes.

    The folder is created if needed. Any exception (KeyboardInterrupt included) discards the
    partial output and leaves an earlier file at ``path`` untouched. A character device or FIFO
    at ``path`` is written into instead (``streams=False`` refuses it); what ``output_target``
    refuses is refused before anything is written. A writer of many files into one folder (a rank's
    each) tidies it once (``tidy``: killed writers' partial files removed, a scan of the folder) and
    makes the renames durable once, after the last (``sync_folder``: the folder's own fsync).
    """
    destination = Path(path)
    if output_target(destination, streams=streams) == STREAM:
        with _streamed(destination) as handle:
            yield handle
        return
    blocking = next((p for p in destination.parents if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise ProfileWriteError(f"Cannot write {destination}: {blocking} is a file, not a directory.")
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
        handle, named = _open_anonymous(destination.parent)
    except OSError as exc:
        raise write_error(destination, exc) from exc
    if tidy:
        remove_stale_partials(destination.parent)
    published = False
    try:
        try:
            yield handle
            _publish(handle, named, destination, sync_folder)
        except OSError as exc:  # a full disk, a read-only or vanished folder...
            raise write_error(destination, exc) from exc
        published = True
    finally:
        handle.close()
        if named is not None and not published:
            with contextlib.suppress(OSError):
                os.unlink(named)


def check_writable(folder: str | os.PathLike[str]) -> None:
    """ProfileWriteError unless a file can be created in ``folder`` (made if needed); nothing is left."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ProfileWriteError(f"Cannot write into {folder}: it is not a directory.")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle, named = _open_anonymous(folder)
    except OSError as exc:
        raise ProfileWriteError(f"Cannot write into {folder}: {exc.strerror or exc}.") from exc
    handle.close()
    if named is not None:
        with contextlib.suppress(OSError):
            os.unlink(named)


def write_error(destination: Path, exc: OSError) -> ProfileWriteError:
    """One sentence for an OSError while writing ``destination``: ENOSPC, EROFS, EACCES..."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    return ProfileWriteError(f"Cannot write {destination}: {reason}.")


_held: dict[tuple[int, int], list] = {}  # (device, inode) of a locked folder -> [fd, depth]


@contextlib.contextmanager
def folder_lock(folder: str | os.PathLike[str], on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold ``folder``'s writer lock (``flock`` on the folder itself: no lock file is left behind).

    A second writer waits for the first, calling ``on_wait`` once first so that it can say so.
    Re-entrant within a process. The folder is created if needed; an OSError is a
    ProfileWriteError sentence.
    """
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise ProfileWriteError(f"Cannot write into {folder}: {exc.strerror or exc}.") from exc
    key = (os.fstat(fd).st_dev, os.fstat(fd).st_ino)
    if key in _held:
        os.close(fd)
        _held[key][1] += 1
    else:
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if on_wait is not None:
                    on_wait()
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:
                pass  # a file system without flock: writers are not serialised there
        except BaseException:
            os.close(fd)
            raise
        _held[key] = [fd, 1]
    try:
        yield
    finally:
        _held[key][1] -= 1
        if not _held[key][1]:
            os.close(_held.pop(key)[0])  # closing releases the lock
