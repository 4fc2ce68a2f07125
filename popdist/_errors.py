"""PopDist's errors: one sentence each, as the rest of popvision's (``popvision run`` exits with code 2).

Graphcore's ``popdist`` has no error classes of its own, so these are popvision's and named for the
package, leaving ``Error`` to ``poptorch.Error`` (PopTorch's real base exception)."""

from __future__ import annotations

from popvision_py.errors import ConfigError


class PopDistError(ConfigError):
    """A PopDist program asked for something that cannot run here (a bad PopRun environment, say)."""


class PopDistUnsupportedError(PopDistError):
    """A PopDist API popvision's ``popdist`` does not cover (one sentence, naming it).

    Not an ``AttributeError``, on purpose: ``from popdist import getDeviceId`` then reports this
    sentence rather than Python's generic "cannot import name".
    """

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"{name} is not supported by popvision's PopDist emulation; docs/poptorch.md lists what is "
                         f"covered.")
