"""The open profile.pop format: schema (version 1), atomic writer and defensive reader."""

from popvision_py.format.reader import Profile, open_profile
from popvision_py.format.schema import SCHEMA_VERSION, TABLES

__all__ = ["Profile", "ProfileWriter", "SCHEMA_VERSION", "TABLES", "TableWriter", "open_profile"]


def __getattr__(name: str):
    # The writer (and its atomic publishing) is imported when first asked for: the commands that
    # only read a profile (`popvision info`, `sql`) do without it.
    if name in ("ProfileWriter", "TableWriter"):
        from popvision_py.format import writer

        return getattr(writer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
