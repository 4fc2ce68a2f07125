"""The open profile.pop format: schema, atomic writer and defensive reader."""

from popvision_py.format.schema import SCHEMA_VERSION, TABLES

__all__ = ["Profile", "ProfileWriter", "SCHEMA_VERSION", "TABLES", "TableWriter", "open_profile"]


def __getattr__(name: str):
    # The reader (pyarrow) and the writer (and its atomic publishing) are imported when first asked
    # for: `popvision sql` opens a profile without decoding (format.opening), `info` writes nothing.
    if name in ("Profile", "open_profile"):
        from popvision_py.format import reader

        return getattr(reader, name)
    if name in ("ProfileWriter", "TableWriter"):
        from popvision_py.format import writer

        return getattr(writer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
