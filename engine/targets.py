"""Hardware targets: the one table of IPU figures the emulator uses, and the systems built from them.

Two kinds of figure live here, kept apart on purpose:

* ``ARCHS``: the public figures of each chip (Graphcore datasheets, docs and talks; see
  docs/emulator.md for the sources). They are facts, not knobs.
* ``Assumptions`` (``engine/assumptions.py``): every figure the emulator needs that Graphcore does
  not publish (or publishes only loosely), each with its source and uncertainty, overridable
  (``Target.with_assumptions`` and the CLI's ``--assume NAME=VALUE``), so a user who knows better
  can say so.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from popvision_py.errors import ConfigError

from engine import rules
from engine.assumptions import Assumptions


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

# IPU systems by size: one table, the planner's (engine.rules), which the analysis is handed to check its fixes.
SYSTEMS = rules.SYSTEMS
# IPU-Links join the IPU-M2000s of up to an IPU-POD64; IPU-POD128 and IPU-POD256 join IPU-POD64s over
# the IPU-Gateways' GW-Links (Graphcore's IPU-POD64 / IPU-POD256 reference designs).
IPU_LINK_DOMAIN_IPUS = 64


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

    def with_assumptions(self, **overrides: Any) -> Target:
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
        # the IPUs' own tiles sync, then the signal goes there and back over the ladder: one hop within a card
        # and one per pair of cards (poplibs' IPUModel of several IPUs)
        hops = 1 + ipus // 4
        return int(a.tile_sync_cycles + math.ceil(2 * hops * a.ipu_sync_ns_per_hop * 1e-9 * self.arch.clock_hz))

    @property
    def ipu_link_domain_ipus(self) -> int:
        """IPUs one IPU-Link domain holds: an IPU-POD64; larger systems join PODs over GW-Links."""
        return min(self.system_ipus, IPU_LINK_DOMAIN_IPUS)


def smallest_system(ipus: int) -> str:
    """The smallest system holding ``ipus`` IPUs; ConfigError beyond the largest (``rules.system_rule``)."""
    broken = rules.system_rule(ipus)
    if broken:
        raise ConfigError(broken)
    return rules.system_holding(ipus)


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
