"""`popvision run MODEL`: emulate a model on IPUs; with --profile, write PROFILE_DIR/profile.pop.

MODEL is a zoo name (`popvision models`) or a path to a Python file that defines
``build(options: engine.Options) -> engine.Model`` (and optionally ``DEFAULTS``, a dict of option
defaults such as ``{"micro_batch_size": 16, "gradient_accumulation": 8}``).
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

import click

from engine.instrument import Summary
from engine.model import MODES, OPTIMISERS, PRECISIONS, STRATEGIES
from engine.targets import ARCHS
from popvision_py.errors import ConfigError


def _assumption(values: tuple[str, ...]) -> dict[str, float]:
    """``NAME=VALUE`` (or ``NAME.OPTIMISER=VALUE``) pairs as numbers; the engine checks names and ranges."""
    out = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--assume takes NAME=VALUE, not {item!r}.")
        try:
            out[name.strip()] = float(value) if any(c in value for c in ".eE") else int(value)
        except ValueError:
            raise ConfigError(f"--assume {name.strip()}: {value.strip()!r} is not a number.") from None
    return out


@click.command("run")
@click.argument("model")
@click.option("--batch-size", "micro_batch_size", type=int, help="Samples per micro-batch (the model's default if unset).")
@click.option("--device-iterations", type=int, help="Iterations per host call.")
@click.option("--gradient-accumulation", type=int, help="Micro-batches per weight update (pipelined training needs "
              "at least 2N-1 for N stages).")
@click.option("--strategy", type=click.Choice(list(STRATEGIES), case_sensitive=False),
              help="Execution strategy (the model's default if unset).")
@click.option("--stages", help='Blocks grouped into stages on IPUs: "B1,B2@0 B3@1 B4@2" (stages separated by '
              'spaces, blocks by commas, @n the IPU; stage k on IPU k if @n is left out). A..B is every block '
              'from A to B in model order, as `popvision models` prints: "embeddings..layer5@0 layer6..head@1".')
@click.option("--replicas", "replication_factor", type=int, help="Data-parallel replicas (replicationFactor).")
@click.option("--tensor-sharding", type=int, help="IPUs each stage's ops are split over (the t axis; weights and "
              "work divided, all-gather / reduce-scatter over IPU-Links).")
@click.option("--available-memory-proportion", type=float, help="Share of tile memory a matmul or convolution may "
              "use for temporary data (Poplar's default 0.6); lower serialises big matmuls.")
@click.option("--mode", type=click.Choice(MODES, case_sensitive=False), help="training (default) or inference.")
@click.option("--precision", type=click.Choice(PRECISIONS, case_sensitive=False),
              help="fp16 (default) or fp32: activations, weights and gradients.")
@click.option("--recompute/--no-recompute", default=None, help="Recompute activations in the backward pass.")
@click.option("--offload-optimiser/--no-offload-optimiser", default=None, help="Keep optimiser state in streaming memory (remote buffers).")
@click.option("--offload-weights/--no-offload-weights", default=None, help="Keep weights in streaming memory, loaded per pass.")
@click.option("--offload-activations/--no-offload-activations", default=None, help="Stash activations in streaming memory.")
@click.option("--replicated-tensor-sharding/--no-replicated-tensor-sharding", default=None,
              help="Shard optimiser state over the replicas.")
@click.option("--optimiser", type=click.Choice(OPTIMISERS, case_sensitive=False),
              help="Optimiser (the model's default if unset; adamw for most).")
@click.option("--arch", type=click.Choice(list(ARCHS), case_sensitive=False), help="IPU generation (mk2 by default).")
@click.option("--system", help="System to run on: IPU, IPU-POD4, POD16, POD64, POD128, POD256 (smallest that fits "
              "by default).")
@click.option("--runs", type=int, help="Host calls to emulate (each runs device-iterations iterations).")
@click.option("--preset", help="Model preset (gpt: gpt2-small ... gpt3-175b).")
@click.option("--layers", type=int, help="Layers (bert, gpt, vit).")
@click.option("--hidden", type=int, help="Hidden size (bert, gpt, vit).")
@click.option("--heads", type=int, help="Attention heads (bert, gpt, vit).")
@click.option("--seq-len", type=int, help="Sequence length (bert, gpt).")
@click.option("--vocab", type=int, help="Vocabulary size (bert, gpt).")
@click.option("--masked-tokens", type=int, help="Masked tokens per input the MLM head predicts (bert; Graphcore: 20 at "
              "sequence 128).")
@click.option("--packing", type=float, help="Sequences packed per input on average (bert; Graphcore's packed BERT: 1.17 "
              "at sequence 128); throughput counts sequences.")
@click.option("--tied-embeddings/--no-tied-embeddings", default=None, help="The output head shares the word-embedding "
              "matrix (bert, gpt; on by default, as in BERT and GPT-2); the default partition puts the head on IPU 0.")
@click.option("--embedding-alone/--no-embedding-alone", default=None, help="The embeddings alone on IPU 0, the layers "
              "on the other IPUs (gpt; Graphcore's GPT-2 layout).")
@click.option("--ipus", type=int, help="IPUs of the model's default partition (zoo models).")
@click.option("--assume", multiple=True, metavar="NAME=VALUE", help="Override an emulator assumption within its "
              "valid range (docs/emulator.md lists names and ranges), e.g. --assume amp_efficiency=0.5; per-optimiser "
              "ones take NAME.OPTIMISER=VALUE (optimiser_state_bytes_per_param.adam=12) or NAME=VALUE for all.")
@click.option("--profile", is_flag=True, help="Write PROFILE_DIR/profile.pop.")
@click.option("--profile-dir", default="./profile", show_default=True, type=click.Path(file_okay=False),
              help="Where to write profile.pop.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def command(model: str, strategy: str | None, stages: str | None, offload_optimiser: bool | None,
            offload_weights: bool | None, offload_activations: bool | None, replicated_tensor_sharding: bool | None, preset: str | None, layers: int | None,
            hidden: int | None, heads: int | None, seq_len: int | None, vocab: int | None, masked_tokens: int | None,
            packing: float | None, tied_embeddings: bool | None, embedding_alone: bool | None, ipus: int | None,
            assume: tuple[str, ...],
            profile: bool, profile_dir: str, as_json: bool, quiet: bool, **options: object) -> None:
    """Emulate MODEL (a zoo name or a .py file) and print time per step, throughput and memory fit."""
    from engine.runner import RunRequest, emulate
    from popvision_py.analysis.report import Report

    request = RunRequest(
        model=model,
        options=options,
        params={"preset": preset, "layers": layers, "hidden": hidden, "heads": heads, "seq_len": seq_len,
                "vocab": vocab, "masked_tokens": masked_tokens, "packing": packing,
                "tied_embeddings": tied_embeddings, "embedding_alone": embedding_alone, "ipus": ipus},
        strategy=strategy,
        stages=stages,
        offload_optimiser=offload_optimiser,
        offload_weights=offload_weights,
        offload_activations=offload_activations,
        replicated_tensor_sharding=replicated_tensor_sharding,
        assumptions=_assumption(assume),
        profile=Path(profile_dir) / "profile.pop" if profile else None,
        progress=not quiet and sys.stderr.isatty(),
    )
    with tempfile.TemporaryDirectory(prefix="popvision-run-") as scratch:
        # Idle time and FLOP utilisation come from the analysis of the profile, as `popvision report`
        # computes them: a run without --profile writes one to a scratch directory for that.
        request.profile = request.profile or Path(scratch) / "profile.pop"
        summary = emulate(request)
        with Report(request.profile) as report:
            figures = {"idle_pct": report.exchange.figures().idle_pct,
                       "flop_utilisation_pct": report.summary.figures().flop_utilisation_pct}
    if not profile:
        summary.profile = None
    click.echo(json.dumps({**asdict(summary), **figures}, indent=2) if as_json else summary_text(summary, **figures))


def summary_text(s: Summary, idle_pct: float, flop_utilisation_pct: float) -> str:
    """The lines `popvision run` prints."""
    fits = "yes" if s.fits else f"NO: {s.oom_tiles:,} tiles out of memory"
    shards = f" x {s.tensor_sharding} tensor shards" if s.tensor_sharding > 1 else ""
    lines = [
        f"{s.model}: {s.mode}, {s.strategy} over {s.num_ipus} IPU(s){shards} x {s.replicas} replica(s) "
        f"on {s.arch} ({s.system})",
        f"  time per step     {s.seconds_per_step * 1e3:,.3f} ms ({s.cycles_per_step:,.0f} cycles, "
        f"{s.samples_per_step:,} samples)",
        f"  throughput        {s.samples_per_second:,.1f} samples/s",
        f"  idle              {idle_pct:.1f}% of IPU time    FLOP utilisation {flop_utilisation_pct:.1f}%",
        f"  fits              {fits}",
        f"  worst tile        IPU {s.worst_ipu} tile {s.worst_tile}: {s.worst_tile_bytes:,} of "
        f"{s.bytes_per_tile:,} bytes ({100 * s.worst_tile_bytes / s.bytes_per_tile:.1f}%)",
    ]
    if s.profile:
        lines.append(f"  profile           {s.profile}")
    return "\n".join(lines)
