"""The system timeline a PopTorch program records under ``PVTI_OPTIONS``, as Graphcore's libpvti does.

``PVTI_OPTIONS`` is a JSON object: ``"enable": "true"`` turns recording on, ``"directory"`` is where
each process writes its file (the current directory by default), ``"channels"`` a list of the
channels to record (all by default: ``poptorch``, ``dataloader``, ``popdist``). Each process writes
``<directory>/<process>.pvti.parquet`` (``popvision_py.format.system``): ``instance-<I>`` for
instance I of a poprun launch (PopDist's index, from PopRun's variables), ``process-<pid>``
otherwise. The events are kept in memory and written in row groups as they accumulate, into a file
that is published whole when the process exits (or when ``popvision run`` finishes the script), so a
killed process leaves nothing behind.

Without ``PVTI_OPTIONS`` (or with ``"enable"`` other than true) nothing is recorded: each event
point costs one look-up of the environment variable. A malformed value is one sentence
(``poptorch.Error``) at the first event the script records.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from popdist._env import poprun_instance
from popvision_py.errors import PopvisionError
from popvision_py.format import system as S
from popvision_py.format.atomic import check_writable
from poptorch._errors import Error

ENV = "PVTI_OPTIONS"
EXAMPLE = '\'{"enable":"true","directory":"reports","channels":["poptorch","dataloader"]}\''


class PvtiSettings:
    """``PVTI_OPTIONS`` as read: where to write, and which channels (None: all)."""

    def __init__(self, directory: Path, channels: frozenset[str] | None) -> None:
        self.directory, self.channels = directory, channels


def settings(text: str) -> PvtiSettings | None:
    """``PVTI_OPTIONS``' value read (None: recording is off); ``Error`` with one sentence if malformed."""
    try:
        options = json.loads(text)
    except ValueError:
        raise Error(f"PVTI_OPTIONS is not JSON: {text[:80]!r}; write it as {EXAMPLE}.") from None
    if not isinstance(options, dict):
        raise Error(f"PVTI_OPTIONS must be a JSON object, such as {EXAMPLE}.")
    unknown = sorted(set(options) - {"enable", "directory", "channels"})
    if unknown:
        raise Error(f"PVTI_OPTIONS has no option {unknown[0]!r}: it takes enable, directory and channels.")
    enable = options.get("enable", False)
    if isinstance(enable, str) and enable.strip().lower() in ("true", "false"):
        enable = enable.strip().lower() == "true"
    if not isinstance(enable, bool):
        raise Error(f"PVTI_OPTIONS' enable must be \"true\" or \"false\", not {json.dumps(enable)[:40]}.")
    if not enable:
        return None
    directory = options.get("directory", ".")
    if not isinstance(directory, str) or not directory.strip():
        raise Error(f"PVTI_OPTIONS' directory must be a folder's name, not {json.dumps(directory)[:40]}.")
    channels = options.get("channels")
    if channels is not None and not (isinstance(channels, list) and all(isinstance(c, str) for c in channels)):
        raise Error(f"PVTI_OPTIONS' channels must be a list of channel names such as [\"poptorch\",\"dataloader\"], "
                    f"not {json.dumps(channels)[:40]}.")
    return PvtiSettings(Path(directory), None if channels is None else frozenset(channels))


def process_name() -> tuple[str, int | None]:
    """This process's name in the timeline, and its instance of a poprun launch (None outside poprun)."""
    instance = poprun_instance()
    if instance is None:
        return f"process-{os.getpid()}", None
    return f"instance-{instance.index}", instance.index


class Recorder:
    """One process's events, written to its file in row groups as they accumulate, published at ``close``."""

    def __init__(self, options: PvtiSettings) -> None:
        self.channels = options.channels
        self.process, self.instance = process_name()
        self.pid = os.getpid()
        self.path = options.directory / f"{self.process}{S.SUFFIX}"
        check_writable(options.directory)  # a folder that cannot be written is one sentence now, not at exit
        self._rows: list[tuple[str, str, str, int, int, int, float]] = []
        self._writer: S.SystemWriter | None = None
        self._lock = threading.Lock()
        self.closed = False

    def wanted(self, channel: str) -> bool:
        return self.channels is None or channel in self.channels

    def add(self, channel: str, name: str, kind: int, start_ns: int, end_ns: int, value: float = float("nan")) -> None:
        """One event (``kind`` an index into ``format.system.KINDS``), if its channel is recorded."""
        if self.channels is not None and channel not in self.channels:
            return
        thread = threading.current_thread().name
        with self._lock:
            if self.closed:
                return
            self._rows.append((thread, channel, name, kind, start_ns, end_ns, value))
            if len(self._rows) >= S.ROW_GROUP_ROWS:
                self._flush()

    def span(self, channel: str, name: str, start_ns: int, end_ns: int) -> None:
        self.add(channel, name, 0, start_ns, max(end_ns, start_ns))

    def instant(self, channel: str, name: str, at_ns: int | None = None) -> None:
        at = time.time_ns() if at_ns is None else at_ns
        self.add(channel, name, 1, at, at)

    def counter(self, channel: str, name: str, value: float, at_ns: int | None = None) -> None:
        at = time.time_ns() if at_ns is None else at_ns
        self.add(channel, name, 2, at, at, float(value))

    def _flush(self) -> None:
        rows, self._rows = self._rows, []
        if self._writer is None:
            self._writer = S.SystemWriter(self.path, self.process, self.pid, self.instance)
        thread, channel, name, kind, start, end, value = (list(c) for c in zip(*rows)) if rows else ([],) * 7
        n = len(rows)
        self._writer.write({
            "process": np.full(n, self.process, object), "pid": np.full(n, self.pid, np.int64),
            "thread": np.asarray(thread, object), "channel": np.asarray(channel, object),
            "name": np.asarray(name, object), "kind": np.asarray(S.KINDS, object)[np.asarray(kind, np.int64)],
            "start_ns": np.asarray(start, np.int64), "end_ns": np.asarray(end, np.int64),
            "value": np.asarray(value, np.float64),
        })

    def close(self) -> Path:
        """Write what is left and publish the file (once)."""
        with self._lock:
            if not self.closed:
                self.closed = True
                self._flush()
                self._writer.close()
        return self.path


# One recorder per PVTI_OPTIONS value seen (normally one), made at the first event: the value can
# change within a process (tests, a tool capturing a script without recording).
_recorders: dict[str, Recorder | None] = {}
_guard = threading.Lock()
_exit_hook: list[bool] = []


def active() -> Recorder | None:
    """The recorder for the current ``PVTI_OPTIONS``, None when recording is off."""
    text = os.environ.get(ENV)
    if not text:
        return None
    try:
        return _recorders[text]
    except KeyError:
        pass
    with _guard:
        if text not in _recorders:
            options = settings(text)
            _recorders[text] = Recorder(options) if options is not None else None
            if not _exit_hook:
                _exit_hook.append(True)
                atexit.register(_finish_at_exit)
        return _recorders[text]


@contextlib.contextmanager
def span(channel: str, name: str) -> Iterator[None]:
    """Record the ``with`` block as a span (also when it raises)."""
    recorder = active()
    if recorder is None or not recorder.wanted(channel):
        yield
        return
    start = time.time_ns()
    try:
        yield
    finally:
        recorder.span(channel, name, start, time.time_ns())


def instant(channel: str, name: str) -> None:
    recorder = active()
    if recorder is not None:
        recorder.instant(channel, name)


def finish() -> list[Path]:
    """Publish every recorder's file now (``popvision run`` does when the script ends); returns the files."""
    with _guard:
        recorders = [r for r in _recorders.values() if r is not None]
        _recorders.clear()
    return [r.close() for r in recorders]


def _finish_at_exit() -> None:
    try:
        finish()
    except PopvisionError as exc:
        print(f"popvision: the system timeline was not written: {exc}", file=sys.stderr)
