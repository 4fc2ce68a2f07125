"""Findings: what the other rooms' answers add up to, in plain words, with the fixes to try.

- ``summary``: the run's key figures and the findings, each with its fix and estimated effect.
- ``insights``: FP32 variables that could be FP16, the fullest tiles, memory over tiles.
- ``fixes``: each fix as a run configuration the planner accepts, with its command.

May import: ``common``, ``trace``, ``ipu``, ``host``, ``imported``, ``pipeline``;
``popvision_py.format`` and ``popvision_py.errors``.
"""
