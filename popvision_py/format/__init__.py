"""The open profile.pop format: schema (version 1), atomic writer and defensive reader."""

from popvision_py.format.reader import Profile, open_profile
from popvision_py.format.schema import SCHEMA_VERSION, TABLES
from popvision_py.format.writer import ProfileWriter, TableWriter

__all__ = ["Profile", "ProfileWriter", "SCHEMA_VERSION", "TABLES", "TableWriter", "open_profile"]
