"""Pipeline: the stages of a pipelined run, and the run re-timed under other choices.

- ``stages``: time per stage and pass, busy and idle, imbalance, bubble, the best split of blocks.
- ``schedules``: torch's pipeline schedules, each rank's order of actions.
- ``replay``: an imported pipeline's schedule as a graph with measured costs, re-timed.
- ``plain``: the profiler's own cost: the recorded run's step without the profiler, timed or bounded.
- ``critical_path``: the chain of work that set an imported step's length, its culprits.
- ``whatif``: other schedules, micro-batch counts and splits of an imported pipeline, predicted.

May import: ``common``, ``trace``, ``imported``; ``popvision_py.format`` and ``popvision_py.errors``.
"""
