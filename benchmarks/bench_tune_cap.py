"""What `popvision tune --max-candidates N` finds: `python benchmarks/bench_tune_cap.py [--caps 40,100] [--tree DIR]`.

Runs `popvision tune gpt --preset gpt3-175b --system POD256 --max-candidates N --no-profile` (the
whole command, in its own process, 2 local workers by default on this machine) for each cap and
prints, from the result's rows: candidates emulated and refused, how many fit, the best throughput
and its ratio to the start's, how many (depth, tensor shards, replicas) groups and depths the
emulated candidates reach, and the command's wall time. ``--tree DIR`` runs another checkout's code
(e.g. the main branch's, for a before/after). ``--caps 0`` runs the uncapped search (about 500
candidates, several minutes).

Measured here (docs/tune.md "The cap" has the table): at a cap of 40, the best found went from
1.62 samples/s (the start, the only one of the first 40 that fit) to 1.94 (1.20x the start).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

COMMAND = ("tune", "gpt", "--preset", "gpt3-175b", "--system", "POD256", "--no-profile", "-q")


def group(request: str) -> tuple[int, int, int]:
    """A row's (depth, tensor shards, replicas) from its request."""
    r = json.loads(request)
    return len(r["stages"].split()), r["options"]["tensor_sharding"], r["options"]["replication_factor"]


def measure(cap: int, tree: Path, folder: Path) -> dict:
    from popvision_py.format.tunefile import read_tune

    out = folder / f"cap{cap}.parquet"
    words = [sys.executable, "-m", "popvision_py.cli", *COMMAND, "-o", str(out)]
    if cap:
        words += ["--max-candidates", str(cap)]
    began = time.perf_counter()
    subprocess.run(words, check=True, cwd=tree, capture_output=True, text=True,
                   env={**os.environ, "PYTHONPATH": str(tree)})
    seconds = time.perf_counter() - began
    rows, meta = read_tune(out)
    emulated = rows[rows["status"] != "rejected"]
    ok = rows[rows["status"] == "ok"]
    start = rows.loc[rows["is_start"], "samples_per_second"].iloc[0]
    groups = emulated["request"].map(group)
    figure = {"cap": cap or None, "emulated": len(emulated), "refused": int((rows["status"] == "rejected").sum()),
              "fit": len(ok), "best_samples_per_second": float(ok["samples_per_second"].max()),
              "vs_start": float(ok["samples_per_second"].max() / start), "groups": int(groups.nunique()),
              "depths": sorted({g[0] for g in groups}), "not_tried": meta.get("capped", 0), "seconds": seconds}
    print(f"cap {cap or 'none':>4}: {figure['emulated']:4} emulated, {figure['refused']} refused, "
          f"{figure['fit']:3} fit, best {figure['best_samples_per_second']:.2f} samples/s "
          f"({figure['vs_start']:.2f}x the start), "
          f"{figure['groups']} groups, depths {figure['depths']}, {figure['not_tried']} not tried, "
          f"{seconds:.1f} s", flush=True)
    return figure


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--caps", default="40,100", help="comma list of --max-candidates (0: uncapped)")
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose code runs (default this one)")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        figures = [measure(int(cap), args.tree.resolve(), Path(folder)) for cap in args.caps.split(",")]
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
