"""`popvision tune MODEL [run options] --system POD16`: the fastest mapping that fits, found by emulation on Dask.

The run options state the starting configuration (as for `popvision run`); the search varies the
mapping and the settings around it (docs/tune.md), emulates every candidate it keeps as a Dask
task, and prints the ranked table, the commands, the Pareto front of throughput against IPUs and a
compare of the best against the start. Candidates are ranked by their central estimates; the rows
shown also carry their fit verdict and ranges (``popvision_py.tune.search``). ``-o`` writes every
candidate (tune.parquet, read by `--resume`, the dashboard's What-if page, DuckDB or pandas); the
best candidate's profile goes to PROFILE_DIR/profile.pop and the start's to
PROFILE_DIR/start/profile.pop.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from popvision_py.analysis.findings.fixes import script_path
from popvision_py.cli import run as run_cli
from popvision_py.emulation import profile_folder, run_fields, run_request
from popvision_py.errors import ConfigError
from popvision_py.tune.cluster import dask_client, quiet_dask

# `popvision run`'s options a search takes as its start (its own --system, profile and output options aside)
RUN_OPTIONS = [p for p in run_cli.command.params
               if isinstance(p, click.Option)
               and p.name not in ("system", "profile", "profile_dir", "as_json", "quiet", "emulate_only", "ranges")]


def _search_dims(value: str | None) -> tuple[str, ...] | None:
    return None if value is None else tuple(d.strip() for d in value.split(",") if d.strip())


@click.command("tune")
@click.argument("model")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- SCRIPT_ARGS...]")
@click.option("--system", help="System to search on: IPU, IPU-POD4, POD16, POD64, POD128, POD256 (by default the "
              "smallest that holds the starting configuration).")
@click.option("--global-batch", type=click.IntRange(min=1), help="Samples per weight update to keep: gradient "
              "accumulation is global / (micro-batch x replicas) for every candidate.")
@click.option("--search", "search", callback=lambda _c, _p, v: _search_dims(v),
              help="What to vary, a comma list of stages, sharding, replicas, batch, recompute, offload, amp, "
              "phased (all by default).")
@click.option("--max-candidates", type=click.IntRange(min=1), default=1500, show_default=True,
              help="Emulate at most this many candidates; refused ones do not count. A cut round keeps a spread "
              "(every depth, tensor sharding and replica count before a second split of any); the output says "
              "what was cut.")
@click.option("--max-splits", type=click.IntRange(min=1), default=32, show_default=True,
              help="Try every contiguous split of the blocks into stages when a depth has at most this many.")
@click.option("--refine", type=click.IntRange(min=0), default=2, show_default=True,
              help="Round 2 varies the settings of this many of the fastest mappings that fit, and as "
                   "many that do not.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Processes of the local Dask cluster (this machine's cores by default).")
@click.option("--scheduler", help="Run on an existing Dask cluster: its scheduler's address, tcp://HOST:PORT.")
@click.option("--resume", type=click.Path(), help="A tune.parquet of an earlier run of this search: its candidates "
              "are not emulated again.")
@click.option("-o", "--output", type=click.Path(), default=None,
              help="Write every candidate here (atomically; default tune.parquet, or the --resume file).")
@click.option("--profile-dir", default="tune-profile", show_default=True, type=click.Path(),
              help="Write the best candidate's profile to PROFILE_DIR/profile.pop, the start's to "
              "PROFILE_DIR/start/profile.pop.")
@click.option("--no-profile", is_flag=True, help="Write no profiles (and print no compare).")
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True,
              help="Rows of the table printed; they, the start and the Pareto front are emulated again at the ends "
              "of the assumptions for their fit verdict and ranges.")
@click.option("--json", "as_json", is_flag=True, help="Print the metadata and every row as JSON.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="An imported pipeline's one what-if instead of the search: schedule=1F1B, micro_batches=16, "
              "fast_rank=R (rank R's stages as fast as the mean stage), stageN=FACTOR (stage N's cost scaled), "
              "blocks=1,4:4,1 (the model's blocks per stage as recorded and as asked: the split moved). "
              "Repeat for several.")
def command(model: str, system: str | None, global_batch: int | None, search: tuple[str, ...] | None,
            max_candidates: int, max_splits: int, refine: int, workers: int | None, scheduler: str | None,
            resume: str | None, output: str | None, profile_dir: str, no_profile: bool, top: int, as_json: bool,
            quiet: bool, sets: tuple[str, ...], script_args: tuple[str, ...], **run_options: Any) -> None:
    """Search the mappings of MODEL (a zoo name, a model file or a PopTorch script, whose arguments follow
    --) on a system by emulating them, and print the fastest that fit, each with its `popvision run` command.

    MODEL may instead be a profile imported from PyTorch traces (popvision import): its pipeline is re-timed
    under every schedule and micro-batch count the stages allow, with its own measured costs, and the
    fastest is printed with the change to make in PyTorch; --set asks one what-if."""
    imported_profile = _imported_profile(model)
    if imported_profile is not None:
        _tune_imported(imported_profile, sets, as_json, top)
        return
    if sets:
        raise ConfigError("--set asks a what-if of a profile imported from PyTorch traces; for a model, give its "
                          "options (popvision tune MODEL --strategy ...).")
    from engine.runner import prepare
    from popvision_py.scripts import load_script
    from popvision_py.format.tunefile import read_tune, write_tune
    from popvision_py.tune.search import Search, keep_finished, same_search
    from popvision_py.tune.space import DIMENSIONS, SearchSettings, Space, system_name

    request = _request(model, run_options, script_args)
    system = system_name(system) if system else prepare(request, load_script).target.system
    settings = SearchSettings(system=system, global_batch=global_batch, search=search or DIMENSIONS,
                              max_candidates=max_candidates, max_splits=max_splits, refine=refine)
    space = Space(request, settings)
    output = output or resume or "tune.parquet"
    previous = None
    if resume:
        previous, old_meta = read_tune(resume)
        probe = Search(space, None).meta()
        differs = same_search(probe, old_meta)
        if differs:
            raise ConfigError(f"{resume} is the result of another search ({differs}); --resume takes a result of "
                              f"this one.")
    from popvision_py.format.atomic import check_output, check_writable, output_target

    # a result or a profile that cannot be written fails now, not after the search
    if Path(output).is_dir():
        raise ConfigError(f"-o {output} is a folder; give the path of the .parquet file to write.")
    check_output(output)
    if not no_profile:
        check_writable(profile_dir)
        output_target(Path(profile_dir) / "profile.pop", streams=False)
    quiet_dask()
    show = not quiet and sys.stderr.isatty()
    with dask_client(scheduler, workers) as client, _bar(model, show) as progress:
        outcome = Search(space, client, previous, on_result=progress, top=top).run()
    meta = {**outcome.meta, "emulated": outcome.emulated, "reused": outcome.reused, "ranged": outcome.ranged}
    rows = outcome.rows
    if outcome.interrupted:
        click.echo(keep_finished(output, rows, meta, previous), err=True)
        raise KeyboardInterrupt
    best = rows[rows["rank"] == 1]
    start = rows[rows["is_start"]]
    if not no_profile and len(best):
        meta["best_profile"] = _profile(best["request"].iloc[0], Path(profile_dir) / "profile.pop")
        meta["start_profile"] = _profile(start["request"].iloc[0], Path(profile_dir) / "start" / "profile.pop")
    write_tune(output, rows, meta)
    if as_json:
        records = rows.astype(object).where(rows.notna(), None).to_dict(orient="records")
        click.echo(json.dumps({"meta": meta, "rows": records}, indent=2, default=str))
        return
    from popvision_py.tune.table import render

    click.echo(render(rows, meta, top))
    if outcome.reused:
        ranged = f" Ranges computed now for {outcome.ranged:,} of the candidates shown." if outcome.ranged else ""
        click.echo(f"\n{outcome.reused:,} candidates taken from {resume}, {outcome.emulated:,} emulated now.{ranged}")
    click.echo(f"\nEvery candidate: {output}")
    if "best_profile" in meta:
        click.echo(f"Best profile:   {script_path(meta['best_profile'])}  (the start's: "
                   f"{script_path(meta['start_profile'])})")
        click.echo("\nBest against the start (popvision compare):")
        click.echo(_compare(meta["start_profile"], meta["best_profile"]))


command.params.extend(RUN_OPTIONS)


def _imported_profile(model: str) -> Path | None:
    """MODEL's profile.pop if MODEL names a profile (a .pop file, or a folder holding profile.pop)."""
    path = Path(model)
    if path.is_dir() and (path / "profile.pop").is_file():
        return path / "profile.pop"
    return path if model.endswith(".pop") else None


def _as_recorded(replay: Any) -> str:
    """The recorded run's step, profiled and without the profiler (what every prediction is for)."""
    m = replay.m
    return (f"{m.measured_step_ns() / 1e6:,.1f} ms a step profiled (median step), {replay.baseline_ns() / 1e6:,.1f} "
            f"ms without the profiler ({m.profiler.how()})")


def _tune_imported(path: Path, sets: tuple[str, ...], as_json: bool, top: int) -> None:
    """`tune PROFILE` of an imported pipeline: the search (or --set's one what-if), printed."""
    import popvision_py
    from popvision_py.render.text import table
    from popvision_py.analysis.pipeline import whatif as replayed

    with popvision_py.open(path) as report:
        if not report.imported:
            raise ConfigError(f"{path} was emulated; popvision tune searches it from its model "
                              f"(popvision tune {report.run.get('model', 'MODEL')} ...).")
        replay = report.critical_path.replay()
        m = replay.m
        if sets:
            p = replayed.what_if(replay, replayed.parse_sets(sets))
            answer = {"change": p.change, "step_ms": p.step_ns / 1e6, "low_ms": p.low_ns / 1e6,
                      "high_ms": p.high_ns / 1e6, "recorded_step_ms": p.baseline_ns / 1e6,
                      "profiled_step_ms": m.measured_step_ns() / 1e6, "plain_step": m.profiler.how(),
                      "range_from": m.profiler.range_words(),
                      "gain_pct": p.gain_pct,
                      "bubble_pct": p.bubble_pct,
                      "ideal_bubble_pct": p.ideal_bubble_pct, "pytorch": replayed.pytorch_words(p)}
            if as_json:
                click.echo(json.dumps(answer, indent=2))
                return
            click.echo(f"{path}: {m.schedule}, {m.world} ranks, {m.n_stages} stages, {m.micro_batches} micro-batches "
                       f"as recorded: {_as_recorded(replay)}")
            click.echo(f"What if {p.change}: {p.step_ns / 1e6:,.1f} ms a step (range {p.low_ns / 1e6:,.1f} to "
                       f"{p.high_ns / 1e6:,.1f} ms), {p.per_micro_batch_ns / 1e6:,.2f} ms a micro-batch "
                       f"({p.gain_pct:+.1f}% throughput), bubble {p.bubble_pct:.1f}% (ideal {p.ideal_bubble_pct:.1f}%)")
            click.echo(f"Range: {m.profiler.range_words()}.")
            click.echo(f"In PyTorch: {replayed.pytorch_words(p)}")
            return
        found = replayed.search(replay)
    if as_json:
        click.echo(json.dumps({"profile": str(path), "schedule": m.schedule, "micro_batches": m.micro_batches,
                               "rows": found.to_dict("records")}, indent=2))
        return
    best = found.iloc[0]
    click.echo(f"{path}: {m.schedule}, {m.world} ranks, {m.n_stages} stages, {m.micro_batches} micro-batches as "
               f"recorded: {_as_recorded(replay)}; {len(found)} schedules x micro-batch counts re-timed with its "
               f"measured costs")
    rounded = found.head(top).assign(step_ms=found["step_ms"].round(1), low_ms=found["low_ms"].round(1),
                                     high_ms=found["high_ms"].round(1))
    click.echo("\n".join(table(rounded, max_rows=top, clip=False)))
    click.echo(f"\nFastest: {best['schedule']} with {int(best['micro_batches'])} micro-batches, "
               f"{best['ms_per_micro_batch']:,.2f} ms a micro-batch ({best['gain_pct']:+.1f}% throughput, range of "
               f"the step {best['low_ms']:,.1f} to {best['high_ms']:,.1f} ms)")
    click.echo(f"In PyTorch: {best['pytorch']}")
    click.echo("Not modelled: memory (more micro-batches in flight hold more activations; GPipe holds them all "
               "until its backwards) and contention between transfers (docs/real-traces.md).")


def _request(model: str, values: dict[str, Any], script_args: tuple[str, ...] = ()) -> Any:
    """The start as `popvision run` states it from the same options (a PopTorch script's as
    `popvision run SCRIPT --emulate-only ... -- SCRIPT_ARGS` does)."""
    from engine.runner import is_poptorch_script

    script = is_poptorch_script(model)
    if script_args and not script:
        raise ConfigError(f"Arguments after the model ({' '.join(script_args)}) are for PopTorch scripts; {model} "
                          f"is not one.")
    if model.endswith(".py") and Path(model).is_file():
        model = str(Path(model).resolve())  # rows' commands and requests run from any folder
    return run_request(model, values, script_args=script_args if script else None)


@contextlib.contextmanager
def _bar(model: str, show: bool) -> Iterator[Any]:
    """tqdm on stderr: candidates done of those known so far, and the best throughput that fits so far."""
    from tqdm import tqdm

    with tqdm(total=None, desc=f"Tuning {model}", unit="candidate", file=sys.stderr, disable=not show,
              leave=False) as bar:
        def progress(done: int, total: int, best: float | None) -> None:
            bar.total = total
            bar.n = done
            if best is not None:
                bar.set_postfix_str(f"best {best:,.1f} samples/s", refresh=False)
            bar.refresh()

        yield progress


def _profile(request_json: str, path: Path) -> str:
    """Emulate a row's request again, writing its profile to ``path``; the absolute path (the tune
    result's metadata keeps it, so the dashboard finds it from any folder)."""
    with profile_folder(path.parent):
        run_fields(json.loads(request_json), path)
    return str(path.resolve())


def _compare(a: str, b: str) -> str:
    """`popvision compare A B --section summary` as text."""
    from popvision_py.analysis.compare import Comparison
    from popvision_py.render import FORMATS
    from popvision_py.render.document import build_comparison

    with Comparison(a, b) as comparison:
        data = FORMATS["text"](build_comparison(comparison, "summary"))
    return data.decode() if isinstance(data, bytes) else str(data)
