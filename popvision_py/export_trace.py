"""A profile's execution trace as Chrome trace-event JSON (what `popvision export-trace PROFILE -o trace.json` writes).

One process per IPU, one track (thread) per stage and pass ("stage 1 forward", "stage 1 backward",
"stage 1 update") plus one per kind of step outside the stages ("sync", "stream copy",
"all-reduce", "idle"...), every trace row one complete ("X") event on its track, named after its
program step (idle rows: "idle"), category = phase, times in microseconds (cycles / clock_hz x
1e6). Perfetto and chrome://tracing open it.

A ``Window`` (`--iterations`, `--from`/`--to` and `--ipu`) keeps part of the trace. Row groups whose
footer statistics show they hold no row of the window are not decoded at all; the others are
streamed in batches of 64 Ki rows, filtered, and formatted 8 Ki rows at a time by NumPy and Arrow
kernels (no Python code per row), and their mapped pages handed back once read, so memory stays flat
however long the trace is.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tqdm import tqdm

from popvision_py.analysis.imported.ranks import SOURCE, rank_numbers
from popvision_py.analysis.common.tables import PASSES, PHASES, codes, lookup, numbers
from popvision_py.analysis.trace.scan import column_bounds
from popvision_py.errors import ConfigError, OutOfRangeError
from popvision_py.format import open_profile
from popvision_py.format import schema as S
from popvision_py.format.atomic import atomic_output
from popvision_py.format.reader import Profile
from popvision_py.format.arrays import arrow

COLUMNS = ["run", "iteration", "micro_batch", "ipu", "stage", "pass", "step", "phase", "start_cycle", "end_cycle"]
# Rows formatted at a time: one batch's strings (about 270 bytes an event) and their parts stay near 8 MB (at 2^16 rows,
# 50 MB: the export of 10 GB of traces in 4 ranks peaked at 174 MiB against 109, in the same time).
BATCH_ROWS = 1 << 13
SCAN_ROWS = 1 << 16  # rows decoded at a time: a window's filter, the iterations counted, the programs read

# Tracks (tids) of one IPU. A row of stage s >= 0 goes on track 10 (s + 1) + its pass code
# (0 forward, 1 backward, 2 update, 3 none, 4 other): stage 0 forward is 10, stage 1 backward 21.
# A row outside the stages goes on the track of its program step's type (1-7), or "idle" (8)
# when it has no step, or "other" (9).
STAGE_TRACKS = 10
TYPE_TRACK_NAMES = {
    "compute_set": "compute set", "exchange": "exchange", "global_exchange": "global exchange",
    "stream_copy": "stream copy", "remote_buffer_copy": "remote-buffer copy", "sync": "sync",
    "all_reduce": "all-reduce",
}
IDLE_TRACK, OTHER_TRACK = 1 + len(S.PROGRAM_TYPES), 2 + len(S.PROGRAM_TYPES)


def track_name(tid: int) -> str:
    """The thread_name of track ``tid`` (see ``tracks``)."""
    if tid >= STAGE_TRACKS:
        stage, pass_ = divmod(tid - STAGE_TRACKS, STAGE_TRACKS)
        word = {"none": "", "forward": " forward", "backward": " backward", "update": " update"}.get(
            PASSES[pass_] if pass_ < len(PASSES) else "", " (other)")
        return f"stage {stage}{word}"
    if 1 <= tid <= len(S.PROGRAM_TYPES):
        return TYPE_TRACK_NAMES[S.PROGRAM_TYPES[tid - 1]]
    return "idle" if tid == IDLE_TRACK else "other"


def tracks(stage: np.ndarray, pass_: np.ndarray, step_type: np.ndarray, phase: np.ndarray) -> np.ndarray:
    """Each row's track: ``stage``, ``pass_`` (codes into PASSES), ``step_type`` (codes into
    PROGRAM_TYPES, -1 for a row without a program step), ``phase`` (codes into PHASES)."""
    outside = np.where(step_type >= len(S.PROGRAM_TYPES), OTHER_TRACK, 1 + step_type)
    outside = np.where(step_type < 0, np.where(phase == PHASES.index("idle"), IDLE_TRACK, OTHER_TRACK), outside)
    return np.where(stage >= 0, STAGE_TRACKS * (stage.astype(np.int64) + 1) + pass_, outside)


# -- the window -------------------------------------------------------------------------------


def _count(option: str, text: str, what: str) -> int:
    cleaned = text.strip().replace("_", "").replace(",", "")
    if not cleaned.isdigit():
        raise ConfigError(f"{option} takes {what} (a whole number >= 0), not {text!r}.")
    return int(cleaned)


@dataclass(frozen=True)
class Window:
    """The rows to export: all by default.

    ``iterations``: [first, stop) over the whole trace (``run * iterations per run + iteration``,
    as the Gantt chart counts them; stop None: to the end). ``from_cycle``/``to_cycle``: rows that
    overlap [from, to): ``start_cycle < to`` and ``end_cycle > from`` (a zero-length row: ``from
    <= start_cycle``). ``ipus``: only these IPUs (empty: all).
    """

    iterations: tuple[int, int | None] | None = None
    from_cycle: int | None = None
    to_cycle: int | None = None
    ipus: tuple[int, ...] = ()

    @classmethod
    def parse(cls, iterations: str | None = None, from_cycle: str | None = None, to_cycle: str | None = None,
              ipus: tuple[str, ...] = ()) -> Window:
        """The window the command-line options describe; ConfigError (one sentence) if one is malformed."""
        span = None
        if iterations is not None:
            first, colon, stop = iterations.strip().partition(":")
            usage = ("an iteration range A:B (iterations A to B-1, counted over the whole trace), A:, :B "
                     "or one iteration N")
            try:
                a = _count("--iterations", first, usage) if first.strip() or not colon else 0
                b = _count("--iterations", stop, usage) if stop.strip() else None
            except ConfigError:
                raise ConfigError(f"--iterations takes {usage}, not {iterations!r}.") from None
            if not colon:
                b = a + 1
            if b is not None and b <= a:
                raise ConfigError(f"--iterations {iterations} selects no iteration: A must be less than B.")
            span = (a, b)
        low = None if from_cycle is None else _count("--from", from_cycle, "a cycle")
        high = None if to_cycle is None else _count("--to", to_cycle, "a cycle")
        if low is not None and high is not None and high <= low:
            raise ConfigError(f"--from {low} must be less than --to {high}.")
        chosen = tuple(sorted({_count("--ipu", i, "an IPU number") for i in ipus}))
        return cls(span, low, high, chosen)

    def __bool__(self) -> bool:
        return self != Window()

    def describe(self) -> str:
        """The window as the options that give it."""
        parts = []
        if self.iterations is not None:
            a, b = self.iterations
            parts.append(f"--iterations {a}:{'' if b is None else b}")
        if self.from_cycle is not None:
            parts.append(f"--from {self.from_cycle}")
        if self.to_cycle is not None:
            parts.append(f"--to {self.to_cycle}")
        parts += [f"--ipu {i}" for i in self.ipus]
        return " ".join(parts) or "the whole trace"

    def mask(self, batch: pa.RecordBatch, per_run: int) -> np.ndarray | None:
        """Which rows of ``batch`` lie in the window (None: all of them)."""
        keep = None

        def both(more: np.ndarray) -> None:
            nonlocal keep
            keep = more if keep is None else keep & more

        if self.iterations is not None:
            g = numbers(batch["run"]).astype(np.int64) * per_run + numbers(batch["iteration"])
            first, stop = self.iterations
            both(g >= first if stop is None else (g >= first) & (g < stop))
        if self.from_cycle is not None:
            start, end = numbers(batch["start_cycle"]), numbers(batch["end_cycle"])
            both((end > self.from_cycle) | (start >= self.from_cycle))
        if self.to_cycle is not None:
            both(numbers(batch["start_cycle"]) < self.to_cycle)
        if self.ipus:
            both(np.isin(numbers(batch["ipu"]), self.ipus))
        return keep

    def row_groups(self, metadata: pq.FileMetaData, per_run: int) -> list[int]:
        """The row groups that may hold rows of the window, from the footer's statistics (a group
        without statistics for a column is kept as far as that column goes)."""
        n = metadata.num_row_groups
        if not self:
            return list(range(n))
        low, high, known = _group_bounds(metadata, ("run", "iteration", "ipu", "start_cycle", "end_cycle"))
        keep = np.ones(n, bool)
        if self.iterations is not None:
            first, stop = self.iterations
            # run and iteration are int32 and per_run <= 2**31: the products fit in int64
            inside = high["run"] * per_run + high["iteration"] >= first
            if stop is not None:
                inside &= low["run"] * per_run + low["iteration"] < stop
            keep &= ~(known["run"] & known["iteration"]) | inside
        if self.from_cycle is not None:
            ends = (high["end_cycle"] > self.from_cycle) | (high["start_cycle"] >= self.from_cycle)
            keep &= ~(known["start_cycle"] & known["end_cycle"]) | ends
        if self.to_cycle is not None:
            keep &= ~known["start_cycle"] | (low["start_cycle"] < self.to_cycle)
        if self.ipus:
            chosen = np.asarray(self.ipus)
            overlap = ((chosen[None, :] >= low["ipu"][:, None]) & (chosen[None, :] <= high["ipu"][:, None])).any(axis=1)
            keep &= ~known["ipu"] | overlap
        return np.flatnonzero(keep).tolist()


def _group_bounds(metadata: pq.FileMetaData, columns: tuple[str, ...]) -> tuple[dict, dict, dict]:
    """Each row group's min and max of ``columns`` (int64 arrays), and whether its statistics give them."""
    where = {metadata.schema.column(i).name: i for i in range(metadata.num_columns)}
    low = {c: np.zeros(metadata.num_row_groups, np.int64) for c in columns}
    high = {c: np.zeros(metadata.num_row_groups, np.int64) for c in columns}
    known = {c: np.zeros(metadata.num_row_groups, bool) for c in columns}
    for g in range(metadata.num_row_groups):  # a loop over row groups (up to 1 Mi rows each), not rows
        group = metadata.row_group(g)
        for c in columns:
            stats = group.column(where[c]).statistics if c in where else None
            if stats is not None and stats.has_min_max and isinstance(stats.min, int) and isinstance(stats.max, int):
                low[c][g], high[c][g], known[c][g] = stats.min, stats.max, True
    return low, high, known


def iterations_per_run(profile: Profile) -> int:
    """Largest iteration + 1 in the trace (from the footer, else one streamed column), as the Gantt counts them."""
    bounds = column_bounds(profile.metadata("trace"), ["iteration"]) if profile.footer_verified("trace") else None
    if bounds is not None:
        return max(bounds["iteration"][1] + 1, 1)
    top = -1
    for batch in profile.iter_batches("trace", ["iteration"], SCAN_ROWS):
        if batch.num_rows:
            top = max(top, int(pc.max(batch["iteration"]).as_py()))
    return max(top + 1, 1)


def _extent(profile: Profile, per_run: int) -> str:
    """The trace's iterations and cycles, for the message of an empty window (streamed: an error path)."""
    last, first_cycle, last_cycle = -1, None, None
    for batch in profile.iter_batches("trace", ["run", "iteration", "start_cycle", "end_cycle"], SCAN_ROWS):
        if batch.num_rows == 0:
            continue
        g = numbers(batch["run"]).astype(np.int64) * per_run + numbers(batch["iteration"])
        last = max(last, int(g.max()))
        low, high = int(numbers(batch["start_cycle"]).min()), int(numbers(batch["end_cycle"]).max())
        first_cycle = low if first_cycle is None else min(first_cycle, low)
        last_cycle = high if last_cycle is None else max(last_cycle, high)
    if last < 0:
        return "is empty"
    return f"holds iterations 0 to {last} and cycles {first_cycle} to {last_cycle}"


# -- writing ----------------------------------------------------------------------------------


def _strings(values: np.ndarray) -> pa.Array:
    return pc.cast(arrow(values), pa.string())


# what comes before each field of an event, after the last (``}}``) and between the pieces (nothing)
_GLUE = (',\n{"name":"', '","cat":"', '","ph":"X","pid":', ',"tid":', ',"ts":', ',"dur":', ',"args":{"step":',
         ',"stage":', ',"pass":"', '","micro_batch":', ',"iteration":', ',"run":', ',"start_cycle":', ',"end_cycle":',
         "}}", "")


@dataclass(frozen=True)
class ProgramSteps:
    """Each (ipu, step)'s name, a code into ``names``, and type, a code into ``schema.PROGRAM_TYPES`` (its length for
    another), -1 where the program has no such step: what the export takes of the programs table."""

    name: np.ndarray
    type: np.ndarray
    names: list[str]

    @classmethod
    def read(cls, profile: Profile) -> ProgramSteps:
        """The profile's, its programs table read a batch at a time (at 10 GB of traces in 4 ranks, its 835k rows
        held whole, as columns and indexed, were 70 MiB of the export's 200)."""
        shape = _largest(profile, ("ipu", "step"))
        name, kind = np.full(shape, -1, np.int32), np.full(shape, -1, np.int8)
        words: dict[str, int] = {}
        for batch in profile.iter_batches("programs", ["ipu", "step", "type", "name"], SCAN_ROWS):
            ipu, step, names = numbers(batch["ipu"]), numbers(batch["step"]), batch["name"]
            names = names if pa.types.is_dictionary(names.type) else names.dictionary_encode()
            lut = np.array([words.setdefault(w, len(words)) for w in names.dictionary.to_pylist()] or [0], np.int32)
            name[ipu, step] = lut[numbers(names.indices)]
            kind[ipu, step] = codes(batch["type"], S.PROGRAM_TYPES)
        return cls(name, kind, list(words))

    def ipus(self) -> list[int]:
        """The IPUs with a program step."""
        return np.flatnonzero((self.name >= 0).any(axis=1)).tolist()


def _largest(profile: Profile, columns: tuple[str, ...]) -> list[int]:
    """One more than the largest value of each integer column of the programs table (0 without rows): from the footer's
    statistics where they are checked and stated for every row group, else read."""
    bounds = column_bounds(profile.metadata("programs"), columns) if profile.footer_verified("programs") else None
    if bounds is not None:
        return [bounds[c][1] + 1 for c in columns]
    largest = [0] * len(columns)
    for batch in profile.iter_batches("programs", list(columns), SCAN_ROWS):
        largest = [max(n, int(numbers(batch[c]).max(initial=-1)) + 1) for n, c in zip(largest, columns)]
    return largest


class _Events:
    """Formats trace batches as trace-event JSON: one string per row, built by Arrow kernels."""

    def __init__(self, steps: ProgramSteps, clock_hz: float) -> None:
        self.clock = clock_hz
        # the labels: each distinct step name JSON-escaped once (a profile holds a few names over many steps: an
        # import of 10 GB of traces has 835k programs rows of 6 names), then the phases for rows without a step
        words = [json.dumps(str(n))[1:-1] for n in steps.names]
        self.unnamed = len(words)  # label of phase p: unnamed + p
        self.label = arrow(words + list(PHASES) + ["unknown"])
        self.name_of, self.type_of = steps.name, steps.type
        self.phase_words = arrow(list(PHASES) + ["unknown"])
        self.pass_words = arrow(list(PASSES) + ["unknown"])
        # the text between an event's fields, as Arrow scalars made once (a Python str handed to a
        # kernel is converted by pa.scalar, which imports pandas)
        self.glue = list(arrow(list(_GLUE)))

    def __call__(self, batch: pa.RecordBatch) -> tuple[pa.StringArray, np.ndarray]:
        """Each row's event, starting with ",\\n"; and the (pid << 32) | tid of the tracks they use."""
        ipu = numbers(batch["ipu"]).astype(np.int64)
        step = numbers(batch["step"]).astype(np.int64)
        phase = codes(batch["phase"], PHASES).astype(np.int64)
        pass_ = codes(batch["pass"], PASSES).astype(np.int64)
        stage = numbers(batch["stage"])
        name = lookup(self.name_of, ipu, step, -1).astype(np.int64)
        name_ix = np.where(name >= 0, name, self.unnamed + phase)
        tid = tracks(stage, pass_, lookup(self.type_of, ipu, step, -1).astype(np.int64), phase)
        start = numbers(batch["start_cycle"])
        end = numbers(batch["end_cycle"])
        ts = arrow(start / self.clock * 1e6)
        dur = arrow((end - start) / self.clock * 1e6)
        g = self.glue
        parts = [
            g[0], self.label.take(arrow(name_ix)), g[1], self.phase_words.take(arrow(phase)),
            g[2], _strings(ipu), g[3], _strings(tid), g[4], pc.cast(ts, pa.string()),
            g[5], pc.cast(dur, pa.string()), g[6], _strings(step),
            g[7], _strings(stage), g[8], self.pass_words.take(arrow(pass_)),
            g[9], _strings(numbers(batch["micro_batch"])),
            g[10], _strings(numbers(batch["iteration"])), g[11], _strings(numbers(batch["run"])),
            g[12], _strings(start), g[13], _strings(end), g[14],
        ]
        return pc.binary_join_element_wise(*parts, g[15]), np.unique((ipu << 32) | tid)


def _process_events(ipus: list[int], ranks: np.ndarray | None = None) -> list[str]:
    """process_name ("IPU n", or an imported trace's "Rank r": ``ranks``, each IPU's rank) and process_sort_index
    metadata events of ``ipus``."""
    def named(i: int) -> str:
        return f"Rank {ranks[i]}" if ranks is not None and i < len(ranks) else f"IPU {i}"

    names = [json.dumps({"name": "process_name", "ph": "M", "pid": i, "tid": 0, "args": {"name": named(i)}})
             for i in ipus]
    return names + [json.dumps({"name": "process_sort_index", "ph": "M", "pid": i, "tid": 0,
                                "args": {"sort_index": i}}) for i in ipus]


def _thread_events(tracks_used: set[int]) -> list[str]:
    """thread_name and thread_sort_index metadata events of each track used ((pid << 32) | tid)."""
    threads = []
    for key in sorted(tracks_used):
        pid, tid = key >> 32, key & 0xFFFFFFFF
        order = tid if tid >= STAGE_TRACKS else 1_000_000_000 + tid  # the stages' tracks first
        threads.append(json.dumps({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                                   "args": {"name": track_name(tid)}}))
        threads.append(json.dumps({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                                   "args": {"sort_index": order}}))
    return threads


def export(path: str | os.PathLike[str], output: str | os.PathLike[str], batch_rows: int = BATCH_ROWS, *,
           window: Window | None = None, progress: bool = False) -> int:
    """Write the trace of the profile at ``path`` (the rows in ``window``, all by default) to ``output`` as
    Chrome trace-event JSON; returns the number of "X" events written.

    ``output`` is replaced atomically (a device or FIFO is written into; ``atomic_output``): an error or
    Ctrl-C part way leaves no partial file. ``batch_rows``: trace rows decoded at a time. ``progress``: a
    tqdm bar on stderr, in trace rows read. A window naming an IPU the profile does not have, or holding
    no trace row, is an OutOfRangeError; a profile that cannot be read raises the reader's ProfileError.
    """
    window = window or Window()
    with open_profile(path) as profile:
        steps = ProgramSteps.read(profile)
        ipus = sorted(set(range(int(profile.target["num_ipus"]))) | set(steps.ipus()))
        missing = [i for i in window.ipus if i not in ipus]
        if missing:
            raise OutOfRangeError(f"{path} has no IPU {missing[0]}: its IPUs are 0 to {ipus[-1]}.")
        per_run = iterations_per_run(profile) if window.iterations is not None else 1
        events = _Events(steps, float(profile.target["clock_hz"]))
        meta = {"format": "popvision trace export", "profile": str(profile.path), "clock_hz": events.clock,
                "model": profile.run.get("model"), "strategy": profile.run.get("strategy"),
                "window": window.describe()}
        metadata = profile.metadata("trace")
        # unverified statistics (an old profile's large trace) may not rule row groups out
        groups = (window.row_groups(metadata, per_run) if profile.footer_verified("trace")
                  else list(range(metadata.num_row_groups)))
        used: set[int] = set()  # (pid << 32) | tid of every track that received an event
        count = 0
        with atomic_output(output) as out, tqdm(
            total=sum(metadata.row_group(g).num_rows for g in groups), desc="Exporting trace", unit="row",
            unit_scale=True, file=sys.stderr, disable=not progress, leave=False,
        ) as bar:
            out.write(b'{"displayTimeUnit":"ns","otherData":' + json.dumps(meta).encode() + b',"traceEvents":[\n')
            ranks = rank_numbers(profile.run, len(ipus)) if profile.run.get("source") == SOURCE else None
            processes = _process_events([i for i in ipus if not window.ipus or i in window.ipus], ranks)
            out.write(",\n".join(processes).encode())
            written = bool(processes)  # an item is in the array: the next one needs a comma
            # decoded and filtered SCAN_ROWS at a time, formatted ``batch_rows`` of the rows kept at a time
            for decoded in profile.iter_batches("trace", COLUMNS, max(batch_rows, SCAN_ROWS), row_groups=groups):
                bar.update(decoded.num_rows)
                keep = window.mask(decoded, per_run)
                decoded = decoded.filter(arrow(keep)) if keep is not None else decoded
                for at in range(0, decoded.num_rows, batch_rows):
                    batch = decoded.slice(at, batch_rows)
                    text, tracks_used = events(batch)
                    used.update(tracks_used.tolist())  # a few tracks a batch
                    # the string array's data buffer holds the rows back to back: write it in one go, the
                    # first event of the array without its leading ",\n"
                    offsets = np.frombuffer(text.buffers()[1], dtype=np.int32, count=len(text) + 1,
                                            offset=text.offset * 4)
                    out.write(memoryview(text.buffers()[2])[offsets[0] + (0 if written else 2): offsets[-1]])
                    written = True
                    count += batch.num_rows
            if count == 0 and window and metadata.num_rows:
                extent = _extent(profile, iterations_per_run(profile))
                raise OutOfRangeError(f"The window {window.describe()} holds no trace rows: the trace of "
                                      f"{path} {extent}.")
            threads = _thread_events(used)
            if threads:
                out.write(((",\n" if written else "") + ",\n".join(threads)).encode())
            out.write(b"\n]}\n")
    return count
