"""`popvision tune`: search the mappings of a model onto a system by emulating them, on Dask.

The search (docs/tune.md) sits beside the CLI: it knows the engine (to emulate candidates) and the
analysis (to write their ``popvision run`` commands), and writes its result through
``popvision_py.format.tunefile``.

- ``space``: the starting configuration, the candidates (contiguous splits of blocks into stages,
  pipeline depth, tensor sharding, replicas, micro-batch and gradient accumulation, recomputation,
  tensor locations, available memory proportion, phased execution), their keys, commands and the
  pruning before emulation (the planner's rules and a lower bound on each IPU's memory);
- ``evaluate``: the Dask task, one candidate emulated as ``popvision run`` would;
- ``search``: the two rounds of the search on a Dask client, resume and interruption;
- ``table``: ranks, the Pareto front, the rows of ``tune.parquet`` and the text printed;
- ``cluster``: the Dask client the search runs on (an existing cluster's, or a local one's).
"""
