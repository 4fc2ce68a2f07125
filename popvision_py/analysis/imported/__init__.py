"""Imported: what a profile imported from PyTorch profiler traces (``popvision import``) answers
besides the common views, in a PyTorch user's words.

- ``ranks``: the run's ranks: the schedule and its ideal bubble, each rank's exposed and hidden
  communication, which rank receives what, and the insights (bottleneck stage, bubble,
  communication, memory peak).
- ``gpu``: a GPU trace's own time line (the ``kernels`` table): each rank's and stream's idle,
  compute, communication and memory time within the profiled steps, and the figures Holistic Trace
  Analysis 0.5 gives (temporal breakdown, kernel types and their overlaps, communication-computation
  overlap, top kernels, launch delays, idle time by cause), computed as HTA computes them.
- ``kernels``: the ``kernels`` table as arrays (``Kernels``), cut into pieces where a rank's GPU idles, and a
  long rank held compressed a piece as read at a time and given back a piece at a time (``HeldKernels``).
- ``intervals``: the time each set of labels (kinds of kernels) runs at once, per rank or stream
  (``coverage``), a piece of the intervals at a time: what every figure of the GPU's time is made of; and where
  a rank's kernels may be cut into pieces (``idle_cuts``).
- ``stats``: per-key counts, sums, extremes, means, standard deviations and medians of a rank's kernels a piece
  at a time, the same bits as at once.
- ``gpu_ranks``: those figures a run of ranks at a time (at most ``CHUNK_KERNELS`` kernels, one rank at
  least), read from the row groups in order, so that a report holds a bounded share of the run's kernels and
  a run of many small ranks is one pass over whole columns, not a pass a rank.
- ``gpu_cluster``: the same figures made on a Dask cluster's workers (``popvision report --scheduler``), a run of
  whole ranks and the row groups holding them a task, their rows joined in rank order.
- ``streams``: a GPU trace's streams over time: each rank's streams as lanes, a zoom window of their
  kernels, or of each kind's occupancy in bins where the window holds too many (the dashboard's GPU page).
- ``collectives``: a GPU trace's collectives per rank and process group: calls, bytes, GPU time and the
  bandwidth they make (nccl-tests' algorithm and bus bandwidth), the group's other ranks its peers.
- ``bound``: beyond HTA's figures: what bound each profiled step (the GPU busy, waiting for the CPU's
  launches, for the DataLoader, or for something else) and the kernels worth a look.
- ``phases``: beyond HTA's figures too: the phases the trace's own annotations name, with the time each ran
  beside another, a piece of a rank's kernels at a time.
- ``stragglers``: across the ranks of a data-parallel run, each rank's arrival at each step's collectives and
  its compute before it; the ranks that arrive last, by how much past the median, and the step without them.

May import: ``common``, ``trace``; ``popvision_py.format``, ``popvision_py.errors``, ``popvision_py.workers`` and
``popvision_py.version``.
"""
