"""Instrumentation: the compiled, planned and scheduled run as profile.pop tables and a summary.

Tables are built column-wise with NumPy, turned into Arrow arrays of the schema's types (numbers
without a copy, strings dictionary-encoded once) and handed to popvision_py's ProfileWriter; the
trace is streamed in batches so it never has to sit in memory whole.

``pyarrow.array`` is not used: on any input it imports pandas to check for pandas objects, which
costs 0.2-0.4 s, as much as writing a bert-large profile; arrays are built from their buffers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from popvision_py.format import ProfileWriter
from popvision_py.format import schema as S
from popvision_py.format.schema import PASSES, PHASES

from engine import rules
from engine.compiler import Compiled, cost_model
from engine.costs import vertices
from engine.memory import IpuMemory
from engine.plan import Plan
from engine.prediction import Prediction
from engine.scheduler import Schedule, trace_batches


@dataclass
class RunSummary:
    """What the emulator knows of a run before anyone reads its profile: the configuration, time
    per step and memory fit. Idle time and FLOP utilisation are the analysis' (``popvision run``
    reads them from the profile, so that the run and the report print the same figures)."""

    model: str
    arch: str
    system: str
    strategy: str
    mode: str
    num_ipus: int
    replicas: int
    samples_per_step: int
    cycles_per_step: float
    seconds_per_step: float
    samples_per_second: float
    fits: bool
    worst_ipu: int
    worst_tile: int
    worst_tile_bytes: int
    bytes_per_tile: int
    oom_tiles: int
    peak_bytes_per_ipu: list[int] = field(default_factory=list)
    tensor_sharding: int = 1
    host_processes: int = 1
    # The host's data loaders: what they take per host call, what the IPUs wait for them per call,
    # and that wait as a share of the call. Host-bound: the IPUs wait at all (the host sets the pace).
    host_input_seconds_per_call: float = 0.0
    input_wait_seconds_per_call: float = 0.0
    input_wait_pct: float = 0.0
    host_bound: bool = False
    # What the host's data loaders are (engine.costs.HostLoader.text): what a host-bound run names.
    host_loader: str = ""
    # The ranges (engine.prediction): throughput and worst tile (% of a tile) at the ends of the
    # assumptions, the fit verdict (fits, does not fit, borderline) and what drives each range.
    throughput_range: list[float] | None = None
    worst_tile_pct_range: list[float] | None = None
    fit_verdict: str | None = None
    fit_verdict_text: str | None = None
    throughput_range_drivers: list[dict[str, Any]] = field(default_factory=list)
    worst_tile_range_drivers: list[dict[str, Any]] = field(default_factory=list)
    pinned_assumptions: list[str] = field(default_factory=list)
    pin_down: str | None = None
    # each figure with every assumption that moves it at the ends that lower it / raise it, together
    throughput_corners: list[float] | None = None
    worst_tile_pct_corners: list[float] | None = None
    profile: str | None = None
    # The analysis' idle share of IPU time and FLOP utilisation, when the caller asks for them
    # (``RunRequest.figures``): the run's summary prints them as `popvision report` states them.
    idle_pct: float | None = None
    flop_utilisation_pct: float | None = None

    def set_figures(self, figures: dict[str, float]) -> None:
        """Take ``idle_pct`` and ``flop_utilisation_pct`` of ``figures``."""
        self.idle_pct, self.flop_utilisation_pct = figures["idle_pct"], figures["flop_utilisation_pct"]

    def set_prediction(self, prediction: Prediction) -> None:
        """Take the ranges, verdict and drivers of ``prediction`` (the sensitivity pass of this run)."""
        figures = prediction.as_json()
        for name in ("throughput_range", "worst_tile_pct_range", "fit_verdict", "throughput_range_drivers",
                     "worst_tile_range_drivers", "pinned_assumptions", "pin_down", "throughput_corners",
                     "worst_tile_pct_corners"):
            setattr(self, name, figures[name])
        self.fit_verdict_text = prediction.verdict_text()


def samples_per_step(plan: Plan) -> int:
    """Samples one step takes (``rules.samples_per_step``): the summary's figure, and the
    manifest's ``run.samples_per_step`` that the analysis reads."""
    o = plan.options
    return rules.samples_per_step({
        "micro_batch_size": o.micro_batch_size,
        "gradient_accumulation": o.gradient_accumulation if plan.training else 1,
        "replication_factor": o.replication_factor, "packing_factor": plan.model.packing_factor})


def summarise(compiled: Compiled, memories: list[IpuMemory], sched: Schedule) -> RunSummary:
    """The run's headline figures."""
    plan = compiled.plan
    o = plan.options
    target = plan.target
    clock = target.arch.clock_hz
    steps = o.device_iterations * o.runs
    samples = samples_per_step(plan)
    cycles_per_step = sched.total_cycles / steps
    seconds = cycles_per_step / clock
    peaks = [m.peak for m in memories]
    worst_ipu = int(np.argmax([p.max() for p in peaks]))
    worst_tile = int(peaks[worst_ipu].argmax())
    capacity = target.arch.bytes_per_tile
    oom = int(sum((p > capacity).sum() for p in peaks))
    wait_pct = 100.0 * sched.input_wait_cycles / sched.unit_cycles if sched.unit_cycles else 0.0
    return RunSummary(
        model=plan.model.name, arch=target.arch.name, system=target.system, strategy=plan.strategy, mode=o.mode,
        num_ipus=plan.num_ipus, replicas=o.replication_factor, samples_per_step=samples,
        cycles_per_step=cycles_per_step, seconds_per_step=seconds, samples_per_second=samples / seconds,
        fits=oom == 0, worst_ipu=worst_ipu, worst_tile=worst_tile, worst_tile_bytes=int(peaks[worst_ipu][worst_tile]),
        bytes_per_tile=capacity, oom_tiles=oom, peak_bytes_per_ipu=[int(p.sum()) for p in peaks],
        tensor_sharding=o.tensor_sharding, host_processes=o.host_processes,
        host_input_seconds_per_call=sched.host_input_cycles / clock,
        input_wait_seconds_per_call=sched.input_wait_cycles / clock,
        input_wait_pct=wait_pct,
        host_bound=wait_pct >= S.HOST_BOUND_PCT,
        host_loader=cost_model(plan).host_loader().text(),
    )


def manifest(compiled: Compiled, sched: Schedule,
             prediction: Prediction | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The manifest's target and run objects (docs/profile-format.md's keys, required then optional)."""
    plan = compiled.plan
    o = plan.options
    t = plan.target
    arch = t.arch
    target = {
        "arch": arch.name,
        "num_ipus": plan.num_ipus,
        "tiles_per_ipu": arch.tiles_per_ipu,
        "bytes_per_tile": arch.bytes_per_tile,
        "clock_hz": arch.clock_hz,
        "system": t.system,
        "system_ipus": t.system_ipus,
        "worker_threads_per_tile": arch.worker_threads_per_tile,
        "flops_per_cycle_per_tile": {"fp16": t.amp_flops_per_cycle("fp16"), "fp32": t.amp_flops_per_cycle("fp32")},
        "vector_flops_per_cycle_per_tile": {"fp16": t.vector_flops_per_cycle("fp16"),
                                            "fp32": t.vector_flops_per_cycle("fp32")},
        "exchange_bytes_per_cycle_per_tile": t.assumptions.exchange_bytes_per_cycle_per_tile,
        "ipu_link_bytes_per_s": arch.ipu_link_bytes_per_s,
        "host_link_bytes_per_s": arch.host_link_bytes_per_s,
        "streaming_memory_bytes_per_s": t.assumptions.streaming_memory_bytes_per_s,
        "sync_cycles": t.sync_cycles(plan.num_ipus),
        "chip": arch.chip,
        "assumptions": _jsonable(t.assumptions.__dict__),
    }
    run = {
        "model": plan.model.name,
        "strategy": plan.strategy,
        "mode": o.mode,
        "stages": plan.manifest_stages(),
        "micro_batch_size": o.micro_batch_size,
        "gradient_accumulation": o.gradient_accumulation if plan.training else 1,
        "device_iterations": o.device_iterations,
        "replication_factor": o.replication_factor,
        "runs": o.runs,
        "precision": o.precision,
        "recompute": bool(o.recompute),
        "tensor_sharding": o.tensor_sharding,
        "host_processes": o.host_processes,
        "host_input": o.host_input or plan.model.input_kind,
        "loader_workers": o.loader_workers,
        "persistent_workers": o.persistent_workers,
        "available_memory_proportion": (list(o.available_memory_proportion)
                                        if isinstance(o.available_memory_proportion, tuple)
                                        else o.available_memory_proportion),
        "recompute_checkpoints": o.recompute_checkpoints,
        "attention_serialisation": o.attention_serialisation,
        "tensor_locations": o.tensor_locations.as_manifest(),
        "model_params": _jsonable(plan.model.params),
        "parameters": int(plan.model.parameters),
        "optimiser": o.optimiser if plan.training else None,
        "optimiser_state_type": o.optimiser_state_type if plan.training else None,
        "first_moment_type": (o.first_moment_type or o.optimiser_state_type) if plan.training else None,
        "accum_type": o.accum_type if plan.training else None,  # None: the weights' type
        "use_combined_accum": o.use_combined_accum if plan.training and o.optimiser == "sgd" else None,
        "enable_outlining": o.enable_outlining,
        "pipeline_stages": plan.pipeline_stages if plan.strategy == "pipelined" else len(plan.stages),
        # the schedule's facts, which the analysis reads the profile by (popvision_py.format.schedule)
        "runs_as_pipeline": plan.pipelined,
        "pipeline_positions": [plan.pipeline_rank(stage) for stage in plan.stages],
        "samples_per_step": samples_per_step(plan),
        "total_cycles": int(sched.total_cycles),
    }
    if plan.model.packing_factor != 1:
        # samples per input (rules.samples_per_step); absent means 1
        run["packing_factor"] = float(plan.model.packing_factor)
    if plan.request:
        run["request"] = _jsonable(plan.request)
    if prediction is not None:
        run["prediction"] = prediction.as_json()
    return target, run


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (v if isinstance(v, (int, float, str, bool, dict, list, type(None))) else str(v)) for k, v in d.items()}


NUMPY_TYPES = {pa.int16(): np.int16, pa.int32(): np.int32, pa.int64(): np.int64}


def _strings(values: list[str] | tuple[str, ...]) -> pa.Array:
    """An Arrow string array from its offsets and UTF-8 data."""
    encoded = [v.encode() for v in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int32)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    return pa.Array.from_buffers(pa.string(), len(encoded),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))])


def _dictionary(indices: np.ndarray, values: tuple[str, ...] | list[str]) -> pa.DictionaryArray:
    """Indices into a fixed list of strings, as a dictionary array (the schema's category type)."""
    codes = np.ascontiguousarray(indices, dtype=np.int32)
    return pa.DictionaryArray.from_arrays(pa.Array.from_buffers(pa.int32(), len(codes), [None, pa.py_buffer(codes)]),
                                          _strings(values))


def _categories(values: list[str]) -> pa.DictionaryArray:
    """Strings dictionary-encoded in order of first appearance (as ``pyarrow.compute.dictionary_encode``)."""
    index: dict[str, int] = {}
    codes = np.fromiter((index.setdefault(v, len(index)) for v in values), dtype=np.int32, count=len(values))
    return _dictionary(codes, list(index))


def _column(values: Any, type_: pa.DataType) -> pa.Array:
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values
    if pa.types.is_dictionary(type_):
        return _categories(list(values))
    if pa.types.is_boolean(type_):
        flags = np.asarray(values, dtype=bool)
        return pa.Array.from_buffers(pa.bool_(), len(flags),
                                     [None, pa.py_buffer(np.packbits(flags, bitorder="little"))])
    array = np.ascontiguousarray(values, dtype=NUMPY_TYPES[type_])
    return pa.Array.from_buffers(type_, len(array), [None, pa.py_buffer(array)])


def arrow_table(name: str, columns: dict[str, Any]) -> pa.Table:
    """Columns (NumPy arrays, lists, Arrow arrays) as an Arrow table of the schema's types for ``name``."""
    spec = S.TABLES[name]
    return pa.Table.from_arrays([_column(columns[c.name], c.type) for c in spec.columns], schema=spec.schema)


def ops_table(compiled: Compiled) -> dict[str, Any]:
    plan = compiled.plan
    rows: dict[str, list] = {k: [] for k in ("op_id", "name", "kind", "block", "stage", "ipu", "pass", "flops",
                                              "bytes", "tiles")}
    for stage in plan.stages:
        for op in stage.ops:
            tiles = compiled.mappings[op.op_id].tiles
            passes = [("forward", op.flops, op.bytes, tiles)]
            if plan.training:
                passes.append(("backward", op.backward_flops, op.backward_bytes, tiles))
                if op.params:
                    _, flops, nbytes = cost_model(plan).update_work(op.params)
                    passes.append(("update", flops, nbytes, compiled.weight_mappings[op.op_id].tiles))
            for pass_, flops, nbytes, t in passes:
                for k, v in zip(rows, (op.op_id, op.name, op.kind, op.block, stage.index, stage.ipu, pass_, flops,
                                       nbytes, t)):
                    rows[k].append(v)
    return rows


def programs_table(compiled: Compiled) -> dict[str, Any]:
    cols: dict[str, list] = {k: [] for k in ("ipu", "step", "type", "name", "op_id", "stage", "pass", "tiles",
                                              "bytes", "cycles")}
    for prog in compiled.programs:
        cols["ipu"].append(np.full(prog.steps, prog.ipu))
        cols["step"].append(np.arange(prog.steps))
        cols["type"] += prog.type
        cols["name"] += prog.name
        cols["op_id"].append(np.asarray(prog.op_id))
        cols["stage"].append(np.asarray(prog.stage))
        cols["pass"] += prog.pass_
        cols["tiles"].append(np.asarray(prog.tiles))
        cols["bytes"].append(np.asarray(prog.bytes))
        cols["cycles"].append(np.asarray(prog.cycles))
    return {k: (np.concatenate(v) if k not in ("type", "name", "pass") else v) for k, v in cols.items()}


def tile_cycles_batches(compiled: Compiled) -> Iterator[dict[str, np.ndarray]]:
    tile_index = np.arange(compiled.plan.target.tiles, dtype=np.int32)
    for prog in compiled.programs:
        if not prog.tile_cycles:
            continue
        lengths = np.array([len(c) for _, _, c, _ in prog.tile_cycles], dtype=np.int64)
        yield {
            "ipu": np.full(int(lengths.sum()), prog.ipu, dtype=np.int16),
            "step": np.repeat(np.array([s for s, _, _, _ in prog.tile_cycles], dtype=np.int32), lengths),
            # slices of one index: each compute set's tiles, written once in the column's type
            "tile": np.concatenate([tile_index[st:st + len(c)] for _, st, c, _ in prog.tile_cycles]),
            "cycles": np.concatenate([c for _, _, c, _ in prog.tile_cycles]),
            "vertices": np.concatenate([vertices(g) for _, _, _, g in prog.tile_cycles]).astype(np.int32),
        }


def tile_memory_batches(memories: list[IpuMemory]) -> Iterator[dict[str, Any]]:
    for mem in memories:
        for matrix, always in ((mem.always_live, True), (mem.at_peak, False)):
            cat, tile = np.nonzero(matrix)
            yield {
                "ipu": np.full(len(tile), mem.ipu),
                "tile": tile,
                "category": _dictionary(cat, mem.categories),
                "always_live": np.full(len(tile), always),
                "bytes": matrix[cat, tile],
            }


def variables_table(compiled: Compiled) -> dict[str, Any]:
    variables = [v for prog in compiled.programs for v in prog.variables]
    # Variables of equal size share their per-tile arrays (see Mapping): each is summed once. The
    # arrays live as long as the variables, so their ids are stable here.
    sums: dict[int, int] = {}
    for v in variables:
        if id(v.per_tile) not in sums:
            sums[id(v.per_tile)] = int(v.per_tile.sum())
    return {
        "var_id": np.arange(len(variables)),
        "name": [v.name for v in variables],
        "ipu": np.repeat([prog.ipu for prog in compiled.programs], [len(prog.variables) for prog in compiled.programs]),
        "category": [v.category for v in variables],
        "always_live": [v.always_live for v in variables],
        "bytes": [sums[id(v.per_tile)] for v in variables],
        "start_tile": [v.start for v in variables],
        "tiles": [len(v.per_tile) for v in variables],
        "live_from_step": [v.live_from for v in variables],
        "live_to_step": [v.live_to for v in variables],
        "op_id": [v.op_id for v in variables],
        "dtype": [v.dtype for v in variables],
    }


def liveness_batches(memories: list[IpuMemory]) -> Iterator[dict[str, np.ndarray]]:
    for mem in memories:
        steps = len(mem.live_total)
        yield {
            "ipu": np.full(steps, mem.ipu),
            "step": np.arange(steps),
            "always_live_bytes": np.full(steps, int(mem.always_live.sum())),
            "not_always_live_bytes": mem.live_total,
            "worst_tile": mem.worst_tile,
            "worst_tile_bytes": mem.worst_tile_bytes,
        }


def exchanges_table(compiled: Compiled) -> dict[str, Any]:
    rows = [(prog.ipu, *e) for prog in compiled.programs for e in prog.exchanges]
    names = ("ipu", "step", "kind", "src_ipu", "dst_ipu", "bytes", "cycles")
    return {n: [r[i] for r in rows] for i, n in enumerate(names)}


def write_profile(path: str | Path, compiled: Compiled, memories: list[IpuMemory], sched: Schedule,
                  progress: Callable[[str], None] = lambda _: None,
                  prediction: Prediction | Callable[[], Prediction | None] | None = None) -> None:
    """Write every table and the manifest to ``path``, atomically (nothing is published on error).

    ``prediction`` may be a function that waits for it (the sensitivity pass, run meanwhile on
    another thread): it is called once the tables are written, since only the manifest holds it."""
    target, run = manifest(compiled, sched)
    with ProfileWriter(path, target=target, run=run) as writer:
        for name, columns in (("ops", ops_table(compiled)), ("programs", programs_table(compiled)),
                              ("variables", variables_table(compiled)), ("exchanges", exchanges_table(compiled))):
            writer.write_table(name, arrow_table(name, columns))
        progress("tables")
        for name, batches in (("tile_cycles", tile_cycles_batches(compiled)),
                              ("tile_memory", tile_memory_batches(memories)),
                              ("liveness", liveness_batches(memories))):
            with writer.table(name) as table:
                for batch in batches:
                    table.write(arrow_table(name, batch))
        progress("tile tables")
        passes, phases = _strings(PASSES), _strings(PHASES)
        with writer.table("trace") as table:
            for batch in trace_batches(sched):
                batch["pass"] = _indices(batch["pass"], passes)
                batch["phase"] = _indices(batch["phase"], phases)
                table.write(arrow_table("trace", batch))
        progress("trace")
        found = prediction() if callable(prediction) else prediction
        if found is not None:
            writer.set_run("prediction", found.as_json())


def _indices(codes: np.ndarray, dictionary: pa.Array) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.Array.from_buffers(pa.int32(), len(codes), [None, pa.py_buffer(codes)]),
                                          dictionary)
