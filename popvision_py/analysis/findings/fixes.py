"""Fixes the insights suggest: each a run configuration the planner accepts, its estimated worst tile, its command.

A fix is a set of *changes* in the vocabulary of ``popvision run``'s options (``micro_batch_size``,
``gradient_accumulation``, ``device_iterations``, ``replication_factor``, ``stages``,
``offload_optimiser``, ``recompute``, ``replicated_tensor_sharding``, ...). ``check`` applies the
changes to the manifest's run configuration and asks the planner's own rules (a ``Planner``, which
the caller hands in: the analysis never imports the engine) whether it runs; a fix it refuses is
never shown, and without a planner no fix is. ``command`` renders the changed run as a
copy-paste ``popvision run`` command: the options the original command gave (the manifest's
``run.request``) with the changes over them, or, for a profile that does not record its request,
every setting of the run spelled out. A PopTorch script's profile records a request with its
arguments (``script_args``): its fixes are ``popvision run SCRIPT --emulate-only ... -- ARGS``, which
emulate the script's model under the changes, and a change of the micro-batch or precision, which
the script's own data and weights fix, is never suggested for it.

Memory estimates (``worst_tile_after``, ``stage_split``) scale the tiles' bytes per category, as
docs/reports.md ("Fixes") describes; they are estimates, the command gives the measured answer.
"""

from __future__ import annotations

import copy
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from popvision_py.analysis.pipeline.stages import min_max_split
from popvision_py.analysis.common.tables import Columns, Table, sum_by

# Options whose flag is not the option's name in kebab case.
FLAGS = {"micro_batch_size": "batch-size", "replication_factor": "replicas", "optimiser": "optimiser",
         "host_input": "input"}
# On/off options: --NAME or --no-NAME.
SWITCHES = ("recompute", "offload_optimiser", "offload_weights", "offload_activations", "replicated_tensor_sharding",
            "tied_embeddings", "embedding_alone", "persistent_workers")
# On/off options whose two flags are not --NAME / --no-NAME.
PAIRS = {"use_combined_accum": ("--combined-accum", "--separate-accum"),
         "enable_outlining": ("--outline", "--no-outline")}
LOCATION_OF = {"offload_optimiser": "optimiser", "offload_weights": "weights", "offload_activations": "activations"}
# The order options appear in a command: the model's parameters, the mapping, the batch, the rest.
ORDER = ("preset", "layers", "hidden", "heads", "seq_len", "vocab", "masked_tokens", "packing", "tied_embeddings",
         "embedding_alone", "ipus", "mode", "strategy", "stages", "micro_batch_size",
         "gradient_accumulation", "device_iterations", "replication_factor", "tensor_sharding", "recompute",
         "offload_optimiser", "offload_weights", "offload_activations", "replicated_tensor_sharding", "precision",
         "optimiser", "available_memory_proportion", "recompute_checkpoints", "attention_serialisation", "arch",
         "system", "runs", "host_processes", "host_input", "loader_workers", "persistent_workers")


class Planner(Protocol):
    """What the analysis asks of the planner that would run a fix, in the manifest's terms.

    A fix is a command the user runs with today's emulator, so it is checked against today's
    planner, not against rules a profile recorded when it was written. The caller hands the planner
    in, as the engine is handed ``load_script``: ``popvision_py.open`` and the CLI pass the planner's
    rules module (``engine.rules``), which has these names. The analysis never imports it.
    """

    SYSTEMS: Mapping[str, int]  # the IPU systems a run is planned on, by name: their IPUs
    LARGEST_SYSTEM: str

    def check_run(self, run: Mapping[str, Any]) -> str | None:
        """The first rule a manifest-style run configuration breaks, as the planner's sentence; None if it runs."""

    def ipus_used(self, run: Mapping[str, Any]) -> int:
        """IPUs a run configuration takes."""

    def system_holding(self, ipus: int, wanted: str | None = None) -> str:
        """``wanted`` if it holds ``ipus`` IPUs, else the smallest system that does."""

    def runs_as_pipeline(self, strategy: str, stage_ipus: Sequence[int]) -> bool:
        """Whether stages on these IPUs run as a pipeline (else one after another)."""

    def pipeline_stages(self, stages: int, training: bool) -> int:
        """PopART's count of pipeline stages over ``stages`` positions (2N-1 training, N inference)."""


@dataclass(frozen=True)
class Predicted:
    """The figures a fix's effect states, for ``popvision report --verify`` to hold against a run of it.

    ``None`` where the effect states nothing about that figure. ``faster``: the fix is meant to raise
    the throughput (samples per second), whether or not it states by how much.
    """

    worst_tile_bytes: int | None = None
    step_cycles: float | None = None
    samples_per_second: float | None = None
    faster: bool = False


@dataclass(frozen=True)
class Fix:
    """A suggestion with its estimated effect and the changes that apply it (see the module docstring)."""

    suggestion: str
    effect: str
    changes: dict[str, Any]
    tag: str  # names the fix's profile directory: profile-<tag>
    predicted: Predicted = Predicted()


def flag(name: str, value: Any) -> list[str]:
    """One option as command-line words."""
    if name in PAIRS:
        return [PAIRS[name][0] if value else PAIRS[name][1]]
    if name in SWITCHES:
        return [f"--{name.replace('_', '-')}" if value else f"--no-{name.replace('_', '-')}"]
    if name == "stages":
        return ["--stages", stages_text(value) if not isinstance(value, str) else value]
    if isinstance(value, (list, tuple)):  # one value per IPU: --available-memory-proportion 0.1,0.3
        return [f"--{FLAGS.get(name, name.replace('_', '-'))}", ",".join(str(v) for v in value)]
    return [f"--{FLAGS.get(name, name.replace('_', '-'))}", str(value)]


def stages_text(stages: list[Mapping[str, Any]], order: list[str] | None = None) -> str:
    """Stages as ``--stages`` reads them: ``"B1,B2@0 B3..B6@1"``; three or more blocks that follow each
    other in ``order`` (the model's block order) are written as a range ``first..last``."""
    position = {b: k for k, b in enumerate(order or [])}
    groups = []
    for stage in stages:
        blocks = [str(b) for b in stage["blocks"]]
        k = [position.get(b, -1) for b in blocks]
        consecutive = len(blocks) >= 3 and min(k) >= 0 and k == list(range(k[0], k[0] + len(k)))
        text = f"{blocks[0]}..{blocks[-1]}" if consecutive else ",".join(blocks)
        groups.append(f"{text}@{int(stage['ipu'])}")
    return " ".join(groups)


def block_order(run: Mapping[str, Any]) -> list[str]:
    """The model's blocks in order: the stages' blocks, stage by stage (stages follow the model's order)."""
    stages = sorted(run.get("stages") or [], key=lambda s: int(s.get("stage", 0)))
    return [str(b) for s in stages for b in s.get("blocks", [])]


def request(run: Mapping[str, Any], target: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The model and the options the run's command gave; every setting spelled out if the profile has no record."""
    recorded = run.get("request")
    if isinstance(recorded, Mapping) and isinstance(recorded.get("model"), str):
        options = dict(recorded.get("options") or {})
        if recorded.get("emulate_only"):  # a PopTorch script: its arguments go with it
            options["script_args"] = [str(a) for a in recorded.get("script_args") or []]
        return recorded["model"], options
    locations = run.get("tensor_locations") or {}
    options: dict[str, Any] = {k: v for k, v in (run.get("model_params") or {}).items()
                               if k in ORDER and isinstance(v, (int, float, str))}
    training = str(run.get("mode", "training")) != "inference"
    options.update({
        "mode": run.get("mode", "training"), "strategy": run.get("strategy"), "stages": list(run.get("stages") or []),
        "micro_batch_size": run.get("micro_batch_size"), "device_iterations": run.get("device_iterations"),
        "replication_factor": run.get("replication_factor", 1), "tensor_sharding": run.get("tensor_sharding", 1),
        "host_processes": run.get("host_processes"),
        "precision": run.get("precision"), "arch": target.get("arch"), "system": target.get("system"),
    })
    if training:
        options.update({"gradient_accumulation": run.get("gradient_accumulation"), "optimiser": run.get("optimiser"),
                        "recompute": bool(run.get("recompute", False))})
        if run.get("recompute") and run.get("recompute_checkpoints", "blocks") != "blocks":
            options["recompute_checkpoints"] = run["recompute_checkpoints"]
    if int(run.get("attention_serialisation", 1) or 1) > 1:
        options["attention_serialisation"] = run["attention_serialisation"]
    for name, where in LOCATION_OF.items():
        options[name] = locations.get(where, "on_chip") == "off_chip"
    options["replicated_tensor_sharding"] = bool(locations.get("replicated_tensor_sharding", False))
    return str(run.get("model", "MODEL")), {k: v for k, v in options.items() if v is not None}


def fixed_options(run: Mapping[str, Any], target: Mapping[str, Any], changes: Mapping[str, Any],
                  planner: Planner) -> tuple[str, dict[str, Any]]:
    """The model and the ``popvision run`` options (by option name, ``assume`` a dict) that run this
    profile's configuration with ``changes``: what ``command`` spells out, and ``--verify`` runs;
    ``planner`` picks the system that holds the IPUs the changed run takes."""
    model, options = request(run, target)
    options.update(changes)
    amp = options.get("available_memory_proportion")
    if isinstance(amp, (list, tuple)):
        # one value per IPU: a fix over another number of IPUs keeps the strictest for every IPU
        stages = applied(run, changes).get("stages") or []
        ipus = 1 + max((int(s.get("ipu", k)) for k, s in enumerate(stages if not isinstance(stages, str) else [])),
                       default=len(amp) - 1)
        if len(amp) != ipus:
            options["available_memory_proportion"] = min(float(v) for v in amp)
    if "system" in options:  # a fix over more IPUs needs a system that holds them
        needed = planner.ipus_used(applied(run, changes))
        options["system"] = planner.system_holding(needed, str(options["system"]))
    return model, options


def command(run: Mapping[str, Any], target: Mapping[str, Any], changes: Mapping[str, Any], tag: str,
            planner: Planner) -> str:
    """The ``popvision run`` command that runs this profile's configuration with ``changes``, writing
    its profile to ``profile-<tag>``."""
    model, options = fixed_options(run, target, changes, planner)
    assume = options.pop("assume", None) or {}
    script_args = options.pop("script_args", None)
    order = block_order(run)
    words = ["popvision", "run", model]
    if script_args is not None:
        words = ["popvision", "run", script_path(model), "--emulate-only"]
    for name in sorted(options, key=lambda n: ORDER.index(n) if n in ORDER else len(ORDER)):
        value = options[name]
        if name == "stages" and not isinstance(value, str):
            value = stages_text(value, order)
        words += flag(name, value)
    for name, value in sorted(assume.items()):
        words += ["--assume", f"{name}={value}"]
    words += ["--profile", "--profile-dir", f"profile-{tag}"]
    if script_args:
        words += ["--", *script_args]
    return shlex.join(words)


def script_path(path: str) -> str:
    """A recorded absolute path (a script's, a profile's) as a user would type it: relative to the
    current directory when under it (``examples/mnist_pipeline.py``), else absolute."""
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive
        return path
    return path if relative.startswith("..") else relative


def applied(run: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest's run configuration with ``changes`` made."""
    out = copy.deepcopy(dict(run))
    locations = dict(out.get("tensor_locations") or {})
    for name, value in changes.items():
        if name in LOCATION_OF:
            locations[LOCATION_OF[name]] = "off_chip" if value else "on_chip"
        elif name == "replicated_tensor_sharding":
            locations[name] = bool(value)
        else:
            out[name] = value
    out["tensor_locations"] = locations
    return out


# What a PopTorch script's own code fixes: its DataLoader's batch_size, its weights' dtype, its
# optimiser's accumulation types (poptorch.optim's accum_type and *_accum_type arguments).
SCRIPT_FIXED = {"micro_batch_size": "batch_size in the script's poptorch.DataLoader",
                "precision": "the dtype of the script's model",
                "accum_type": "the accum_type argument of the script's poptorch.optim optimiser",
                "optimiser_state_type": "the *_accum_type arguments of the script's poptorch.optim optimiser",
                "first_moment_type": "the first_order_momentum_accum_type argument of the script's poptorch.optim "
                                     "optimiser"}


def check(run: Mapping[str, Any], changes: Mapping[str, Any], planner: Planner) -> str | None:
    """``None`` if ``planner`` accepts the run with ``changes``, else its sentence."""
    recorded = run.get("request")
    if isinstance(recorded, Mapping) and recorded.get("emulate_only"):
        for name in (n for n in changes if n in SCRIPT_FIXED):  # the first named: one sentence, always the same
            return f"A PopTorch script's {name.replace('_', ' ')} is {SCRIPT_FIXED[name]}, not an option."
    return planner.check_run(applied(run, changes))


# -- memory estimates ------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorstTile:
    ipu: int
    tile: int
    bytes: int


def worst_tile_after(tile_memory: Columns, target: Mapping[str, Any],
                     keep: Mapping[str | tuple[int, str], float]) -> WorstTile:
    """The worst tile once categories' bytes are scaled: ``keep[category]`` on every IPU,
    ``keep[(ipu, category)]`` on that IPU only (over the first); 1 where not named."""
    words = tile_memory.words("category")
    code, ipu = tile_memory.codes("category"), tile_memory["ipu"].astype(np.int64)
    factor = np.ones(len(code))
    for key, k in sorted(keep.items(), key=lambda item: isinstance(item[0], tuple)):
        on, category = key if isinstance(key, tuple) else (None, key)
        where = np.flatnonzero(words == category)
        if len(where):
            factor[(code == where[0]) & ((ipu == on) if on is not None else True)] = float(k)
    scaled = tile_memory["bytes"] * factor
    width = int(target["tiles_per_ipu"])
    tile = tile_memory["tile"].astype(np.int64)
    width = max(width, int(tile.max()) + 1 if len(tile) else 0)
    key = tile_memory["ipu"].astype(np.int64) * width + tile
    totals = sum_by(key, scaled, int(key.max()) + 1 if len(key) else 1)
    k = int(np.argmax(totals)) if len(totals) else 0
    return WorstTile(k // width, k % width, int(totals[k]) if len(totals) else 0)


def bytes_text(n: float) -> str:
    return f"{int(round(n)):,} bytes"


def tile_change(before: int, after: int, capacity: int) -> str:
    """``worst tile 863,162 -> ~650,000 bytes (101.7% of 638,976: still 11,024 over)``."""
    verdict = (f"fits, {bytes_text(capacity - after)} to spare" if after <= capacity
               else f"still {bytes_text(after - capacity)} over")
    return (f"worst tile {bytes_text(before)} -> about {bytes_text(after)} ({100.0 * after / capacity:.1f}% of "
            f"{bytes_text(capacity)}: {verdict})")


@dataclass(frozen=True)
class StageSplit:
    """Blocks split into ``len(stages)`` contiguous stages (IPU k for stage k) and each stage's predicted worst tile."""

    stages: list[dict[str, Any]]
    worst_tile_bytes: np.ndarray


def stage_split(blocks: Table, tiles: Any, stage_ipus: Mapping[int, int], k: int) -> StageSplit | None:
    """The contiguous split of the blocks into ``k`` stages that minimises the largest predicted worst tile.

    Always-live memory moves with the blocks: a block weighs its own always-live bytes
    (``stages.blocks``' memory_bytes) plus an even share of the rest of its IPU's always-live bytes
    (code, vertex state, constants). Not-always-live memory peaks at one program step, so it stays
    what it is on each tile. A stage holding a fraction f of IPU q's always-live bytes is predicted
    to peak at ``max over q's tiles of (always-live x f + not-always-live)``, the largest over the
    IPUs its blocks come from. ``tiles`` is ``memory.TileTotals`` (per-tile always-live and not).
    """
    names = [str(b) for b in blocks["block"]]
    n = len(names)
    if k < 1 or n < k:
        return None
    ipu = np.array([stage_ipus.get(int(s), -1) for s in np.asarray(blocks["stage"], np.int64)], np.int64)
    own = np.asarray(blocks["memory_bytes"], float)
    grid_ipus = np.asarray(tiles.ipus, np.int64)
    always = tiles.per_ipu("always_live_bytes").astype(float)
    not_always = tiles.per_ipu("not_always_live_bytes").astype(float)
    weight = own.copy()
    ipu_always = np.zeros(n)  # the always-live bytes of each block's IPU
    for q in np.unique(ipu):
        on = ipu == q
        row = np.flatnonzero(grid_ipus == q)
        total = always[row[0]].sum() if len(row) else own[on].sum()
        weight[on] += max(total - own[on].sum(), 0.0) / on.sum()
        ipu_always[on] = total
    prefix = np.concatenate(([0.0], np.cumsum(weight)))
    held = prefix[None, :] - prefix[:, None]  # [i, j]: always-live bytes of blocks i..j-1
    cost = np.zeros((n + 1, n + 1))
    first = np.concatenate((ipu, [-1]))  # the IPU of block i (blocks of an IPU are contiguous)
    last = np.concatenate(([-1], ipu))  # the IPU of block j - 1
    for q in np.unique(ipu):
        row = np.flatnonzero(grid_ipus == q)
        if not len(row):
            continue
        a, na = always[row[0]], not_always[row[0]]
        total = a.sum()
        f = held / total if total > 0 else np.zeros_like(held)
        # the tiles on the upper envelope of always x f + not-always for f in the range used
        samples = np.linspace(0.0, max(float(f.max()), 1.0), 65)
        envelope = np.unique(np.argmax(a[None, :] * samples[:, None] + na[None, :], axis=1))
        peak = (f[..., None] * a[envelope] + na[envelope]).max(axis=-1)
        takes = ((first[:, None] <= q) & (last[None, :] >= q)) | (first[:, None] == q)
        cost = np.where(takes, np.maximum(cost, peak), cost)
    groups = min_max_split(lambda _: cost, k, n)
    if groups is None:
        return None
    cuts = [(int(g[0]), int(g[-1]) + 1) for g in groups]
    stages = [{"stage": s, "ipu": s, "blocks": names[a:b]} for s, (a, b) in enumerate(cuts)]
    return StageSplit(stages, np.array([cost[a, b] for a, b in cuts]))
