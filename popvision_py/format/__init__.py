"""The open profile.pop format: schema, atomic writer and defensive reader."""

from popvision_py.format.schema import SCHEMA_VERSION, TABLES

__all__ = ["Profile", "ProfileWriter", "SCHEMA_VERSION", "TABLES", "TableWriter", "open_profile", "open_profile_file"]


def open_profile_file(path):
    """A profile opened and checked as ``open_profile`` opens one, nothing decoded and pyarrow not imported
    where its footers are small (``opening.ProfileFile``: `popvision sql` and `info`); where a sentence needs
    rows decoded (a value its footer's statistics refuse, a value a query refused), the reader is opened
    on the same path for it."""
    from popvision_py.format.opening import ProfileFile, opened

    return opened(lambda: ProfileFile(path, _reader), path, ProfileFile._READ_ERRORS)


def _reader(path):
    from popvision_py.format.reader import Profile

    return Profile(path)


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
