"""IPU: the views of a chip's run, one module per report (a rank of an imported trace is an IPU).

- ``memory``: per IPU and tile, by category, always-live or not, out-of-memory tiles, variables.
- ``memory_depth``: the tile map, a variable's bytes per tile, one tile in depth, the fullest tiles.
- ``liveness``: not-always-live memory over program steps, the peak, what is live at a step.
- ``tiles``: how evenly compute sets spread over tiles, the busiest tiles, chosen tiles in time.
- ``programs``: each IPU's control program put back together as Poplar and PopART lay it out.
- ``exchange``: time by phase, bytes and cycles by kind, the IPU-to-IPU matrix, bandwidth.
- ``operations``: every op's cycles, FLOPs and memory, by op, block and layer.

May import: ``common``, ``trace``; ``popvision_py.format`` and ``popvision_py.errors``.
"""
