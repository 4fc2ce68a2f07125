"""Fidelity: the emulator's predictions of Graphcore's published figures, at the configurations Graphcore ran.

    .venv/bin/python benchmarks/fidelity.py            # print public | predicted | range | error
    .venv/bin/python benchmarks/fidelity.py --write    # and write the table into docs/emulator.md

Each point runs `popvision run ... --json` exactly as a user would type it (the command is in the
table). No assumption was fitted to any of these figures (engine/assumptions.py gives each one's
source): they are predictions, and a miss is reported, not failed. A throughput is "inside" when
the published figure lies in the run's range; a fit claim is right when the verdict agrees
(borderline is neither right nor wrong). Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "emulator.md"
BEGIN, END = "<!-- fidelity:begin -->", "<!-- fidelity:end -->"

# Graphcore's TensorFlow 1 ResNet-50 on IPU-POD16 (the seed talk's run): 4 pipeline stages x 4
# replicas, micro-batch 16, split after stage1/unit3, stage2/unit4 and stage3/unit4 (Graphcore's
# names for the units our zoo calls layer1.2, layer2.3 and layer3.3), recomputation, momentum SGD,
# available memory proportion 0.15, half partials, FP32 gradient accumulators and momentum (its
# precision "16.32"; TensorFlow's pipeline accumulates gradients apart from the optimiser), one poprun
# instance per replica. IPU-POD64: the same with 16 replicas and a quarter of the accumulation
# ("just changes the number of accumulated gradients in order to maintain the same global batch
# size"). Source: graphcore/examples applications/tensorflow/cnns/training/configs.yml
# (mk2_resnet50_bn_16ipus, mk2_resnet50_bn_64ipus) and its README (poprun --num-instances). Its input
# is a tf.data pipeline that repeats the dataset without starting its readers again at each epoch:
# --persistent-workers.
RESNET = ('resnet50 --stages "stem..layer1.2@0 layer2.0..layer2.3@1 layer3.0..layer3.3@2 layer3.4..head@3" '
          "--batch-size 16 --available-memory-proportion 0.15 --optimiser sgd --recompute --partials fp16 "
          "--accum-type fp32 --separate-accum --persistent-workers")
RESNET_SOURCE = "graphcore/examples applications/tensorflow/cnns/training/configs.yml"
# The PopTorch pipelining tutorial's MNIST run (seed tutorial): batch 40, gradient accumulation 10,
# device iterations 10, 4 IPUs pipelined, AdamW, optimiser state offloaded (its "Saving memory by
# offloading" section sets it on the training options before training), poptorch.DataLoader with
# num_workers=16.
MNIST = ("mnist --batch-size 40 --gradient-accumulation 10 --device-iterations 10 --optimiser adamw "
         "--offload-optimiser --loader-workers 16")
# BERT-Large on an IPU-POD16 (seed blog): pipelined over 4 IPUs x 4 replicas, or 8 IPUs x 2 replicas,
# as Graphcore's BERT-Large runs: LAMB with an FP16 first moment and FP16 accumulators, half partials,
# recomputation, the zoo's memory-aware split (Graphcore's layers per IPU [3, 7, 7, 7], the MLM head
# tied to the embedding on IPU 0). Source: graphcore/examples nlp/bert/pytorch configs_pretraining.yml
# (pretrain_large_128) and Graphcore's published IPU config for bert-large-uncased
# (enable_half_first_order_momentum, layers_per_ipu, enable_half_partials).
BERT4 = "bert-large --ipus 4 --replicas 4 --first-moment-type fp16"
BERT8 = "bert-large --ipus 8 --replicas 2 --first-moment-type fp16"
# GPT-3 175B on an IPU-POD256 (seed blog): p=8, t=8, r=4 (the zoo preset's published mapping).
GPT3 = "gpt --preset gpt3-175b"


@dataclass(frozen=True)
class Point:
    """One published figure and the run that mirrors it."""

    name: str
    args: str
    public: float | bool  # samples per second, or fits
    source: str

    @property
    def command(self) -> str:
        return f"popvision run {self.args}"


POINTS = (
    Point("ResNet-50 training, IPU-POD16 (img/s)", f"{RESNET} --replicas 4 --gradient-accumulation 256 "
          "--host-processes 4", 26_000, f"seed talk; {RESNET_SOURCE} mk2_resnet50_bn_16ipus"),
    Point("ResNet-50 training, IPU-POD64 (img/s)", f"{RESNET} --replicas 16 --gradient-accumulation 64 "
          "--host-processes 16 --system POD64", 70_000, f"seed talk; {RESNET_SOURCE} mk2_resnet50_bn_64ipus"),
    Point("MNIST tutorial, 4 IPUs pipelined (img/s)", MNIST, 15.04 * 4_000,
          "seed tutorial: 15.04 it/s of 4,000 images"),
    Point("BERT-Large p=4 r=4, optimiser in streaming memory: fits", f"{BERT4} --offload-optimiser", True,
          "seed blog"),
    Point("BERT-Large p=4 r=4, optimiser on chip: fits", f"{BERT4} --no-offload-optimiser", False, "seed blog"),
    Point("BERT-Large p=8 r=2, optimiser on chip: fits", f"{BERT8} --no-offload-optimiser", True, "seed blog"),
    Point("GPT-3 175B p=8 t=8 r=4, phased: fits", f"{GPT3} --strategy phased", True, "seed blog"),
    Point("GPT-3 175B p=8 t=8 r=4, not phased: fits", f"{GPT3} --strategy pipelined", False, "seed blog"),
)


def run(point: Point) -> dict:
    """The emulator's summary of the point's run (``popvision run ... --json``)."""
    words = [sys.executable, "-m", "popvision_py.cli", "run", *shlex.split(point.args), "-q", "--json"]
    done = subprocess.run(words, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"{point.command} failed: {done.stderr.strip() or done.stdout.strip()}")
    return json.loads(done.stdout)


def row(point: Point, summary: dict) -> dict:
    """public | predicted | range | error for one point."""
    if isinstance(point.public, bool):
        verdict = summary.get("fit_verdict") or ("fits" if summary["fits"] else "does not fit")
        worst = 100 * summary["worst_tile_bytes"] / summary["bytes_per_tile"]
        low, high = summary.get("worst_tile_pct_range") or [worst] * 2
        error = "borderline" if verdict == "borderline" else "right" if (verdict == "fits") == point.public else "WRONG"
        return {"point": point.name, "public": "fits" if point.public else "does not fit", "emulator": verdict,
                "range": f"worst tile {worst:.0f}% ({low:.0f}% to {high:.0f}%)", "error": error,
                "ok": error == "right", "inside": error != "WRONG", "command": point.command, "source": point.source,
                "bound": ""}
    emulated = summary["samples_per_second"]
    low, high = summary.get("throughput_range") or (emulated, emulated)
    error = emulated / point.public - 1
    bound = "host" if summary.get("host_bound") else "IPUs"
    return {"point": point.name, "public": f"{point.public:,.0f}", "emulator": f"{emulated:,.0f}",
            "range": f"{low:,.0f} to {high:,.0f}", "error": f"{error:+.1%}", "ok": abs(error) <= 0.10,
            "inside": low <= point.public <= high, "command": point.command, "source": point.source, "bound": bound}


def table(rows: list[dict]) -> str:
    lines = ["| published figure | public | predicted | range | error | public in range | bound by | run | source |",
             "| --- | ---: | ---: | ---: | ---: | :---: | --- | --- | --- |"]
    lines += [f"| {r['point']} | {r['public']} | {r['emulator']} | {r['range']} | {r['error']} | "
              f"{'yes' if r['inside'] else 'no'} | {r['bound']} | `{r['command']}` | {r['source']} |" for r in rows]
    return "\n".join(lines)


def write(doc: Path, text: str) -> None:
    """Replace the text between the fidelity markers of ``doc``."""
    body = doc.read_text()
    if BEGIN not in body or END not in body:
        raise SystemExit(f"{doc} has no {BEGIN} ... {END} markers to write the table between.")
    head, rest = body.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    doc.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write the table into {DOC.relative_to(ROOT)}")
    args = parser.parse_args()
    rows = []
    for point in POINTS:
        rows.append(row(point, run(point)))
        r = rows[-1]
        print(f"{r['point']:58} {r['public']:>13} {r['emulator']:>13} {r['range']:>30} {r['error']:>10} "
              f"{'inside' if r['inside'] else 'OUTSIDE':>8}", flush=True)
    within = sum(r["ok"] for r in rows)
    inside = sum(r["inside"] for r in rows)
    print(f"{within} of {len(rows)} points within 10% or right; {inside} of {len(rows)} inside the printed range "
          f"(or not contradicted by a borderline verdict)")
    if args.write:
        write(DOC, table(rows))
        print(f"wrote the table into {DOC.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
