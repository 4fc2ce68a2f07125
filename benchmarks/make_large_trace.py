"""Grow recorded PyTorch profiler traces (one per rank) to a target size by repeating their real steps.

    .venv/bin/python benchmarks/make_large_trace.py SRC_DIR OUT_DIR --total-mb 1000 [--jobs N]

SRC_DIR holds one Chrome-trace JSON per rank as ``torch.profiler`` (Kineto) writes it (``.json`` or
``.json.gz``; other JSON files there, such as a recorder's ``meta.json``, are skipped: a trace has a
``"traceEvents"`` key). For each rank the window of its ``ProfilerStep#N`` annotations (first step's
start to the last event that starts before the last step ends) is written ``copies`` times, each
copy shifted in time by one span and renumbered, so that the grown file is a longer run of the same
real steps:

- ``ts`` += k x span, where the span is one common whole number of microseconds for every rank (the
  longest rank's window, to its last event's end), so the ranks stay aligned copy after copy;
- ``ProfilerStep#N`` -> ``ProfilerStep#(N + k x steps)`` (steps: the number the ranks recorded);
- ``External id``, ``Ev Idx``, ``Sequence number``, ``Python id`` / ``Python parent id``, flow ``id`` and
  ``correlation`` += k x (the file's largest value + 1), so each stays unique in the file and every
  flow start still meets its own end;
- every rank gets the same number of copies.

Everything else is kept as recorded: the header (every key before ``"traceEvents"``, byte for byte:
``distributedInfo``, ``baseTimeNanoseconds``...), the metadata (``ph: "M"``) and the events before the
first step once, the events after the last step shifted past the last copy, the profiler's own span
(which covered the recording) stretched over the grown run, and ``"traceName"`` at the end (now the
file written). Each event's text is the recorded text with only those numbers replaced, in the
order Kineto wrote them (a block of consecutive in-window events, such as the operators, then the
``[memory]`` instants, is repeated as a block), so the grown trace has Kineto's layout and bytes per
event. Every event's replacement is checked once against the same change made on the parsed event.

The inputs are small and read whole; each output is written as it is made (in blocks of one copy of
a run of events), so memory stays at a few times the input's size whatever the output's. The
number of copies is chosen so that the files together come to ``--total-mb`` (10^6 bytes), within
about 0.1 % (the ids' digits grow with the copies). ``OUT_DIR.grown.json`` (beside the folder, which
holds the traces only) records the copies, the span, the events and bytes per rank.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import math
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

STEP = re.compile(r"ProfilerStep#(\d+)$")
# integer keys renumbered in each copy (top level or in "args"); "id" and "correlation" share one stride,
# as a GPU trace's kernel flows use the launch's correlation id as their id
ID_KEYS = ("External id", "Ev Idx", "Sequence number", "Python id", "Python parent id", "correlation", "id")
STRIDE_GROUP = {"Python parent id": "Python id", "correlation": "id"}
# where a number to change is in an event's text: "key": number (the ts's whole microseconds only)
SLOT = re.compile(r'"(ts|dur|' + "|".join(re.escape(k) for k in ID_KEYS) + r')":(\s*)(-?\d+)')
STEP_SLOT = re.compile(r'"name":(\s*)"ProfilerStep#(\d+)"')
TRACE_SUFFIXES = (".json", ".json.gz")


class GrowError(Exception):
    """A source that cannot be grown (one sentence)."""


@dataclass
class Rank:
    """One source trace, parsed, and its events' text."""

    path: Path
    prefix: str  # the file up to its first event: the header and '"traceEvents": ['
    separator: str  # the text between two events
    suffix: str  # after the last event: '],"traceName": ... }'
    raws: list[str]
    events: list[dict]
    rank: int
    gaps: list[str]  # the text after each event but the last (a comma and white space)
    lo: Decimal = Decimal(0)  # first ProfilerStep's ts
    hi: Decimal = Decimal(0)  # last ProfilerStep's end
    end: Decimal = Decimal(0)  # last end of an in-window event
    steps: tuple[int, int] = (0, 0)
    strides: dict[str, int] = field(default_factory=dict)


def read_text(path: Path) -> str:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data.decode("utf-8")


def find_traces(src: Path) -> list[Path]:
    """The rank traces in ``src``: JSON files with a ``"traceEvents"`` key near their start."""
    found = []
    for p in sorted(src.iterdir()):
        if p.is_file() and p.name.endswith(TRACE_SUFFIXES):
            with (gzip.open(p, "rb") if p.name.endswith(".gz") else open(p, "rb")) as f:
                if b'"traceEvents"' in f.read(1 << 16):
                    found.append(p)
    if not found:
        raise GrowError(f"{src} holds no trace (a .json or .json.gz file with a \"traceEvents\" array)")
    return found


# --gpu-style: a CPU recording's events rewritten as a GPU trace's (see as_gpu)
OPERATOR = re.compile(r'"cat":(\s*)"cpu_op"')
GLOO = re.compile(r'"cat":(\s*)"user_annotation"(.*?)"name":(\s*)"gloo:([a-z_]+)"', re.S)
PID_TID = re.compile(r'"(pid|tid)":(\s*)(-?\d+|"[^"]*")')
COMPUTE_STREAM, NCCL_STREAM, DEVICE = 7, 20, 0
NCCL_KERNEL = {"send": "ncclDevKernel_SendRecv", "recv": "ncclDevKernel_SendRecv",
               "all_reduce": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "broadcast": "ncclDevKernel_Broadcast_RING_LL"}


def as_gpu(raw: str, event: dict) -> str:
    """A CPU recording's event as a GPU trace would hold it: each operator that is not a communication
    call or an autograd node becomes a ``kernel`` on a compute stream (device 0, stream 7), and each of
    gloo's transfers (``gloo:send``...) an NCCL kernel (``ncclDevKernel_SendRecv``...) on a stream of its
    own (20). Times, names of operators, args and layout are the recording's: the GPU's time is the
    CPU's, which is what makes it a stand-in for a GPU trace and not one."""
    name = event.get("name") if isinstance(event.get("name"), str) else ""
    if event.get("ph") != "X":
        return raw
    stream = None
    if event.get("cat") == "cpu_op" and not name.startswith(("c10d::", "record_param_comms", "autograd::")):
        raw, stream = OPERATOR.sub(lambda m: f'"cat":{m.group(1)}"kernel"', raw, count=1), COMPUTE_STREAM
    elif event.get("cat") == "user_annotation" and name.startswith("gloo:"):
        kernel = NCCL_KERNEL.get(name[5:], "ncclDevKernel_Generic")
        raw = GLOO.sub(lambda m: f'"cat":{m.group(1)}"kernel"{m.group(2)}"name":{m.group(3)}"{kernel}"', raw, count=1)
        stream = NCCL_STREAM
    if stream is None:
        return raw
    return PID_TID.sub(lambda m: f'"{m.group(1)}":{m.group(2)}{DEVICE if m.group(1) == "pid" else stream}', raw)


def load(path: Path, gpu: bool = False) -> Rank:
    """Split a trace into its header, each event's text (with the event parsed) and its tail; ``gpu``: each
    event rewritten as a GPU trace's (``as_gpu``)."""
    text = read_text(path)
    key = text.find('"traceEvents"')
    bracket = text.find("[", key)
    if key < 0 or bracket < 0:
        raise GrowError(f"{path} has no \"traceEvents\" array")
    decoder = json.JSONDecoder(parse_float=Decimal)
    ws = re.compile(r"\s*")
    raws, events, gaps = [], [], []
    pos = ws.match(text, bracket + 1).end()
    first = pos
    stop = pos
    while text[pos] != "]":
        event, stop = decoder.raw_decode(text, pos)
        raw = as_gpu(text[pos:stop], event) if gpu else text[pos:stop]
        raws.append(raw)
        events.append(json.loads(raw, parse_float=Decimal) if gpu else event)
        after = ws.match(text, stop).end()
        if text[after] == ",":
            nxt = ws.match(text, after + 1).end()
            gaps.append(text[stop:nxt])
            pos = nxt
        else:
            pos = after
    if not events:
        raise GrowError(f"{path} has no events")
    header = json.loads(text[:key].rstrip().rstrip(",") + "}")
    info = header.get("distributedInfo") or {}
    rank = info.get("rank") if isinstance(info.get("rank"), int) else -1
    separator = max(set(gaps), key=gaps.count) if gaps else ",\n  "
    if any(g.strip() != "," for g in gaps):
        raise GrowError(f"{path}: events are not separated by commas")
    return Rank(path, text[:first], separator, text[stop:], raws, events, rank, gaps)


def step_window(r: Rank) -> None:
    """The rank's window: its ProfilerStep#N annotations, and the ids' strides."""
    steps = [e for e in r.events if e.get("ph") == "X" and isinstance(e.get("name"), str) and STEP.match(e["name"])]
    if not steps:
        raise GrowError(f"{r.path} has no ProfilerStep#N annotation: record it with a torch.profiler schedule "
                        "and prof.step() in the loop")
    r.lo = min(Decimal(e["ts"]) for e in steps)
    r.hi = max(Decimal(e["ts"]) + Decimal(e.get("dur", 0)) for e in steps)
    numbers = [int(STEP.match(e["name"]).group(1)) for e in steps]
    r.steps = (min(numbers), max(numbers))
    r.end = max(Decimal(e["ts"]) + Decimal(e.get("dur", 0)) for e in r.events if in_window(r, e))
    biggest: dict[str, int] = {}
    for e in r.events:
        for key, value in [*e.items(), *((e.get("args") or {}).items() if isinstance(e.get("args"), dict) else ())]:
            if key in ID_KEYS and isinstance(value, int) and not isinstance(value, bool):
                group = STRIDE_GROUP.get(key, key)
                biggest[group] = max(biggest.get(group, 0), value)
    r.strides = {key: biggest.get(STRIDE_GROUP.get(key, key), 0) + 1 for key in ID_KEYS}


def in_window(r: Rank, e: dict) -> bool:
    ts = e.get("ts")
    return e.get("ph") != "M" and isinstance(ts, (int, Decimal)) and not isinstance(ts, bool) and r.lo <= ts <= r.hi


def changed(e: dict, k: int, span: int, step_stride: int, strides: dict[str, int]) -> dict:
    """Copy ``k`` of an in-window event, made on the parsed event (the check of the text's change)."""
    e = copy.deepcopy(e)
    e["ts"] = Decimal(e["ts"]) + k * span if isinstance(e["ts"], (int, Decimal)) else e["ts"]
    if isinstance(e.get("name"), str) and (m := STEP.match(e["name"])) and e.get("ph") == "X":
        e["name"] = f"ProfilerStep#{int(m.group(1)) + k * step_stride}"
    for holder in (e, e.get("args") if isinstance(e.get("args"), dict) else {}):
        for key in ID_KEYS:
            if isinstance(holder.get(key), int) and not isinstance(holder.get(key), bool):
                holder[key] += k * strides[key]
    return e


@dataclass
class Template:
    """Events' text with the numbers to change cut out: literal parts around integer slots."""

    literals: list[str] = field(default_factory=list)  # one more than the slots
    bases: list[int] = field(default_factory=list)
    strides: list[int] = field(default_factory=list)

    def add(self, raw: str, changes: dict[str, int], step_stride: int) -> None:
        """Append an event; ``changes``: key -> stride per copy (keys absent from the text are left)."""
        cuts: list[tuple[int, int, int, int]] = []  # start, end, base, stride
        for m in SLOT.finditer(raw):
            if m.group(1) in changes:
                cuts.append((m.start(3), m.end(3), int(m.group(3)), changes[m.group(1)]))
        if "name" in changes:
            for m in STEP_SLOT.finditer(raw):
                cuts.append((m.start(2), m.end(2), int(m.group(2)), step_stride))
        cuts.sort()
        at = 0
        if not self.literals:
            self.literals.append("")
        for start, end, base, stride in cuts:
            self.literals[-1] += raw[at:start]
            self.literals.append("")
            self.bases.append(base)
            self.strides.append(stride)
            at = end
        self.literals[-1] += raw[at:]

    def join(self, text: str) -> None:
        if not self.literals:
            self.literals.append("")
        self.literals[-1] += text

    def render(self, k: int) -> str:
        out = [self.literals[0]]
        for lit, base, stride in zip(self.literals[1:], self.bases, self.strides):
            out.append(str(base + k * stride))
            out.append(lit)
        return "".join(out)

    def formatter(self):
        """A function k -> text, one ``str.format`` call per block (the fast path for many copies)."""
        fmt = "{}".join(lit.replace("{", "{{").replace("}", "}}") for lit in self.literals)
        bases, strides = self.bases, self.strides
        if not bases:
            return lambda k: fmt.format()
        import numpy as np

        b, s = np.asarray(bases, np.int64), np.asarray(strides, np.int64)
        return lambda k: fmt.format(*(b + k * s).tolist())


def event_changes(r: Rank, span: int) -> dict[str, int]:
    return {"ts": span, "name": 0, **{key: r.strides[key] for key in ID_KEYS}}


def check(r: Rank, raw: str, event: dict, span: int, step_stride: int) -> None:
    """The text's change of ``raw`` at copy 1 and 3 is the parsed event's change, or a GrowError."""
    t = Template()
    t.add(raw, event_changes(r, span), step_stride)
    for k in (1, 3):
        got = json.loads(t.render(k), parse_float=Decimal)
        want = changed(event, k, span, step_stride, r.strides)
        if got != want:
            raise GrowError(f"{r.path}: cannot renumber this event in place (unusual layout): {raw[:200]}")


def plan(ranks: list[Rank]) -> tuple[int, int]:
    """The common span (whole microseconds) and step stride."""
    span = max(math.ceil(r.end - r.lo) for r in ranks) + 1
    step_stride = max(r.steps[1] for r in ranks) - min(r.steps[0] for r in ranks) + 1
    return span, step_stride


def layout(r: Rank, span: int, step_stride: int) -> list[tuple[str, Template]]:
    """Blocks of the output in the recorded order: ``once`` blocks (rendered at the last copy) and ``each``
    runs of in-window events (rendered at every copy); each event is followed by the text that followed
    it in the source, and the last event by the common separator (cut after the last copy, see
    ``write_blocks``)."""
    blocks: list[tuple[str, Template]] = []
    for i, (raw, e) in enumerate(zip(r.raws, r.events)):
        gap = r.gaps[i] if i < len(r.gaps) else r.separator
        if in_window(r, e):
            check(r, raw, e, span, step_stride)
            kind, changes = "each", event_changes(r, span)
        else:
            ts = e.get("ts")
            timed = isinstance(ts, (int, Decimal)) and not isinstance(ts, bool) and e.get("ph") != "M"
            if timed and ts > r.hi:
                kind, changes = "once", {"ts": span}  # after the steps: past the last copy
            elif timed and e.get("ph") == "X" and ts + Decimal(e.get("dur", 0)) >= r.hi:
                kind, changes = "once", {"dur": span}  # a span over the recording (the profiler's own)
            else:
                kind, changes = "once", {}
        if not blocks or blocks[-1][0] != kind:
            blocks.append((kind, Template()))
        blocks[-1][1].add(raw, changes, step_stride)
        blocks[-1][1].join(gap)
    return blocks


def write_blocks(f, r: Rank, blocks: list[tuple[str, Template]], copies: int) -> int:
    """Write the events' blocks to ``f`` (the last copy of the last block without its separator); bytes."""
    written = 0
    for b, (kind, t) in enumerate(blocks):
        last_block = b == len(blocks) - 1
        if kind == "once":
            texts = [t.render(copies - 1)]
        else:
            render = t.formatter()
            texts = (render(k) for k in range(copies))
        for k, text in enumerate(texts):
            if last_block and (kind == "once" or k == copies - 1):
                text = text[: len(text) - len(r.separator)]
            f.write(text)
            written += len(text.encode())
    return written


def grow_rank(src: Path, out: Path, copies: int, span: int, step_stride: int, gpu: bool = False) -> dict:
    """Write ``out``: the rank ``src`` grown to ``copies`` copies of its step window."""
    r = load(src, gpu)
    step_window(r)
    blocks = layout(r, span, step_stride)
    events_once = sum(1 for e in r.events if not in_window(r, e))
    events_each = len(r.events) - events_once
    tmp = out.with_name(out.name + ".part")
    with open(tmp, "w", encoding="utf-8", buffering=1 << 22) as f:
        f.write(r.prefix)
        write_blocks(f, r, blocks, copies)
        f.write(re.sub(r'("traceName":\s*)"(?:[^"\\]|\\.)*"', lambda m: m.group(1) + json.dumps(str(out)),
                       r.suffix))
    tmp.replace(out)
    return {"source": str(src), "file": str(out), "rank": r.rank, "bytes": out.stat().st_size,
            "events": events_once + copies * events_each, "events_per_copy": events_each,
            "steps": [r.steps[0], r.steps[0] + copies * step_stride - 1]}


def copy_bytes(r: Rank, span: int, step_stride: int, k: int) -> tuple[int, int]:
    """Bytes written once, and bytes of copy ``k`` of the window (ids grow digits with k)."""
    once = len(r.prefix.encode()) + len(r.suffix.encode())
    each = 0
    for kind, t in layout(r, span, step_stride):
        n = len(t.render(k).encode())
        if kind == "each":
            each += n
        else:
            once += n
    return once, each


def grow(src: Path, out: Path, total_mb: float, jobs: int | None = None, gpu: bool = False) -> dict:
    """Grow every rank trace in ``src`` into ``out`` so that the files total ``total_mb`` x 10^6 bytes
    (``gpu``: rewritten as GPU traces first, see ``as_gpu``)."""
    paths = find_traces(src)
    ranks = [load(p, gpu) for p in paths]
    for r in ranks:
        step_window(r)
    span, step_stride = plan(ranks)
    target = total_mb * 1e6
    copies = 1
    for _ in range(3):  # ids' digits grow with the copies: estimate at the middle copy, twice
        sizes = [copy_bytes(r, span, step_stride, copies // 2) for r in ranks]
        once, each = sum(s[0] for s in sizes), sum(s[1] for s in sizes)
        copies = max(1, math.ceil((target - once) / each))
    out.mkdir(parents=True, exist_ok=True)
    names = [out / (p.name[:-3] if p.name.endswith(".gz") else p.name) for p in paths]
    if len(set(names)) != len(names):
        raise GrowError(f"two sources in {src} would be written to one file")
    began = time.perf_counter()
    jobs = max(1, min(jobs or 2, len(paths)))
    # the largest ranks first, so that one process is not left with the biggest at the end
    order = sorted(range(len(paths)), key=lambda i: -paths[i].stat().st_size)
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {i: pool.submit(grow_rank, paths[i], names[i], copies, span, step_stride, gpu) for i in order}
        files = [futures[i].result() for i in range(len(paths))]
    summary = {"source": str(src), "total_mb": total_mb, "gpu_style": gpu, "copies": copies, "span_us": span,
               "step_stride": step_stride, "bytes": sum(f["bytes"] for f in files),
               "events": sum(f["events"] for f in files), "files": files,
               "seconds": round(time.perf_counter() - began, 1)}
    manifest(out).write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def manifest(out: Path) -> Path:
    """Where the summary of a grown folder is written: beside it, as the folder holds traces only (HTA
    reads every .json file in a folder as a trace)."""
    return out.parent / f"{out.name}.grown.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", type=Path, help="folder of recorded rank traces (.json / .json.gz)")
    parser.add_argument("out", type=Path, help="folder to write the grown traces into (same file names)")
    parser.add_argument("--total-mb", type=float, required=True, help="size of all the grown files together, MB")
    parser.add_argument("--jobs", type=int, default=2, help="ranks written at once (default 2)")
    parser.add_argument("--gpu-style", action="store_true",
                        help="rewrite the CPU recording as a GPU trace: operators as kernels on a stream, gloo's "
                             "transfers as NCCL kernels (a stand-in, see as_gpu)")
    args = parser.parse_args(argv)
    try:
        s = grow(args.src, args.out, args.total_mb, args.jobs, args.gpu_style)
    except GrowError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{len(s['files'])} rank(s) x {s['copies']} copies of the step window (span {s['span_us'] / 1e6:.3f} s): "
          f"{s['bytes'] / 1e6:,.1f} MB, {s['events']:,} events, in {s['seconds']} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
