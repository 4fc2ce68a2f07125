"""The profile.pop schema, version 4: the one definition the writer, the reader and the docs use.

Every table is a list of typed columns. Columns whose values repeat a lot (names, kinds, passes,
phases, categories) are dictionary-encoded strings: small on disk and pandas categoricals in memory.
Units are the last word of a column name (``_bytes``, ``_cycles``, ``flops``); ids and indexes are
plain integers; ``-1`` means "none" in integer id columns (no op, no stage, no micro-batch).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the schema names its types; pyarrow builds them when a writer or decoder asks
    import pyarrow as pa

FORMAT_NAME = "popvision-profile"
SCHEMA_VERSION = 5
MANIFEST_MEMBER = "manifest.json"
TABLE_SUFFIX = ".parquet"

# A categorical string column: Arrow's dictionary<int32, string>, which Parquet restores exactly from
# the stored Arrow schema. Columns name their types (``Column.type_name``) so that a command that only
# opens a profile (`popvision sql`) never imports pyarrow; ``Column.type`` builds the Arrow type.
CATEGORY = "category"
# Each type name's Arrow type as pyarrow prints it (``str(column.type)``), for messages made without pyarrow
ARROW_TEXT = {"bool": "bool", "int16": "int16", "int32": "int32", "int64": "int64", "string": "string",
              CATEGORY: "dictionary<values=string, indices=int32, ordered=0>"}

# Host and streaming memory in the src_ipu / dst_ipu columns of ``exchanges``.
HOST = -1
STREAMING_MEMORY = -2

# The program step, on every IPU, in which the IPUs wait for the host's data loaders at the start
# of a host call (a stream step without bytes; 0 cycles when the host keeps up).
INPUT_WAIT_STEP = "host/input_wait"
# A run is host-bound when its IPUs wait for input at least this share of its time (%): a data loader
# that restarts at each epoch makes every run wait a little, spread over the epoch's calls; below 1%
# that wait is not what bounds the run.
HOST_BOUND_PCT = 1.0

PASSES = ("forward", "backward", "update", "none")
PROGRAM_TYPES = (
    "compute_set",
    "exchange",
    "global_exchange",
    "stream_copy",
    "remote_buffer_copy",
    "sync",
    "all_reduce",
)
PHASES = ("compute", "sync", "exchange", "stream", "idle")
# A run's fit verdict at the ends of the assumptions (engine/prediction.py; a manifest's run.prediction, tune.parquet)
FIT_VERDICTS = ("fits", "does not fit", "borderline")


@dataclass(frozen=True)
class Driver:
    """One assumption behind a range, as a manifest's ``run.prediction`` records it: its value and
    plausible interval, and the figure (samples/s, or the worst tile in % of a tile) at each end of it.
    The engine's sensitivity pass makes it; the dashboard reads it back."""

    name: str
    value: float
    low: float  # the assumption's interval
    high: float
    at_low: float  # the figure with the assumption at its low end
    at_high: float

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "low": self.low, "high": self.high,
                "at_low": self.at_low, "at_high": self.at_high}


EXCHANGE_KINDS = ("internal", "inter_ipu", "host", "remote_buffer", "all_reduce")
# What a GPU kernel of an imported trace does (the ``kernels`` table): the kinds Holistic Trace Analysis tells apart
KERNEL_KINDS = ("compute", "communication", "memcpy", "memset")
MEMORY_CATEGORIES = (
    "vertex_code",
    "vertex_state",
    "control_code",
    "exchange_code",
    "constants",
    "weights",
    "optimiser_state",
    "gradients",
    "activations",
    "stash",
    "exchange_buffers",
    "stack",
)
# A variable's element type (variables.dtype, schema 2); mixed: an optimiser state whose two moments
# differ in type (one FP16, one FP32), or a gradient of inputs of several types.
DTYPES = ("fp16", "fp32", "int32", "mixed")


# The largest count (cycles, bytes, flops) a column may hold: exact as a float64, and a sum of
# 1024 of them still fits int64.
MAX_COUNT = 2**53 - 1


@dataclass(frozen=True)
class Values:
    """The values a column may hold, checked by the reader (on open) and the writer.

    ``low``: the smallest value. ``below``: values must be less than this, a number or the name
    of a bound the manifest declares (``BOUNDS``: ``num_ipus``, ``program_steps``...); ``high``:
    the largest value (inclusive; names of ``BOUNDS`` too). ``codes``: the only strings a category
    may hold. Columns are never null (TableSchema.schema).
    """

    low: int | None = None
    below: int | str | None = None
    high: int | str | None = None
    codes: tuple[str, ...] | None = None


# The bounds a column's ``below`` or ``high`` may name, each a figure the manifest declares, with the
# words that say where it comes from (``values.bounds`` computes them). Every id that sizes an array
# or a loop in a reader is below one of them, so no id makes a reader allocate more than the
# manifest's own figures (which are themselves checked against the file: values.check_declared).
BOUNDS: dict[str, str] = {
    "num_ipus": "the target's num_ipus",
    "tiles_per_ipu": "the target's tiles_per_ipu",
    "stages": "the stages the run lists",
    "runs": "the run's runs",
    "device_iterations": "the run's device_iterations",
    "gradient_accumulation": "the run's gradient_accumulation",
    "program_steps": "the rows of programs",
    "ops": "the rows of ops",
    "variables": "the rows of variables",
}

ANY = Values()
IPU = Values(low=0, below="num_ipus")
TILE = Values(low=0, below="tiles_per_ipu")
TILE_COUNT = Values(low=0, high="tiles_per_ipu")
INDEX = Values(low=0, high=2**31 - 1)
COUNT = Values(low=0, high=MAX_COUNT)
STAGE = Values(low=-1, below="stages")  # a pipeline stage, or -1 for none
STEP = Values(low=0, below="program_steps")  # a program step (numbered per IPU, so below the steps of all)
OPTIONAL_STEP = Values(low=-1, below="program_steps")  # a program step, or -1 for none (idle)
OP = Values(low=-1, below="ops")  # an op (an op has a row per pass, so below the rows), or -1 for none
VERTICES = Values(low=1, high=2**31 - 1)  # a tile that takes part in a compute set runs at least one vertex
BIN_CYCLES = Values(low=0, high=2**62)  # a bin of trace_levels: its width is a power of two, up to twice the run


@dataclass(frozen=True)
class Column:
    """One column of a table: its name, Arrow type, meaning (with its unit) and allowed values.

    ``since``: the schema version that added it; a profile of an older version lacks it and still opens.
    """

    name: str
    type_name: str  # a key of ARROW_TEXT
    doc: str
    values: Values = ANY
    since: int = 1  # the schema version that added it: an older profile lacks it, and still opens

    @property
    def type(self) -> pa.DataType:
        """The column's Arrow type."""
        return arrow_type(self.type_name)

    @property
    def is_integer(self) -> bool:
        return self.type_name.startswith("int")


@dataclass(frozen=True)
class TableSchema:
    """One table of the profile: its member name is ``<name>.parquet``."""

    name: str
    doc: str
    columns: tuple[Column, ...]
    # (earlier, later): column ``later`` is never less than ``earlier`` on a row
    ordered: tuple[tuple[str, str], ...] = ()
    # columns whose values together identify a row (no two rows share them)
    key: tuple[str, ...] = ()
    # the schema version that added the table: a profile of an older version lacks it, and still opens
    since: int = 1

    @property
    def schema(self) -> pa.Schema:
        import pyarrow as pa

        return pa.schema([pa.field(c.name, c.type, nullable=False) for c in self.columns])

    @property
    def member(self) -> str:
        return self.name + TABLE_SUFFIX


@functools.cache
def arrow_type(name: str) -> pa.DataType:
    """The Arrow type of a column's ``type_name``."""
    import pyarrow as pa

    return pa.dictionary(pa.int32(), pa.string()) if name == CATEGORY else pa.type_for_alias(name)


def _t(name: str, doc: str, *columns: tuple, ordered: tuple[tuple[str, str], ...] = (),
       key: tuple[str, ...] = (), since: int = 1) -> TableSchema:
    return TableSchema(name, doc, tuple(Column(*c) for c in columns), ordered, key, since)


TABLES: dict[str, TableSchema] = {
    t.name: t
    for t in (
        _t(
            "ops",
            "Each operation of the model, one row per op and pass (forward, backward, update).",
            ("op_id", "int32", "Op index in program order; shared by the op's passes.", Values(low=0, below="ops")),
            ("name", CATEGORY, "Op name, e.g. 'layer3/matmul'."),
            ("kind", CATEGORY, "Op kind, e.g. 'matmul', 'conv', 'relu', 'softmax'."),
            ("block", CATEGORY, "The Block the op belongs to, e.g. 'B3'."),
            ("stage", "int16", "Stage (PopTorch Stage index: a group of blocks on one IPU) holding the op.",
             Values(low=0, below="stages")),
            ("ipu", "int16", "IPU the op runs on.", IPU),
            ("pass", CATEGORY, "forward, backward or update.", Values(codes=PASSES[:3])),
            ("flops", "int64", "Floating-point operations of one execution (one micro-batch; update: per "
                                  "weight update).", COUNT),
            ("bytes", "int64", "Bytes read and written by one execution.", COUNT),
            ("tiles", "int32", "Tiles the op's work is spread over.", TILE_COUNT),
        ),
        _t(
            "programs",
            "The compiled program steps of each IPU in program order. IPU execution is deterministic, "
            "so each step's duration is stored once here; the trace says when it ran.",
            ("ipu", "int16", "IPU whose program holds the step.", IPU),
            ("step", "int32", "Program step index, 0-based, in program order on that IPU.", STEP),
            ("type", CATEGORY, "compute_set, exchange, global_exchange, stream_copy, remote_buffer_copy, sync "
                               "or all_reduce.", Values(codes=PROGRAM_TYPES)),
            ("name", CATEGORY, "Step name, e.g. 'layer3/matmul/fwd'."),
            ("op_id", "int32", "Op the step belongs to, -1 if none.", OP),
            ("stage", "int16", "Pipeline stage of the step, -1 if none.", STAGE),
            ("pass", CATEGORY, "forward, backward, update or none.", Values(codes=PASSES)),
            ("tiles", "int32", "Tiles taking part in the step.", TILE_COUNT),
            ("bytes", "int64", "Bytes moved by the step (exchanges and copies), 0 for compute sets.", COUNT),
            ("cycles", "int64", "Cycles one execution of the step takes (a compute set: its slowest tile).", COUNT),
            key=("ipu", "step"),
        ),
        _t(
            "tile_cycles",
            "Cycles each tile spends in each compute set (only tiles that take part).",
            ("ipu", "int16", "IPU.", IPU),
            ("step", "int32", "Program step (a compute set) on that IPU.", STEP),
            ("tile", "int32", "Tile index, 0-based, on that IPU.", TILE),
            ("cycles", "int64", "Cycles the tile computes in one execution of the step.", COUNT),
            ("vertices", "int32", "Vertices the tile runs in the step (schema 2 on).", VERTICES, 2),
        ),
        _t(
            "tile_memory",
            "Memory per IPU, tile and category. Always-live rows hold bytes that live for the whole "
            "program; not-always-live rows hold the tile's bytes at its own peak step, so a tile's rows "
            "sum to its peak memory.",
            ("ipu", "int16", "IPU.", IPU),
            ("tile", "int32", "Tile index, 0-based.", TILE),
            ("category", CATEGORY, "Memory category (vertex_code, vertex_state, weights, activations, ...).",
             Values(codes=MEMORY_CATEGORIES)),
            ("always_live", "bool", "True for always-live memory."),
            ("bytes", "int64", "Bytes of that category on that tile.", COUNT),
        ),
        _t(
            "variables",
            "Each variable (tensor) placed on an IPU, with its liveness interval in program steps.",
            ("var_id", "int32", "Variable index.", Values(low=0, below="variables")),
            ("name", CATEGORY, "Variable name, e.g. 'layer3/weight'."),
            ("ipu", "int16", "IPU holding it.", IPU),
            ("category", CATEGORY, "Memory category.", Values(codes=MEMORY_CATEGORIES)),
            ("always_live", "bool", "True if live for the whole program."),
            ("bytes", "int64", "Total bytes over all its tiles.", COUNT),
            ("start_tile", "int32", "First tile of the contiguous range it is mapped to.", TILE),
            ("tiles", "int32", "Number of tiles in that range (bytes are spread over them in grains).", TILE_COUNT),
            ("live_from_step", "int32", "First program step it is live (0 for always-live).", STEP),
            ("live_to_step", "int32", "Last program step it is live, inclusive.", STEP),
            ("op_id", "int32", "Op that produces or owns it, -1 if none.", OP),
            ("dtype", CATEGORY, "Element type: fp16, fp32, int32, or mixed (an optimiser state with one FP16 and "
             "one FP32 moment). Schema 2 on.", Values(codes=DTYPES), 2),
            ordered=(("live_from_step", "live_to_step"),),
        ),
        _t(
            "liveness",
            "Memory live at each program step of each IPU: IPU totals and the worst tile.",
            ("ipu", "int16", "IPU.", IPU),
            ("step", "int32", "Program step.", STEP),
            ("always_live_bytes", "int64", "Always-live bytes on the IPU (the same at every step).", COUNT),
            ("not_always_live_bytes", "int64", "Not-always-live bytes live on the IPU at this step.", COUNT),
            ("worst_tile", "int32", "Tile with the most memory live at this step.", TILE),
            ("worst_tile_bytes", "int64", "Total bytes (always-live + not-always-live) live on that "
                                             "tile at this step.", COUNT),
            key=("ipu", "step"),
        ),
        _t(
            "trace",
            "The execution trace: one row per execution of a program step on an IPU, plus idle rows "
            "where an IPU waits for the others. Replicas run in lockstep, so only replica 0 is traced.",
            ("run", "int32", "Host call (one call runs device_iterations iterations).", Values(low=0, below="runs")),
            ("iteration", "int32", "Device iteration within the run (one weight update when training).",
             Values(low=0, below="device_iterations")),
            ("micro_batch", "int32", "Micro-batch within the iteration, -1 if none (update, all-reduce, idle).",
             Values(low=-1, below="gradient_accumulation")),
            ("ipu", "int16", "IPU.", IPU),
            ("stage", "int16", "Pipeline stage, -1 if none.", STAGE),
            ("pass", CATEGORY, "forward, backward, update or none.", Values(codes=PASSES)),
            ("step", "int32", "Program step executed, -1 for idle rows.", OPTIONAL_STEP),
            ("phase", CATEGORY, "compute, sync, exchange, stream or idle.", Values(codes=PHASES)),
            ("start_cycle", "int64", "Start, in cycles from the start of the trace.", COUNT),
            ("end_cycle", "int64", "End (exclusive), in cycles.", COUNT),
            ordered=(("start_cycle", "end_cycle"),),
        ),
        _t(
            "trace_levels",
            "The trace's levels of detail (schema 3 on; format/levels.py): each IPU's cycles per phase in bins "
            "[k x width, (k + 1) x width) of the run, a level per width, level 0 the coarsest (at most 512 "
            "bins over the run), each next level's bins 4 times narrower, the finest holding about 16,384 trace "
            "rows a bin or fewer. A bin's cycles are its rows' cycles inside it, so each level's cycles per "
            "IPU and phase sum to the trace's; only bins that rows overlap have a row (none when the trace's "
            "cycles sum to 2^62 or more, which no reader takes). Sorted by level, start_cycle, ipu and phase.",
            ("level", "int32", "Level of detail, 0 the coarsest.", Values(low=0, high=63)),
            ("ipu", "int16", "IPU.", IPU),
            ("phase", CATEGORY, "compute, sync, exchange, stream or idle.", Values(codes=PHASES)),
            ("start_cycle", "int64", "The bin's start, a multiple of its width, in cycles.", BIN_CYCLES),
            ("end_cycle", "int64", "The bin's end (exclusive): start_cycle + the level's width.", BIN_CYCLES),
            ("cycles", "int64", "Cycles of the phase's trace rows inside the bin.", BIN_CYCLES),
            ("rows", "int64", "Trace rows of the phase that overlap the bin (start before its end, end after "
                                 "its start).", COUNT),
            ordered=(("start_cycle", "end_cycle"),),
            since=3,
        ),
        _t(
            "kernels",
            "Each GPU kernel, memory copy and memory set of a profile imported from GPU traces (schema 5 on; "
            "empty for the emulator's and CPU traces'): where and when it ran on the GPU, and the runtime "
            "call that launched it (any runtime or driver call with its correlation id). Sorted by ipu, then "
            "start_cycle.",
            ("ipu", "int16", "The rank whose GPU ran it (an imported profile's IPU).", IPU),
            ("stream", "int32", "The GPU stream it ran on (the trace's stream id).", INDEX),
            ("kind", CATEGORY, "compute, communication (NCCL's kernels, and those the trace's annotations or "
                               "the kernel's name mark as communication), memcpy or memset.",
             Values(codes=KERNEL_KINDS)),
            ("name", CATEGORY, "The kernel's name as the trace records it."),
            ("start_cycle", "int64", "Start on the GPU, in cycles (ns) from the start of the trace.", COUNT),
            ("end_cycle", "int64", "End on the GPU (exclusive), in cycles.", COUNT),
            ("correlation", "int64", "The correlation id joining it to the runtime call that launched it, -1 if "
                                     "none.", Values(low=-1, high=MAX_COUNT)),
            ("bytes", "int64", "Bytes it moves: a collective's message (In msg nelems x its dtype's size), a "
                               "copy's or a set's size; 0 for a compute kernel and where the trace does not say.",
             COUNT),
            ("group", CATEGORY, "A communication kernel's process group: its ranks as the trace writes them "
                                "(Process Group Ranks), else its size ('8 ranks'); empty if none is said."),
            ("launch_start_cycle", "int64", "Start of the runtime call that launched it (cudaLaunchKernel, "
                                            "hipLaunchKernel, cudaMemcpyAsync...), -1 if the trace holds none.",
             Values(low=-1, high=MAX_COUNT)),
            ("launch_end_cycle", "int64", "End of that runtime call, -1 if none.", Values(low=-1, high=MAX_COUNT)),
            ("launch_name", CATEGORY, "That runtime call's name (cudaLaunchKernel, cudaGraphLaunch, "
                                      "hipMemcpyWithStream...), empty if none."),
            ("op", CATEGORY, "The innermost CPU operator that runtime call ran in (aten::addmm...), empty if "
                             "none holds it."),
            ("module", CATEGORY, "The innermost module that call ran in ('nn.Module: Linear_0', traces recorded "
                                 "with_stack or with_modules), empty if none."),
            ordered=(("start_cycle", "end_cycle"), ("launch_start_cycle", "launch_end_cycle")),
            since=5,
        ),
        _t(
            "exchanges",
            "Each exchange or copy program step: what it moves, between which IPUs, and how long it takes.",
            ("ipu", "int16", "IPU whose program holds the step.", IPU),
            ("step", "int32", "Program step.", STEP),
            ("kind", CATEGORY, "internal, inter_ipu, host, remote_buffer or all_reduce.", Values(codes=EXCHANGE_KINDS)),
            ("src_ipu", "int16", "Source IPU; -1 the host, -2 streaming memory.",
             Values(low=STREAMING_MEMORY, below="num_ipus")),
            ("dst_ipu", "int16", "Destination IPU; -1 the host, -2 streaming memory.",
             Values(low=STREAMING_MEMORY, below="num_ipus")),
            ("bytes", "int64", "Bytes moved by one execution.", COUNT),
            ("cycles", "int64", "Cycles one execution takes.", COUNT),
        ),
    )
}

# -- the manifest -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """What a manifest value must be, checked as a whole by ``values.check_manifest``.

    ``kinds``: the JSON types it may have (``int`` never a boolean; ``float`` any number). An object
    (``dict``) has ``fields``: name -> (shape, required), other keys unchecked; a list has ``items``,
    the shape of each item; an object of ``values`` has that shape under every key.
    """

    kinds: tuple[type, ...]
    fields: dict[str, tuple[Shape, bool]] | None = None
    items: Shape | None = None
    values: Shape | None = None


def _obj(required: dict[str, Shape], optional: dict[str, Shape] | None = None) -> Shape:
    return Shape((dict,), {**{k: (v, True) for k, v in required.items()},
                           **{k: (v, False) for k, v in (optional or {}).items()}})


STRING, INTEGER, NUMBER, BOOLEAN, OBJECT = (Shape((str,)), Shape((int,)), Shape((int, float)), Shape((bool,)),
                                            Shape((dict,)))

TARGET_SHAPE = _obj(
    {"arch": STRING, "num_ipus": INTEGER, "tiles_per_ipu": INTEGER, "bytes_per_tile": INTEGER, "clock_hz": NUMBER},
    {"system": STRING, "system_ipus": INTEGER, "worker_threads_per_tile": INTEGER, "flops_per_cycle_per_tile": OBJECT,
     "exchange_bytes_per_cycle_per_tile": NUMBER, "ipu_link_bytes_per_s": NUMBER, "host_link_bytes_per_s": NUMBER,
     "streaming_memory_bytes_per_s": NUMBER, "sync_cycles": INTEGER},
)

# [{"stage": 0, "ipu": 0, "blocks": ["B1"]}, ...]: the PopTorch Stages
STAGES_SHAPE = Shape((list,), items=_obj({"stage": INTEGER, "ipu": INTEGER, "blocks": Shape((list,), items=STRING)}))

# The run configuration every profile states, and the optional keys a reader uses (docs/profile-format.md).
RUN_SHAPE = _obj(
    {"model": STRING, "strategy": STRING, "mode": STRING, "stages": STAGES_SHAPE, "micro_batch_size": INTEGER,
     "gradient_accumulation": INTEGER, "device_iterations": INTEGER, "replication_factor": INTEGER},
    {"runs": INTEGER, "host_processes": INTEGER, "precision": STRING, "recompute": BOOLEAN, "tensor_locations": OBJECT,
     "tensor_sharding": INTEGER, "available_memory_proportion": Shape((int, float, list), items=NUMBER),
     "recompute_checkpoints": Shape((str, int)), "attention_serialisation": INTEGER, "model_params": OBJECT,
     "parameters": INTEGER, "request": OBJECT,
     # since version 4: the schedule's facts the analysis reads (format.schedule derives them for older profiles)
     "runs_as_pipeline": BOOLEAN, "pipeline_positions": Shape((list,), items=INTEGER), "samples_per_step": INTEGER},
)

MANIFEST_SHAPE = _obj({
    "format": STRING,
    "schema_version": INTEGER,
    "generator": OBJECT,
    "created": STRING,
    "target": TARGET_SHAPE,
    "run": RUN_SHAPE,
    # for each table: {"rows": int, "bytes": int, "footer_crc32": int}
    "tables": Shape((dict,), values=_obj({}, {"rows": INTEGER, "bytes": INTEGER, "footer_crc32": INTEGER})),
})


def _required(shape: Shape) -> dict[str, tuple[type, ...]]:
    return {name: field.kinds for name, (field, required) in (shape.fields or {}).items() if required}


# The keys each part of the manifest must have, with their JSON types (from the shapes above).
REQUIRED_MANIFEST_KEYS = _required(MANIFEST_SHAPE)
REQUIRED_TARGET_KEYS = _required(TARGET_SHAPE)
REQUIRED_RUN_KEYS = _required(RUN_SHAPE)
