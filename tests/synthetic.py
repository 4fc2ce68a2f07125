"""Hand-checkable profiles, written through ``ProfileWriter``, for the analysis, CLI and dashboard tests.

``write_pipeline_profile`` builds a small pipelined (or sharded) run whose every figure a person can
compute on paper. It keeps the format's conventions (docs/profile-format.md): trace rows tile each
IPU's time line from 0, idle rows have step -1, each step's phase follows its type, every execution
lasts ``programs.cycles``, a compute set's cycles are the max of its ``tile_cycles`` rows, and each
tile's ``tile_memory`` rows sum to its peak (always-live + its largest not-always-live).

The model
---------
Block ``i`` (named ``B{i+1}``) is op ``i`` with one forward compute set of ``fwd_cycles[i]``
cycles, one backward compute set of ``bwd_cycles[i]`` (training) and one update compute set of
``update_cycles`` (training). ``stages`` gives the number of blocks per stage (default: one block per
stage); stage ``s`` runs on IPU ``s``. Every compute set uses all ``tiles_per_ipu`` tiles; tile ``t``
computes ``c * (T - t) // T`` cycles, so tile 0 is the slowest and sets the step's cycles ``c``.

Program steps of IPU ``s``, in order (steps with 0 cycles are left out):
``input/stream`` (stage 0 only: host -> IPU 0, ``host_cycles``), the forward compute sets,
``fwd/exchange`` (not the last stage: inter-IPU s -> s+1, ``exchange_cycles``), the backward compute
sets in reverse block order, ``bwd/exchange`` (not the first stage: s -> s-1), ``optimiser/load``
(remote buffer -> IPU, ``remote_cycles``), the update compute sets, and ``sync`` (``sync_cycles``).
Exchange and stream steps carry their stage and pass but no op (op_id -1).

Schedule (pipelined): pipeline cycle ``t`` runs on stage ``s`` the forward of micro-batch ``t - s``
and (training) the backward of micro-batch ``t - (2S - 2 - s)``; there are ``M + 2S - 2`` cycles
(inference: ``M + S - 1``). Each cycle lasts as long as the busiest IPU; the others idle, then all
run ``sync``. After the last cycle every IPU runs its update (``optimiser/load`` then the update
sets), idles to the slowest, then syncs. Sharded: micro-batch by micro-batch, one stage at a time
(forward in stage order, then backward in reverse), the other IPUs idle, a sync after each segment.
Inference: each micro-batch is one device iteration (``micro_batch`` 0), as in PopTorch inference.

Memory: per IPU, ``code_bytes`` per tile of always-live vertex code; per block ``weight_bytes`` and
``optimiser_bytes`` (always-live) and ``activation_bytes`` (not-always-live, live from the block's
forward step to its backward step, or its forward step only in inference). Each variable covers all
tiles, spread evenly with the remainder one byte each on the first tiles.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from popvision_py.format import ProfileWriter

CLOCK_HZ = 1_000_000_000  # 1 GHz: one cycle is one nanosecond, easy to check by hand

DEFAULT_TARGET: dict[str, Any] = {
    "arch": "mk2",
    "tiles_per_ipu": 4,
    "bytes_per_tile": 1000,
    "clock_hz": CLOCK_HZ,
    "flops_per_cycle_per_tile": {"fp16": 128, "fp32": 32},
    "exchange_bytes_per_cycle_per_tile": 4,
    "ipu_link_bytes_per_s": 100e9,
    "host_link_bytes_per_s": 40e9,
    "streaming_memory_bytes_per_s": 20e9,
    "sync_cycles": 0,
}


def _per_block(value: int | Sequence[int] | None, n: int, default: int) -> list[int]:
    if value is None:
        return [default] * n
    if isinstance(value, (int, np.integer)):
        return [int(value)] * n
    if len(value) != n:
        raise ValueError(f"expected {n} per-block values, got {len(value)}")
    return [int(v) for v in value]


def spread(total: int, tiles: int) -> np.ndarray:
    """Bytes per tile of a variable of ``total`` bytes over ``tiles`` tiles (remainder on the first)."""
    share = np.full(tiles, total // tiles, dtype=np.int64)
    share[: total % tiles] += 1
    return share


def write_pipeline_profile(
    path: str | os.PathLike[str],
    fwd_cycles: Sequence[int] = (100, 100),
    bwd_cycles: Sequence[int] | None = None,
    *,
    stages: Sequence[int] | None = None,
    micro_batches: int = 4,
    iterations: int = 1,
    strategy: str = "pipelined",
    mode: str = "training",
    tiles_per_ipu: int = 4,
    bytes_per_tile: int = 1000,
    micro_batch_size: int = 2,
    update_cycles: int | Sequence[int] = 10,
    sync_cycles: int = 0,
    exchange_bytes: int = 0,
    exchange_cycles: int = 0,
    host_bytes: int = 0,
    host_cycles: int = 0,
    remote_bytes: int = 0,
    remote_cycles: int = 0,
    code_bytes: int = 100,
    weight_bytes: int | Sequence[int] | None = None,
    optimiser_bytes: int | Sequence[int] | None = None,
    activation_bytes: int | Sequence[int] | None = None,
    flops_per_cycle: int = 64,
    model: str = "synthetic",
    target: Mapping[str, Any] | None = None,
    run: Mapping[str, Any] | None = None,
) -> Path:
    """Write a hand-checkable pipelined/sharded profile to ``path`` and return the path.

    ``fwd_cycles[i]`` / ``bwd_cycles[i]`` are block ``B{i+1}``'s forward / backward compute cycles
    per micro-batch (backward defaults to twice forward). ``stages`` lists blocks per stage (default
    one each). Memory defaults per block: 400 weight bytes, 0 optimiser bytes, 200 activation bytes.
    ``target`` / ``run`` override manifest keys (a value of ``None`` removes an optional key).
    See the module docstring for the exact schedule and memory layout.
    """
    n_blocks = len(fwd_cycles)
    fwd = [int(c) for c in fwd_cycles]
    training = mode == "training"
    bwd = [2 * c for c in fwd] if bwd_cycles is None else [int(c) for c in bwd_cycles]
    upd = _per_block(update_cycles, n_blocks, 10)
    stages = [1] * n_blocks if stages is None else list(stages)
    if sum(stages) != n_blocks:
        raise ValueError("stages must add up to the number of blocks")
    S, T, M = len(stages), tiles_per_ipu, micro_batches
    weights = _per_block(weight_bytes, n_blocks, 400)
    optimiser = _per_block(optimiser_bytes, n_blocks, 0)
    activations = _per_block(activation_bytes, n_blocks, 200)
    stage_blocks: list[list[int]] = []
    first = 0
    for count in stages:
        stage_blocks.append(list(range(first, first + count)))
        first += count

    # -- programs and exchanges ------------------------------------------------------------
    programs: list[dict[str, Any]] = []
    exchanges: list[dict[str, Any]] = []
    steps: dict[tuple[int, str], int] = {}  # (ipu, key) -> step

    def add(ipu: int, key: str, type_: str, name: str, op: int, stage: int, pass_: str, cycles: int, nbytes: int = 0):
        step = sum(1 for p in programs if p["ipu"] == ipu)
        programs.append(dict(ipu=ipu, step=step, type=type_, name=name, op_id=op, stage=stage, **{"pass": pass_},
                             tiles=T, bytes=nbytes, cycles=cycles))
        steps[(ipu, key)] = step
        return step

    for s, blocks in enumerate(stage_blocks):
        if s == 0 and host_cycles:
            st = add(s, "host", "stream_copy", "input/stream", -1, s, "forward", host_cycles, host_bytes)
            exchanges.append(dict(ipu=s, step=st, kind="host", src_ipu=-1, dst_ipu=s, bytes=host_bytes,
                                  cycles=host_cycles))
        for b in blocks:
            add(s, f"fwd{b}", "compute_set", f"B{b + 1}/fwd", b, s, "forward", fwd[b])
        if s < S - 1 and exchange_cycles:
            st = add(s, "xfwd", "global_exchange", f"S{s}/fwd/exchange", -1, s, "forward", exchange_cycles,
                     exchange_bytes)
            exchanges.append(dict(ipu=s, step=st, kind="inter_ipu", src_ipu=s, dst_ipu=s + 1, bytes=exchange_bytes,
                                  cycles=exchange_cycles))
        if training:
            for b in reversed(blocks):
                add(s, f"bwd{b}", "compute_set", f"B{b + 1}/bwd", b, s, "backward", bwd[b])
            if s > 0 and exchange_cycles:
                st = add(s, "xbwd", "global_exchange", f"S{s}/bwd/exchange", -1, s, "backward", exchange_cycles,
                         exchange_bytes)
                exchanges.append(dict(ipu=s, step=st, kind="inter_ipu", src_ipu=s, dst_ipu=s - 1,
                                      bytes=exchange_bytes, cycles=exchange_cycles))
            if remote_cycles:
                st = add(s, "remote", "remote_buffer_copy", "optimiser/load", -1, s, "update", remote_cycles,
                         remote_bytes)
                exchanges.append(dict(ipu=s, step=st, kind="remote_buffer", src_ipu=-2, dst_ipu=s, bytes=remote_bytes,
                                      cycles=remote_cycles))
            for b in blocks:
                add(s, f"upd{b}", "compute_set", f"B{b + 1}/update", b, s, "update", upd[b])
        if sync_cycles:
            add(s, "sync", "sync", "sync", -1, -1, "none", sync_cycles)
    prog = pd.DataFrame(programs)
    phase_of = {"compute_set": "compute", "global_exchange": "exchange", "exchange": "exchange",
                "all_reduce": "exchange", "sync": "sync", "stream_copy": "stream", "remote_buffer_copy": "stream"}
    step_info = {(p["ipu"], p["step"]): p for p in programs}

    # -- trace -----------------------------------------------------------------------------
    rows: list[tuple] = []
    clock = 0

    def segment(work: dict[int, list[tuple[str, int, int]]], iteration: int) -> None:
        """Run each IPU's (key, micro_batch, iteration) list from ``clock``, idle to the slowest, then sync.

        Idle and sync rows belong to ``iteration``."""
        nonlocal clock
        ends = {}
        for s in range(S):
            t = clock
            for key, mb, it in work.get(s, []):
                if (s, key) not in steps:
                    continue
                p = step_info[(s, steps[(s, key)])]
                rows.append((0, it, mb, s, p["stage"], p["pass"], p["step"], phase_of[p["type"]], t, t + p["cycles"]))
                t += p["cycles"]
            ends[s] = t
        end = max(ends.values())
        for s in range(S):
            if ends[s] < end:
                rows.append((0, iteration, -1, s, -1, "none", -1, "idle", ends[s], end))
            if sync_cycles:
                rows.append((0, iteration, -1, s, -1, "none", steps[(s, "sync")], "sync", end, end + sync_cycles))
        clock = end + sync_cycles

    def forward(s: int, mb: int, it: int) -> list[tuple[str, int, int]]:
        return [("host", mb, it)] * (s == 0) + [(f"fwd{b}", mb, it) for b in stage_blocks[s]] + [("xfwd", mb, it)]

    def backward(s: int, mb: int, it: int) -> list[tuple[str, int, int]]:
        return [(f"bwd{b}", mb, it) for b in reversed(stage_blocks[s])] + [("xbwd", mb, it)]

    def update(it: int) -> dict[int, list[tuple[str, int, int]]]:
        return {s: [("remote", -1, it)] + [(f"upd{b}", -1, it) for b in stage_blocks[s]] for s in range(S)}

    if training:
        for it in range(iterations):
            if strategy == "pipelined":
                for t in range(M + 2 * S - 2):
                    work = {}
                    for s in range(S):
                        w = []
                        if 0 <= t - s < M:
                            w += forward(s, t - s, it)
                        if 0 <= t - (2 * S - 2 - s) < M:
                            w += backward(s, t - (2 * S - 2 - s), it)
                        work[s] = w
                    segment(work, it)
            else:
                for mb in range(M):
                    for s in range(S):
                        segment({s: forward(s, mb, it)}, it)
                    for s in reversed(range(S)):
                        segment({s: backward(s, mb, it)}, it)
            segment(update(it), it)
        grad_acc, device_iterations = M, iterations
    else:
        n_iter = M * iterations
        if strategy == "pipelined":
            for t in range(n_iter + S - 1):
                # the segment belongs to the iteration entering the pipeline, the last while flushing
                segment({s: forward(s, 0, t - s) for s in range(S) if 0 <= t - s < n_iter}, min(t, n_iter - 1))
        else:
            for it in range(n_iter):
                for s in range(S):
                    segment({s: forward(s, 0, it)}, it)
        grad_acc, device_iterations = 1, n_iter
    trace = pd.DataFrame(rows, columns=["run", "iteration", "micro_batch", "ipu", "stage", "pass", "step", "phase",
                                        "start_cycle", "end_cycle"])
    trace = trace.sort_values(["ipu", "start_cycle"], kind="stable").reset_index(drop=True)

    # -- tile cycles -----------------------------------------------------------------------
    cs = prog[prog["type"] == "compute_set"]
    tile = np.arange(T)
    tile_cycles = pd.DataFrame({
        "ipu": np.repeat(cs["ipu"].to_numpy(), T),
        "step": np.repeat(cs["step"].to_numpy(), T),
        "tile": np.tile(tile, len(cs)),
        "cycles": (np.repeat(cs["cycles"].to_numpy(), T) * np.tile(T - tile, len(cs))) // T,
        "vertices": 1 + np.tile(tile, len(cs)) % 6,
    })

    # -- variables, liveness, tile memory ----------------------------------------------------
    variables: list[dict[str, Any]] = []
    for s, blocks in enumerate(stage_blocks):
        last_step = int(prog.loc[prog["ipu"] == s, "step"].max())

        def var(name: str, category: str, always: bool, nbytes: int, lo: int, hi: int, op: int) -> None:
            if nbytes:
                variables.append(dict(var_id=len(variables), name=name, ipu=s, category=category, always_live=always,
                                      bytes=nbytes, start_tile=0, tiles=T, live_from_step=lo, live_to_step=hi, op_id=op,
                                      dtype="fp16"))

        var(f"IPU{s}/code", "vertex_code", True, code_bytes * T, 0, last_step, -1)
        for b in blocks:
            var(f"B{b + 1}/weight", "weights", True, weights[b], 0, last_step, b)
            var(f"B{b + 1}/optimiser", "optimiser_state", True, optimiser[b], 0, last_step, b)
            lo = steps[(s, f"fwd{b}")]
            hi = steps[(s, f"bwd{b}")] if training else lo
            var(f"B{b + 1}/activation", "activations", False, activations[b], lo, hi, b)
    var_df = pd.DataFrame(variables)
    liveness, memory = [], []
    for s in range(S):
        v = var_df[var_df["ipu"] == s]
        n_steps = int((prog["ipu"] == s).sum())
        per_tile = {r.var_id: spread(int(r.bytes), T) for r in v.itertuples()}
        al_tile = sum((per_tile[r.var_id] for r in v.itertuples() if r.always_live), np.zeros(T, np.int64))
        nal_by_step = np.zeros((n_steps, T), np.int64)
        for r in v.itertuples():
            if not r.always_live:
                nal_by_step[r.live_from_step: r.live_to_step + 1] += per_tile[r.var_id]
        al_total = int(v.loc[v["always_live"], "bytes"].sum())
        for step in range(n_steps):
            live = al_tile + nal_by_step[step]
            worst = int(np.argmax(live))
            liveness.append(dict(ipu=s, step=step, always_live_bytes=al_total,
                                 not_always_live_bytes=int(nal_by_step[step].sum()), worst_tile=worst,
                                 worst_tile_bytes=int(live[worst])))
        for t in range(T):
            peak_step = int(np.argmax(nal_by_step[:, t]))
            for r in v.itertuples():
                live = r.always_live or r.live_from_step <= peak_step <= r.live_to_step
                share = int(per_tile[r.var_id][t])
                if live and share:
                    memory.append(dict(ipu=s, tile=t, category=r.category, always_live=bool(r.always_live),
                                       bytes=share))
    tile_memory = (pd.DataFrame(memory).groupby(["ipu", "tile", "category", "always_live"], as_index=False)["bytes"]
                   .sum())

    # -- ops ---------------------------------------------------------------------------------
    ops = []
    for s, blocks in enumerate(stage_blocks):
        for b in blocks:
            passes = [("forward", fwd[b])] + ([("backward", bwd[b]), ("update", upd[b])] if training else [])
            for pass_, c in passes:
                ops.append(dict(op_id=b, name=f"B{b + 1}/op", kind="matmul", block=f"B{b + 1}", stage=s, ipu=s,
                                **{"pass": pass_}, flops=c * T * flops_per_cycle, bytes=0, tiles=T))

    manifest_target = dict(DEFAULT_TARGET, num_ipus=S, tiles_per_ipu=T, bytes_per_tile=bytes_per_tile,
                           sync_cycles=sync_cycles)
    manifest_run = {
        "model": model, "strategy": strategy, "mode": mode,
        "stages": [{"stage": s, "ipu": s, "blocks": [f"B{b + 1}" for b in blocks]}
                   for s, blocks in enumerate(stage_blocks)],
        "micro_batch_size": micro_batch_size, "gradient_accumulation": grad_acc,
        "device_iterations": device_iterations, "replication_factor": 1, "runs": 1, "precision": "fp16",
        "recompute": False, "tensor_locations": {"optimiser": "off_chip" if remote_cycles else "on_chip"},
    }
    for mapping, overrides in ((manifest_target, target), (manifest_run, run)):
        for key, value in (overrides or {}).items():
            if value is None:
                mapping.pop(key, None)
            else:
                mapping[key] = value
    exchanges_df = pd.DataFrame(exchanges, columns=["ipu", "step", "kind", "src_ipu", "dst_ipu", "bytes", "cycles"])
    path = Path(path)
    with ProfileWriter(path, target=manifest_target, run=manifest_run) as writer:
        writer.write_table("ops", pd.DataFrame(ops))
        writer.write_table("programs", prog)
        writer.write_table("tile_cycles", tile_cycles)
        writer.write_table("tile_memory", tile_memory)
        writer.write_table("variables", var_df)
        writer.write_table("liveness", pd.DataFrame(liveness))
        writer.write_table("trace", trace)
        whole = ["ipu", "step", "src_ipu", "dst_ipu", "bytes", "cycles"]
        writer.write_table("exchanges", exchanges_df.astype({c: "int64" for c in whole}))
    return path


# The four scenarios the issue names; each returns the path it wrote.

def balanced_pipeline(path: str | os.PathLike[str]) -> Path:
    """Two stages of 100 forward / 200 backward cycles, 4 micro-batches: 1,510 cycles per step."""
    return write_pipeline_profile(path, [100, 100], [200, 200], micro_batches=4)


def unbalanced_pipeline(path: str | os.PathLike[str]) -> Path:
    """Blocks of 10/10/10/30 forward cycles split 1 | 3 blocks: stage 1 is the bottleneck."""
    return write_pipeline_profile(path, [10, 10, 10, 30], stages=[1, 3], micro_batches=4, update_cycles=0)


def oom_pipeline(path: str | os.PathLike[str]) -> Path:
    """IPU 0 holds 3,000 weight + 1,000 optimiser bytes over 4 tiles of 1,000 bytes: 150 bytes over per tile."""
    return write_pipeline_profile(path, [100, 100], micro_batches=4, weight_bytes=[3000, 400],
                                  optimiser_bytes=[1000, 100], activation_bytes=[200, 200])


def exchange_heavy_pipeline(path: str | os.PathLike[str]) -> Path:
    """Two stages whose inter-IPU exchanges (500 cycles) outweigh compute, plus host and remote traffic."""
    return write_pipeline_profile(path, [100, 100], micro_batches=4, exchange_bytes=8000, exchange_cycles=500,
                                  host_bytes=1000, host_cycles=50, remote_bytes=4000, remote_cycles=200,
                                  sync_cycles=20)
