"""popvision_py: an open profiler for many-core, bulk-synchronous ML accelerators.

Read a profile with ``popvision_py.open(path)`` (the analysis facade) or, for the raw tables,
``popvision_py.format.open_profile(path)``.
"""

__version__ = "0.1.0"
