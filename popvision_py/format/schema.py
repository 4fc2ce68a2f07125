"""The profile.pop schema, version 1: the one definition the writer, the reader and the docs use.

Every table is a list of typed columns. Columns whose values repeat a lot (names, kinds, passes,
phases, categories) are dictionary-encoded strings: small on disk and pandas categoricals in memory.
Units are the last word of a column name (``_bytes``, ``_cycles``, ``flops``); ids and indexes are
plain integers; ``-1`` means "none" in integer id columns (no op, no stage, no micro-batch).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

FORMAT_NAME = "popvision-profile"
SCHEMA_VERSION = 1
MANIFEST_MEMBER = "manifest.json"
TABLE_SUFFIX = ".parquet"

# A categorical string column. Parquet restores this type exactly from the stored Arrow schema.
CATEGORY = pa.dictionary(pa.int32(), pa.string())

# Host and streaming memory in the src_ipu / dst_ipu columns of ``exchanges``.
HOST = -1
STREAMING_MEMORY = -2

# The program step, on every IPU, in which the IPUs wait for the host's data loaders at the start
# of a host call (a stream step without bytes; 0 cycles when the host keeps up).
INPUT_WAIT_STEP = "host/input_wait"

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
EXCHANGE_KINDS = ("internal", "inter_ipu", "host", "remote_buffer", "all_reduce")
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


@dataclass(frozen=True)
class Column:
    """One column of a table: its name, Arrow type, and meaning (with its unit)."""

    name: str
    type: pa.DataType
    doc: str


@dataclass(frozen=True)
class Table:
    """One table of the profile: its member name is ``<name>.parquet``."""

    name: str
    doc: str
    columns: tuple[Column, ...]

    @property
    def schema(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, c.type, nullable=False) for c in self.columns])

    @property
    def member(self) -> str:
        return self.name + TABLE_SUFFIX


def _t(name: str, doc: str, *columns: tuple[str, pa.DataType, str]) -> Table:
    return Table(name, doc, tuple(Column(n, t, d) for n, t, d in columns))


TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        _t(
            "ops",
            "Each operation of the model, one row per op and pass (forward, backward, update).",
            ("op_id", pa.int32(), "Op index in program order; shared by the op's passes."),
            ("name", CATEGORY, "Op name, e.g. 'layer3/matmul'."),
            ("kind", CATEGORY, "Op kind, e.g. 'matmul', 'conv', 'relu', 'softmax'."),
            ("block", CATEGORY, "The Block the op belongs to, e.g. 'B3'."),
            ("stage", pa.int16(), "Stage (PopTorch Stage index: a group of blocks on one IPU) holding the op."),
            ("ipu", pa.int16(), "IPU the op runs on."),
            ("pass", CATEGORY, "forward, backward or update."),
            ("flops", pa.int64(), "Floating-point operations of one execution (one micro-batch; update: per weight update)."),
            ("bytes", pa.int64(), "Bytes read and written by one execution."),
            ("tiles", pa.int32(), "Tiles the op's work is spread over."),
        ),
        _t(
            "programs",
            "The compiled program steps of each IPU in program order. IPU execution is deterministic, "
            "so each step's duration is stored once here; the trace says when it ran.",
            ("ipu", pa.int16(), "IPU whose program holds the step."),
            ("step", pa.int32(), "Program step index, 0-based, in program order on that IPU."),
            ("type", CATEGORY, "compute_set, exchange, global_exchange, stream_copy, remote_buffer_copy, sync or all_reduce."),
            ("name", CATEGORY, "Step name, e.g. 'layer3/matmul/fwd'."),
            ("op_id", pa.int32(), "Op the step belongs to, -1 if none."),
            ("stage", pa.int16(), "Pipeline stage of the step, -1 if none."),
            ("pass", CATEGORY, "forward, backward, update or none."),
            ("tiles", pa.int32(), "Tiles taking part in the step."),
            ("bytes", pa.int64(), "Bytes moved by the step (exchanges and copies), 0 for compute sets."),
            ("cycles", pa.int64(), "Cycles one execution of the step takes (a compute set: its slowest tile)."),
        ),
        _t(
            "tile_cycles",
            "Cycles each tile spends in each compute set (only tiles that take part).",
            ("ipu", pa.int16(), "IPU."),
            ("step", pa.int32(), "Program step (a compute set) on that IPU."),
            ("tile", pa.int32(), "Tile index, 0-based, on that IPU."),
            ("cycles", pa.int64(), "Cycles the tile computes in one execution of the step."),
        ),
        _t(
            "tile_memory",
            "Memory per IPU, tile and category. Always-live rows hold bytes that live for the whole "
            "program; not-always-live rows hold the tile's bytes at its own peak step, so a tile's rows "
            "sum to its peak memory.",
            ("ipu", pa.int16(), "IPU."),
            ("tile", pa.int32(), "Tile index, 0-based."),
            ("category", CATEGORY, "Memory category (vertex_code, vertex_state, weights, activations, ...)."),
            ("always_live", pa.bool_(), "True for always-live memory."),
            ("bytes", pa.int64(), "Bytes of that category on that tile."),
        ),
        _t(
            "variables",
            "Each variable (tensor) placed on an IPU, with its liveness interval in program steps.",
            ("var_id", pa.int32(), "Variable index."),
            ("name", CATEGORY, "Variable name, e.g. 'layer3/weight'."),
            ("ipu", pa.int16(), "IPU holding it."),
            ("category", CATEGORY, "Memory category."),
            ("always_live", pa.bool_(), "True if live for the whole program."),
            ("bytes", pa.int64(), "Total bytes over all its tiles."),
            ("start_tile", pa.int32(), "First tile of the contiguous range it is mapped to."),
            ("tiles", pa.int32(), "Number of tiles in that range (bytes are spread over them in grains)."),
            ("live_from_step", pa.int32(), "First program step it is live (0 for always-live)."),
            ("live_to_step", pa.int32(), "Last program step it is live, inclusive."),
            ("op_id", pa.int32(), "Op that produces or owns it, -1 if none."),
        ),
        _t(
            "liveness",
            "Memory live at each program step of each IPU: IPU totals and the worst tile.",
            ("ipu", pa.int16(), "IPU."),
            ("step", pa.int32(), "Program step."),
            ("always_live_bytes", pa.int64(), "Always-live bytes on the IPU (the same at every step)."),
            ("not_always_live_bytes", pa.int64(), "Not-always-live bytes live on the IPU at this step."),
            ("worst_tile", pa.int32(), "Tile with the most memory live at this step."),
            ("worst_tile_bytes", pa.int64(), "Total bytes (always-live + not-always-live) live on that tile at this step."),
        ),
        _t(
            "trace",
            "The execution trace: one row per execution of a program step on an IPU, plus idle rows "
            "where an IPU waits for the others. Replicas run in lockstep, so only replica 0 is traced.",
            ("run", pa.int32(), "Host call (one call runs device_iterations iterations)."),
            ("iteration", pa.int32(), "Device iteration within the run (one weight update when training)."),
            ("micro_batch", pa.int32(), "Micro-batch within the iteration, -1 if none (update, all-reduce, idle)."),
            ("ipu", pa.int16(), "IPU."),
            ("stage", pa.int16(), "Pipeline stage, -1 if none."),
            ("pass", CATEGORY, "forward, backward, update or none."),
            ("step", pa.int32(), "Program step executed, -1 for idle rows."),
            ("phase", CATEGORY, "compute, sync, exchange, stream or idle."),
            ("start_cycle", pa.int64(), "Start, in cycles from the start of the trace."),
            ("end_cycle", pa.int64(), "End (exclusive), in cycles."),
        ),
        _t(
            "exchanges",
            "Each exchange or copy program step: what it moves, between which IPUs, and how long it takes.",
            ("ipu", pa.int16(), "IPU whose program holds the step."),
            ("step", pa.int32(), "Program step."),
            ("kind", CATEGORY, "internal, inter_ipu, host, remote_buffer or all_reduce."),
            ("src_ipu", pa.int16(), "Source IPU; -1 the host, -2 streaming memory."),
            ("dst_ipu", pa.int16(), "Destination IPU; -1 the host, -2 streaming memory."),
            ("bytes", pa.int64(), "Bytes moved by one execution."),
            ("cycles", pa.int64(), "Cycles one execution takes."),
        ),
    )
}

REQUIRED_MANIFEST_KEYS: dict[str, type | tuple[type, ...]] = {
    "format": str,
    "schema_version": int,
    "generator": dict,
    "created": str,
    "target": dict,
    "run": dict,
    "tables": dict,
}

REQUIRED_TARGET_KEYS: dict[str, type | tuple[type, ...]] = {
    "arch": str,
    "num_ipus": int,
    "tiles_per_ipu": int,
    "bytes_per_tile": int,
    "clock_hz": (int, float),
}

# The run configuration every profile states (see docs/profile-format.md for the optional keys).
REQUIRED_RUN_KEYS: dict[str, type | tuple[type, ...]] = {
    "model": str,
    "strategy": str,  # pipelined, sharded or phased
    "mode": str,  # training or inference
    "stages": list,  # [{"stage": 0, "ipu": 0, "blocks": ["B1"]}, ...]
    "micro_batch_size": int,
    "gradient_accumulation": int,
    "device_iterations": int,
    "replication_factor": int,
}
