"""Write a large, emulator-shaped profile through ProfileWriter, for the analysis and dashboard benchmarks.

    .venv/bin/python benchmarks/make_large_profile.py /tmp/large.pop --rows 50000000

The run is a pipelined training run of a transformer-like model: ``--layers`` layers of
``--ops`` ops each, split evenly over ``--ipus`` pipeline stages (stage s on IPU s), with
``--micro-batches`` micro-batches per iteration (gradient accumulation) and as many device
iterations as it takes to reach ``--rows`` trace rows (``--device-iterations`` per run, i.e.
per host call). Each op runs as three program steps per pass (sync, exchange, compute set); stage
boundaries add an inter-IPU exchange, stage 0 streams its input from the host, the update loads
and stores the optimiser state from streaming memory.

The schedule is the synchronous pipeline (docs/profile-format.md's conventions hold): pipeline
cycle t runs on stage s the forward of micro-batch t - s and the backward of micro-batch
t - (2S - 2 - s); each cycle lasts as long as its busiest stage, the others idle, then all
sync. After the last cycle every IPU runs its update, idles to the slowest, and syncs. Each
execution of a step lasts its ``programs.cycles``; a compute set's cycles are the max of its
``tile_cycles``; each tile's ``tile_memory`` rows sum to its peak.

One iteration's rows are built once as NumPy columns (IPU-major, as the engine writes them) and
repeated with shifted cycles, so memory stays bounded by one batch (about 1 Mi rows) whatever
``--rows`` is.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from popvision_py.format import ProfileWriter  # noqa: E402
from popvision_py.format import schema as S  # noqa: E402

TILES = 1472
BYTES_PER_TILE = 638_976
TARGET = {
    "arch": "mk2", "num_ipus": 4, "tiles_per_ipu": TILES, "bytes_per_tile": BYTES_PER_TILE, "clock_hz": 1.33e9,
    "flops_per_cycle_per_tile": {"fp16": 128, "fp32": 32}, "exchange_bytes_per_cycle_per_tile": 4.0,
    "ipu_link_bytes_per_s": 320e9, "host_link_bytes_per_s": 64e9, "streaming_memory_bytes_per_s": 20e9,
    "sync_cycles": 1800, "system": "IPU-POD4", "system_ipus": 4,
}
PHASE_OF_TYPE = {"compute_set": "compute", "exchange": "exchange", "global_exchange": "exchange",
                 "all_reduce": "exchange", "sync": "sync", "stream_copy": "stream", "remote_buffer_copy": "stream"}
SYNC_CYCLES = 1800


def dictionary(codes: np.ndarray, words: tuple[str, ...] | list[str]) -> pa.DictionaryArray:
    """A category column from codes into ``words``: no string per row is ever made."""
    return pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32)), pa.array(list(words), pa.string()))


class Model:
    """Programs, ops, memory and one iteration's trace rows of the synthetic run (all small arrays)."""

    def __init__(self, layers: int, ops: int, ipus: int, micro_batches: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.ipus, self.M = ipus, micro_batches
        self.layer_stage = np.minimum(np.arange(layers) * ipus // layers, ipus - 1)
        n_ops = layers * ops
        self.op_layer = np.repeat(np.arange(layers), ops)
        # per op: compute cycles of one micro-batch forward (backward: about twice), exchange cycles
        self.op_fwd = rng.integers(200, 60_000, n_ops)
        self.op_bwd = (self.op_fwd * rng.uniform(1.6, 2.4, n_ops)).astype(np.int64)
        self.op_xchg = rng.integers(60, 8_000, n_ops)
        self.op_tiles = rng.integers(64, TILES + 1, n_ops)
        self.op_flops = self.op_fwd * self.op_tiles * 40
        self.op_kind = rng.integers(0, 4, n_ops)  # matmul, softmax, layernorm, gelu
        self._programs()

    def _programs(self) -> None:
        """Each IPU's program steps: columns of ``self.programs`` plus the step ids the schedule uses."""
        cols: dict[str, list] = {k: [] for k in ("ipu", "step", "type", "name", "op_id", "stage", "pass", "tiles",
                                                  "bytes", "cycles")}
        self.fwd_steps, self.bwd_steps, self.update_steps, self.sync_step = {}, {}, {}, {}

        def add(ipu: int, types: list[str], names: list[str], op: np.ndarray, pass_: str, tiles: np.ndarray,
                nbytes: np.ndarray, cycles: np.ndarray) -> np.ndarray:
            first = sum(1 for i in cols["ipu"] if i == ipu)
            n = len(types)
            cols["ipu"] += [ipu] * n
            cols["step"] += list(range(first, first + n))
            cols["type"] += types
            cols["name"] += names
            cols["op_id"] += list(op)
            cols["stage"] += [ipu if pass_ != "none" else -1] * n
            cols["pass"] += [pass_] * n
            cols["tiles"] += list(tiles)
            cols["bytes"] += list(nbytes)
            cols["cycles"] += list(cycles)
            return np.arange(first, first + n)

        for s in range(self.ipus):
            ops = np.flatnonzero(self.layer_stage[self.op_layer] == s)
            triple = ["sync", "exchange", "compute_set"]

            def per_op(pass_: str, order: np.ndarray, compute: np.ndarray) -> tuple[list, list, np.ndarray, np.ndarray,
                                                                                     np.ndarray, np.ndarray]:
                types = triple * len(order)
                names = [f"layer{self.op_layer[o]}/op{o}/{pass_[:3]}/{t}"
                         for o in order for t in ("sync", "exch", "cs")]
                op = np.repeat(order, 3)
                tiles = np.repeat(self.op_tiles[order], 3)
                cycles = np.stack([np.full(len(order), 30), self.op_xchg[order], compute[order]], 1).ravel()
                nbytes = np.stack([np.zeros(len(order), np.int64), self.op_xchg[order] * 4 * 64,
                                   np.zeros(len(order), np.int64)], 1).ravel()
                return types, names, op, tiles, nbytes, cycles

            fwd = []
            if s == 0:
                fwd.append(add(s, ["stream_copy"], ["input/stream"], np.array([-1]), "forward", np.array([TILES]),
                               np.array([512 * 1024]), np.array([2_000])))
            types, names, op, tiles, nbytes, cycles = per_op("forward", ops, self.op_fwd)
            fwd.append(add(s, types, names, op, "forward", tiles, nbytes, cycles))
            if s < self.ipus - 1:
                fwd.append(add(s, ["exchange"], ["fwd/send"], np.array([-1]), "forward", np.array([TILES]),
                               np.array([4 << 20]), np.array([9_000])))
            types, names, op, tiles, nbytes, cycles = per_op("backward", ops[::-1], self.op_bwd)
            bwd = [add(s, types, names, op, "backward", tiles, nbytes, cycles)]
            if s > 0:
                bwd.append(add(s, ["exchange"], ["bwd/send"], np.array([-1]), "backward", np.array([TILES]),
                               np.array([4 << 20]), np.array([9_000])))
            layers = np.unique(self.op_layer[ops])
            n = len(layers)
            upd = add(s, ["remote_buffer_copy", "compute_set", "remote_buffer_copy"] * n,
                      [f"layer{k}/optimiser/{w}" for k in layers for w in ("load", "update", "store")],
                      np.repeat(ops[np.searchsorted(self.op_layer[ops], layers)], 3), "update", np.full(3 * n, TILES),
                      np.tile([8 << 20, 0, 8 << 20], n), np.tile([420_000, 52_000, 420_000], n))
            self.sync_step[s] = int(add(s, ["sync"], ["pipeline/sync"], np.array([-1]), "none", np.array([TILES]),
                                        np.array([0]), np.array([SYNC_CYCLES]))[0])
            self.fwd_steps[s], self.bwd_steps[s], self.update_steps[s] = np.concatenate(fwd), np.concatenate(bwd), upd
        self.programs = {k: np.asarray(v) if k not in ("type", "name", "pass") else v for k, v in cols.items()}
        self.programs["phase"] = [PHASE_OF_TYPE[t] for t in cols["type"]]
        self.grid = {}  # (ipu, step) -> cycles, phase code, stage, pass code
        for s in range(self.ipus):
            mine = self.programs["ipu"] == s
            self.grid[s] = {
                "cycles": self.programs["cycles"][mine],
                "phase": np.array([S.PHASES.index(p) for p, m in zip(self.programs["phase"], mine) if m]),
                "pass": np.array([S.PASSES.index(p) for p, m in zip(self.programs["pass"], mine) if m]),
            }

    def iteration(self) -> dict[str, np.ndarray]:
        """One iteration's trace rows, IPU-major, from cycle 0: columns of the trace table (codes for pass/phase)."""
        S_, M = self.ipus, self.M
        work = {s: (int(self.grid[s]["cycles"][self.fwd_steps[s]].sum()),
                    int(self.grid[s]["cycles"][self.bwd_steps[s]].sum()))
                for s in range(S_)}
        n_cycles = M + 2 * S_ - 2
        t = np.arange(n_cycles)[:, None]
        s = np.arange(S_)[None, :]
        fwd_mb = np.where((t - s >= 0) & (t - s < M), t - s, -1)  # [cycle, stage]
        bwd_mb = np.where((t - (2 * S_ - 2 - s) >= 0) & (t - (2 * S_ - 2 - s) < M), t - (2 * S_ - 2 - s), -1)
        f, b = np.array([work[k][0] for k in range(S_)]), np.array([work[k][1] for k in range(S_)])
        busy = np.where(fwd_mb >= 0, f, 0) + np.where(bwd_mb >= 0, b, 0)
        length = busy.max(axis=1)  # each pipeline cycle lasts as long as its busiest stage
        cycle_start = np.concatenate(([0], np.cumsum(length + SYNC_CYCLES)))
        upd_len = np.array([self.grid[k]["cycles"][self.update_steps[k]].sum() for k in range(S_)])
        upd_start = cycle_start[-1]
        self.iteration_cycles = int(upd_start + upd_len.max() + SYNC_CYCLES)
        parts = []
        for ipu in range(S_):  # per IPU: a few hundred segments of steps, each built with array ops
            g = self.grid[ipu]
            segs_step, segs_mb, segs_start = [], [], []
            for c in range(n_cycles):
                at = cycle_start[c]
                for steps, mb in ((self.fwd_steps[ipu], fwd_mb[c, ipu]), (self.bwd_steps[ipu], bwd_mb[c, ipu])):
                    if mb >= 0:
                        segs_step.append(steps)
                        segs_mb.append(np.full(len(steps), mb))
                        segs_start.append(at + np.concatenate(([0], np.cumsum(g["cycles"][steps])[:-1])))
                        at += int(g["cycles"][steps].sum())
                idle = cycle_start[c] + length[c] - at
                if idle > 0:
                    segs_step.append(np.array([-1]))
                    segs_mb.append(np.array([-1]))
                    segs_start.append(np.array([at]))
                segs_step.append(np.array([self.sync_step[ipu]]))
                segs_mb.append(np.array([-1]))
                segs_start.append(np.array([cycle_start[c] + length[c]]))
            u = self.update_steps[ipu]
            segs_step.append(u)
            segs_mb.append(np.full(len(u), -1))
            segs_start.append(upd_start + np.concatenate(([0], np.cumsum(g["cycles"][u])[:-1])))
            if upd_len[ipu] < upd_len.max():
                segs_step.append(np.array([-1]))
                segs_mb.append(np.array([-1]))
                segs_start.append(np.array([upd_start + upd_len[ipu]]))
            segs_step.append(np.array([self.sync_step[ipu]]))
            segs_mb.append(np.array([-1]))
            segs_start.append(np.array([upd_start + upd_len.max()]))
            step = np.concatenate(segs_step)
            start = np.concatenate(segs_start).astype(np.int64)
            end = np.append(start[1:], self.iteration_cycles)  # rows tile the time line
            idle = step < 0
            safe = np.where(idle, 0, step)
            stage = np.where(idle | (g["pass"][safe] == S.PASSES.index("none")), -1, ipu)
            parts.append({
                "micro_batch": np.concatenate(segs_mb), "ipu": np.full(len(step), ipu), "stage": stage,
                "pass": np.where(idle, S.PASSES.index("none"), g["pass"][safe]), "step": step,
                "phase": np.where(idle, S.PHASES.index("idle"), g["phase"][safe]), "start_cycle": start,
                "end_cycle": end,
            })
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def write(path: Path, rows: int, layers: int = 24, ops: int = 8, ipus: int = 4, micro_batches: int = 16,
          device_iterations: int = 100, seed: int = 0, batch_rows: int = 1 << 20) -> dict:
    """Write the profile; returns what was written (rows, iterations, seconds)."""
    began = time.perf_counter()
    m = Model(layers, ops, ipus, micro_batches, seed)
    one = m.iteration()
    per_iter = len(one["step"])
    iterations = max(1, -(-rows // per_iter))
    target = dict(TARGET, num_ipus=ipus)
    run = {
        "model": f"synthetic-transformer-{layers}x{ops}", "strategy": "pipelined", "mode": "training",
        "stages": [{"stage": s, "ipu": s, "blocks": [f"layer{k}" for k in np.flatnonzero(m.layer_stage == s)]}
                   for s in range(ipus)],
        "micro_batch_size": 8, "gradient_accumulation": micro_batches, "device_iterations": device_iterations,
        "replication_factor": 1, "runs": -(-iterations // device_iterations), "precision": "fp16",
    }
    with ProfileWriter(path, target=target, run=run,
                       generator={"name": "benchmarks/make_large_profile.py", "version": "1"}) as writer:
        _small_tables(writer, m)
        with writer.table("trace") as trace:
            templates = [{k: v[one["ipu"] == ipu] for k, v in one.items()} for ipu in range(ipus)]
            for first_run in range(0, iterations, device_iterations):
                last_run = min(first_run + device_iterations, iterations)
                for tmpl in templates:  # IPU-major within a run, as the engine writes
                    n = len(tmpl["step"])
                    chunk = max(1, batch_rows // n)  # iterations per batch
                    for first in range(first_run, last_run, chunk):
                        k = min(chunk, last_run - first)
                        it = np.repeat(np.arange(first, first + k), n)
                        shift = it.astype(np.int64) * m.iteration_cycles
                        trace.write({
                            "run": (it // device_iterations).astype(np.int32),
                            "iteration": (it % device_iterations).astype(np.int32),
                            "micro_batch": np.tile(tmpl["micro_batch"], k).astype(np.int32),
                            "ipu": np.tile(tmpl["ipu"], k).astype(np.int16),
                            "stage": np.tile(tmpl["stage"], k).astype(np.int16),
                            "pass": dictionary(np.tile(tmpl["pass"], k), S.PASSES),
                            "step": np.tile(tmpl["step"], k).astype(np.int32),
                            "phase": dictionary(np.tile(tmpl["phase"], k), S.PHASES),
                            "start_cycle": np.tile(tmpl["start_cycle"], k) + shift,
                            "end_cycle": np.tile(tmpl["end_cycle"], k) + shift,
                        })
    return {"rows": per_iter * iterations, "iterations": iterations, "rows_per_iteration": per_iter,
            "seconds": time.perf_counter() - began}


def _small_tables(writer: ProfileWriter, m: Model) -> None:
    """ops, programs, exchanges, tile_cycles, tile_memory, variables, liveness: consistent with the trace."""
    p = m.programs
    n_ops = len(m.op_fwd)
    stage = m.layer_stage[m.op_layer]
    kinds = np.array(["matmul", "softmax", "layernorm", "gelu"], dtype=object)
    passes = np.repeat(np.array(["forward", "backward"], dtype=object), n_ops)
    writer.write_table("ops", {
        "op_id": np.tile(np.arange(n_ops), 2),
        "name": np.tile([f"layer{k}/op{o}" for o, k in enumerate(m.op_layer)], 2),
        "kind": np.tile(kinds[m.op_kind], 2), "block": np.tile([f"layer{k}" for k in m.op_layer], 2),
        "stage": np.tile(stage, 2), "ipu": np.tile(stage, 2), "pass": passes,
        "flops": np.concatenate([m.op_flops, 2 * m.op_flops]), "bytes": np.tile(m.op_xchg * 256, 2),
        "tiles": np.tile(m.op_tiles, 2),
    })
    writer.write_table("programs", {k: p[k] for k in ("ipu", "step", "type", "name", "op_id", "stage", "pass",
                                                      "tiles", "bytes", "cycles")})
    types = np.asarray(p["type"], dtype=object)
    names = np.asarray(p["name"], dtype=object)
    x = np.flatnonzero(np.isin(types, ["exchange", "stream_copy", "remote_buffer_copy"]))
    src, dst = p["ipu"][x].copy(), p["ipu"][x].copy()
    kind = np.full(len(x), "internal", dtype=object)
    for label, k, s_, d_ in (("fwd/send", "inter_ipu", 0, 1), ("bwd/send", "inter_ipu", 0, -1)):
        hit = names[x] == label
        kind[hit], dst[hit] = k, src[hit] + d_
    host = types[x] == "stream_copy"
    kind[host], src[host] = "host", S.HOST
    remote = types[x] == "remote_buffer_copy"
    load = remote & np.char.endswith(names[x].astype(str), "load")
    kind[remote] = "remote_buffer"
    src[load] = S.STREAMING_MEMORY
    dst[remote & ~load] = S.STREAMING_MEMORY
    writer.write_table("exchanges", {"ipu": p["ipu"][x], "step": p["step"][x], "kind": kind, "src_ipu": src,
                                     "dst_ipu": dst, "bytes": p["bytes"][x], "cycles": p["cycles"][x]})
    # tile_cycles: each compute set's tiles 0..tiles-1, the slowest (tile 0) sets the step's cycles
    cs = np.flatnonzero(types == "compute_set")
    counts = p["tiles"][cs]
    rows = np.repeat(cs, counts)
    tile = np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)
    cyc = p["cycles"][rows] - (p["cycles"][rows] * tile) // (4 * np.maximum(counts.max(), 1))
    writer.write_table("tile_cycles", {"ipu": p["ipu"][rows], "step": p["step"][rows], "tile": tile, "cycles": cyc,
                                       "vertices": np.minimum(1 + tile % 8, 6)})
    # memory: per IPU and tile, always-live categories and the not-always-live peak, summing to the peak
    rng = np.random.default_rng(1)
    cats = ("vertex_code", "vertex_state", "control_code", "weights", "optimiser_state", "activations", "stash",
            "exchange_buffers")
    live = np.array([True, True, True, True, False, False, False, False])
    base = np.array([60_000, 20_000, 8_000, 120_000, 0, 90_000, 60_000, 30_000])
    ipu_col = np.repeat(np.arange(m.ipus), TILES * len(cats))
    tile_col = np.tile(np.repeat(np.arange(TILES), len(cats)), m.ipus)
    noise = rng.uniform(0.6, 1.2, len(ipu_col))
    writer.write_table("tile_memory", {
        "ipu": ipu_col, "tile": tile_col, "category": np.tile(np.array(cats, dtype=object), m.ipus * TILES),
        "always_live": np.tile(live, m.ipus * TILES), "bytes": (np.tile(base, m.ipus * TILES) * noise).astype(np.int64),
    })
    # variables: per op a weight (always-live) and an activation live from its forward to its backward step
    n_steps = {s: int((p["ipu"] == s).sum()) for s in range(m.ipus)}
    fwd_of = np.zeros(n_ops, np.int64)
    bwd_of = np.zeros(n_ops, np.int64)
    for s in range(m.ipus):
        f, b = m.fwd_steps[s], m.bwd_steps[s]
        mine = (p["ipu"] == s)
        ops_f = p["op_id"][mine][f]
        ops_b = p["op_id"][mine][b]
        fwd_of[ops_f[ops_f >= 0]] = f[ops_f >= 0]
        bwd_of[ops_b[ops_b >= 0]] = b[ops_b >= 0]
    ids = np.arange(2 * n_ops)
    writer.write_table("variables", {
        "var_id": ids, "name": [f"layer{m.op_layer[i % n_ops]}/op{i % n_ops}/{'weight' if i < n_ops else 'activation'}"
                                for i in ids],
        "ipu": np.tile(stage, 2), "category": np.repeat(np.array(["weights", "activations"], dtype=object), n_ops),
        "always_live": ids < n_ops, "bytes": np.concatenate([m.op_tiles * 2_000, m.op_tiles * 800]),
        "start_tile": np.zeros(2 * n_ops, np.int64), "tiles": np.tile(m.op_tiles, 2),
        "live_from_step": np.concatenate([np.zeros(n_ops, np.int64), fwd_of]),
        "live_to_step": np.concatenate([np.array([n_steps[s] - 1 for s in stage]), bwd_of]),
        "op_id": np.tile(np.arange(n_ops), 2), "dtype": np.full(2 * n_ops, "fp16", dtype=object),
    })
    # liveness: per IPU and step, always-live total and the activations live at that step
    step_ipu = p["ipu"]
    step = p["step"]
    act_ipu, act_from, act_to, act_bytes = stage, fwd_of, bwd_of, m.op_tiles * 800
    key = np.concatenate([[0], np.cumsum([n_steps[s] for s in range(m.ipus)])])
    delta = np.zeros(int(key[-1]) + 1, np.int64)  # +bytes at each activation's first step, - after its last
    np.add.at(delta, key[act_ipu] + act_from, act_bytes)
    np.add.at(delta, key[act_ipu] + act_to + 1, -act_bytes)
    alive = np.cumsum(delta)[:-1] - np.repeat(np.concatenate([[0], np.cumsum(delta)[key[1:-1] - 1]]),
                                              [n_steps[s] for s in range(m.ipus)])
    always = np.array([int((m.op_tiles[stage == s] * 2_000).sum()) for s in range(m.ipus)])
    writer.write_table("liveness", {
        "ipu": step_ipu, "step": step, "always_live_bytes": always[step_ipu], "not_always_live_bytes": alive,
        "worst_tile": np.zeros(len(step), np.int64),
        "worst_tile_bytes": (always[step_ipu] + alive) // TILES + 40_000,
    })


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--rows", type=int, default=50_000_000, help="trace rows, at least (whole iterations)")
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--ops", type=int, default=8, help="ops per layer")
    parser.add_argument("--ipus", type=int, default=4)
    parser.add_argument("--micro-batches", type=int, default=16)
    parser.add_argument("--device-iterations", type=int, default=100)
    args = parser.parse_args(argv)
    done = write(args.path, args.rows, args.layers, args.ops, args.ipus, args.micro_batches, args.device_iterations)
    print(f"wrote {args.path}: {done['rows']:,} trace rows ({done['iterations']:,} iterations of "
          f"{done['rows_per_iteration']:,} rows), {args.path.stat().st_size / 1e6:,.1f} MB in {done['seconds']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
