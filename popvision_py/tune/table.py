"""The answer of `popvision tune`: one row per candidate (``tunefile.COLUMNS``), ranked, with the
Pareto front of throughput against IPUs, and the text printed.

Built from data alone (the candidates' figures), never from the order they finished in: the rows
are sorted by status (ok, oom, rejected, error), then by throughput (fastest first, to 0.001
samples/s), then IPUs
(fewest first), headroom (most first) and key.
Wall-clock ``seconds`` is recorded, never sorted or ranked by.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from popvision_py.format.tunefile import COLUMNS, STATUSES

STATUS_ORDER = {s: k for k, s in enumerate(STATUSES)}
CHANGES_WIDTH = 100


def ranked(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` (every column but rank and pareto) sorted, ranked and with the Pareto front marked."""
    rows = rows.copy()
    order = rows["status"].map(STATUS_ORDER)
    # to a thousandth of a sample a second: figures that differ only in float rounding tie
    speed = rows["samples_per_second"].astype(float).round(3).fillna(-np.inf)
    room = rows["headroom_bytes"].astype(float).fillna(-np.inf)
    # ties in throughput: fewer IPUs first, then more headroom, then the key
    rows = rows.assign(_order=order, _speed=-speed, _room=-room).sort_values(
        ["_order", "_speed", "ipus", "_room", "key"], kind="stable")
    rows = rows.reset_index(drop=True)
    ok = (rows["status"] == "ok").to_numpy()
    rank = np.where(ok, np.cumsum(ok), 0)
    rows["rank"] = pd.Series(rank, dtype="Int64").where(ok, pd.NA)
    rows["pareto"] = pareto(rows["ipus"].to_numpy(np.int64), -rows["_speed"].to_numpy(), ok)
    return rows[COLUMNS.names]


def pareto(ipus: np.ndarray, speed: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Rows (among ``ok``) no other ok row beats: as fast or faster on as few or fewer IPUs, better in one."""
    front = np.zeros(len(ipus), bool)
    idx = np.flatnonzero(ok)
    if not len(idx):
        return front
    # fewest IPUs first, fastest first within a count: a row is on the front if faster than every row before it
    order = idx[np.lexsort((-speed[idx], ipus[idx]))]
    best_before = np.concatenate(([-np.inf], np.maximum.accumulate(speed[order])[:-1]))
    front[order[speed[order] > best_before]] = True
    return front


def _kib(n: float) -> str:
    return f"{n / 1024:,.0f} KiB"


def global_batch(request: str) -> int:
    """Samples per weight update of a row's request (micro-batch x gradient accumulation x replicas)."""
    options = json.loads(request).get("options", {})
    return int(options.get("micro_batch_size") or 1) * int(options.get("gradient_accumulation") or 1) \
        * int(options.get("replication_factor") or 1)


def capped_lines(meta: dict) -> list[str]:
    """What ``--max-candidates`` cut and what it kept (``popvision_py.tune.cap``)."""
    cap, cut = meta["max_candidates"], meta["capped"]
    mappings, settings = meta.get("capped_mappings"), meta.get("capped_settings")
    which = " and ".join(f"{n:,} more {what}" for n, what in ((mappings, "mappings"), (settings, "round-two candidates (moved cuts and settings)"))
                         if n)
    lines = [f"The search stopped at --max-candidates {cap:,} (it counts candidates emulated; refused ones are rows "
             f"and do not count): {which or f'{cut:,} more candidates'} were not tried."]
    if mappings:
        lines.append("Kept: the start, then the mappings round-robin over (depth, tensor shards, replicas), spread "
                     "over depths first, every such group before a second split of any; none were left for round two "
                     "(moved cuts and settings).")
    elif settings:
        lines.append("Kept: every mapping; then round two's candidates round-robin over the refined mappings, "
                     "fastest first.")
    return lines


def render(rows: pd.DataFrame, meta: dict, top: int = 10) -> str:
    """The ranked table (``top`` rows that fit, the start's row if not among them), the commands of the rows
    shown, the Pareto front, and what did not fit or was refused."""
    counts = rows["status"].value_counts()
    start = rows[rows["is_start"]]
    start_speed = float(start["samples_per_second"].iloc[0]) if len(start) and start["status"].iloc[0] in ("ok", "oom") else None
    lines = [f"{meta['model']} on {meta['system']}: {len(rows):,} candidates, {counts.get('ok', 0):,} fit, "
             f"{counts.get('oom', 0):,} out of memory, {counts.get('rejected', 0):,} rejected, "
             f"{counts.get('error', 0):,} failed."]
    if meta.get("capped"):
        lines += capped_lines(meta)
    if meta.get("global_batch"):
        lines.append(f"Global batch {meta['global_batch']:,} samples per weight update.")
    shown = rows[rows["status"] == "ok"].head(top)
    if len(start) and not start.index.isin(shown.index).any():
        shown = pd.concat([shown, start])
    batch = shown["request"].map(global_batch)
    if not meta.get("global_batch") and batch.nunique() > 1:
        lines.append("Candidates train with different global batches (the batch column); --global-batch N compares "
                     "them all at N samples per weight update.")
    header = f"{'rank':>5}  {'samples/s':>11}  {'vs start':>8}  {'fits':>4}  {'worst tile':>10}  {'headroom':>11}  " \
             f"{'IPUs':>4}  {'batch':>6}  changes from the start"
    lines += ["", header]
    for _, r in shown.iterrows():
        speed = r["samples_per_second"]
        vs = f"{speed / start_speed:.2f}x" if start_speed and pd.notna(speed) else "-"
        label = str(r["rank"]) if pd.notna(r["rank"]) else "-"
        mark = "*" if r["pareto"] else " "
        tile = f"{r['worst_tile_pct']:.1f}%" if pd.notna(r["worst_tile_pct"]) else "-"
        room = _kib(r["headroom_bytes"]) if pd.notna(r["headroom_bytes"]) else "-"
        changes = "(the start)" if r["is_start"] else (r["changes"] or "(none)")
        if len(changes) > CHANGES_WIDTH:  # the whole of it is in the row's command, printed below
            changes = changes[:CHANGES_WIDTH - 3] + "..."
        lines.append(f"{label:>4}{mark}  {speed if pd.isna(speed) else format(speed, ',.1f'):>11}  {vs:>8}  "
                     f"{'yes' if r['fits'] else 'no':>4}  {tile:>10}  {room:>11}  {r['ipus']:>4}  "
                     f"{batch[r.name]:>6,}  {changes}")
    lines.append("(* on the Pareto front of throughput against IPUs)")
    lines += ["", "Commands:"]
    for _, r in shown.iterrows():
        label = f"#{r['rank']}" if pd.notna(r["rank"]) else "start"
        lines.append(f"  {label:>5}  {r['command']}")
    front = rows[rows["pareto"]].sort_values(["ipus"], kind="stable")
    if len(front):
        lines += ["", "Pareto front (the fastest that fits on as few IPUs):"]
        lines += [f"  {int(r['ipus']):>4} IPUs  {r['samples_per_second']:,.1f} samples/s  (#{r['rank']})"
                  for _, r in front.iterrows()]
    best = rows[rows["rank"] == 1]
    if not len(best):
        lines += ["", "No candidate fits; the closest (least over) are:"]
        oom = rows[rows["status"] == "oom"].sort_values(["headroom_bytes", "key"], ascending=[False, True]).head(3)
        lines += [f"  {r['worst_tile_pct']:.1f}% of a tile: {r['command']}" for _, r in oom.iterrows()]
    return "\n".join(lines)
