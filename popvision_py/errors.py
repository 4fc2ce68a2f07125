"""The project's error classes.

Every error a user can cause (a bad file, a bad option, a model that cannot run) is a
``PopvisionError`` carrying one sentence. The CLI catches them once, at the top, prints the
sentence and exits with ``exit_code``; nothing else in the project prints tracebacks to users.
"""

from __future__ import annotations


def first_line(exc: BaseException, empty: str = "no message") -> str:
    """The first line of an exception's message, for a one-sentence error that quotes it (``empty``
    when it has none)."""
    text = str(exc).strip().splitlines()
    return text[0] if text else empty


class PopvisionError(Exception):
    """Base class of every error popvision_py reports to a user as one sentence."""

    exit_code: int = 2


class ProfileError(PopvisionError):
    """A profile.pop cannot be read: the subclasses say why."""


class NotAProfileError(ProfileError):
    """The file is not a profile.pop container at all."""


class EmptyProfileError(ProfileError):
    """The file is empty or was cut short."""


class CorruptProfileError(ProfileError):
    """A member of the container (or the container itself) is damaged."""


class ProfileChangedError(CorruptProfileError):
    """The file was overwritten or truncated after it was opened: what was read may mix two files.

    A kind of corrupt profile, so whoever refuses damaged members refuses a changed one too.
    """


class UnknownFormatError(ProfileError):
    """The manifest names a format other than popvision-profile."""


class NewerSchemaError(ProfileError):
    """The profile was written with a schema version this reader does not know."""


class MissingTableError(ProfileError):
    """A table the schema requires, or a caller asked for, is not in the profile."""


class MissingColumnError(ProfileError):
    """A column the schema requires, or a caller asked for, is not in a table."""


class ColumnTypeError(ProfileError):
    """A column holds a type other than the one the schema declares."""


class UnexpectedMemberError(ProfileError):
    """The container holds a member that is not one of the known table names."""


class MemberSizeError(ProfileError):
    """A member declares a size that does not fit the file."""


class ValueRangeError(ProfileError):
    """A table holds a value its schema does not allow (a null, an id beyond the target, end before start...)."""


class ExpansionError(ProfileError):
    """The profile would decode to far more than its size allows (a decompression bomb), or the limit set
    is not a number."""


class ManifestError(ProfileError):
    """manifest.json is missing, not JSON, or lacks keys the schema requires."""


class ProfileWriteError(PopvisionError):
    """Writing a profile failed; any earlier profile at the same path is untouched."""


class ConfigError(PopvisionError):
    """A run configuration (model, strategy, options) is invalid."""


class ClusterError(PopvisionError):
    """A Dask cluster cannot do what it was given: a worker that does not see the file, runs another popvision, or
    died."""


class OutOfRangeError(PopvisionError):
    """A requested item (IPU, step, tile...) is not in the profile."""
