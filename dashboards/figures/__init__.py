"""Pure figure builders: the analysis library's DataFrames in, plotly figures out, one module per page.

Nothing here reads a profile or computes a figure the analysis does not: the builders only lay out
what they are given (positions of tiles on a grid, the order of stacked segments, labels).
Tests call them directly.

- ``style``: what every page shares: colours, layout, the blank figure, IPU labels, number units
- ``memory``: Memory (and Summary's memory per IPU)
- ``liveness``: Liveness
- ``trace``: Trace
- ``gpu``: GPU (a GPU trace's streams over time and its breakdowns per rank)
- ``stages``: Stages (and Compare's stage cycles)
- ``exchange``: Exchange (and Summary's time by phase)
- ``compare``: Compare
- ``whatif``: What-if
- ``insights``: Summary's tile insights (memory over tiles in the report's bins)

Import the module a page draws with (``from dashboards.figures import memory as figures``); this
package imports none of them.
"""
