"""The candidates `popvision tune` emulates: the starting configuration, the two rounds, the pruning.

A candidate is a *configuration*: the settings in ``CONFIG_FIELDS`` (strategy, stages, tensor
sharding, replicas, micro-batch, gradient accumulation, device iterations, recomputation, tensor
locations, available memory proportion), over the user's other options. Its key is the
configuration as canonical JSON; its request is the user's ``RunRequest`` with the configuration
written over it, every field stated, so that the request and the command run it whatever the
model's defaults are.

Round 1 (the mapping): every pipeline depth p (all of 1..min(blocks, IPUs) up to 8 of them, else
the powers of two and the start's), the contiguous splits of the blocks into p stages (all of them
when there are at most ``max_splits``; otherwise the memory-aware split ``engine.zoo`` makes, the
FLOP-balanced one and the head-on-the-first-IPU one when the start ties its head to IPU 0), tensor
sharding t in 1, 2, 4, 8 and replicas r in the powers of two and the most that fit, with p x t x r
at most the system's IPUs; the other settings as the start has them. Phased execution replaces
pipelining for a split whose weights cannot fit on its IPUs (the lower bound below).

Round 2 (around the best): the fastest mappings of round 1 that fit and the fastest that do not
(their memory may fit with other settings), each with its split's cuts moved by one block either
way (a local search where round 1 could not try every split), and each with every micro-batch
(half, same, double), recomputation on and off, tensor locations (optimiser on or off chip, with or
without replicated tensor sharding, weights or activations off chip) and available memory
proportion (0.15, 0.3, 0.6, the start's).

Gradient accumulation follows: with a global batch, global / (micro-batch x replicas), a candidate
whose division is not whole is not made; without one, the start's, raised to the least a pipeline
of that depth needs (2N-1).

Pruning, before anything is emulated: the planner's rules (``engine.rules.check_run``) and a lower
bound on each IPU's always-live memory, its weights (when on chip) and optimiser state (when on
chip, split over the replicas with replicated tensor sharding), against the IPU's tile memory. A
lower bound: a candidate it refuses cannot fit, so the pruning never loses the best.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine import rules
from engine.compiler import cost_model
from engine.model import shard_ops
from engine.plan import Plan
from engine.runner import LOCATION_NAMES, RunRequest, location_options, prepare
from engine.layout import Layout
from engine.zoo import balanced_stages
from popvision_py.analysis.findings.fixes import ORDER, flag, stages_text
from popvision_py.errors import ConfigError
from popvision_py.scripts import load_script
from popvision_py.tune.order import round_robin, spread

CONFIG_FIELDS = ("strategy", "stages", "tensor_sharding", "replication_factor", "micro_batch_size",
                 "gradient_accumulation", "device_iterations", "recompute", "offload_optimiser", "offload_weights",
                 "offload_activations", "replicated_tensor_sharding", "available_memory_proportion")
# What a search may vary (``--search``): each a group of CONFIG_FIELDS.
DIMENSIONS = ("stages", "sharding", "replicas", "batch", "recompute", "offload", "amp", "phased")
SHARDING_CHOICES = (1, 2, 4, 8)
AMP_CHOICES = (0.15, 0.3, 0.6)
OPTION_FIELDS = ("tensor_sharding", "replication_factor", "micro_batch_size", "gradient_accumulation",
                 "device_iterations", "recompute", "available_memory_proportion")


@dataclass(frozen=True)
class SearchSettings:
    """What the search covers (``popvision tune``'s options)."""

    system: str
    global_batch: int | None = None
    search: tuple[str, ...] = DIMENSIONS
    max_candidates: int = 1500
    max_splits: int = 32
    refine: int = 2  # round 2 refines this many fitting and this many non-fitting mappings


@dataclass
class Candidate:
    """One configuration to emulate; ``reason`` says why it is refused before emulation ("" if kept)."""

    config: dict[str, Any]
    stages: list[dict[str, Any]]  # [{"blocks": [...], "ipu": k}] in stage order
    round: int
    reason: str = ""
    is_start: bool = False
    refines: str = ""  # round 2: the key of the round-1 mapping it refines

    @property
    def key(self) -> str:
        return config_key(self.config)


def config_key(config: dict[str, Any]) -> str:
    """The canonical JSON of a configuration: the resume key."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def system_name(wanted: str) -> str:
    """The canonical name of a system a user wrote ("POD16", "ipu-pod16"); ConfigError naming them otherwise."""
    names = {name.lower(): name for name in rules.SYSTEMS}
    key = wanted.lower() if wanted.lower() in names else "ipu-" + wanted.lower()
    if key not in names:
        raise ConfigError(f"Unknown system {wanted!r}; choose one of {', '.join(rules.SYSTEMS)}.")
    return names[key]


@dataclass
class Space:
    """The starting configuration of ``base`` on ``settings.system`` and the candidates around it."""

    base: RunRequest
    settings: SearchSettings
    plan: Plan = field(init=False)
    start: Candidate = field(init=False)

    def __post_init__(self) -> None:
        unknown = [d for d in self.settings.search if d not in DIMENSIONS]
        if unknown:
            raise ConfigError(f"--search names {unknown[0]!r}; choose from {', '.join(DIMENSIONS)}.")
        if self.base.script_args is not None and "batch" in self.settings.search:
            # a PopTorch script's micro-batch is its DataLoader's batch_size, not an option
            self.settings = dataclasses.replace(self.settings,
                                                search=tuple(d for d in self.settings.search if d != "batch"))
        options = {k: v for k, v in self.base.options.items() if v is not None}
        options["system"] = self.settings.system
        self.base = dataclasses.replace(self.base, options=options, profile=None, progress=False)
        try:
            self.plan = prepare(self.base, load_script)
        except ConfigError as exc:
            if str(exc).startswith("The run needs"):  # the start's IPUs: say what to change
                raise ConfigError(f"The starting configuration does not run on an {self.settings.system}: {exc} "
                                  f"State a start that does (--ipus, --stages, --replicas), or search a larger "
                                  f"--system.") from None
            raise
        o = self.plan.options
        self.training = o.training
        self.blocks = list(self.plan.model.blocks)
        self._block_index = {b: k for k, b in enumerate(self.blocks)}
        self.system_ipus = rules.SYSTEMS[self.settings.system]
        stages = [{"blocks": list(s.blocks), "ipu": s.ipu} for s in self.plan.stages]
        amp = o.available_memory_proportion
        config = {
            "strategy": self.plan.strategy, "stages": self.stages_text(stages),
            "tensor_sharding": o.tensor_sharding, "replication_factor": o.replication_factor,
            "micro_batch_size": o.micro_batch_size,
            "gradient_accumulation": o.gradient_accumulation if self.training else 1,
            "device_iterations": o.device_iterations, "recompute": bool(o.recompute),
            **location_options(o.tensor_locations),
            "available_memory_proportion": list(amp) if isinstance(amp, tuple) else float(amp),
        }
        if self.settings.global_batch is not None:
            config = self._at_global_batch(config, stages)
        # The start runs (``prepare`` accepted it): it is emulated whatever the estimate says.
        self.start = Candidate(config, stages, 0, is_start=True)
        costs = cost_model(self.plan)
        self._dtype_bytes = costs.dtype_bytes
        self._state_bytes = costs.optimiser_state_bytes
        self._capacity = self.plan.target.tiles * self.plan.target.arch.bytes_per_tile
        self._params: dict[int, np.ndarray] = {}

    def _at_global_batch(self, config: dict[str, Any], stages: list[dict[str, Any]]) -> dict[str, Any]:
        """The start's configuration at ``--global-batch`` (its accumulation set to reach it), so that every
        row, the start's too, trains with that batch and "vs start" compares like with like; a ConfigError
        saying what to change when the start cannot run at that batch."""
        g = self.settings.global_batch
        if not self.training:
            raise ConfigError(f"--global-batch is samples per weight update, and {self.plan.model.name} runs "
                              "inference (no weight update); leave it out.")
        per_step = config["micro_batch_size"] * config["replication_factor"]
        at_g = self.batch(config, stages)
        if at_g is None:
            raise ConfigError(f"--global-batch {g:,} is not a multiple of the start's samples per step, micro-batch "
                              f"{config['micro_batch_size']:,} x {config['replication_factor']} replica(s) = "
                              f"{per_step:,}; give a multiple of {per_step:,}, or a --batch-size or --replicas "
                              f"that divides {g:,}.")
        broken = rules.check_run(self.run_dict(Candidate(at_g, stages, 0)))
        if broken:
            reason = broken.split(";")[0].rstrip(".")  # its own advice names --gradient-accumulation, which G sets
            raise ConfigError(f"At --global-batch {g:,} the start would accumulate {at_g['gradient_accumulation']:,} "
                              f"micro-batches: {reason}. Give a larger --global-batch, or a start that runs at "
                              "this one (--batch-size, --stages).")
        return at_g

    # -- requests and commands ---------------------------------------------------------------

    def stages_text(self, stages: list[dict[str, Any]]) -> str:
        return stages_text(stages, self.blocks)

    def request(self, config: dict[str, Any]) -> RunRequest:
        """The user's request with ``config`` written over it, every configuration field stated."""
        options = dict(self.base.options)
        for name in OPTION_FIELDS:
            if name in ("gradient_accumulation", "recompute") and not self.training:
                continue
            options[name] = config[name]
        locations = {name: bool(config[name]) for name in LOCATION_NAMES}
        return dataclasses.replace(self.base, options=options, strategy=config["strategy"], stages=config["stages"],
                                   **locations)

    def command(self, request: RunRequest) -> str:
        """The ``popvision run`` command that runs ``request`` (options in ``fixes.ORDER``)."""
        given = {k: v for k, v in {**request.params, **request.options}.items() if v is not None}
        for name in ("strategy", "stages", *LOCATION_NAMES):
            if getattr(request, name) is not None:
                given[name] = getattr(request, name)
        words = ["popvision", "run", request.model]
        if request.script_args is not None:  # a PopTorch script's model, emulated under the options
            words.append("--emulate-only")
        for name in sorted(given, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n)):
            words += flag(name, given[name])
        for name, value in sorted(request.assumptions.items()):
            words += ["--assume", f"{name}={value}"]
        if request.script_args:
            words += ["--", *request.script_args]
        return shlex.join(words)

    def changes(self, config: dict[str, Any]) -> str:
        """The configuration's differences from the start, as ``popvision run`` flags; the stages last
        (the longest, so the table's cut column keeps the short changes in view)."""
        changed = [name for name in CONFIG_FIELDS if config[name] != self.start.config[name]]
        changed.sort(key=lambda name: name == "stages")
        return shlex.join([word for name in changed for word in flag(name, config[name])])

    # -- pruning -----------------------------------------------------------------------------

    def run_dict(self, cand: Candidate) -> dict[str, Any]:
        """The candidate as a manifest-style run (``engine.rules.check_run``'s keys)."""
        c = cand.config
        return {"strategy": c["strategy"], "mode": self.plan.options.mode,
                "stages": [{"blocks": s["blocks"], "ipu": s["ipu"]} for s in cand.stages],
                "gradient_accumulation": c["gradient_accumulation"], "device_iterations": c["device_iterations"],
                "replication_factor": c["replication_factor"], "tensor_sharding": c["tensor_sharding"],
                "micro_batch_size": c["micro_batch_size"], "host_processes": self.plan.options.host_processes}

    def block_params(self, shards: int) -> np.ndarray:
        """Each block's own parameters as one of ``shards`` tensor shards holds them."""
        if shards not in self._params:
            index = self._block_index
            ops = shard_ops(self.plan.model.ops, shards)
            self._params[shards] = np.bincount([index[op.block] for op in ops], [op.params for op in ops],
                                               len(self.blocks))
        return self._params[shards]

    def ipu_bytes(self, cand: Candidate, *, weights: bool = True, state: bool = True) -> np.ndarray:
        """A lower bound on each IPU's always-live bytes: weights on chip, optimiser state on chip."""
        c = cand.config
        streamed = c["strategy"] == "phased" or c["offload_weights"]
        per_param = 0.0
        if weights and not streamed:
            per_param += self._dtype_bytes
        if state and self.training and not c["offload_optimiser"] and not streamed:
            per_param += self._state_bytes / (c["replication_factor"] if c["replicated_tensor_sharding"] else 1)
        params = self.block_params(c["tensor_sharding"])
        index = self._block_index
        ipus = 1 + max(s["ipu"] for s in cand.stages)
        held = np.zeros(ipus)
        for s in cand.stages:
            held[s["ipu"]] += params[[index[b] for b in s["blocks"] if b in index]].sum()
        return held * per_param

    def refusal(self, cand: Candidate) -> str:
        """Why the candidate cannot run or cannot fit, without emulating it ("" if it may)."""
        run = self.run_dict(cand)
        broken = rules.check_run(run)
        if broken:
            return broken
        ipus = rules.ipus_used(run)
        if ipus > self.system_ipus:
            return f"It needs {ipus} IPUs; an {self.settings.system} has {self.system_ipus}."
        held = self.ipu_bytes(cand)
        worst = int(np.argmax(held))
        if held[worst] > self._capacity:
            return (f"IPU {worst} would hold at least {held[worst] / 2**30:.2f} GiB of weights and optimiser state, "
                    f"over its {self._capacity / 2**30:.2f} GiB of tile memory.")
        return ""

    # -- round 1: the mapping ----------------------------------------------------------------

    def depths(self) -> list[int]:
        if "stages" not in self.settings.search:
            return []
        most = min(len(self.blocks), self.system_ipus)
        if most <= 8:
            return list(range(1, most + 1))
        start = 1 + max(s["ipu"] for s in self.start.stages)
        return sorted({2**k for k in range(most.bit_length()) if 2**k <= most} | ({start} if start <= most else set()))

    def splits(self, depth: int) -> list[list[dict[str, Any]]]:
        """Contiguous splits of the blocks into ``depth`` stages on IPUs 0..depth-1 (see the module docstring)."""
        n = len(self.blocks)
        if depth > n:
            return []
        if math.comb(n - 1, depth - 1) <= self.settings.max_splits:
            cuts_list: Iterable[tuple[int, ...]] = itertools.combinations(range(1, n), depth - 1)
            return [self._from_cuts(cuts) for cuts in cuts_list]
        model = self.plan.model
        found = [_stages_of(balanced_stages(model, depth, "pipelined", memory_aware=True)),
                 _stages_of(balanced_stages(model, depth, "pipelined"))]
        start = self.start.stages
        if len(start) > 2 and start[-1]["ipu"] == start[0]["ipu"] != start[-2]["ipu"] and depth > 1:
            found.append(_stages_of(balanced_stages(model, depth, "pipelined", memory_aware=True,
                                                    head_on_first=True)))
        unique: dict[str, list[dict[str, Any]]] = {}
        for stages in found:
            unique.setdefault(self.stages_text(stages), stages)
        return list(unique.values())

    def _from_cuts(self, cuts: tuple[int, ...]) -> list[dict[str, Any]]:
        edges = [0, *cuts, len(self.blocks)]
        return [{"blocks": self.blocks[a:b], "ipu": k} for k, (a, b) in enumerate(zip(edges, edges[1:]))]

    def sharding_choices(self) -> tuple[int, ...]:
        return SHARDING_CHOICES if "sharding" in self.settings.search else (self.start.config["tensor_sharding"],)

    def replica_choices(self, ipus_per_replica: int) -> list[int]:
        if "replicas" not in self.settings.search:
            return [self.start.config["replication_factor"]]
        most = self.system_ipus // ipus_per_replica
        return sorted({2**k for k in range(most.bit_length()) if 2**k <= most} | ({most} if most else set()))

    def batch(self, config: dict[str, Any], stages: list[dict[str, Any]]) -> dict[str, Any] | None:
        """``config`` with its gradient accumulation (training) or device iterations (inference) set
        for its micro-batch, replicas and pipeline; None when a global batch cannot be divided so."""
        ipus = [s["ipu"] for s in stages]
        piped = rules.runs_as_pipeline(config["strategy"], ipus)
        depth = rules.pipeline_depth(ipus) if piped else 1
        if not self.training:
            return {**config, "device_iterations": max(self.start.config["device_iterations"], depth)}
        g = self.settings.global_batch
        if g is not None:
            per_step = config["micro_batch_size"] * config["replication_factor"]
            if g % per_step:
                return None
            return {**config, "gradient_accumulation": g // per_step}
        least = rules.pipeline_stages(depth, True) if depth > 1 else 1
        return {**config, "gradient_accumulation": max(self.start.config["gradient_accumulation"], least)}

    def mapping(self, stages: list[dict[str, Any]], shards: int, replicas: int, base: dict[str, Any] | None = None,
                round_: int = 1) -> Candidate | None:
        """A candidate with these stages, tensor shards and replicas over ``base`` (the start's settings)."""
        config = dict(base or self.start.config)
        config.update(stages=self.stages_text(stages), tensor_sharding=shards, replication_factor=replicas)
        config["strategy"] = "pipelined" if "stages" in self.settings.search else self.start.config["strategy"]
        start_phased = self.start.config["strategy"] == "phased"
        probe = Candidate(config, stages, round_)
        weights_only = self.ipu_bytes(probe, state=False)
        if (start_phased and "phased" not in self.settings.search) or (
                "phased" in self.settings.search and weights_only.max() > self._capacity):
            config["strategy"] = "phased"
        config = self.batch(config, stages)
        if config is None:
            return None
        cand = Candidate(config, stages, round_)
        cand.reason = self.refusal(cand)
        return cand

    def round_one(self) -> list[Candidate]:
        """The start, then every mapping (depth, split, tensor shards, replicas) at the start's settings."""
        out = [self.start]
        depths = self.depths()
        stage_sets = [s for d in depths for s in self.splits(d)] if depths else [self.start.stages]
        for stages in stage_sets:
            ipus = 1 + max(s["ipu"] for s in stages)
            for t in self.sharding_choices():
                if ipus * t > self.system_ipus:
                    continue
                for r in self.replica_choices(ipus * t):
                    cand = self.mapping(stages, t, r)
                    if cand is not None:
                        out.append(cand)
        return _unique(out)

    # -- round 2: the settings ---------------------------------------------------------------

    def settings_variants(self, config: dict[str, Any]) -> list[dict[str, Any]]:
        """Micro-batch, recomputation, tensor locations and memory proportion around ``config``."""
        dims = self.settings.search
        mbs = config["micro_batch_size"]
        batches = sorted({max(1, mbs // 2), mbs, 2 * mbs}) if "batch" in dims else [mbs]
        recompute = [True, False] if "recompute" in dims and self.training else [config["recompute"]]
        here = {k: config[k] for k in ("offload_optimiser", "offload_weights", "offload_activations",
                                       "replicated_tensor_sharding")}
        locations = [here]
        if "offload" in dims:
            none = dict.fromkeys(here, False)
            rts = [False, True] if config["replication_factor"] > 1 else [False]
            locations += [{**none, "offload_optimiser": opt, "replicated_tensor_sharding": r}
                          for opt in (False, True) for r in rts]
            locations += [{**none, "offload_optimiser": True, "offload_weights": True},
                          {**none, "offload_optimiser": True, "offload_activations": True}]
        amp = config["available_memory_proportion"]
        amps = ([amp] + [a for a in AMP_CHOICES if a != amp]) if "amp" in dims else [amp]
        out = []
        for b, rc, loc, a in itertools.product(batches, recompute, locations, amps):
            out.append({**config, "micro_batch_size": b, "recompute": rc, **loc, "available_memory_proportion": a})
        return out

    def moved_cuts(self, stages: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
        """``stages`` with one cut between consecutive stages moved by a block either way, each stage
        keeping its IPU (so a head tied back to IPU 0 stays there); at most ``max_splits``, the cuts
        taken ends first (``order.spread``). Empty when round 1 already tried every split like it, and
        for stages that do not hold the blocks in order."""
        n, ipus = len(self.blocks), [s["ipu"] for s in stages]
        if [b for s in stages for b in s["blocks"]] != self.blocks:
            return []
        if ipus == list(range(len(stages))) and math.comb(n - 1, len(stages) - 1) <= self.settings.max_splits:
            return []
        edges = list(itertools.accumulate(len(s["blocks"]) for s in stages))[:-1]
        out = []
        for k, step in itertools.product(spread(range(len(edges))), (-1, 1)):
            cuts = [0, *edges, n]
            cuts[k + 1] += step
            if all(a < b for a, b in zip(cuts, cuts[1:])):  # each stage keeps a block
                out.append([{"blocks": self.blocks[a:b], "ipu": ipu} for a, b, ipu in zip(cuts, cuts[1:], ipus)])
        return out[:self.settings.max_splits]

    def round_two(self, mappings: list[Candidate]) -> list[Candidate]:
        """For each of ``mappings`` (the fastest of round 1): its split with each cut moved by a block
        (at its settings) and every settings variant of it, taken in turn (a moved cut, a variant, ...)."""
        out = []
        for m in mappings:
            moved = [self.mapping(stages, m.config["tensor_sharding"], m.config["replication_factor"], base=m.config,
                                  round_=2) for stages in self.moved_cuts(m.stages)]
            variants = []
            for config in self.settings_variants(m.config):
                config = self.batch(config, m.stages)
                if config is not None:
                    cand = Candidate(config, m.stages, 2)
                    cand.reason = self.refusal(cand)
                    variants.append(cand)
            for cand in round_robin([[c for c in moved if c is not None], variants]):
                cand.refines = m.key
                out.append(cand)
        return _unique(out)


def _stages_of(layout: Layout) -> list[dict[str, Any]]:
    return [{"blocks": list(s.blocks), "ipu": s.ipu} for s in layout.stages]


def _unique(cands: list[Candidate]) -> list[Candidate]:
    seen: dict[str, Candidate] = {}
    for c in cands:
        seen.setdefault(c.key, c)
    return list(seen.values())
