"""Common: what every room of the analysis shares, and nothing else.

- ``tables``: the profile's tables as the analyzers take them (``Columns``, the trace as NumPy
  arrays with fixed codes for its categories, ``StepIndex``) and the small columnar helpers
  (``sum_by``, ``lookup``, ``bin_edges``, ``SpanUnion``: spans merged, and the time they cover before
  any instant).
- ``answer``: ``Table``, an answer's columns as NumPy arrays, the DataFrame built when asked for.
- ``spread``: a per-rank table at many ranks in a few rows: each figure's distribution over the ranks
  and the ranks furthest past its median.

May import: ``popvision_py.format`` and ``popvision_py.errors`` only; no other room of the analysis.
"""
