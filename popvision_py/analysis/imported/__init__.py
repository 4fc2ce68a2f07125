"""Imported: what a profile imported from PyTorch profiler traces (``popvision import``) answers
besides the common views, in a PyTorch user's words.

- ``ranks``: the run's ranks: the schedule and its ideal bubble, each rank's exposed and hidden
  communication, which rank receives what, and the insights (bottleneck stage, bubble,
  communication, memory peak).

May import: ``common``, ``trace``; ``popvision_py.format`` and ``popvision_py.errors``.
"""
