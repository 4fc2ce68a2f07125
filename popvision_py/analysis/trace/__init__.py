"""Trace: the execution trace folded, never held whole, whatever its length (a billion rows).

- ``scan``: the one streaming pass that folds the trace into ``Aggregates`` (phase totals, how
  often each program step ran, the runs of rows the stages re-time).
- ``cube``: the phase totals per (IPU, stage, pass, phase), held for the (IPU, stage) pairs that occur.
- ``groups``: the same fold over the row groups on all the machine's cores at once.
- ``steps``: a long trace's supersteps and Gantt bars settled as its row groups are folded.
- ``retime``: the run's own supersteps cut from the trace, and re-timed with other costs.
- ``rows``: each IPU's rows gathered in one pass, for the timeline's index.
- ``timeline``: the zoomable timeline (extent, level-of-detail bins, program steps in a window).
- ``levels``: the timeline read out of core, from the profile's levels of detail.

May import: ``common``; ``popvision_py.format`` and ``popvision_py.errors``.
"""
