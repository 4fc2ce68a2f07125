"""Every figure the emulator needs that Graphcore's datasheets do not give: its value, its source and
how sure we are of it.

Each assumption is a field of ``Assumptions`` that declares, side by side:

* ``default``: the value a run uses unless told otherwise (``--assume NAME=VALUE``);
* ``valid``: the values it may take at all (a ``Range``; outside it, one sentence, exit code 2);
* ``uncertainty``: (low, high), the plausible interval: what the source allows, or a wide interval
  where no source pins the figure down. ``engine.prediction`` emulates a run at both ends of each
  assumption to put a range on its throughput and worst tile;
* ``source``: where the value comes from: a datasheet or Graphcore document, a Poplar / PopART /
  poplibs source, a published microbenchmark, a microbenchmark in this repository
  (``benchmarks/host_input.py``), or, where none exists, the words "no published figure" and why the
  value is what it is;
* ``affects``: what the figure can change: ``time``, ``memory`` or both (which parts of a run the
  sensitivity pass re-emulates).

No value is chosen to make an application's published throughput or fit verdict come out right:
those are predictions (``benchmarks/fidelity.py``). ``tests/engine/test_assumption_sources.py``
fails on an assumption without a source or with a default outside its uncertainty.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from popvision_py.errors import ConfigError

from engine.options import OPTIMISERS

MK2_DATASHEET = "Graphcore GC200 IPU / IPU-M2000 datasheet"
POPLIBS = "graphcore/poplibs"
# poplibs' own model of several IPUs for its tests (Mk1 C2 cards in a ladder): link rate and efficiency,
# and the latency of a sync signal per hop
POPLIBS_IPU_MODEL = f"{POPLIBS} lib/poplibs_test/Util.cpp (the multi-IPU IPUModel its tests run on)"
# poplibs' planners' estimates of a sync and of an exchange's fixed overhead (popnn's CTC loss planner)
POPLIBS_PLANNER = f"{POPLIBS} lib/popnn/CTCLossPlan.cpp"
# Graphcore's PopTorch tutorial on efficient data loading: its own measurements of PopTorch calls on IPUs
POPTORCH_DATA_TUTORIAL = "graphcore/tutorials tutorials/pytorch/efficient_data_loading (README, 'Experiments')"
HOST_BENCH = "benchmarks/host_input.py (measured here: see docs/emulator.md, 'Host input pipeline')"

TIME, MEMORY, BOTH = frozenset({"time"}), frozenset({"memory"}), frozenset({"time", "memory"})


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
RATE = Range(1)
PER_PARAM = Range(0, 1024, whole=True)


def assumption(default: float, valid: Range, unit: str, *, uncertainty: tuple[float, float], source: str,
               affects: frozenset[str] = TIME) -> Any:
    """A field of ``Assumptions``: its default, valid values, unit, plausible interval and source."""
    return field(default=default, metadata={"range": valid, "unit": unit, "uncertainty": uncertainty,
                                            "source": source, "affects": affects})


def per_optimiser(defaults: dict[str, float], valid: Range, unit: str, *,
                  uncertainty: dict[str, tuple[float, float]], source: str, affects: frozenset[str] = TIME) -> Any:
    """A field of ``Assumptions`` with one value per optimiser (``NAME.OPTIMISER=VALUE`` sets one)."""
    return field(default_factory=lambda: dict(defaults),
                 metadata={"range": valid, "unit": unit, "per_optimiser": True, "uncertainty": uncertainty,
                           "source": source, "affects": affects})


@dataclass(frozen=True)
class Assumptions:
    """Figures the emulator needs that are not public (or only loosely): named, sourced, overridable.

    Rates are per tile per cycle unless the name says otherwise. Change them with
    ``Target.with_assumptions(name=value)`` or ``--assume name=value``; a value out of its valid
    range is a ConfigError, here, whichever way it came in. ``describe()`` lists them all with
    their sources and uncertainties (``popvision assumptions``).
    """

    # -- on-chip exchange and sync -------------------------------------------------------------
    exchange_bytes_per_cycle_per_tile: float = assumption(
        4.0, PER_CYCLE, "bytes per cycle per tile", uncertainty=(3.0, 4.1),
        source=f"{MK2_DATASHEET}: 8 TB/s of on-chip exchange over 1,472 tiles at 1.33 GHz = 4.08 B/cycle/tile "
               "(the peak; the high end). No sustained Mk2 figure is published: the low end allows a quarter "
               "less for exchanges whose tiles do not send and receive every cycle", affects=BOTH)
    exchange_latency_cycles: int = assumption(
        100, WHOLE, "cycles", uncertainty=(50, 200),
        source=f"{POPLIBS_PLANNER}: a fixed overhead of 100 cycles per exchange (fixedOverheadExchangeCycles), "
               "the planner's estimate; half to twice it, as it is an estimate")
    tile_sync_cycles: int = assumption(
        90, WHOLE, "cycles", uncertainty=(45, 150),
        source=f"{POPLIBS_PLANNER}: a sync before each exchange 'has approximately the "
               "same cost each time', 90 cycles (syncCycles), the planner's estimate; half to 1.7 times it")
    ipu_sync_ns_per_hop: float = assumption(
        15.0, Range(0, 1000), "nanoseconds per hop", uncertainty=(10.0, 50.0),
        source=f"{POPLIBS_IPU_MODEL}: a sync across IPUs goes there and back over 1 + N/4 hops (one within "
               "a card, one per pair of cards up the ladder) at 15 ns a hop (syncLatencyPerHop), after each "
               "IPU's own tiles sync. It models cards in one chassis; the high end allows Sync-Link cables "
               "between IPU-M2000s and racks")
    # -- links ---------------------------------------------------------------------------------
    ipu_link_share_per_neighbour: float = assumption(
        0.2, SHARE, "share of the IPU-Links", uncertainty=(0.1, 0.3),
        source=f"{MK2_DATASHEET}: 10 IPU-Links of 32 GB/s each (320 GB/s per IPU); PopART's inter-IPU "
               "copies between pipeline neighbours use the links between the two IPUs: 2 of the 10 "
               "(1 to 3 depending on the cabling of the IPU-M2000)")
    host_link_efficiency: float = assumption(
        0.8, SHARE, "share of the host link", uncertainty=(0.5, 0.9),
        source="PCIe Gen4 x16 (the IPU-M2000's host link) delivers 80 to 90% of its peak in large DMA "
               "transfers after its packet overheads (128b/130b encoding, a 24-byte header per 256-byte "
               "payload: 91% at most); no Graphcore measurement is published, and small copies pay their "
               "set-up: the low end allows half")
    streaming_memory_bytes_per_s: float = assumption(
        20e9, BYTES_PER_S, "bytes per second per IPU", uncertainty=(10e9, 40e9),
        source="IPU-M2000 streaming memory: DDR4 DIMMs on the IPU-Gateway, reached over its PCIe "
               "switch; Graphcore publishes capacity (up to 448 GB) but no bandwidth per IPU: the "
               "interval spans a PCIe Gen4 x8 share to a whole DIMM channel")
    link_latency_cycles: int = assumption(
        1500, WHOLE, "cycles", uncertainty=(700, 4000),
        source="no published figure: a transfer over IPU-Links or PCIe starts with a DMA descriptor, the "
               "link's packet set-up and the exchange that opens it, about a microsecond (1.1 µs at "
               "1.33 GHz); 0.5 to 3 µs, an order of magnitude wide")
    # -- collectives (the gradient all-reduce between replicas, tensor shards) ------------------
    collective_bytes_per_s: float = assumption(
        64e9, BYTES_PER_S, "bytes per second per IPU", uncertainty=(32e9, 128e9),
        source=f"{MK2_DATASHEET}: IPU-Links of 32 GB/s each. A ring all-reduce sends to one neighbour "
               "and receives from the other; GCL's rings between IPU-M2000s run over the two links "
               "cabled between each pair of machines (64 GB/s). Low end: one link (about poplibs' Mk1 "
               f"link of 128 Gibit/s each way, {POPLIBS_IPU_MODEL}, over two); high end: four")
    # At least 5 %: below it, with the bandwidths' floors, gpt3-175b's all-reduces would outgrow
    # the profile's cycle columns.
    collective_link_efficiency: float = assumption(
        0.85, Range(0.05, 1), "share of the collective bandwidth", uncertainty=(0.5, 0.95),
        source=f"{POPLIBS_IPU_MODEL}: an IPU-Link delivers 85% of its rate (linkEfficiency). No Graphcore "
               "all-reduce bandwidth is published; GCL's collectives are rings that keep every link busy "
               "once the buffers are large (small ones pay the per-step latencies, modelled apart). Low "
               "end: rings that lose a third to contention and the torus's longer paths")
    gw_link_bytes_per_s: float = assumption(
        6.25e9, BYTES_PER_S, "bytes per second per IPU", uncertainty=(3e9, 12.5e9),
        source="IPU-M2000 datasheet: 2 x 100 Gbps GW-Links per machine (25 GB/s) for its 4 IPUs, used "
               "between IPU-PODs of 64 IPUs (IPU-POD128 and IPU-POD256). High end: one IPU's traffic "
               "alone on both links; low end: half of the links' rate achieved")
    collective_buffer_bytes: int = assumption(
        50_000_000, WHOLE_POSITIVE, "bytes", uncertainty=(10_000_000, 100_000_000),
        source="gradients are all-reduced in merged buffers of at most this size, each a collective "
               "with its own ring steps: graphcore/examples CNN training sets "
               "max_cross_replica_buffer_size (10 to 100 MB), PopART merges all-reduces "
               "(replicatedCollectivesSettings.mergeAllReduceCollectives)")
    # -- host ----------------------------------------------------------------------------------
    host_call_latency_s: float = assumption(
        15e-3, Range(0, 1), "seconds", uncertainty=(5e-3, 25e-3),
        source=f"{POPTORCH_DATA_TUTORIAL}: a small CNN trained with synthetic data (no host input), 50 device "
               "iterations per call, took 23.6 ms per call with 1 replica and 23.4 ms with 4 (12 calls of 800 "
               "samples, 3 of 3,200): a call's latency (PopTorch's Python, PopART's run, the host-IPU handshake) "
               "plus its model's 50 iterations on the IPU. The latency is at most that (high end 25 ms); the "
               "model's iterations, small convolutions and a 41,772 x 100 matmul on 16 samples, take a few "
               "ms (central 15 ms); the low end allows them a third of the call")
    loader_worker_start_s: float = assumption(
        0.03, Range(0, 10), "seconds per worker", uncertainty=(0.005, 0.06),
        source=f"{HOST_BENCH}: torch's DataLoader starts its num_workers processes one after the other each "
               "time an iterator is made, that is at every epoch unless persistent_workers=True (PopTorch's "
               "AsynchronousDataAccessor makes a new one per epoch: graphcore/poptorch python/_dataloader.py; its "
               f"{POPTORCH_DATA_TUTORIAL} names the drop at the beginning of an epoch). Measured here: 37 ms "
               "to the first batch with 1 worker, 58 ms per worker with 16 on 2 busy cores; a fork of a "
               "smaller process on an idle server core is a few ms (low end)")
    host_tensor_samples_per_s_per_core: float = assumption(
        30_000.0, RATE, "samples per second per host core", uncertainty=(15_000.0, 60_000.0),
        source=f"{HOST_BENCH}: 31,500 samples/s on one AMD EPYC core for MNIST-like 28 x 28 uint8 images "
               "through PIL to normalised float tensors, collated (torchvision's MNIST path); the "
               "interval covers host cores half and twice as fast")
    host_image_samples_per_s_per_core: float = assumption(
        360.0, RATE, "samples per second per host core", uncertainty=(180.0, 720.0),
        source=f"{HOST_BENCH}: 364 samples/s on one AMD EPYC core for Pillow decoding an ImageNet-sized "
               "JPEG (500 x 375, quality 90), a random resized crop to 224 x 224, a flip and a "
               "normalised tensor; the interval covers cores half as fast and SIMD decoders "
               "(Pillow-SIMD) twice as fast")
    host_text_samples_per_s_per_core: float = assumption(
        95_000.0, RATE, "samples per second per host core", uncertainty=(45_000.0, 190_000.0),
        source=f"{HOST_BENCH}: 94,900 samples/s on one AMD EPYC core for pre-tokenised 128-token "
               "sequences with their masks and masked-token labels, collated (as Graphcore's BERT "
               "and GPT pretraining read tokenised datasets); cores half and twice as fast")
    host_cores_per_server: int = assumption(
        128, WHOLE_POSITIVE, "host cores per server", uncertainty=(64, 128),
        source="Graphcore's IPU-POD reference host: a dual-socket AMD EPYC 7742 server (2 x 64 cores); "
               "smaller hosts (2 x 32 cores) were also qualified: the low end")
    ipus_per_host_server: int = assumption(
        16, WHOLE_POSITIVE, "IPUs per host server", uncertainty=(16, 64),
        source="Graphcore's IPU-POD16 has one host server; the IPU-POD64 datasheet: '1-4 approved host "
               "servers ... default number of servers is 1, however up to 4 host servers may be required "
               "depending on workload'. Graphcore's own ResNet-50 IPU-POD64 scripts run on 4 hosts "
               "(graphcore/examples vision/cnns/pytorch/train/rn50_pod64.sh): one per 16 IPUs; one host "
               "for all 64 is the high end")
    # -- compute -------------------------------------------------------------------------------
    amp_efficiency: float = assumption(
        1.0, SHARE, "share of the planned AMP rate", uncertainty=(0.75, 1.0),
        source=f"{POPLIBS} lib/poplin/PerformanceEstimation.hpp: the planner's own cycle estimate of "
               "the AMP vertex (engine/costs.py amp_plan) is the rate; what it leaves out (zeroing "
               "partials, layout changes) makes real convolutions slower, by up to a quarter")
    vector_fp16_flops_per_cycle_per_tile: float = assumption(
        8.0, PER_CYCLE, "FLOP per cycle per tile", uncertainty=(4.0, 12.0),
        source="the tile issues about one 64-bit vector instruction per cycle, its six workers taking "
               "turns (Graphcore's IPU programmer's guide); "
               "f16v4 works on 4 FP16 lanes, a fused multiply-add counting 2 FLOP per lane (8). "
               "Kernels that also load and store run at about half (4); co-issued loads reach 12")
    vector_fp32_flops_per_cycle_per_tile: float = assumption(
        4.0, PER_CYCLE, "FLOP per cycle per tile", uncertainty=(2.0, 6.0),
        source="as the FP16 rate, with f32v2's 2 FP32 lanes: half of it")
    compute_set_overhead_cycles: int = assumption(
        80, WHOLE, "cycles", uncertainty=(40, 200),
        source=f"{POPLIBS} lib/poplin/PerformanceEstimation.hpp charges a convolution supervisor 43 to 83 "
               "cycles outside its loops (supervisorNonloopOverhead), lib/popnn/popnnCycleEstimators.cpp "
               "9 cycles of supervisor overhead; a compute set starts its supervisors and workers: about "
               "80, no published figure for a whole one, so a wide interval")
    vertex_overhead_cycles: int = assumption(
        12, WHOLE, "cycles", uncertainty=(6, 30),
        source=f"{POPLIBS} cycle estimators: a worker vertex's prologue and epilogue cost 5 to 9 cycles "
               "('5 + // Vertex overhead', 'cycles = 9; // Supervisor vertex overhead' in "
               "lib/popnn/popnnCycleEstimators.cpp), more with its loop set-up")
    elementwise_relayout_fraction: float = assumption(
        0.1, FRACTION, "fraction of the inputs", uncertainty=(0.0, 0.3),
        source="no published figure: poplibs maps an elementwise op's output like its inputs where it "
               "can, so few inputs move; the interval runs from none to a third")
    # -- memory --------------------------------------------------------------------------------
    vertex_code_bytes_per_kind: int = assumption(
        2400, WHOLE, "bytes", uncertainty=(1200, 4800), affects=MEMORY,
        source="no published figure: the codelet sizes PopVision's memory report shows for poplibs' "
               "convolution, matmul and elementwise vertices are a few KB each; a factor of two either way")
    vertex_state_bytes_per_vertex: int = assumption(
        24, WHOLE, "bytes", uncertainty=(16, 48), affects=MEMORY,
        source=f"{POPLIBS} codelets: a vertex's state is its fields, a few pointers and sizes of 4 B "
               "each (ConvPartial1x1Out: about 6 fields)")
    control_code_bytes_per_step: int = assumption(
        8, WHOLE, "bytes", uncertainty=(4, 32), affects=MEMORY,
        source="no published figure: a program step costs a few instructions of control code per "
               "tile (a call, a sync, a branch)")
    exchange_code_bytes_per_exchange: int = assumption(
        28, WHOLE, "bytes", uncertainty=(16, 64), affects=MEMORY,
        source="no published figure: each exchange a tile takes part in is a few send/receive "
               "instructions of its own (plus 1 B per 512 B received)")
    stack_bytes_per_tile: int = assumption(
        7 * 1024, WHOLE, "bytes", uncertainty=(4 * 1024, 12 * 1024), affects=MEMORY,
        source="Poplar's default worker stack (target.workerStackSizeInBytes) is about 1 KB for each "
               "of six workers, plus the supervisor's; models that raise it use up to 12 KB")
    constants_bytes_per_tile: int = assumption(
        256, WHOLE, "bytes", uncertainty=(64, 1024), affects=MEMORY,
        source="no published figure: a few hundred bytes of constants per tile")
    optimiser_state_bytes_per_param: dict[str, int] = per_optimiser(
        {"adamw": 8, "adam": 8, "lamb": 8, "sgd": 4, "lars": 4}, PER_PARAM, "bytes per parameter",
        uncertainty={"adamw": (8, 8), "adam": (8, 8), "lamb": (8, 8), "sgd": (4, 4), "lars": (4, 4)},
        affects=BOTH,
        source="graphcore/poptorch python/optim.py: Adam, AdamW and LAMB keep two moments, SGD and LARS "
               "one velocity, each FP32 unless its accum type says FP16; exact, so no interval")
    optimiser_flops_per_param: dict[str, int] = per_optimiser(
        {"adamw": 12, "adam": 10, "lamb": 16, "sgd": 3, "lars": 8}, PER_PARAM, "FLOP per parameter",
        uncertainty={"adamw": (10, 16), "adam": (8, 14), "lamb": (12, 24), "sgd": (2, 4), "lars": (6, 12)},
        source="the optimisers' update rules as PopART writes them (graphcore/popart "
               "willow/src/optimizer*.cpp): a few multiply-adds per moment, a square root and a "
               "division for Adam's step, LAMB's and LARS's per-layer norms")

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

    def updated(self, overrides: Mapping[str, Any]) -> Assumptions:
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


@dataclass(frozen=True)
class Described:
    """One assumption (one optimiser's value for a per-optimiser one) as ``popvision assumptions`` lists it."""

    name: str  # what --assume takes: ``exchange_latency_cycles``, ``optimiser_flops_per_param.adam``
    value: float
    unit: str
    low: float
    high: float
    source: str
    valid: str
    affects: tuple[str, ...]

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "unit": self.unit, "low": self.low, "high": self.high,
                "source": self.source, "valid": self.valid, "affects": list(self.affects)}


def describe(assumptions: Assumptions | None = None) -> Iterator[Described]:
    """Every assumption with its value (``assumptions``' or the defaults), unit, uncertainty and source;
    per-optimiser ones once per optimiser."""
    assumptions = assumptions or Assumptions()
    for f in dataclasses.fields(assumptions):
        m = f.metadata
        value = getattr(assumptions, f.name)
        affects = tuple(sorted(m["affects"]))
        if m.get("per_optimiser"):
            for optimiser in OPTIMISERS:
                low, high = m["uncertainty"][optimiser]
                yield Described(f"{f.name}.{optimiser}", value[optimiser], m["unit"], low, high, m["source"],
                                m["range"].text(), affects)
        else:
            low, high = m["uncertainty"]
            yield Described(f.name, value, m["unit"], low, high, m["source"], m["range"].text(), affects)


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
