"""Ctrl-C in a command: what the CLI's handler saw, for the commands that run libraries which may
swallow a KeyboardInterrupt (DuckDB, say). A module of its own, so that a command reads it without
importing the CLI package that loads the commands (no import circle)."""

from __future__ import annotations

import signal

_INTERRUPTS: list[int] = []  # Ctrl-Cs seen: a library may swallow the KeyboardInterrupt, not this


def _interrupt(signum: int, frame: object) -> None:
    _INTERRUPTS.append(signum)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the clean-up the first one starts runs to its end
    raise KeyboardInterrupt


def interrupted(exc: BaseException | None) -> bool:
    """``exc`` is a KeyboardInterrupt, or was raised while handling one."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__context__ or exc.__cause__
    return False
