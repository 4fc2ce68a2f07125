"""Record real PyTorch profiler traces of small distributed training runs on the CPU (gloo).

``record(kind, out_dir)`` spawns 2 to 4 processes, one per rank, each of which trains a small model
under ``torch.profiler.profile`` and writes its Chrome trace to ``out_dir/rank{r}.json``; the parent
then writes ``out_dir/meta.json``, what was run. The kinds:

``gpipe``        ``ScheduleGPipe``, 4 ranks = 4 stages.
``1f1b``         ``Schedule1F1B``, 4 ranks = 4 stages, ``with_stack=True`` (Python function events).
``interleaved``  ``ScheduleInterleaved1F1B``, 2 ranks x 2 stages (stage s on rank s % 2).
``loopedbfs``    ``ScheduleLoopedBFS``, 2 ranks x 2 stages (stage s on rank s % 2).
``ddp``          ``DistributedDataParallel``, 2 ranks.
``fsdp``         FSDP2 (``torch.distributed.fsdp.fully_shard``), 2 ranks.

The model is a stack of blocks named ``layers.0``, ``layers.1``, ... (``block="linear"``: a ``Linear`` then a
ReLU each; ``block="transformer"``: an ``nn.TransformerEncoderLayer`` each, on sequences of ``SEQ`` tokens).
In the pipeline kinds every stage holds ``layers_per_stage`` consecutive blocks, except the heavy
stage, which holds three times as many, so it is the bottleneck. One training step runs first as a
warm-up (the pipeline's set-up: P2P warm-up and shape inference); the profiler's schedule
(``wait=0, warmup=1, active=steps``) records the ``steps`` steps after it, each inside a
``ProfilerStep#k`` annotation (k = 1 .. steps).

``plain_steps=P`` (P > 0) times P steps without the profiler first: the profiler's schedule becomes
``wait=K + P, warmup=1, active=steps`` (``plain_skip=K`` untimed steps, 1 by default, the warm-up; then P
steps in its wait phase, timed by ``popvision_py.importer.plain_steps.PlainSteps``, which writes them into
each rank's trace; then one step in its warmup phase), and ``plain_after=N`` times N more steps after the
profiler has stopped. ``benchmarks/replay_fidelity.py`` warms up with K = 5, as ``PlainSteps`` does by
default: a process's first steps are not its steady state.
Both go to ``meta.json`` (``plain_step_ns``, ``plain_after_ns``: per rank, per step), the rank's
loop period from one step's end to the next's, as a user times a run.

CLI: ``python -m tests.traces.record KIND OUT_DIR [--steps N] [--micro-batches N] [--heavy-stage S]``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.pipelining import (PipelineStage, Schedule1F1B, ScheduleGPipe,
                                          ScheduleInterleaved1F1B, ScheduleLoopedBFS)
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile, schedule

from popvision_py.importer.plain_steps import PlainSteps

KINDS = ("gpipe", "1f1b", "interleaved", "loopedbfs", "ddp", "fsdp")
PIPELINE_KINDS = ("gpipe", "1f1b", "interleaved", "loopedbfs")
WORLD_SIZE = {"gpipe": 4, "1f1b": 4, "interleaved": 2, "loopedbfs": 2, "ddp": 2, "fsdp": 2}
STAGES_PER_RANK = {"gpipe": 1, "1f1b": 1, "interleaved": 2, "loopedbfs": 2}
SCHEDULE_CLASS = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B", "interleaved": "ScheduleInterleaved1F1B",
                  "loopedbfs": "ScheduleLoopedBFS"}
WITH_STACK = {"gpipe": False, "1f1b": True, "interleaved": False, "loopedbfs": False, "ddp": False, "fsdp": False}
DEFAULT_HEAVY_STAGE = 2
DEFAULT_MICRO_BATCHES = 8
HEAVY_FACTOR = 4

BLOCKS = ("linear", "transformer")
WIDTH = 512             # every block is Linear(WIDTH, WIDTH) + ReLU
MICRO_BATCH_SIZE = 64   # rows per micro-batch (pipeline kinds): enough that the matmuls, not Python, set a stage's time
LAYERS_PER_STAGE = 2    # blocks on an ordinary stage; the heavy stage has HEAVY_FACTOR times as many
D_MODEL, HEADS, FF = 128, 4, 512  # a transformer block: nn.TransformerEncoderLayer(D_MODEL, HEADS, FF)
SEQ, SEQUENCES = 32, 4  # a transformer micro-batch: SEQUENCES sequences of SEQ tokens
DP_LAYERS = 4           # blocks of the ddp / fsdp model
DP_BATCH = 64           # rows per rank per step (ddp / fsdp)
DDP_BUCKET_CAP_MB = 0.25  # small buckets, so one backward makes several all-reduces
WARMUP_STEPS = 1
# Imported once by the fork server, so the ranks (forked from it) start at once. torch._inductor.config
# matters: the profiler imports it on start (torch/profiler/profiler.py, prepare_trace), 1.5 s a process
# on its own, 6 s with four ranks importing at once on two cores. This module is left out when it runs
# as __main__ (python -m), where each rank runs it again as its main module.
PRELOAD = ["torch", "torch.distributed", "torch.distributed.pipelining", "torch.distributed.fsdp",
           "torch.nn.parallel", "torch.profiler", "torch._inductor.config"]
if __name__ != "__main__":
    PRELOAD.append(__name__)
TIMEOUT_S = 120.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def plan(kind: str, *, heavy_stage: int | None = DEFAULT_HEAVY_STAGE,
         micro_batches: int = DEFAULT_MICRO_BATCHES, steps: int = 2,
         with_stack: bool | None = None, world_size: int | None = None, block: str = "linear",
         plain_steps: int = 0, plain_after: int = 0, plain_skip: int = WARMUP_STEPS) -> dict:
    """What ``record`` will run: the contents of ``meta.json`` less the timings. ``world_size``: the
    ranks of a pipeline kind (default ``WORLD_SIZE``; each rank holds ``STAGES_PER_RANK`` stages);
    ``plain_skip``: the unprofiled steps run before the ``plain_steps`` are timed (the process warming up)."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; one of {', '.join(KINDS)}")
    if block not in BLOCKS or (block != "linear" and kind not in PIPELINE_KINDS):
        raise ValueError(f"block is one of {', '.join(BLOCKS)} (transformer: the pipeline kinds)")
    if steps < 1 or plain_steps < 0 or plain_after < 0 or plain_skip < 1:
        raise ValueError("steps must be at least 1, plain_steps and plain_after at least 0, plain_skip at least 1")
    wait = plain_skip + plain_steps if plain_steps else 0
    first = wait + WARMUP_STEPS  # the first recorded step's number
    world = WORLD_SIZE[kind]
    if world_size is not None:
        if kind not in PIPELINE_KINDS or world_size < 2:
            raise ValueError("world_size applies to the pipeline kinds, at least 2 ranks")
        world = world_size
    meta = {
        "kind": kind,
        "world_size": world,
        "backend": "gloo",
        "steps": steps,
        "warmup_steps": WARMUP_STEPS,
        "plain_steps": plain_steps,
        "plain_after": plain_after,
        "plain_skip": plain_skip if plain_steps else 0,
        "profiler_schedule": {"wait": wait, "warmup": WARMUP_STEPS, "active": steps, "repeat": 1},
        "profiled_step_annotations": [f"ProfilerStep#{k}" for k in range(first, first + steps)],
        "with_stack": WITH_STACK[kind] if with_stack is None else bool(with_stack),
        "record_shapes": True,
        "profile_memory": True,
        "block": block,
        "width": WIDTH if block == "linear" else D_MODEL,
        "threads_per_rank": 1,
    }
    if kind in PIPELINE_KINDS:
        n_stages = world * STAGES_PER_RANK[kind]
        if heavy_stage is not None and not 0 <= heavy_stage < n_stages:
            raise ValueError(f"heavy_stage must be in 0..{n_stages - 1} or None")
        if micro_batches < 1:
            raise ValueError("micro_batches must be at least 1")
        if kind == "1f1b" and micro_batches < n_stages:
            raise ValueError(f"Schedule1F1B needs micro_batches >= stages ({n_stages})")
        if kind == "interleaved":
            rounds = max(1, micro_batches // world)
            if micro_batches % rounds:
                raise ValueError("ScheduleInterleaved1F1B needs micro_batches % max(1, micro_batches // ranks) == 0")
        stage_layers, next_layer = {}, 0
        for s in range(n_stages):
            n = LAYERS_PER_STAGE * (HEAVY_FACTOR if s == heavy_stage else 1)
            stage_layers[s] = [f"layers.{i}" for i in range(next_layer, next_layer + n)]
            next_layer += n
        stage_to_rank = {s: s % world for s in range(n_stages)}  # "loop" style, as torch maps stages
        meta.update({
            "schedule": SCHEDULE_CLASS[kind],
            "num_stages": n_stages,
            "stage_to_rank": stage_to_rank,
            "rank_stages": {r: [s for s in range(n_stages) if stage_to_rank[s] == r] for r in range(world)},
            "micro_batches": micro_batches,
            "micro_batch_size": MICRO_BATCH_SIZE if block == "linear" else SEQUENCES,
            "batch_size": (MICRO_BATCH_SIZE if block == "linear" else SEQUENCES) * micro_batches,
            "heavy_stage": heavy_stage,
            "heavy_factor": HEAVY_FACTOR,
            "stage_layers": stage_layers,
            "loss": "mse_loss",
            "optimizer": "SGD(lr=0.01)",
        })
    else:
        meta.update({
            "schedule": None,
            "num_stages": None,
            "stage_to_rank": None,
            "micro_batches": None,
            "heavy_stage": None,
            "batch_size_per_rank": DP_BATCH,
            "layers": [f"layers.{i}" for i in range(DP_LAYERS)],
            "loss": "mse_loss",
            "optimizer": "SGD(lr=0.01)",
        })
        if kind == "ddp":
            meta["ddp_bucket_cap_mb"] = DDP_BUCKET_CAP_MB
        else:
            meta["fsdp"] = "fully_shard (FSDP2) on each block, then on the root"
    return meta


# ----------------------------------------------------------------------------- the ranks


class Block(nn.Module):
    """One block of the model, ``layers.N``: a ``Linear(WIDTH, WIDTH)`` then a ReLU."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        return self.fc(x).relu()


def _transformer_block() -> nn.Module:
    """One block ``layers.N`` of the transformer model: an encoder layer (attention, then the feed-forward)."""
    return nn.TransformerEncoderLayer(D_MODEL, HEADS, FF, dropout=0.0, batch_first=True)


class Stage(nn.Module):
    """The blocks ``names`` (``layers.N``) of one pipeline stage, held as ``self.layers[N]`` so their
    parameters are named ``layers.N.fc.weight`` as in the whole model."""

    def __init__(self, names: list[str], block: str = "linear"):
        super().__init__()
        make = Block if block == "linear" else _transformer_block
        self.layers = nn.ModuleDict({n.split(".", 1)[1]: make() for n in names})

    def forward(self, x):
        for layer in self.layers.values():
            x = layer(x)
        return x


class Model(nn.Module):
    """The ddp / fsdp model: ``layers.0`` .. ``layers.{n-1}``."""

    def __init__(self, n: int):
        super().__init__()
        self.layers = nn.ModuleList(Block() for _ in range(n))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def _data(step: int, rows: int, block: str = "linear"):
    g = torch.Generator().manual_seed(1000 + step)
    shape = (rows, WIDTH) if block == "linear" else (rows, SEQ, D_MODEL)
    return torch.randn(*shape, generator=g), torch.randn(*shape, generator=g)


def _pipeline_runner(meta: dict, rank: int):
    n_stages = meta["num_stages"]
    my_stages = meta["rank_stages"][rank]
    modules, stages = [], []
    for s in my_stages:
        torch.manual_seed(s)
        mod = Stage(meta["stage_layers"][s], meta.get("block", "linear"))
        modules.append(mod)
        stages.append(PipelineStage(mod, s, n_stages, torch.device("cpu")))
    n_mb = meta["micro_batches"]
    if meta["kind"] == "gpipe":
        sched = ScheduleGPipe(stages[0], n_mb, loss_fn=F.mse_loss)
    elif meta["kind"] == "1f1b":
        sched = Schedule1F1B(stages[0], n_mb, loss_fn=F.mse_loss)
    elif meta["kind"] == "loopedbfs":
        sched = ScheduleLoopedBFS(stages, n_mb, loss_fn=F.mse_loss)
    else:
        sched = ScheduleInterleaved1F1B(stages, n_mb, loss_fn=F.mse_loss)
    params = [p for m in modules for p in m.parameters()]
    opt = torch.optim.SGD(params, lr=0.01)
    has_first = 0 in my_stages
    has_last = n_stages - 1 in my_stages

    def step(k: int) -> None:
        x, y = _data(k, meta["batch_size"], meta.get("block", "linear"))
        args = (x,) if has_first else ()
        kwargs = {"target": y, "losses": []} if has_last else {}
        sched.step(*args, **kwargs)
        opt.step()
        opt.zero_grad()

    return step


def _dp_runner(meta: dict, rank: int):
    torch.manual_seed(0)
    model = Model(DP_LAYERS)
    if meta["kind"] == "ddp":
        model = DistributedDataParallel(model, bucket_cap_mb=DDP_BUCKET_CAP_MB)
    else:
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        for layer in model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(k: int) -> None:
        x, y = _data(k * 16 + rank, DP_BATCH)
        F.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()

    return step


def _rank_main(rank: int, meta: dict, port: int, out_dir: str) -> None:
    """One rank: join the group, train under the profiler, write ``rank{rank}.json``."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(meta["world_size"]))
    torch.set_num_threads(meta["threads_per_rank"])
    dist.init_process_group("gloo", rank=rank, world_size=meta["world_size"],
                            timeout=timedelta(seconds=TIMEOUT_S))
    try:
        step = (_pipeline_runner if meta["kind"] in PIPELINE_KINDS else _dp_runner)(meta, rank)
        path = Path(out_dir) / f"rank{rank}.json"
        plan_ = meta["profiler_schedule"]
        n_steps = plan_["wait"] + plan_["warmup"] + plan_["active"]
        with profile(
            activities=[ProfilerActivity.CPU],
            schedule=schedule(wait=plan_["wait"], warmup=plan_["warmup"], active=plan_["active"], repeat=1),
            on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
            record_shapes=True,
            profile_memory=True,
            with_stack=meta["with_stack"],
        ) as prof:
            timer = PlainSteps(prof, skip=meta["plain_skip"] or meta["warmup_steps"])
            for k in range(n_steps):
                step(k)
                timer.step()
        dist.barrier()
        after = []
        last = time.perf_counter_ns()
        for k in range(meta["plain_after"]):  # the profiler stopped: the run as a user runs it
            step(n_steps + k)
            now = time.perf_counter_ns()
            after.append(now - last)
            last = now
        dist.barrier()
        (Path(out_dir) / f"rank{rank}.plain").write_text(json.dumps({"before": timer.step_ns, "after": after}))
    finally:
        dist.destroy_process_group()


# ----------------------------------------------------------------------------- the parent


def _spawn(meta: dict, out_dir: Path, timeout_s: float) -> None:
    port = _free_port()
    mp.set_forkserver_preload(PRELOAD)
    ctx = mp.start_processes(_rank_main, args=(meta, port, str(out_dir)), nprocs=meta["world_size"],
                             join=False, start_method="forkserver")
    deadline = time.monotonic() + timeout_s
    try:
        while not ctx.join(timeout=max(0.1, min(1.0, deadline - time.monotonic()))):
            if time.monotonic() > deadline:
                raise TimeoutError(f"recording {meta['kind']} took over {timeout_s:.0f} s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
                p.join()


def record(kind: str, out_dir: Path, *, heavy_stage: int | None = DEFAULT_HEAVY_STAGE,
           micro_batches: int = DEFAULT_MICRO_BATCHES, steps: int = 2,
           with_stack: bool | None = None, timeout_s: float = TIMEOUT_S,
           world_size: int | None = None, block: str = "linear", plain_steps: int = 0,
           plain_after: int = 0, plain_skip: int = WARMUP_STEPS) -> list[Path]:
    """Record ``kind`` (one of ``KINDS``) into ``out_dir``: ``rank{r}.json`` per rank and ``meta.json``.

    ``heavy_stage`` and ``micro_batches`` apply to the pipeline kinds only (``heavy_stage=None``: all
    stages alike); ``steps`` profiled training steps follow one unprofiled warm-up step;
    ``with_stack=None`` takes the kind's default (True for ``1f1b`` only). Returns the rank files in
    rank order. Raises if a rank fails or the whole run takes over ``timeout_s``. The ranks are
    forked from a fork server (``multiprocessing``'s forkserver), so the caller's main module must be
    importable: not ``python -`` or ``python -c``. ``meta.json`` keys that are stage or rank numbers
    are strings (JSON).
    """
    meta = plan(kind, heavy_stage=heavy_stage, micro_batches=micro_batches, steps=steps,
                with_stack=with_stack, world_size=world_size, block=block, plain_steps=plain_steps,
                plain_after=plain_after, plain_skip=plain_skip)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"rank{r}.json" for r in range(meta["world_size"])]
    for p in paths:
        p.unlink(missing_ok=True)
    start = time.perf_counter()
    for attempt in range(3):
        try:
            _spawn(meta, out_dir, timeout_s)
            break
        except mp.ProcessRaisedException as exc:  # the free port was taken before rank 0 bound it
            if attempt == 2 or "address already in use" not in str(exc).lower():
                raise
    meta["wall_s"] = round(time.perf_counter() - start, 2)
    meta["torch_version"] = torch.__version__
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise RuntimeError(f"recording {kind}: no trace written for {', '.join(missing)}")
    plain = [json.loads(p.read_text()) for p in (out_dir / f"rank{r}.plain" for r in range(meta["world_size"]))]
    for r in range(meta["world_size"]):
        (out_dir / f"rank{r}.plain").unlink()
    meta["plain_step_ns"] = [p["before"] for p in plain]
    meta["plain_after_ns"] = [p["after"] for p in plain]
    (out_dir / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.traces.record", description=__doc__.split("\n")[0])
    ap.add_argument("kind", choices=KINDS)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--micro-batches", type=int, default=DEFAULT_MICRO_BATCHES)
    ap.add_argument("--heavy-stage", type=lambda s: None if s.lower() == "none" else int(s),
                    default=DEFAULT_HEAVY_STAGE, help="a stage index, or 'none'")
    ap.add_argument("--with-stack", choices=("yes", "no"), default=None)
    ap.add_argument("--world-size", type=int, default=None, help="ranks of a pipeline kind")
    ap.add_argument("--block", choices=BLOCKS, default="linear")
    ap.add_argument("--plain-steps", type=int, default=0, help="steps timed without the profiler, before it")
    ap.add_argument("--plain-after", type=int, default=0, help="steps timed without the profiler, after it")
    a = ap.parse_args(argv)
    ws = None if a.with_stack is None else a.with_stack == "yes"
    paths = record(a.kind, a.out_dir, heavy_stage=a.heavy_stage, micro_batches=a.micro_batches,
                   steps=a.steps, with_stack=ws, world_size=a.world_size, block=a.block,
                   plain_steps=a.plain_steps, plain_after=a.plain_after)
    meta = json.loads((a.out_dir / "meta.json").read_text())
    for p in paths:
        print(f"{p}  {p.stat().st_size:,} bytes")
    print(f"{a.kind}: {meta['world_size']} ranks in {meta['wall_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
