"""The lines ``popvision run`` prints after a run, which a PopTorch script prints too when it compiles
a model (``poptorch/_emulation.py``): one place, below both, so neither imports the other.

It renders the engine's ``RunSummary`` (``engine.instrument.RunSummary``) and computes nothing: the figures
the engine cannot compute itself, the idle share and FLOP utilisation, are on the summary already
(``popvision_py.run_figures``). It imports neither the engine nor the analysis' figures."""

from __future__ import annotations

from typing import Any

from popvision_py.analysis.host.input_wait import host_bound_line
from popvision_py.render.format import three_figures


def summary_text(s: Any) -> str:
    """The lines `popvision run` prints, from ``s``, an ``engine.instrument.RunSummary`` whose idle share
    and FLOP utilisation are set."""
    shards = f" x {s.tensor_sharding} tensor shards" if s.tensor_sharding > 1 else ""
    rate = f"  throughput        {s.samples_per_second:,.1f} samples/s"
    if s.throughput_range:
        low, high = s.throughput_range
        rate += f" ({three_figures(low)} to {three_figures(high)})"
    lines = [
        f"{s.model}: {s.mode}, {s.strategy} over {s.num_ipus} IPU(s){shards} x {s.replicas} replica(s) "
        f"on {s.arch} ({s.system})",
        f"  time per step     {s.seconds_per_step * 1e3:,.3f} ms ({s.cycles_per_step:,.0f} cycles, "
        f"{s.samples_per_step:,} samples)",
        rate,
        f"  idle              {s.idle_pct:.1f}% of IPU time    FLOP utilisation {s.flop_utilisation_pct:.1f}%",
        f"  fit               {_verdict(s)}",
        f"  worst tile        IPU {s.worst_ipu} tile {s.worst_tile}: {s.worst_tile_bytes:,} of "
        f"{s.bytes_per_tile:,} bytes ({100 * s.worst_tile_bytes / s.bytes_per_tile:.1f}%)",
    ]
    if s.throughput_range is not None:
        lines.append(f"  ranges driven by  throughput: {_drivers(s.throughput_range_drivers)}; "
                     f"worst tile: {_drivers(s.worst_tile_range_drivers)}")
        if s.pin_down:
            lines.append(f"  pin down          the throughput range is wider than ±25%: measure {s.pin_down} and "
                         f"give it with --assume {s.pin_down}=VALUE")
    if s.host_bound:
        lines.append("  " + host_bound_line(s.input_wait_pct) + f"; the loader: {s.host_loader}")
    if s.profile:
        lines.append(f"  profile           {s.profile}")
    return "\n".join(lines)


def _verdict(s: Any) -> str:
    """``fits (worst tile 74% to 81%)``, ``does not fit: 12 tiles out of memory (...)`` or ``borderline (...)``."""
    oom = f"{s.oom_tiles:,} tiles out of memory" if s.oom_tiles else ""
    if s.fit_verdict is None:  # --no-ranges: the central estimate alone
        return f"does not fit: {oom}" if oom else "fits"
    low, high = s.worst_tile_pct_range or (0.0, 0.0)
    if s.fit_verdict == "borderline":
        return s.fit_verdict_text + (f"; {oom} at the central estimate" if oom else "")
    return f"{s.fit_verdict}{': ' + oom if oom else ''} (worst tile {low:.0f}% to {high:.0f}%)"


def _drivers(drivers: list[dict]) -> str:
    """The assumptions that dominate a range, largest first (three at most)."""
    return ", ".join(d["name"] for d in drivers[:3]) or "none"
