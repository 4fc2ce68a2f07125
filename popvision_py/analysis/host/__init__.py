"""Host: the run beyond the chips, its processes and their time.

- ``input_wait``: how long the IPUs wait for the host's data loaders (host-bound or not).
- ``events``: the system timeline's files read into ``Events`` (a run of files at a time).
- ``system``: the system timeline of each host process (PopDist's instances, PyTorch's threads):
  where its time went, and a zoomable view of millions of events.
- ``system_figures``: the System section's tables of many files, a run of files at a time.
- ``instances``: a ``poprun`` run's instances side by side, the figures that differ between them.

May import: ``common``, ``trace``; ``popvision_py.format`` and ``popvision_py.errors``.
"""
