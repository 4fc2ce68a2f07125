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
from dataclasses import dataclass, field

from popvision_py.errors import ConfigError


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

# IPU systems by size. One IPU is a single card; an IPU-M2000 (or Bow-2000) is an IPU-POD4.
SYSTEMS: dict[str, int] = {
    "IPU": 1,
    "IPU-POD4": 4,
    "IPU-POD16": 16,
    "IPU-POD64": 64,
    "IPU-POD128": 128,
    "IPU-POD256": 256,
}


@dataclass(frozen=True)
class Assumptions:
    """Figures the emulator needs that are not public: named, documented, overridable.

    Rates are per tile per cycle unless the name says otherwise. docs/emulator.md gives each one's
    reasoning; change them with ``Target.with_assumptions(name=value)`` or ``--assume name=value``.
    """

    # On-chip exchange: 8 TB/s over 1,472 tiles at 1.33 GHz is about 4 B/cycle/tile.
    exchange_bytes_per_cycle_per_tile: float = 4.0
    # Fixed cost of one exchange program (setup, first message in flight).
    exchange_latency_cycles: int = 60
    # Hardware sync among the tiles of one IPU.
    tile_sync_cycles: int = 30
    # Sync across IPUs: a base cost plus a cost per doubling of the IPUs taking part (a tree of
    # IPU-Link / GW-Link hops); 1,000 + 400 x log2(n) cycles is about 0.75 us on one IPU-POD4.
    ipu_sync_base_cycles: int = 1000
    ipu_sync_cycles_per_doubling: int = 400
    # Share of an IPU's 320 GB/s of IPU-Links one pipeline neighbour can use (2 of 10 links).
    ipu_link_share_per_neighbour: float = 0.2
    # Share of the machine's PCIe link each IPU gets when all stream at once.
    host_link_efficiency: float = 0.8
    # Streaming memory (DDR on the IPU-Machine) bandwidth one IPU achieves.
    streaming_memory_bytes_per_s: float = 20e9
    # Collective (all-reduce) bandwidth per IPU over IPU-Links inside a POD, and over GW-Links
    # when replicas span PODs of more than 64 IPUs.
    all_reduce_bytes_per_s: float = 64e9
    gw_link_bytes_per_s: float = 25e9
    # Latency of one inter-IPU, host or streaming-memory transfer.
    link_latency_cycles: int = 1500
    # Host-side cost of one host call (one `model(...)` call in PopTorch, which runs device_iterations
    # iterations): Python dispatch, the stream callbacks and the host-IPU handshake. Not published; an
    # order of magnitude for a PopTorch call. The Python data loader is not modelled (see
    # docs/emulator.md): the tutorial's real mnist run is bound by it.
    host_call_latency_s: float = 2e-3
    # Fraction of the AMP peak a matmul / convolution inner loop sustains once its operands are on
    # the tile (Poplar's matmul vertices reach roughly 60-70% of peak on large shapes).
    amp_efficiency: float = 0.65
    # Convolutions whose reduction (in-channels x kernel) is shorter than this cannot fill the
    # AMP's accumulators; their efficiency falls in proportion.
    amp_min_reduction: int = 64
    # Elementwise and reduction work runs on the six workers' vector units: FLOP per cycle per tile.
    vector_fp16_flops_per_cycle_per_tile: float = 12.0
    vector_fp32_flops_per_cycle_per_tile: float = 6.0
    # Cycles to launch a compute set's vertices on a tile (supervisor + worker start).
    compute_set_overhead_cycles: int = 80
    # Cycles per vertex (grain) a worker spends on its own prologue and epilogue.
    vertex_overhead_cycles: int = 12
    # Memory: bytes of code per codelet kind on each tile that runs it, vertex state per grain,
    # control code per program step, exchange code per exchange a tile takes part in, worker and
    # supervisor stacks per tile.
    vertex_code_bytes_per_kind: int = 2400
    vertex_state_bytes_per_grain: int = 24
    control_code_bytes_per_step: int = 8
    exchange_code_bytes_per_exchange: int = 28
    stack_bytes_per_tile: int = 7 * 1024
    constants_bytes_per_tile: int = 256
    # Fraction of an elementwise op's inputs that must move between tiles (layouts rarely match).
    elementwise_relayout_fraction: float = 0.1
    # Bytes of optimiser state per parameter (Adam/AdamW/LAMB: two FP32 moments; SGD: one).
    optimiser_state_bytes_per_param: dict = field(
        default_factory=lambda: {"adamw": 8, "adam": 8, "lamb": 8, "sgd": 4}
    )
    # FLOPs per parameter of one weight update.
    optimiser_flops_per_param: dict = field(
        default_factory=lambda: {"adamw": 12, "adam": 10, "lamb": 16, "sgd": 3}
    )


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

    def with_assumptions(self, **overrides: float) -> "Target":
        """A copy with some assumptions changed; unknown names are a ConfigError."""
        names = {f.name for f in dataclasses.fields(Assumptions)}
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise ConfigError(f"Unknown assumption {unknown[0]!r}; the assumptions are {', '.join(sorted(names))}.")
        return dataclasses.replace(self, assumptions=dataclasses.replace(self.assumptions, **overrides))

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
    """The smallest system holding ``ipus`` IPUs; ConfigError beyond an IPU-POD256."""
    for name, size in SYSTEMS.items():
        if size >= ipus:
            return name
    raise ConfigError(f"The run needs {ipus} IPUs but the largest system, an IPU-POD256, has 256.")


def make_target(arch: str = DEFAULT_ARCH, ipus: int = 1, system: str | None = None,
                assumptions: dict[str, float] | None = None) -> Target:
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
