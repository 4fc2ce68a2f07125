"""The shim's errors: one sentence each, as the rest of popvision's."""

from __future__ import annotations

from popvision_py.errors import ConfigError


class Error(ConfigError):
    """A PopTorch program asked for something that cannot run (PopTorch's ``poptorch.Error``)."""


class UnsupportedError(Error):
    """A PopTorch API popvision's CPU-backed ``poptorch`` does not cover (one sentence, naming it).

    Not an ``AttributeError``, on purpose: ``from poptorch import for_loop`` then reports this
    sentence rather than Python's generic "cannot import name".
    """

    def __init__(self, name: str, hint: str = "") -> None:
        self.name = name
        tail = hint or "docs/poptorch.md lists what is covered"
        super().__init__(f"{name} is not supported by popvision's PopTorch emulation; {tail}.")
