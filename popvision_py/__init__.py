"""popvision_py: an open profiler for many-core, bulk-synchronous ML accelerators.

Read a profile with ``popvision_py.open(path)`` (the analysis facade) or, for the raw tables,
``popvision_py.format.open_profile(path)``.
"""

from popvision_py.version import __version__

__all__ = ["__version__", "compare", "open"]


def open(path, system=None):  # noqa: A001 - the library's entry point, like pv.open(...)
    """Open a profile.pop: returns a ``popvision_py.analysis.report.Report`` (see docs/api.md). ``system``:
    system timeline files or folders to use instead of those found beside the profile. Its insights'
    fixes are checked against the planner's rules (``engine.rules``), handed in here."""
    from engine import rules
    from popvision_py.analysis.report import Report

    return Report(path, system, rules)


def compare(a, b):
    """Compare two profiles (paths or Reports): returns a ``popvision_py.analysis.compare.Comparison``;
    paths are opened as ``open`` opens them."""
    from engine import rules
    from popvision_py.analysis.compare import Comparison

    return Comparison(a, b, rules)
