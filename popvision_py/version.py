"""The package's version, on the bottom floor so the format writer can stamp it without importing the facade."""

__version__ = "0.1.0"
