"""The answer of `popvision tune`: one row per candidate (``tunefile.COLUMNS``), ranked, with the
Pareto front of throughput against IPUs, and the text printed.

Built from data alone (the candidates' figures), never from the order they finished in: the rows
are sorted by status (ok, oom, rejected, error), then by throughput (fastest first, to 0.001
samples/s), then IPUs
(fewest first), headroom (most first) and key.
Wall-clock ``seconds`` is recorded, never sorted or ranked by.

Ranks use the central estimates. The rows the text shows (``ranged_keys``: the table's, the Pareto
front, and the closest that do not fit when none does) also carry their ranges (``RANGE_FIELDS``:
the fit verdict, the throughput's and the worst tile's range at the ends of the assumptions), null
on every other row and on rows of a result written before ranges existed.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from popvision_py.format.tunefile import COLUMNS, STATUSES
from popvision_py.render.format import FIT_ANSWER, three_figures
from popvision_py.tune.evaluate import RANGE_FIELDS

STATUS_ORDER = {s: k for k, s in enumerate(STATUSES)}
CHANGES_WIDTH = 100
CLOSEST = 3  # rows that do not fit shown when none fits


def ranked(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` (every column but rank and pareto) sorted, ranked and with the Pareto front marked; the
    ``RANGE_FIELDS`` they lack are null (not computed)."""
    rows = with_ranges(rows)
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
    return rows[[*COLUMNS.names, *RANGE_FIELDS]]


def with_ranges(rows: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``rows`` with every ``RANGE_FIELDS`` column, null where it lacks one (a result written before
    ranges existed): the verdict as text or None, the range ends as floats."""
    rows = rows.copy()
    verdict = rows["fit_verdict"] if "fit_verdict" in rows else pd.Series(None, index=rows.index, dtype=object)
    rows["fit_verdict"] = verdict.astype(object).where(verdict.notna(), None)
    for name in RANGE_FIELDS[1:]:
        rows[name] = rows[name].astype(float) if name in rows else np.nan
    return rows


def table_rows(rows: pd.DataFrame, top: int) -> pd.DataFrame:
    """The rows of the printed table: the ``top`` ranked rows, and the start's when it is not among them."""
    shown = rows[rows["status"] == "ok"].head(top)
    start = rows[rows["is_start"]]
    if len(start) and not start.index.isin(shown.index).any():
        shown = pd.concat([shown, start])
    return shown


def closest(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows that do not fit by the least (most headroom), shown when none fits."""
    return rows[rows["status"] == "oom"].sort_values(["headroom_bytes", "key"], ascending=[False, True]).head(CLOSEST)


def ranged_keys(rows: pd.DataFrame, top: int) -> list[str]:
    """The emulated candidates the text shows, by key: the table's rows (``top`` of them, the best among
    them, and the start), the Pareto front, and the closest that do not fit when none fits. These are the
    ones whose ranges the search computes."""
    parts = [table_rows(rows, top), rows[rows["pareto"]]]
    if not (rows["rank"] == 1).any():
        parts.append(closest(rows))
    keys = pd.concat(parts)
    keys = keys[keys["status"].isin(("ok", "oom"))]["key"]
    return list(dict.fromkeys(keys))


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
    kinds = ((mappings, "mappings"), (settings, "round-two candidates (moved cuts and settings)"))
    which = " and ".join(f"{n:,} more {what}" for n, what in kinds if n)
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


def throughput_range(row: pd.Series) -> str:
    """'24,000 to 31,000' (samples/s at the assumptions' ends), or '-' where not computed."""
    if pd.isna(row["throughput_low"]):
        return "-"
    return f"{three_figures(row['throughput_low'])} to {three_figures(row['throughput_high'])}"


def fits_text(row: pd.Series) -> str:
    """The "fits" column: the fit verdict (yes, no, borderline) where the ranges were computed, else the
    central estimate's yes or no."""
    if row["fit_verdict"] is not None:
        return FIT_ANSWER[row["fit_verdict"]]
    return "yes" if row["fits"] else "no"


def tile_range(row: pd.Series) -> str:
    """'worst tile 96.3% to 100.4% of a tile'."""
    return f"worst tile {row['worst_tile_pct_low']:.1f}% to {row['worst_tile_pct_high']:.1f}% of a tile"


def borderline_lines(rows: pd.DataFrame, top: int) -> list[str]:
    """What the text says when the best candidate is borderline: its worst tile's range, and the fastest
    candidate shown that fits at every end of the assumptions (if any)."""
    best = rows[rows["rank"] == 1]
    if not len(best) or best["fit_verdict"].iloc[0] != "borderline":
        return []
    b = best.iloc[0]
    lines = ["", f"The best candidate (#1) is BORDERLINE: at the ends of the assumptions its worst tile is "
             f"{b['worst_tile_pct_low']:.1f}% to {b['worst_tile_pct_high']:.1f}% of a tile, so it may not fit "
             f"(its central estimate, {b['worst_tile_pct']:.1f}%, fits)."]
    sure = rows[(rows["status"] == "ok") & (rows["fit_verdict"] == "fits")]
    if len(sure):
        s = sure.iloc[0]
        vs = s["samples_per_second"] / b["samples_per_second"]
        lines.append(f"The fastest that fits at every end is #{s['rank']}: {s['samples_per_second']:,.1f} samples/s "
                     f"({vs:.2f}x the best), {s['command']}")
    else:
        lines.append(f"None of the candidates ranged (the top {top:,}, the start and the Pareto front) fits at every "
                     "end; pin down the assumptions behind the worst tile (popvision run on the best's command names "
                     "them).")
    return lines


def render(rows: pd.DataFrame, meta: dict, top: int = 10) -> str:
    """The ranked table (``top`` rows that fit, the start's row if not among them), the commands of the rows
    shown, the Pareto front, and what did not fit or was refused; a borderline best candidate is said so.
    ``rows`` are ``ranked``'s."""
    counts = rows["status"].value_counts()
    start = rows[rows["is_start"]]
    ran = len(start) and start["status"].iloc[0] in ("ok", "oom")
    start_speed = float(start["samples_per_second"].iloc[0]) if ran else None
    lines = [f"{meta['model']} on {meta['system']}: {len(rows):,} candidates, {counts.get('ok', 0):,} fit, "
             f"{counts.get('oom', 0):,} out of memory, {counts.get('rejected', 0):,} rejected, "
             f"{counts.get('error', 0):,} failed."]
    if meta.get("capped"):
        lines += capped_lines(meta)
    if meta.get("global_batch"):
        lines.append(f"Global batch {meta['global_batch']:,} samples per weight update.")
    shown = table_rows(rows, top)
    batch = shown["request"].map(global_batch)
    if not meta.get("global_batch") and batch.nunique() > 1:
        lines.append("Candidates train with different global batches (the batch column); --global-batch N compares "
                     "them all at N samples per weight update.")
    header = f"{'rank':>5}  {'samples/s':>11}  {'range of samples/s':>22}  {'vs start':>8}  {'fits':>10}  " \
             f"{'worst tile':>10}  {'headroom':>11}  {'IPUs':>4}  {'batch':>6}  changes from the start"
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
        lines.append(f"{label:>4}{mark}  {speed if pd.isna(speed) else format(speed, ',.1f'):>11}  "
                     f"{throughput_range(r):>22}  {vs:>8}  {fits_text(r):>10}  {tile:>10}  {room:>11}  {r['ipus']:>4}  "
                     f"{batch[r.name]:>6,}  {changes}")
    lines.append("(* on the Pareto front of throughput against IPUs; range and fits: at the ends of the emulator's "
                 "assumptions, borderline when the worst tile's range crosses a tile's memory, for the rows shown)")
    lines += borderline_lines(rows, top)
    lines += ["", "Commands:"]
    for _, r in shown.iterrows():
        label = f"#{r['rank']}" if pd.notna(r["rank"]) else "start"
        lines.append(f"  {label:>5}  {r['command']}")
    front = rows[rows["pareto"]].sort_values(["ipus"], kind="stable")
    if len(front):
        lines += ["", "Pareto front (the fastest that fits on as few IPUs):"]
        lines += [f"  {int(r['ipus']):>4} IPUs  {r['samples_per_second']:,.1f} samples/s  (#{r['rank']}"
                  f"{', borderline' if r['fit_verdict'] == 'borderline' else ''})" for _, r in front.iterrows()]
    if not (rows["rank"] == 1).any():
        lines += ["", "No candidate fits; the closest (least over) are:"]
        lines += [f"  {r['worst_tile_pct']:.1f}% of a tile{_closest_verdict(r)}: {r['command']}"
                  for _, r in closest(rows).iterrows()]
    return "\n".join(lines)


def _closest_verdict(row: pd.Series) -> str:
    """' (borderline: worst tile 97.2% to 104.1% of a tile)' for a closest row that may fit; else nothing."""
    return f" (borderline: {tile_range(row)})" if row["fit_verdict"] == "borderline" else ""
