"""`popvision run MODEL`: emulate a model on IPUs; with --profile, write PROFILE_DIR/profile.pop.

MODEL is a zoo name (`popvision models`) or a path to a Python file that defines
``build(options: engine.RunOptions) -> engine.Model`` (and optionally ``DEFAULTS``, a dict of option
defaults such as ``{"micro_batch_size": 16, "gradient_accumulation": 8}``), or a PopTorch script
(imports poptorch, no ``build``), which runs with popvision's ``poptorch`` (docs/poptorch.md).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

import click

from engine.options import INPUT_KINDS, MODES, OPTIMISERS, PRECISIONS
from engine.runner import MAX_MEMORY_BYTES, MAX_TRACE_ROWS
from engine.layout import KINDS
from engine.targets import ARCHS
from popvision_py.emulation import parse_checkpoints, parse_proportions, profile_folder, run_request
from popvision_py.errors import ConfigError
from popvision_py.render.run_summary import summary_text
from popvision_py.run_figures import emulated_figures
from popvision_py.scripts import load_script


class Int64(click.ParamType):
    """A whole number that fits 64 bits: larger ones are refused while parsing, in one sentence."""

    name = "integer"

    def convert(self, value, param, ctx):  # type: ignore[no-untyped-def]
        number = click.INT.convert(value, param, ctx)
        if not -(2**63) <= number < 2**63:
            self.fail(f"{number} is beyond 64-bit integers.", param, ctx)
        return number


INT64 = Int64()


@click.command("run")
@click.argument("model")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- SCRIPT_ARGS...]")
@click.option("--batch-size", "micro_batch_size", type=INT64,
              help="Samples per micro-batch (the model's default if unset).")
@click.option("--device-iterations", type=INT64, help="Iterations per host call.")
@click.option("--gradient-accumulation", type=INT64, help="Micro-batches per weight update (pipelined training needs "
              "at least 2N-1 for N stages).")
@click.option("--strategy", type=click.Choice(list(KINDS), case_sensitive=False),
              help="Execution strategy (the model's default if unset).")
@click.option("--stages", help='Blocks grouped into stages on IPUs: "B1,B2@0 B3@1 B4@2" (stages separated by '
              'spaces, blocks by commas, @n the IPU; stage k on IPU k if @n is left out). A..B is every block '
              'from A to B in model order, as `popvision models` prints: "embeddings..layer5@0 layer6..head@1".')
@click.option("--replicas", "replication_factor", type=INT64, help="Data-parallel replicas (replicationFactor).")
@click.option("--tensor-sharding", type=INT64, help="IPUs each stage's ops are split over (the t axis; weights and "
              "work divided, all-gather / reduce-scatter over IPU-Links).")
@click.option("--available-memory-proportion", callback=lambda _c, _p, v: parse_proportions(v),
              help="Share of tile memory a matmul or convolution may use for temporary data (Poplar's default 0.6); "
              "lower serialises big matmuls. One value, or one per IPU: 0.1,0.3,0.3,0.3.")
@click.option("--recompute-checkpoints", callback=lambda _c, _p, v: parse_checkpoints(v),
              help="With --recompute, where the backward restarts from: blocks (every block's output, the default), "
              "stage (only the stage inputs: PopART's Pipeline recomputation) or K (every K-th block's output).")
@click.option("--attention-serialisation", type=INT64, help="Compute attention in this many pieces over the heads "
              "(each piece's scores live alone; one more launch per piece).")
@click.option("--mode", type=click.Choice(MODES, case_sensitive=False), help="training (default) or inference.")
@click.option("--precision", type=click.Choice(PRECISIONS, case_sensitive=False),
              help="fp16 (default) or fp32: activations, weights and gradients.")
@click.option("--partials", type=click.Choice(PRECISIONS, case_sensitive=False),
              help="Precision of matmul / convolution partial sums: fp32 (Poplar's default; the AMP at half rate) "
              "or fp16 (PopTorch Precision.setPartialsType(torch.half)); zoo models default to what Graphcore ran.")
@click.option("--recompute/--no-recompute", default=None, help="Recompute activations in the backward pass.")
@click.option("--offload-optimiser/--no-offload-optimiser", default=None,
              help="Keep optimiser state in streaming memory (remote buffers).")
@click.option("--offload-weights/--no-offload-weights", default=None,
              help="Keep weights in streaming memory, loaded per pass.")
@click.option("--offload-activations/--no-offload-activations", default=None,
              help="Stash activations in streaming memory.")
@click.option("--replicated-tensor-sharding/--no-replicated-tensor-sharding", default=None,
              help="Shard optimiser state over the replicas.")
@click.option("--optimiser", type=click.Choice(OPTIMISERS, case_sensitive=False),
              help="Optimiser (the model's default if unset; adamw for most).")
@click.option("--optimiser-state-type", type=click.Choice(PRECISIONS, case_sensitive=False),
              help="Precision of the optimiser's state (PopTorch's first/second_order_momentum_accum_type, "
              "velocity_accum_type): fp32 (default) or fp16.")
@click.option("--first-moment-type", type=click.Choice(PRECISIONS, case_sensitive=False),
              help="Adam, AdamW, LAMB: the first moment's precision alone (PopTorch's first_order_momentum_accum_type; "
              "Graphcore's BERT-Large uses fp16); the state's type by default.")
@click.option("--accum-type", type=click.Choice(PRECISIONS, case_sensitive=False),
              help="Precision of the gradient accumulators (PopTorch's accum_type; the weights' by default).")
@click.option("--combined-accum/--separate-accum", "use_combined_accum", default=None,
              help="SGD: one velocity that also accumulates the gradients (default), or a separate accumulator.")
@click.option("--outline/--no-outline", "enable_outlining", default=None,
              help="Identical layers share one copy of their code and vertex state (PopART's outlining; default on).")
@click.option("--arch", type=click.Choice(list(ARCHS), case_sensitive=False), help="IPU generation (mk2 by default).")
@click.option("--system", help="System to run on: IPU, IPU-POD4, POD16, POD64, POD128, POD256 (smallest that fits "
              "by default).")
@click.option("--runs", type=INT64, help="Host calls to emulate (each runs device-iterations iterations).")
@click.option("--host-processes", type=INT64, help="Host processes feeding the replicas (poprun instances, each with "
              "its own data loader; at most one per replica; 1 by default).")
@click.option("--input", "host_input", type=click.Choice(list(INPUT_KINDS), case_sensitive=False),
              help="What one sample is for the host's data loaders: synthetic (no loading), tensor (MNIST-like), "
              "image (ImageNet JPEGs decoded and augmented), text (tokenised); the model's own by default.")
@click.option("--loader-workers", type=INT64, help="Worker processes of each host process's DataLoader (PopTorch's "
              "num_workers); by default every core of the process's share of its host server.")
@click.option("--persistent-workers/--no-persistent-workers", default=None, help="The DataLoader keeps its workers "
              "from one epoch to the next (PopTorch's persistent_workers; TensorFlow's tf.data never restarts); by "
              "default the --loader-workers start again at every epoch of the model's dataset, as torch's "
              "DataLoader's do (without --loader-workers the loader is ideal: every core, kept).")
@click.option("--preset", help="Model preset (gpt: gpt2-small ... gpt3-175b).")
@click.option("--layers", type=INT64, help="Layers (bert, gpt, vit).")
@click.option("--hidden", type=INT64, help="Hidden size (bert, gpt, vit).")
@click.option("--heads", type=INT64, help="Attention heads (bert, gpt, vit).")
@click.option("--seq-len", type=INT64, help="Sequence length (bert, gpt).")
@click.option("--vocab", type=INT64, help="Vocabulary size (bert, gpt).")
@click.option("--masked-tokens", type=INT64,
              help="Masked tokens per input the MLM head predicts (bert; Graphcore: 20 at "
              "sequence 128).")
@click.option("--packing", type=float,
              help="Sequences packed per input on average (bert; Graphcore's packed BERT: 1.17 "
              "at sequence 128); throughput counts sequences.")
@click.option("--tied-embeddings/--no-tied-embeddings", default=None, help="The output head shares the word-embedding "
              "matrix (bert, gpt; on by default, as in BERT and GPT-2); the default partition puts the head on IPU 0.")
@click.option("--embedding-alone/--no-embedding-alone", default=None, help="The embeddings alone on IPU 0, the layers "
              "on the other IPUs (gpt; Graphcore's GPT-2 layout).")
@click.option("--ipus", type=INT64, help="IPUs of the model's default partition (zoo models).")
@click.option("--assume", multiple=True, metavar="NAME=VALUE", help="Override an emulator assumption within its "
              "valid range (docs/emulator.md lists names and ranges), e.g. --assume amp_efficiency=0.5; per-optimiser "
              "ones take NAME.OPTIMISER=VALUE (optimiser_state_bytes_per_param.adam=12) or NAME=VALUE for all.")
@click.option("--emulate-only", is_flag=True, help="PopTorch scripts: emulate the script's training model (with --mode "
              "inference its inference model) under the options given, without running its loop; the script's "
              "poptorch.Options are the defaults. Writes PROFILE_DIR/profile.pop with --profile.")
@click.option("--profile", is_flag=True, help="Write PROFILE_DIR/profile.pop.")
@click.option("--profile-dir", default="./profile", show_default=True, type=click.Path(),
              help="Where to write profile.pop.")
@click.option("--max-trace-rows", type=INT64, default=MAX_TRACE_ROWS, show_default=True,
              help="Refuse a run whose estimated trace (ops x passes x micro-batches x iterations x runs) is larger.")
@click.option("--max-memory-gb", type=float, default=MAX_MEMORY_BYTES / 2**30, show_default=True,
              help="Refuse a run whose emulation is estimated to need more memory (GiB).")
@click.option("--ranges/--no-ranges", default=True, show_default=True, help="Emulate the run again at the ends of "
              "each assumption's interval for a range on the throughput and the worst tile, and the fit verdict "
              "(fits, does not fit, borderline); --no-ranges prints the central estimates only.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def command(model: str, script_args: tuple[str, ...], emulate_only: bool, profile: bool, profile_dir: str,
            ranges: bool, as_json: bool, quiet: bool, **values: object) -> None:
    """Emulate MODEL (a zoo name, a model file or a PopTorch script) and print time per step, throughput
    and memory fit. A PopTorch script (a .py that imports poptorch and defines no build) runs as
    `python script.py SCRIPT_ARGS` would, training on the CPU; each model it compiles prints its
    summary and, with --profile, writes PROFILE_DIR/training/profile.pop or .../inference/profile.pop;
    with --emulate-only, its model is emulated under the options given, without running its loop."""
    from engine.runner import emulate, is_poptorch_script

    if profile and not profile_dir.strip():
        # Path("") is the current folder: an empty option would write profile.pop there unasked
        raise ConfigError("--profile-dir is empty; name the folder to write profile.pop into, e.g. "
                          "--profile-dir profile.")
    if is_poptorch_script(model) and not emulate_only:
        code = _run_script(model, script_args, Path(profile_dir) if profile else None)
        if code:
            click.get_current_context().exit(code)  # the script's own sys.exit(code)
        return
    if script_args and not emulate_only:
        if model.endswith(".py") and not Path(model).is_file():
            raise ConfigError(f"Script {model} does not exist.")
        raise ConfigError(f"Arguments after the model ({' '.join(script_args)}) are for PopTorch scripts; {model} "
                          f"is not one.")

    # Idle time and FLOP utilisation are the analysis' formulas over the emulated run (as `popvision
    # report` computes them from its profile), taken from the schedule: the trace is not read back.
    request = run_request(
        model, values, script_args=script_args if emulate_only else None,
        profile=Path(profile_dir) / "profile.pop" if profile else None,
        progress=not quiet and sys.stderr.isatty(),
        ranges=ranges,
        figures=emulated_figures,
    )
    with profile_folder(Path(profile_dir) if profile else None):
        summary = emulate(request, load_script)
    click.echo(json.dumps(asdict(summary), indent=2) if as_json else summary_text(summary))


# What a PopTorch script may be given: everything else is set by its own poptorch.Options.
SCRIPT_OPTIONS = frozenset({"model", "script_args", "profile", "profile_dir", "quiet"})


def _run_script(script: str, args: tuple[str, ...], profile_dir: Path | None) -> int:
    """Run a PopTorch script with popvision's poptorch; its exit code."""
    ctx = click.get_current_context()
    given = [name for name in ctx.params if name not in SCRIPT_OPTIONS
             and ctx.get_parameter_source(name) not in (click.core.ParameterSource.DEFAULT, None)]
    if given:
        flag = next(p.opts[0] for p in ctx.command.params if p.name == given[0])
        raise ConfigError(f"{flag} applies to a PopTorch script only with --emulate-only (its model emulated under "
                          f"the options given, without running its loop); run as it is, {script} takes its options "
                          f"from its poptorch.Options.")
    try:
        from poptorch._script import run_script
    except ImportError as exc:  # torch missing: the shim's own sentence
        raise ConfigError(str(exc)) from None
    from popdist._env import instance_directory

    # under poprun each instance writes (and locks) its own DIR/instance-I: one lock on DIR would have an
    # instance wait for another that waits for its gradients
    with profile_folder(instance_directory(profile_dir) if profile_dir is not None else None):
        return run_script(script, args, profile_dir)

