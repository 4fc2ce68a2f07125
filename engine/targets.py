"""Hardware targets: the one table of IPU figures the emulator uses, and the systems built from them.

Two kinds of figure live here, kept apart on purpose:

* ``ARCHS``: the public figures of each chip (Graphcore datasheets, docs and talks; see
  docs/emulator.md for the sources). They are facts, not knobs.
* ``Assumptions``: every figure the emulator needs that Graphcore does not publish (or publishes
  only loosely). Each is named, documented and overridable (``Target.with_assumptions`` and the
  CLI's ``--assume NAME=VALUE``), so a user who knows better can say so.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from popvision_py.errors import ConfigError
from popvision_py.format import runconfig

from engine.model import OPTIMISERS


@dataclass(frozen=True)
class Arch:
    """Public figures of one IPU generation."""

    name: str
    chip: str
    tiles_per_ipu: int
    bytes_per_tile: int
    clock_hz: float
    worker_threads_per_tile: int
    fp16_peak_flops_per_ipu: float
    # Peak FLOP per cycle per tile of the matrix (AMP) units, derived from the public peak:
    # peak / (tiles x clock). FP32 runs at a quarter of the FP16 rate on the AMP units.
    amp_fp16_flops_per_cycle_per_tile: int
    memory_bytes_per_s_per_ipu: float  # on-chip SRAM bandwidth
    exchange_bytes_per_s_per_ipu: float  # on-chip exchange fabric
    ipu_link_bytes_per_s: float  # all IPU-Links of one IPU together
    host_link_bytes_per_s: float  # PCIe link of one machine (shared by its IPUs)
    ipus_per_machine: int


# The public figures (PRODUCT.md, "The emulator"; sources in docs/emulator.md).
# Mk1's exchange and links are not in the table there: we reuse the Mk2 fabric figures (flagged as
# assumptions in docs/emulator.md), since both generations use the same exchange design.
ARCHS: dict[str, Arch] = {
    "mk1": Arch(
        name="mk1", chip="GC2", tiles_per_ipu=1216, bytes_per_tile=256 * 1024, clock_hz=1.6e9,
        worker_threads_per_tile=6, fp16_peak_flops_per_ipu=124.5e12, amp_fp16_flops_per_cycle_per_tile=64,
        memory_bytes_per_s_per_ipu=45e12, exchange_bytes_per_s_per_ipu=8e12, ipu_link_bytes_per_s=320e9,
        host_link_bytes_per_s=32e9, ipus_per_machine=2,
    ),
    "mk2": Arch(
        name="mk2", chip="GC200", tiles_per_ipu=1472, bytes_per_tile=638_976, clock_hz=1.33e9,
        worker_threads_per_tile=6, fp16_peak_flops_per_ipu=250e12, amp_fp16_flops_per_cycle_per_tile=128,
        memory_bytes_per_s_per_ipu=47.5e12, exchange_bytes_per_s_per_ipu=8e12, ipu_link_bytes_per_s=320e9,
        host_link_bytes_per_s=64e9, ipus_per_machine=4,
    ),
    "bow": Arch(
        name="bow", chip="Bow IPU", tiles_per_ipu=1472, bytes_per_tile=638_976, clock_hz=1.85e9,
        worker_threads_per_tile=6, fp16_peak_flops_per_ipu=350e12, amp_fp16_flops_per_cycle_per_tile=128,
        memory_bytes_per_s_per_ipu=47.5e12 * 1.85 / 1.33, exchange_bytes_per_s_per_ipu=8e12 * 1.85 / 1.33,
        ipu_link_bytes_per_s=320e9, host_link_bytes_per_s=64e9, ipus_per_machine=4,
    ),
}
DEFAULT_ARCH = "mk2"

# IPU systems by size: one table, shared with the analysis (popvision_py.format.runconfig).
SYSTEMS = runconfig.SYSTEMS


@dataclass(frozen=True)
class Range:
    """The values one assumption may take: a closed interval, of whole numbers or not."""

    low: float
    high: float = math.inf
    whole: bool = False

    def __contains__(self, value: object) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return False
        return self.low <= value <= self.high and (not self.whole or value == int(value))

    def text(self) -> str:
        """The range as docs/emulator.md and the error messages write it: ``in [0.001, 1]``, ``>= 0.01``..."""
        kind = "a whole number " if self.whole else ""
        if math.isinf(self.high):
            return f"{kind}>= {_number(self.low)}"
        return f"{kind}in [{_number(self.low)}, {_number(self.high)}]"


def _number(x: float) -> str:
    return f"{x:,.0f}" if x == int(x) else f"{x:g}"


# Every figure's range keeps a run's cycle counts inside the int64 columns of the profile, even for
# gpt3-175b on an IPU-POD256. Whole-number figures (cycles, bytes) are added up over every step and
# tile: a billion (0.75 s for one exchange, 1 GB of code on one tile) is far beyond any real figure.
# Rates, bandwidths and shares divide work, so they have a floor above 0 (a rate of 0 is a division
# by zero; one near 0 an emulated time of centuries): a thousandth of a share, 1 MB/s, 0.01 byte or
# FLOP per cycle per tile. Cycles and bytes may be 0 (a user may switch a cost off).
MAX_WHOLE = 1_000_000_000
SHARE = Range(0.001, 1)
FRACTION = Range(0, 1)
PER_CYCLE = Range(0.01)
BYTES_PER_S = Range(1e6)
WHOLE = Range(0, MAX_WHOLE, whole=True)
WHOLE_POSITIVE = Range(1, MAX_WHOLE, whole=True)


def assumption(default: float, valid: Range, unit: str) -> Any:
    """A field of ``Assumptions``: its default, the values it may take and its unit."""
    return field(default=default, metadata={"range": valid, "unit": unit})


def per_optimiser(defaults: dict[str, float], valid: Range, unit: str) -> Any:
    """A field of ``Assumptions`` with one value per optimiser (``NAME.OPTIMISER=VALUE`` sets one)."""
    return field(default_factory=lambda: dict(defaults), metadata={"range": valid, "unit": unit, "per_optimiser": True})


@dataclass(frozen=True)
class Assumptions:
    """Figures the emulator needs that are not public: named, documented, overridable.

    Rates are per tile per cycle unless the name says otherwise. Each field declares its default,
    its valid range and its unit; docs/emulator.md gives each one's reasoning. Change them with
    ``Target.with_assumptions(name=value)`` or ``--assume name=value``; a value out of range is a
    ConfigError, here, whichever way it came in.
    """

    # On-chip exchange: 8 TB/s over 1,472 tiles at 1.33 GHz is about 4 B/cycle/tile.
    exchange_bytes_per_cycle_per_tile: float = assumption(4.0, PER_CYCLE, "bytes per cycle per tile")
    # Fixed cost of one exchange program (setup, first message in flight).
    exchange_latency_cycles: int = assumption(60, WHOLE, "cycles")
    # Hardware sync among the tiles of one IPU.
    tile_sync_cycles: int = assumption(30, WHOLE, "cycles")
    # Sync across IPUs: a base cost plus a cost per doubling of the IPUs taking part (a tree of
    # IPU-Link / GW-Link hops); 1,000 + 400 x log2(n) cycles is about 0.75 us on one IPU-POD4.
    ipu_sync_base_cycles: int = assumption(1000, WHOLE, "cycles")
    ipu_sync_cycles_per_doubling: int = assumption(400, WHOLE, "cycles")
    # Share of an IPU's 320 GB/s of IPU-Links one pipeline neighbour can use (2 of 10 links).
    ipu_link_share_per_neighbour: float = assumption(0.2, SHARE, "share of the IPU-Links")
    # Share of the machine's PCIe link each IPU gets when all stream at once.
    host_link_efficiency: float = assumption(0.8, SHARE, "share of the host link")
    # Streaming memory (DDR on the IPU-Machine) bandwidth one IPU achieves.
    streaming_memory_bytes_per_s: float = assumption(20e9, BYTES_PER_S, "bytes per second per IPU")
    # Collective (all-reduce) bandwidth per IPU over IPU-Links inside a POD, and over GW-Links
    # when replicas span PODs of more than 64 IPUs.
    all_reduce_bytes_per_s: float = assumption(64e9, BYTES_PER_S, "bytes per second per IPU")
    gw_link_bytes_per_s: float = assumption(25e9, BYTES_PER_S, "bytes per second per IPU")
    # Share of that bandwidth the gradient all-reduce between replicas achieves end to end. Graphcore
    # publishes no collective figure; calibrated on ResNet-50's scaling from IPU-POD16 to IPU-POD64
    # (docs/emulator.md, "Fidelity"): it absorbs what a weight update across IPU-Machines costs beyond
    # the ring's steps. At least 1 % (below it, with the bandwidths' floors, one all-reduce of gpt3-175b
    # would outgrow the profile's cycle columns).
    all_reduce_efficiency: float = assumption(0.025, Range(0.01, 1), "share of the collective bandwidth")
    # Latency of one inter-IPU, host or streaming-memory transfer.
    link_latency_cycles: int = assumption(1500, WHOLE, "cycles")
    # Host-side cost of one host call (one `model(...)` call in PopTorch, which runs device_iterations
    # iterations): Python dispatch, the stream callbacks and the host-IPU handshake. Not published; an
    # order of magnitude for a PopTorch call. The data loader is host_samples_per_s below. At most
    # 1 s, so that its cycles stay within MAX_WHOLE-sized sums.
    host_call_latency_s: float = assumption(2e-3, Range(0, 1), "seconds")
    # Samples per second one host process's data loader prepares and hands over (loading,
    # preprocessing, collation): PopTorch's Async DataLoader fills a ring buffer while the IPUs run
    # the previous call, so a call lasts at least samples per call / (this x host processes).
    # Calibrated on the PopTorch pipelining tutorial (MNIST, batch 40 x GA 10 x 10 device
    # iterations, one process with 16 workers: 15.04 and 14.89 it/s of 4,000 images, ~60,000
    # images/s end to end). One figure per sample whatever its size: a loader that decodes JPEGs
    # is far slower, so say so with --assume. At least 1 (a rate divides).
    host_samples_per_s: float = assumption(60_000.0, Range(1), "samples per second per host process")
    # Share of its planned cycles (engine/costs.py ``amp_plan``: poplibs' vertex estimates) a matmul /
    # convolution achieves once its operands are on the tile: what the vertex estimate leaves out
    # (zeroing and reducing partials, layout). Calibrated (docs/emulator.md, "Fidelity").
    amp_efficiency: float = assumption(1.0, SHARE, "share of the planned AMP rate")
    # Elementwise and reduction work runs on the six workers' vector units: FLOP per cycle per tile.
    vector_fp16_flops_per_cycle_per_tile: float = assumption(12.0, PER_CYCLE, "FLOP per cycle per tile")
    vector_fp32_flops_per_cycle_per_tile: float = assumption(6.0, PER_CYCLE, "FLOP per cycle per tile")
    # Cycles to launch a compute set's vertices on a tile (supervisor + worker start).
    compute_set_overhead_cycles: int = assumption(80, WHOLE, "cycles")
    # Cycles per vertex (grain) a worker spends on its own prologue and epilogue.
    vertex_overhead_cycles: int = assumption(12, WHOLE, "cycles")
    # Memory: bytes of code per codelet kind on each tile that runs it, vertex state per vertex,
    # control code per program step, exchange code per exchange a tile takes part in, worker and
    # supervisor stacks per tile. A compute set has one vertex per busy worker on a tile (poplibs'
    # conv / matmul vertices carry worklists: a tile's share of a bigger batch is longer worklist
    # runs, not more vertices), so vertex state follows the partition, not the micro-batch.
    vertex_code_bytes_per_kind: int = assumption(2400, WHOLE, "bytes")
    vertex_state_bytes_per_vertex: int = assumption(24, WHOLE, "bytes")
    control_code_bytes_per_step: int = assumption(8, WHOLE, "bytes")
    exchange_code_bytes_per_exchange: int = assumption(28, WHOLE, "bytes")
    stack_bytes_per_tile: int = assumption(7 * 1024, WHOLE, "bytes")
    constants_bytes_per_tile: int = assumption(256, WHOLE, "bytes")
    # Fraction of an elementwise op's inputs that must move between tiles (layouts rarely match).
    elementwise_relayout_fraction: float = assumption(0.1, FRACTION, "fraction of the inputs")
    # Bytes of FP32 optimiser state per parameter (Adam/AdamW/LAMB: two FP32 moments; SGD and LARS:
    # one velocity; --optimiser-state-type fp16 halves it), and the FLOPs per parameter of one weight
    # update (LARS: SGD's 3 plus the trust ratio's two squared norms, 2 each, and its scaling, 1).
    # Capped at 1,024 so that parameters x figure stay well inside int64 for the largest model
    # (gpt3-175b: 1.8e14).
    optimiser_state_bytes_per_param: dict[str, int] = per_optimiser(
        {"adamw": 8, "adam": 8, "lamb": 8, "sgd": 4, "lars": 4}, Range(0, 1024, whole=True), "bytes per parameter")
    optimiser_flops_per_param: dict[str, int] = per_optimiser(
        {"adamw": 12, "adam": 10, "lamb": 16, "sgd": 3, "lars": 8}, Range(0, 1024, whole=True), "FLOP per parameter")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.metadata.get("per_optimiser"):
                if not isinstance(value, dict):
                    raise ConfigError(f"Assumption {f.name} takes one value per optimiser ({', '.join(OPTIMISERS)}), "
                                      f"not {value!r}.")
                missing = [o for o in OPTIMISERS if o not in value]
                if missing:
                    raise ConfigError(f"Assumption {f.name} has no value for optimiser {missing[0]}.")
                for key in value:
                    _optimiser(f.name, key)
                checked = {o: _checked(f"{f.name}.{o}", value[o], f) for o in OPTIMISERS}
            else:
                checked = _checked(f.name, value, f)
            object.__setattr__(self, f.name, checked)

    def updated(self, overrides: Mapping[str, Any]) -> "Assumptions":
        """A copy with ``overrides`` applied: ``name=value``, or for a per-optimiser assumption
        ``name.optimiser=value`` (one optimiser), ``name=value`` (every optimiser) or
        ``name={optimiser: value}``. Unknown names, optimisers and out-of-range values are ConfigErrors."""
        fields = {f.name: f for f in dataclasses.fields(self)}
        values: dict[str, Any] = {}
        for key, value in overrides.items():
            name, dot, optimiser = key.partition(".")
            if name not in fields:
                raise ConfigError(f"Unknown assumption {key!r}; the assumptions are {', '.join(sorted(fields))}.")
            per = fields[name].metadata.get("per_optimiser", False)
            if dot and not per:
                raise ConfigError(f"Assumption {name} is one figure for every optimiser; write {name}=VALUE, "
                                  f"not {key}=VALUE.")
            if not per:
                values[name] = value
                continue
            merged = values.setdefault(name, dict(getattr(self, name)))
            if dot:
                merged[_optimiser(name, optimiser.lower())] = value
            elif isinstance(value, Mapping):
                merged.update({_optimiser(name, o): v for o, v in value.items()})
            else:
                merged.update(dict.fromkeys(OPTIMISERS, value))
        return dataclasses.replace(self, **values)


def _optimiser(name: str, optimiser: object) -> str:
    if optimiser not in OPTIMISERS:
        raise ConfigError(f"Assumption {name} has no optimiser {optimiser!r}; the optimisers are "
                          f"{', '.join(OPTIMISERS)}.")
    return str(optimiser)


def _checked(label: str, value: object, f: dataclasses.Field) -> Any:
    """``value`` if it lies in the field's range (whole numbers as int); else one sentence."""
    valid: Range = f.metadata["range"]
    if value not in valid:
        raise ConfigError(f"Assumption {label}={value!r} is out of range: it must be {valid.text()} "
                          f"({f.metadata['unit']}).")
    return int(value) if valid.whole else value


@dataclass(frozen=True)
class Target:
    """An architecture, a system size, and the assumptions that complete the public figures."""

    arch: Arch
    system: str
    assumptions: Assumptions = field(default_factory=Assumptions)

    @property
    def system_ipus(self) -> int:
        return SYSTEMS[self.system]

    @property
    def tiles(self) -> int:
        return self.arch.tiles_per_ipu

    def with_assumptions(self, **overrides: Any) -> "Target":
        """A copy with some assumptions changed (see ``Assumptions.updated``; per-optimiser values as
        ``**{"optimiser_state_bytes_per_param.adam": 12}``); a bad name or value is a ConfigError."""
        return dataclasses.replace(self, assumptions=self.assumptions.updated(overrides))

    # -- derived rates ---------------------------------------------------------------------

    def amp_flops_per_cycle(self, precision: str) -> float:
        """Peak matrix-unit FLOP per cycle per tile (FP32 is a quarter of FP16)."""
        peak = self.arch.amp_fp16_flops_per_cycle_per_tile
        return peak if precision == "fp16" else peak / 4

    def vector_flops_per_cycle(self, precision: str) -> float:
        a = self.assumptions
        return a.vector_fp16_flops_per_cycle_per_tile if precision == "fp16" else a.vector_fp32_flops_per_cycle_per_tile

    @property
    def memory_bytes_per_cycle_per_tile(self) -> float:
        return self.arch.memory_bytes_per_s_per_ipu / self.arch.tiles_per_ipu / self.arch.clock_hz

    def bytes_per_cycle(self, bytes_per_s: float) -> float:
        return bytes_per_s / self.arch.clock_hz

    @property
    def ipu_neighbour_bytes_per_s(self) -> float:
        return self.arch.ipu_link_bytes_per_s * self.assumptions.ipu_link_share_per_neighbour

    @property
    def host_bytes_per_s_per_ipu(self) -> float:
        a = self.arch
        return a.host_link_bytes_per_s * self.assumptions.host_link_efficiency / a.ipus_per_machine

    def sync_cycles(self, ipus: int) -> int:
        """Cycles of one sync across ``ipus`` IPUs (on-chip sync for one IPU)."""
        a = self.assumptions
        if ipus <= 1:
            return a.tile_sync_cycles
        return int(a.ipu_sync_base_cycles + a.ipu_sync_cycles_per_doubling * math.ceil(math.log2(ipus)))

    def all_reduce_bytes_per_s(self, ipus: int) -> float:
        a = self.assumptions
        return a.all_reduce_bytes_per_s if ipus <= 64 else a.gw_link_bytes_per_s


def smallest_system(ipus: int) -> str:
    """The smallest system holding ``ipus`` IPUs; ConfigError beyond the largest (``runconfig.system_rule``)."""
    broken = runconfig.system_rule(ipus)
    if broken:
        raise ConfigError(broken)
    return runconfig.system_holding(ipus)


def make_target(arch: str = DEFAULT_ARCH, ipus: int = 1, system: str | None = None,
                assumptions: Mapping[str, Any] | None = None) -> Target:
    """The target for ``arch`` and a system holding ``ipus`` IPUs (``system`` names one explicitly)."""
    if arch not in ARCHS:
        raise ConfigError(f"Unknown architecture {arch!r}; choose one of {', '.join(ARCHS)}.")
    if system is None:
        system = smallest_system(ipus)
    else:
        canonical = {k.lower(): k for k in SYSTEMS}
        key = system.lower() if system.lower() in canonical else ("ipu-" + system.lower())
        if key not in canonical:
            raise ConfigError(f"Unknown system {system!r}; choose one of {', '.join(SYSTEMS)}.")
        system = canonical[key]
        if SYSTEMS[system] < ipus:
            raise ConfigError(f"The run needs {ipus} IPUs but an {system} has only {SYSTEMS[system]}.")
    target = Target(ARCHS[arch], system)
    return target.with_assumptions(**assumptions) if assumptions else target
