"""Ctrl-C in a command: what the CLI's handler saw, for the commands that run libraries which may
swallow a KeyboardInterrupt (DuckDB, say). A module of its own, so that a command reads it without
importing the CLI package that loads the commands (no import circle)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

_INTERRUPTS: list[int] = []  # Ctrl-Cs seen: a library may swallow the KeyboardInterrupt, not this
_DEFERRING: list[bool] = []  # inside a `deferred` block: a Ctrl-C is noted, raised as the block ends


def _interrupt(signum: int, frame: object) -> None:
    _INTERRUPTS.append(signum)
    if _DEFERRING:
        return
    _raise_interrupt()


def _raise_interrupt() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the clean-up the first one starts runs to its end
    raise KeyboardInterrupt


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A Ctrl-C inside the block is noted and raised as the block ends, not where it lands. For
    what a KeyboardInterrupt must not break into: DuckDB's module set-up (nanobind) aborts the whole
    process (SIGABRT, "Critical nanobind error") on a KeyboardInterrupt raised while it builds its enums."""
    before = len(_INTERRUPTS)
    _DEFERRING.append(True)
    try:
        yield
    finally:
        _DEFERRING.pop()
    if len(_INTERRUPTS) > before and not _DEFERRING:
        _raise_interrupt()


def interrupted(exc: BaseException | None) -> bool:
    """``exc`` is a KeyboardInterrupt, or was raised while handling one."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__context__ or exc.__cause__
    return False
