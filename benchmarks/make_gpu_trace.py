"""Synthetic GPU traces of a data-parallel training run, one per rank, in Kineto's layout, at any size.

    .venv/bin/python benchmarks/make_gpu_trace.py OUT_DIR --total-mb 1000 [--ranks 4] [--layers 16] [--jobs 2]
        [--distinct 4]

No GPU recording large enough is at hand (and the small public ones are not to be copied), so this
writes traces of the shape ``torch.profiler`` (Kineto) writes for a DistributedDataParallel run on
GPUs with NCCL, from a model of one profiler step repeated: every figure a GPU import reads is there.

Each step of each rank, on the training thread (the backward on autograd's thread):

- ``ProfilerStep#N`` (``user_annotation``); a batch copied in (``aten::to`` ... ``cudaMemcpyAsync`` ->
  a ``gpu_memcpy`` HtoD on a copy stream of its own, 24) and the gradients zeroed
  (``Optimizer.zero_grad#SGD.zero_grad``: ``aten::zero_`` ... ``cudaMemsetAsync`` -> ``gpu_memset``s);
- the forward (``## forward ##``, ``DistributedDataParallel.forward``): per layer ``aten::linear`` ->
  ``aten::addmm`` -> ``cudaLaunchKernel`` -> a GEMM ``kernel`` on the compute stream (7), then
  ``aten::relu`` -> an elementwise kernel;
- the backward (``## backward ##``): per layer autograd's nodes (``autograd::engine::evaluate_function:
  AddmmBackward0``...) launching two GEMMs and an elementwise kernel, and every ``--bucket`` layers a
  gradient bucket all-reduced: ``record_param_comms`` (``Collective name``, ``In msg nelems``, ``dtype``,
  ``Process Group Ranks``...) and ``nccl:all_reduce``, launching an ``ncclDevKernel_AllReduce_Sum_f32_RING_LL``
  kernel with the same args on NCCL's stream (20), overlapping the backward's compute;
- the optimiser (``Optimizer.step#SGD.step``: ``aten::_foreach_add_`` -> ``multi_tensor_apply_kernel``s);
- ``[memory]`` instants (``Total Allocated`` on the GPU, ``Device Type`` 1).

Every runtime call carries a ``correlation`` id and its kernel the same one (and the ``ac2g`` flow pair
between them); ``gpu_user_annotation`` spans on the GPU's tracks name what its kernels ran for
(``DistributedDataParallel.forward``, ``## backward ##``, ``nccl:all_reduce``, ``Optimizer.step#SGD.step``).
As Kineto orders a file: the CPU's events of every step first, then the runtime calls and the GPU's
activities in launch order, then the GPU-side annotations, then the metadata and the profiler's span.
Kernels are queued behind each other per stream and start a few microseconds after their launch;
each rank's GPU runs a few percent slower than the one before (``rank`` x ``--spread``, 3 % by default), so the
ranks differ; ``--slow-rank R --slow-factor F`` plants one straggler, rank R's GPU F times slower besides.

By default each rank's all-reduce takes its own time (as if the ranks did not wait on each other); with
``--synchronised`` (implied by ``--slow-rank``) a collective ends on every rank at once, ``TRANSFER_NS`` after the
last rank reached it, as NCCL's ring does: the kernel on a rank that arrived early spends the difference waiting,
and the optimiser's kernels wait for the step's last all-reduce, as DistributedDataParallel's do. The arrivals
depend on the ends before them, so the ranks' steps are modelled again until nothing moves (a pass a collective
at most).

Each step's text is made once, with the numbers that change from step to step (times, ``External
id``, ``Ev Idx``, ``Sequence number``, ``correlation`` and flow ids, the step's number) cut out, and
written ``copies`` times (one ``str.format`` a step): a 10 GB run (4 ranks) takes about a minute.
The copies are chosen so that the files together come to ``--total-mb`` (10^6 bytes) within about
0.1 %. ``OUT_DIR.grown.json`` (beside the folder) records them, as ``make_large_trace.py`` does.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

T0_US = 1_000_000  # the first step's start, in µs of the trace's clock (baseTimeNanoseconds is added to it)
BASE_NS = 1790857026000000000
COMPUTE, NCCL, COPY = 7, 20, 24  # streams
LAUNCH_NS, QUEUE_NS = 6_000, 4_000  # a runtime call's length, and from its start to its kernel's earliest start
TRANSFER_NS = 300_000  # an all-reduce's own time once every rank has reached it (not scaled by a rank's slowness)
GEMM = "ampere_sgemm_128x64_tn"
RELU = ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar("
        "at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()"
        "() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, "
        "at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, "
        "at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::"
        "{lambda(float)#1}, at::detail::Array<char*, 2>)")
RELU_BACKWARD = ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
                 "threshold_kernel_impl<float>(at::TensorIteratorBase&, float, float)::{lambda(float, float)#1}, "
                 "at::detail::Array<char*, 3> >(int, at::native::(anonymous namespace)::threshold_kernel_impl<float>"
                 "(at::TensorIteratorBase&, float, float)::{lambda(float, float)#1}, at::detail::Array<char*, 3>)")
FOREACH = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
           "TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, "
           "std::plus<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::"
           "(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float)")
ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


@dataclass
class Slot:
    """A number that changes from step to step: ``base + k x stride`` in step ``k``."""

    base: int
    stride: str  # which of the step's strides (``Step.strides``)


@dataclass
class Text:
    """Text with slots (``str.format``'s ``{}``), the slots' bases and strides; its parts are joined once, in
    ``formatter`` (a step of 1,600 layers is 14 MB of text: added to one string it took minutes)."""

    literal: list[str] = field(default_factory=list)
    slots: list[Slot] = field(default_factory=list)

    def put(self, text: str) -> None:
        self.literal.append(text.replace("{", "{{").replace("}", "}}"))

    def slot(self, slot: Slot) -> None:
        self.literal.append("{}")
        self.slots.append(slot)

    def formatter(self, strides: dict[str, int]):
        """A function k -> the text of step ``k``."""
        fmt = "".join(self.literal)
        base = np.array([s.base for s in self.slots], np.int64)
        stride = np.array([strides[s.stride] for s in self.slots], np.int64)
        return lambda k: fmt.format(*(base + k * stride).tolist())


class Step:
    """One profiler step of one rank, as three texts in Kineto's order (the CPU's events, the runtime calls
    and the GPU's activities, the GPU-side annotations), and the strides of its numbers per step."""

    def __init__(self, rank: int, world: int, layers: int, bucket: int, slower: float | None = None,
                 ends: list[int] | None = None) -> None:
        self.rank, self.world = rank, world
        self.pid, self.tid, self.autograd_tid = 4000 + rank, 4000 + rank, 4100 + rank
        self.cpu, self.gpu, self.annotations = Text(), Text(), Text()
        self.external = self.ev_idx = self.sequence = self.correlation = self.events = 0
        self.cursor = 0  # the CPU thread's time in the step, ns
        self.streams = {COMPUTE: 0, NCCL: 0, COPY: 0}  # when each stream is next free, ns
        self.slower = 1 + 0.03 * rank if slower is None else slower
        self.ends = ends  # each collective's end on every rank (synchronised), else None: each its own
        self.arrivals: list[int] = []  # when this rank's GPU reached each collective (its kernel's start)
        self.model(layers, bucket)
        end = max(self.cursor, *self.streams.values())
        self.span_us = math.ceil(end / 1000) + 20  # the step's own length; the ranks' steps share the longest's
        self.strides = {"ts": self.span_us, "external": self.external, "ev": self.ev_idx, "seq": self.sequence,
                        "corr": self.correlation, "step": 1}

    def span(self, span_us: int) -> None:
        """Each step ``span_us`` after the one before (at least its own length)."""
        self.span_us = self.strides["ts"] = max(span_us, self.span_us)

    # -- writing events ------------------------------------------------------------------------------------

    def event(self, text: Text, head: dict, ts_ns: int | None, dur_ns: int | None, args: dict | None,
              ids: dict[str, str] | None = None, tail: dict | None = None) -> None:
        """An event in Kineto's layout: ``head``'s keys, its times, ``tail``'s keys, its args; ``ids``: keys whose
        values are slots (key -> stride)."""
        ids = ids or {}
        self.events += 1
        text.put("  {\n    ")
        for n, (key, value) in enumerate(head.items()):
            text.put((", " if n else "") + f'"{key}": ')
            if key in ids:
                text.slot(Slot(value, ids[key]))
            elif key == "name" and isinstance(value, tuple):  # ProfilerStep#N
                text.put('"' + value[0])
                text.slot(Slot(value[1], "step"))
                text.put('"')
            else:
                text.put(json.dumps(value))
        if ts_ns is not None:
            text.put(",\n    " if head.get("ph") == "X" else ", ")
            self.time(text, "ts", T0_US * 1000 + ts_ns)
            if dur_ns is not None:
                text.put(f', "dur": {dur_ns // 1000}.{dur_ns % 1000:03d}')
        if tail:
            text.put(",\n    " + ", ".join(f'"{key}": {json.dumps(value)}' for key, value in tail.items()))
        if args is not None:
            text.put(',\n    "args": {\n      ')
            for n, (key, value) in enumerate(args.items()):
                text.put((", " if n else "") + f'"{key}": ')
                if key in ids:
                    text.slot(Slot(value, ids[key]))
                else:
                    text.put(json.dumps(value))
            text.put("\n    }")
        text.put("\n  },\n")

    @staticmethod
    def time(text: Text, key: str, ns: int) -> None:
        text.put(f'"{key}": ')
        text.slot(Slot(ns // 1000, "ts"))
        text.put(f".{ns % 1000:03d}")

    def op(self, name: str, start: int, end: int, cat: str = "cpu_op", args: dict | None = None,
           tid: int | None = None, step: int | None = None) -> int:
        """A CPU event (operator or annotation) from ``start`` to ``end``; its External id."""
        self.external += 1
        self.ev_idx += 1
        head = {"ph": "X", "cat": cat, "name": (name, step) if step is not None else name, "pid": self.pid,
                "tid": tid or self.tid}
        body = {"External id": self.external, "Record function id": 0, **(args or {}), "Ev Idx": self.ev_idx}
        ids = {"External id": "external", "Ev Idx": "ev"}
        if cat == "cpu_op" and not name.startswith("autograd::"):
            self.sequence += 1
            body = {"External id": self.external, "Record function id": 0, "Sequence number": self.sequence,
                    "Fwd thread id": 0, **(args or {}), "Ev Idx": self.ev_idx}
            ids["Sequence number"] = "seq"
        self.event(self.cpu, head, start, end - start, body, ids)
        return self.external

    def launch(self, call: str, cat: str, name: str, stream: int, dur_ns: int, external: int,
               args: dict | None = None, after: int = 0, tid: int | None = None,
               until: int | None = None) -> tuple[int, int]:
        """A runtime call at the CPU's cursor on thread ``tid`` (the training thread's by default) and the GPU
        activity it launches (queued on ``stream``, not before ``after``; ending at ``until`` where given, else
        after its ``dur_ns`` on this rank's GPU); the activity's start and end."""
        self.correlation += 1
        corr = self.correlation
        at = self.cursor
        tid = tid or self.tid
        ids = {"correlation": "corr", "External id": "external"}
        self.event(self.gpu, {"ph": "X", "cat": "cuda_runtime", "name": call, "pid": self.pid, "tid": tid},
                   at, LAUNCH_NS, {"External id": external, "cbid": 211, "correlation": corr}, ids)
        self.event(self.gpu, {"ph": "s", "id": corr, "pid": self.pid, "tid": tid}, at, None, None, {"id": "corr"},
                   {"cat": "ac2g", "name": "ac2g"})
        start = max(at + QUEUE_NS, self.streams[stream], after)
        dur = int(dur_ns * self.slower) if until is None else max(until - start, 1_000)
        self.streams[stream] = start + dur
        body = {"External id": external, "queued": 0, "device": self.rank, "context": 1, "stream": stream,
                "correlation": corr, **(args or {})}
        self.event(self.gpu, {"ph": "X", "cat": cat, "name": name, "pid": self.rank, "tid": stream}, start, dur,
                   body, ids)
        self.event(self.gpu, {"ph": "f", "id": corr, "pid": self.rank, "tid": stream}, start, None, None,
                   {"id": "corr"}, {"cat": "ac2g", "name": "ac2g", "bp": "e"})
        self.cursor += LAUNCH_NS + 1_000
        return start, start + dur

    def kernel_op(self, names: list[str], kernel: str, dur_ns: int, stream: int = COMPUTE, cat: str = "kernel",
                  call: str = "cudaLaunchKernel", args: dict | None = None, tid: int | None = None,
                  op_args: dict | None = None, after: int = 0) -> tuple[int, int]:
        """Nested operators (outermost first), the innermost launching ``kernel``; the kernel's start and end."""
        begin = self.cursor
        self.cursor += 2_000 * len(names)
        external = self.external + len(names)  # the innermost operator's id (each op takes the next)
        launch_args = {"grid": [512, 1, 1], "block": [256, 1, 1], **(args or {})} if cat == "kernel" else args
        start, end = self.launch(call, cat, kernel, stream, dur_ns, external, launch_args, after, tid=tid)
        self.cursor += 1_000
        stop = self.cursor
        for depth, name in enumerate(names):  # the outer operator first, as Kineto writes them
            self.op(name, begin + 1_000 * depth, stop - 1_000 * depth, tid=tid,
                    args=op_args if depth == len(names) - 1 else None)
        self.cursor += 2_000
        return start, end

    def memory(self, total: int) -> None:
        self.event(self.cpu, {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": self.pid,
                              "tid": self.tid}, self.cursor, None,
                   {"Total Reserved": 8 << 30, "Total Allocated": total, "Bytes": 1 << 20, "Addr": 139_000_000_000,
                    "Device Type": 1, "Device Id": self.rank})

    def gpu_span(self, name: str, start: int, end: int, stream: int = COMPUTE) -> None:
        self.external += 1
        self.event(self.annotations, {"ph": "X", "cat": "gpu_user_annotation", "name": name, "pid": self.rank,
                                      "tid": stream}, start, end - start, {"External id": self.external},
                   {"External id": "external"})

    # -- the model ---------------------------------------------------------------------------------------------

    def model(self, layers: int, bucket: int) -> None:
        step_start = self.cursor
        self.cursor += 5_000
        self.kernel_op(["aten::to", "aten::_to_copy", "aten::copy_"], "Memcpy HtoD (Pageable -> Device)", 180_000,
                       COPY, "gpu_memcpy", "cudaMemcpyAsync", {"bytes": 8 << 20, "memory bandwidth (GB/s)": 46.6})
        self.memory(2 << 30)
        zero = self.cursor
        for _ in range(2):
            self.kernel_op(["aten::zero_", "aten::fill_"], "Memset (Device)", 3_000, cat="gpu_memset",
                           call="cudaMemsetAsync", args={"bytes": 1 << 20, "memory bandwidth (GB/s)": 350.0})
        self.op("Optimizer.zero_grad#SGD.zero_grad", zero, self.cursor, "user_annotation")
        forward = self.cursor
        first = last = None
        for layer in range(layers):
            s, e = self.kernel_op(["aten::linear", "aten::addmm"], GEMM, 40_000 + 5_000 * (layer % 5),
                                  op_args={"Input Dims": [[1024], [4096, 1024], [1024, 1024]]})
            first = s if first is None else first
            _, last = self.kernel_op(["aten::relu", "aten::clamp_min"], RELU, 6_000)
        self.op("DistributedDataParallel.forward", forward, self.cursor, "user_annotation")
        self.op("## forward ##", forward, self.cursor, "user_annotation")
        self.gpu_span("DistributedDataParallel.forward", first, last)
        self.memory(5 << 30)
        backward = self.cursor
        first = None
        for layer in reversed(range(layers)):
            s, _ = self.kernel_op(["autograd::engine::evaluate_function: ReluBackward0", "ReluBackward0",
                                   "aten::threshold_backward"], RELU_BACKWARD, 7_000, tid=self.autograd_tid)
            first = s if first is None else first
            self.kernel_op(["autograd::engine::evaluate_function: AddmmBackward0", "AddmmBackward0", "aten::mm"],
                           GEMM, 45_000, tid=self.autograd_tid)
            _, last = self.kernel_op(["aten::mm"], GEMM, 42_000, tid=self.autograd_tid)
            if layer % bucket == 0:
                self.all_reduce(last, 4 << 20)
        self.op("## backward ##", backward, self.cursor, "user_annotation")
        self.gpu_span("## backward ##", first, last)
        self.memory(3 << 30)
        update = self.cursor
        first = None
        for n in range(3):  # synchronised: the update waits for the gradients' all-reduces, as DDP's does
            s, last = self.kernel_op(["aten::_foreach_add_"], FOREACH, 25_000,
                                     after=self.streams[NCCL] if self.ends is not None and n == 0 else 0)
            first = s if first is None else first
        self.op("Optimizer.step#SGD.step", update, self.cursor, "user_annotation")
        self.gpu_span("Optimizer.step#SGD.step", first, last)
        self.cursor += 5_000
        self.op("ProfilerStep#", step_start, self.cursor, "user_annotation", step=1)

    def all_reduce(self, after: int, elements: int) -> None:
        """A gradient bucket all-reduced: ``record_param_comms`` around ``nccl:all_reduce``, which launches the
        NCCL kernel (with the call's args) on NCCL's stream once the bucket's gradients exist (``after``)."""
        comm = {"Collective name": "allreduce", "In msg nelems": elements, "Out msg nelems": elements,
                "Group size": self.world, "dtype": "Float", "In split size": "[]", "Out split size": "[]",
                "Process Group Name": "0", "Process Group Description": "default_pg",
                "Process Group Ranks": json.dumps(list(range(self.world)))}
        begin = self.cursor
        self.cursor += 3_000
        inner = self.cursor
        ready = max(self.cursor + QUEUE_NS, self.streams[NCCL], after)  # the kernel's start: this rank arrives
        n = len(self.arrivals)
        self.arrivals.append(ready)
        until = None if self.ends is None else max(self.ends[n] if n < len(self.ends) else 0, ready + 1_000)
        start, end = self.launch("cudaLaunchKernel", "kernel", ALL_REDUCE, NCCL, TRANSFER_NS, self.external + 2,
                                 {"grid": [8, 1, 1], "block": [544, 1, 1], **comm}, after, self.autograd_tid, until)
        self.cursor += 1_000
        self.op("record_param_comms", begin, self.cursor + 1_000, args=comm, tid=self.autograd_tid)
        self.op("nccl:all_reduce", inner, self.cursor, "user_annotation", tid=self.autograd_tid)
        self.cursor += 2_000
        self.gpu_span("nccl:all_reduce", start, end, NCCL)


def header(rank: int, world: int) -> str:
    """The file up to its first event: Kineto's header keys, then ``"traceEvents": [``."""
    device = {"id": rank, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85_097_971_712, "computeMajor": 8,
              "computeMinor": 0, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
              "regsPerBlock": 65536, "warpSize": 32, "sharedMemPerBlock": 49152, "numSms": 108}
    return ('{\n  "schemaVersion": 1,\n  "deviceProperties": [\n    ' + json.dumps(device) + "\n  ],\n"
            '  "distributedInfo": ' + json.dumps({"backend": "nccl", "rank": rank, "world_size": world}) + ",\n"
            '  "record_shapes": 1,\n  "with_stack": 0,\n'
            f'  "baseTimeNanoseconds": {BASE_NS},\n  "traceEvents": [\n')


def trailer(step: Step, copies: int, out: Path) -> str:
    """After the steps: the metadata, the profiler's own span over the run, and ``traceName``."""
    end_us = T0_US + copies * step.span_us
    meta = [{"name": "process_name", "ph": "M", "ts": T0_US, "pid": step.pid, "tid": 0, "args": {"name": "python"}},
            {"name": "thread_name", "ph": "M", "ts": T0_US, "pid": step.pid, "tid": step.tid,
             "args": {"name": "thread 1 (python)"}},
            {"name": "thread_name", "ph": "M", "ts": T0_US, "pid": step.pid, "tid": step.autograd_tid,
             "args": {"name": "thread 2 (pt_autograd_0)"}},
            {"name": "process_name", "ph": "M", "ts": T0_US, "pid": step.rank, "tid": 0, "args": {"name": "python"}},
            *({"name": "thread_name", "ph": "M", "ts": T0_US, "pid": step.rank, "tid": stream,
               "args": {"name": f"stream {stream}"}} for stream in (COMPUTE, NCCL, COPY)),
            {"ph": "X", "cat": "Trace", "ts": T0_US - 100, "dur": end_us - T0_US + 200, "pid": "Spans",
             "tid": "PyTorch Profiler", "name": "PyTorch Profiler (0)", "args": {"Op count": 0}}]
    body = ",\n".join("  " + json.dumps(e) for e in meta)
    return body + f'\n  ],\n  "traceName": {json.dumps(str(out))}\n}}\n'


def write_rank(out: Path, rank: int, world: int, copies: int, layers: int, bucket: int, span_us: int,
               slower: float | None = None, ends: list[int] | None = None) -> dict:
    """Write rank ``rank``'s trace of ``copies`` steps, each ``span_us`` after the one before, to ``out``; its
    summary (``slower`` and ``ends``: ``Step``'s)."""
    step = Step(rank, world, layers, bucket, slower, ends)
    step.span(span_us)
    tmp = out.with_name(out.name + ".part")
    written = 0
    with open(tmp, "w", encoding="utf-8", buffering=1 << 22) as f:
        for text in (header(rank, world),):
            f.write(text)
            written += len(text)
        for section in (step.cpu, step.gpu, step.annotations):
            render = section.formatter(step.strides)
            for k in range(copies):
                text = render(k)
                f.write(text)
                written += len(text)
        text = trailer(step, copies, out)
        f.write(text)
    tmp.replace(out)
    return {"file": str(out), "rank": rank, "bytes": out.stat().st_size, "events": copies * step.events + 8,
            "kernels": copies * step.correlation, "steps": copies}


def step_bytes(step: Step, k: int) -> int:
    """Bytes of step ``k`` (ids grow digits with k)."""
    return sum(len(t.formatter(step.strides)(k)) for t in (step.cpu, step.gpu, step.annotations))


def slowness(ranks: int, spread: float = 0.03, slow_rank: int | None = None, slow_factor: float = 1.5) -> list[float]:
    """Each rank's GPU's time for a kernel over rank 0's: ``1 + rank x spread``, times ``slow_factor`` on
    ``slow_rank``."""
    return [(1 + spread * r) * (slow_factor if r == slow_rank else 1.0) for r in range(ranks)]


def modelled(ranks: int, layers: int, bucket: int, slower: list[float],
             synchronised: bool) -> tuple[list[Step], list[int] | None]:
    """Every rank's step, and (synchronised) each collective's end on every rank: ``TRANSFER_NS`` after its last
    arrival, modelled again until the arrivals stop moving."""
    steps = [Step(r, ranks, layers, bucket, slower[r]) for r in range(ranks)]
    if not synchronised:
        return steps, None
    ends: list[int] = []
    for _ in range(len(steps[0].arrivals) + 1):
        arrived = np.array([s.arrivals for s in steps], np.int64)
        now = (arrived.max(axis=0) + TRANSFER_NS).tolist()
        if now == ends:
            break
        ends = now
        steps = [Step(r, ranks, layers, bucket, slower[r], ends) for r in range(ranks)]
    return steps, ends


def make(out: Path, total_mb: float, ranks: int = 4, layers: int = 16, bucket: int = 4,
         jobs: int | None = None, spread: float = 0.03, slow_rank: int | None = None, slow_factor: float = 1.5,
         synchronised: bool = False) -> dict:
    """Write ``ranks`` rank traces into ``out`` totalling ``total_mb`` x 10^6 bytes; the summary (also written
    to ``out``'s manifest). ``spread``, ``slow_rank``, ``slow_factor``: ``slowness``'s; ``synchronised`` (implied
    by ``slow_rank``): the collectives end on every rank at once (``modelled``)."""
    synchronised = synchronised or slow_rank is not None
    slower = slowness(ranks, spread, slow_rank, slow_factor)
    steps, ends = modelled(ranks, layers, bucket, slower, synchronised)
    span_us = max(s.span_us for s in steps)  # one for every rank, so that the ranks stay aligned step after step
    for s in steps:
        s.span(span_us)
    target = total_mb * 1e6
    once = sum(len(header(r, ranks)) + len(trailer(s, 1, out / f"rank{r}.json")) for r, s in enumerate(steps))
    copies = 1
    for _ in range(3):  # ids' digits grow with the copies: estimate at the middle copy, twice
        each = sum(step_bytes(s, copies // 2) for s in steps)
        copies = max(1, math.ceil((target - once) / each))
    out.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, min(jobs or 2, ranks))) as pool:
        futures = [pool.submit(write_rank, out / f"rank{r}.json", r, ranks, copies, layers, bucket, span_us,
                               slower[r], ends) for r in range(ranks)]
        files = [f.result() for f in futures]
    summary = {"source": "make_gpu_trace", "total_mb": total_mb, "gpu_style": "synthetic", "ranks": ranks,
               "layers": layers, "bucket": bucket, "copies": copies, "span_us": span_us, "spread": spread,
               "slow_rank": slow_rank, "slow_factor": slow_factor if slow_rank is not None else None,
               "synchronised": synchronised,
               "bytes": sum(f["bytes"] for f in files), "events": sum(f["events"] for f in files),
               "kernels": sum(f["kernels"] for f in files), "files": files,
               "seconds": round(time.perf_counter() - began, 1)}
    manifest(out).write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def make_copies(out: Path, total_mb: float, ranks: int, distinct: int = 4, layers: int = 16, bucket: int = 4,
                jobs: int | None = None) -> dict:
    """``ranks`` rank traces in ``out`` totalling ``total_mb``: ``distinct`` ranks written (``make``), every rank r a
    copy of rank r % ``distinct``, each file's ``distributedInfo`` naming its rank in a world of ``ranks``. A rank's
    step then has the same size whatever the world (``make``'s collectives list every rank of theirs: at thousands
    of ranks a step is mostly those lists), so the same total cut into more ranks is more, smaller ranks."""
    summary = make(out, total_mb * distinct / ranks, distinct, layers, bucket, jobs)
    texts = {k: (out / f"rank{k}.json").read_text(encoding="utf-8") for k in range(distinct)}
    files = []
    for r in range(ranks):
        k = r % distinct
        was = json.dumps({"backend": "nccl", "rank": k, "world_size": distinct})
        text = texts[k].replace(was, json.dumps({"backend": "nccl", "rank": r, "world_size": ranks}), 1)
        (out / f"rank{r}.json").write_text(text, encoding="utf-8")
        files.append({**summary["files"][k], "file": str(out / f"rank{r}.json"), "rank": r,
                      "bytes": (out / f"rank{r}.json").stat().st_size})
    summary.update(total_mb=total_mb, ranks=ranks, distinct=distinct, files=files,
                   **{key: sum(f[key] for f in files) for key in ("bytes", "events", "kernels")})
    manifest(out).write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def manifest(out: Path) -> Path:
    """The summary's file, beside the folder (which holds traces only, as HTA reads every .json in it)."""
    return out.parent / f"{out.name}.grown.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder to write rank<r>.json into")
    parser.add_argument("--total-mb", type=float, required=True, help="size of all the files together, MB")
    parser.add_argument("--ranks", type=int, default=4, help="ranks (files), default 4")
    parser.add_argument("--layers", type=int, default=16, help="layers of the model, default 16")
    parser.add_argument("--bucket", type=int, default=4, help="layers per all-reduced gradient bucket, default 4")
    parser.add_argument("--jobs", type=int, default=2, help="ranks written at once (default 2)")
    parser.add_argument("--spread", type=float, default=0.03, help="each rank's GPU this much slower than the one "
                        "before (default 0.03)")
    parser.add_argument("--slow-rank", type=int, help="plant a straggler: this rank's GPU --slow-factor slower")
    parser.add_argument("--slow-factor", type=float, default=1.5, help="the straggler's slowness (default 1.5)")
    parser.add_argument("--synchronised", action="store_true", help="collectives end on every rank at once, after "
                        "the last rank arrives (implied by --slow-rank)")
    parser.add_argument("--distinct", type=int, help="ranks written; the others copies of them, each naming its "
                                                     "rank (make_copies): a step's size then whatever the ranks")
    args = parser.parse_args(argv)
    if args.distinct and args.distinct < args.ranks:
        if args.slow_rank is not None or args.synchronised or args.spread != 0.03:
            parser.error("--distinct makes copies of the ranks it writes: it takes none of --spread, --slow-rank, "
                         "--synchronised")
        s = make_copies(args.out, args.total_mb, args.ranks, args.distinct, args.layers, args.bucket, args.jobs)
    else:
        s = make(args.out, args.total_mb, args.ranks, args.layers, args.bucket, args.jobs, args.spread, args.slow_rank,
                 args.slow_factor, args.synchronised)
    print(f"{s['ranks']} rank(s) x {s['copies']:,} steps ({s['span_us'] / 1e3:.3f} ms each): "
          f"{s['bytes'] / 1e6:,.1f} MB, {s['events']:,} events, {s['kernels']:,} GPU activities, "
          f"in {s['seconds']} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
