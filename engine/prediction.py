"""A range on every answer: the run emulated again at the ends of the assumptions it rests on.

Every assumption carries a plausible interval (``engine/assumptions.py``). A one-at-a-time
sensitivity pass emulates the run with each assumption that applies to it at its low end and at its
high end, the others at their values: the time assumptions (compile and schedule again) move the
throughput, the memory assumptions (plan memory again) the worst tile. Each end's change from the
central estimate is an effect; the assumptions with the largest effects are the range's drivers.
Then two corners are emulated for each figure: every assumption that moved it at the end that
lowered it, together, and every one at the end that raised it, together.

What the range means (docs/emulator.md, "What a range means"): it holds the figure with any one
assumption at either end of its interval, and with all of them together at the ends that lower it
or at the ends that raise it; it also holds the central estimate minus and plus the root sum of
squares of the one-at-a-time effects (the assumptions' errors taken as independent). It is the
smallest interval that holds all of those. An assumption the user pinned with ``--assume`` is taken
as known and drops out of the range.

The fit verdict follows from the worst tile's range: ``fits`` if even its high end is within the
tile, ``does not fit`` if even its low end is beyond it, else ``borderline``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

from engine.assumptions import Described, describe
from engine.compiler import Compiled, compile_plan
from engine.memory import IpuMemory, plan_memory
from engine.plan import Plan
from engine.scheduler import schedule
from popvision_py.format.schema import FIT_VERDICTS, Driver

FITS, DOES_NOT_FIT, BORDERLINE = FIT_VERDICTS
USEFUL_SPREAD = 0.25  # a throughput range wider than this either side says which assumption to pin down
DRIVERS = 3  # drivers named in the run's summary


def _effect(driver: Driver, central: float) -> float:
    """How far the driver moves the figure from ``central``, at the farther of its ends."""
    return max(abs(driver.at_low - central), abs(driver.at_high - central))


@dataclass(frozen=True)
class Prediction:
    """The ranges of a run's throughput and worst tile, its fit verdict and what drives them."""

    throughput: float
    throughput_range: tuple[float, float]
    worst_tile_pct: float
    worst_tile_pct_range: tuple[float, float]
    throughput_drivers: tuple[Driver, ...] = ()
    worst_tile_drivers: tuple[Driver, ...] = ()
    pinned: tuple[str, ...] = ()
    # the figure with every driver at the end that lowered it, together, and at the end that raised it
    throughput_corners: tuple[float, float] | None = None
    worst_tile_pct_corners: tuple[float, float] | None = None

    @property
    def fit_verdict(self) -> str:
        low, high = self.worst_tile_pct_range
        return FITS if high <= 100.0 else DOES_NOT_FIT if low > 100.0 else BORDERLINE

    def verdict_text(self) -> str:
        """``fits``, ``does not fit`` or ``borderline (93% to 104% of the worst tile)``."""
        low, high = self.worst_tile_pct_range
        if self.fit_verdict == BORDERLINE:
            return f"{BORDERLINE} ({low:.0f}% to {high:.0f}% of the worst tile)"
        return self.fit_verdict

    @property
    def pin_down(self) -> str | None:
        """The assumption to pin down when the throughput range is too wide to be useful."""
        low, high = self.throughput_range
        if not self.throughput_drivers or not self.throughput:
            return None
        if high / self.throughput - 1 > USEFUL_SPREAD or 1 - low / self.throughput > USEFUL_SPREAD:
            return self.throughput_drivers[0].name
        return None

    def as_json(self) -> dict[str, Any]:
        """The keys ``popvision run --json`` and the manifest's ``prediction`` carry."""
        return {
            "throughput_range": list(self.throughput_range),
            "worst_tile_pct": self.worst_tile_pct,
            "worst_tile_pct_range": list(self.worst_tile_pct_range),
            "fit_verdict": self.fit_verdict,
            "throughput_range_drivers": [d.as_json() for d in self.throughput_drivers],
            "worst_tile_range_drivers": [d.as_json() for d in self.worst_tile_drivers],
            "pinned_assumptions": list(self.pinned),
            "pin_down": self.pin_down,
            "throughput_corners": list(self.throughput_corners) if self.throughput_corners else None,
            "worst_tile_pct_corners": list(self.worst_tile_pct_corners) if self.worst_tile_pct_corners else None,
        }


@dataclass
class _Ends:
    """The figures at each end of each assumption that moved them."""

    time: list[Driver] = field(default_factory=list)
    memory: list[Driver] = field(default_factory=list)


def throughput(compiled: Compiled, total_cycles: float) -> float:
    """Samples per second of a run that takes ``total_cycles`` (``instrument.summarise``'s figure)."""
    from engine import rules

    plan = compiled.plan
    o = plan.options
    samples = rules.samples_per_step({
        "micro_batch_size": o.micro_batch_size,
        "gradient_accumulation": o.gradient_accumulation if plan.training else 1,
        "replication_factor": o.replication_factor, "packing_factor": plan.model.packing_factor})
    seconds = total_cycles / (o.device_iterations * o.runs) / plan.target.arch.clock_hz
    return samples / seconds


def worst_tile_pct(compiled: Compiled, memories: list[IpuMemory]) -> float:
    """The fullest tile's peak bytes as a share of a tile's memory, in %."""
    return 100.0 * max(int(m.peak.max()) for m in memories) / compiled.plan.target.arch.bytes_per_tile


def applicable(plan: Plan, pinned: Collection[str] = ()) -> Iterator[Described]:
    """The assumptions whose interval can move this run's figures: not pinned, with an interval,
    and (per-optimiser ones, the host's per-kind rates) of the run's optimiser and input kind."""
    o = plan.options
    kind = o.host_input or plan.model.input_kind
    for d in describe(plan.target.assumptions):
        base, _, optimiser = d.name.partition(".")
        if base in pinned or d.name in pinned or d.low == d.high:
            continue
        if optimiser and (optimiser != o.optimiser or not plan.training):
            continue
        per_core = "_samples_per_s_per_core"
        if base.startswith("host_") and base.endswith(per_core) and base != f"host_{kind}{per_core}":
            continue
        yield d


def _at(plan: Plan, name: str, value: float) -> Plan:
    return dataclasses.replace(plan, target=plan.target.with_assumptions(**{name: value}))


def sensitivity(compiled: Compiled, memories: list[IpuMemory], total_cycles: float,
                pinned: Collection[str] = (), progress: Callable[[], None] = lambda: None) -> Prediction:
    """The run's ranges: ``compiled`` and ``memories`` are its central emulation, ``total_cycles``
    its scheduled length; ``pinned`` the assumptions the user set (left out of the ranges)."""
    plan = compiled.plan
    central_rate = throughput(compiled, total_cycles)
    central_pct = worst_tile_pct(compiled, memories)
    ends = _Ends()
    for d in applicable(plan, pinned):
        rates, pcts = [], []
        for value in (d.low, d.high):
            p = _at(plan, d.name, _typed(d, value))
            if "time" in d.affects:
                c = compile_plan(p)
                rates.append(throughput(c, schedule(c).total_cycles))
            else:
                c = dataclasses.replace(compiled, plan=p)
            if "memory" in d.affects:
                pcts.append(worst_tile_pct(c, [plan_memory(c, prog) for prog in c.programs]))
        if rates and max(abs(r - central_rate) for r in rates) > 0:
            ends.time.append(Driver(d.name, d.value, d.low, d.high, rates[0], rates[1]))
        if pcts and max(abs(x - central_pct) for x in pcts) > 0:
            ends.memory.append(Driver(d.name, d.value, d.low, d.high, pcts[0], pcts[1]))
        progress()
    rate_corners = (tuple(_rate(_corner(plan, ends.time, central_rate, up)) for up in (False, True))
                    if ends.time else None)
    pct_corners = (tuple(_pct(_corner(plan, ends.memory, central_pct, up)) for up in (False, True))
                   if ends.memory else None)
    return Prediction(
        throughput=central_rate, throughput_range=_hull(central_rate, ends.time, rate_corners),
        worst_tile_pct=central_pct, worst_tile_pct_range=_hull(central_pct, ends.memory, pct_corners),
        throughput_drivers=_ranked(ends.time, central_rate), worst_tile_drivers=_ranked(ends.memory, central_pct),
        pinned=tuple(sorted(pinned)), throughput_corners=rate_corners, worst_tile_pct_corners=pct_corners)


def _corner(plan: Plan, drivers: list[Driver], central: float, up: bool) -> Compiled:
    """The run compiled with every driver at the end that raised the figure (``up``) or lowered it."""
    values = {}
    for d in drivers:
        raises_at_high = d.at_high - central >= d.at_low - central
        values[d.name] = d.high if raises_at_high == up else d.low  # a whole number's range takes 50.0 as 50
    return compile_plan(dataclasses.replace(plan, target=plan.target.with_assumptions(**values)))


def _rate(compiled: Compiled) -> float:
    return throughput(compiled, schedule(compiled).total_cycles)


def _pct(compiled: Compiled) -> float:
    return worst_tile_pct(compiled, [plan_memory(compiled, prog) for prog in compiled.programs])


def _hull(central: float, drivers: list[Driver], corners: tuple[float, ...] | None) -> tuple[float, float]:
    """The smallest interval holding the central estimate, each driver's two ends, the root sum of
    squares of their effects on each side (``_spread``) and the corners."""
    points = [central, *_spread(central, drivers), *(corners or ())]
    points += [x for d in drivers for x in (d.at_low, d.at_high)]
    return min(points), max(points)


def _typed(d: Described, value: float) -> float:
    return int(value) if "whole number" in d.valid else value


def _spread(central: float, drivers: list[Driver]) -> tuple[float, float]:
    """central minus and plus the root sum of squares of the effects below and above it."""
    below = [max(0.0, central - min(d.at_low, d.at_high)) for d in drivers]
    above = [max(0.0, max(d.at_low, d.at_high) - central) for d in drivers]
    return central - math.sqrt(sum(x * x for x in below)), central + math.sqrt(sum(x * x for x in above))


def _ranked(drivers: list[Driver], central: float) -> tuple[Driver, ...]:
    return tuple(sorted(drivers, key=lambda d: (-_effect(d, central), d.name)))
