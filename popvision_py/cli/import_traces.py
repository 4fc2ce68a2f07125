"""`popvision import TRACES... -o DIR`: PyTorch profiler traces (one per rank) into DIR/profile.pop.

TRACES are files, folders (their traces) or glob patterns, ``.json`` or ``.json.gz``, one file per rank
(``torch.profiler``'s ``export_chrome_trace`` or ``tensorboard_trace_handler``). A folder that
``tensorboard_trace_handler`` wrote over several profiling cycles holds one trace per worker a cycle
(``<worker>.<ms>.pt.trace.json``): ``--cycle`` picks one (``popvision_py.importer.profiling_cycles``).
Each rank's events are cut into byte ranges decoded in parallel (``--jobs``) and reduced as they come
(``popvision_py.importer.ranges``); each rank's columns go to anonymous spill files in DIR's folder as they
come and are read back a window at a time (``popvision_py.importer.spill``), so memory stays flat whatever the
traces' size. A job of many small ranks has their rows cut by processes forked once the profile is planned
(``popvision_py.importer.forked``). ``--scheduler`` reads and reduces the ranks on an existing Dask cluster's
workers instead (``popvision_py.importer.cluster``). The profile is written atomically: a bad trace is one
sentence and exit code 2, and an earlier profile in DIR is left as it was. Then each rank's CPU timeline goes
to DIR/system/rank-<r>.pvti.parquet. docs/real-traces.md says what each figure means and what is inferred.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click

from popvision_py.render.names import ranks_named
from popvision_py.errors import ConfigError
from popvision_py.format.atomic import check_writable, output_target


@click.command("import")
@click.argument("traces", nargs=-1, required=True)
@click.option("-o", "--output", "output", required=True, type=click.Path(),
              help="Folder to write profile.pop into (made if needed).")
@click.option("--device-memory", type=float, metavar="GIB",
              help="Each rank's device memory in GiB, which the memory reports measure against (a GPU trace "
                   "states it; a CPU trace does not, and is then measured against the largest rank's peak).")
@click.option("--jobs", type=click.IntRange(1, 256),
              help="Processes decoding the traces at once, and cutting many small ranks into the profile's rows "
                   "(the CPUs by default; 1: in this process).")
@click.option("--name", help="The run's name in the reports (the traces' folder name by default).")
@click.option("--cycle", metavar="N|latest",
              help="Of a tensorboard_trace_handler folder holding several profiling cycles (one trace per worker "
                   "a cycle, <worker>.<ms>.pt.trace.json), the cycle to import: 1 the oldest, ..., or latest "
                   "(the default).")
@click.option("--scheduler", metavar="tcp://HOST:PORT",
              help="Read the ranks on an existing Dask cluster: its scheduler's address. Each rank is a task that "
                   "reads and reduces its trace on a worker, which writes its columns to a scratch folder beside "
                   "OUTPUT; this machine writes the profile from them. The traces and OUTPUT must lie on storage "
                   "every worker sees, at the same paths; workers of one thread each (dask worker --nthreads 1).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def command(traces: tuple[str, ...], output: str, device_memory: float | None, jobs: int | None, name: str | None,
            cycle: str | None, scheduler: str | None, quiet: bool) -> None:
    """Import PyTorch profiler traces (one per rank) as OUTPUT/profile.pop: pipeline stages, micro-batches,
    bubble, exposed communication and memory, for `report`, `dashboard`, `compare`, `export-trace` and `sql`.
    A tensorboard_trace_handler folder of several profiling cycles: its newest cycle, or the one --cycle names."""
    from popvision_py.importer import find_traces, import_traces
    from popvision_py.importer.profiling_cycles import pick_cycle

    if not output.strip():
        raise ConfigError("-o is empty; name the folder to write profile.pop into, e.g. -o profile.")
    if device_memory is not None and not 0 < device_memory <= 1 << 20:
        raise ConfigError(f"--device-memory {device_memory:g} is not a memory size in GiB (above 0, at "
                          f"most 1,048,576).")
    if scheduler is not None and jobs is not None:
        raise ConfigError("--jobs sets the processes of an import on this machine; with --scheduler the cluster's "
                          "workers read the traces (dask worker --nworkers N).")
    picked = pick_cycle(find_traces(traces), _cycle(cycle))
    paths = picked.paths
    folder = Path(output)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"-o {output} is a file; give a folder to write profile.pop into.")
    if folder.is_dir():
        check_writable(folder)
    target = folder / "profile.pop"
    output_target(target, streams=False)  # a FIFO or device there is refused, not replaced
    memory = int(device_memory * 2**30) if device_memory else None
    from popvision_py.tune.cluster import scheduler_client

    with scheduler_client(scheduler) as client, _bar(len(paths), shown=not quiet and sys.stderr.isatty()) as bar:
        phases = _Phases(bar)
        if client is None:
            run = import_traces(paths, target, device_memory=memory, jobs=jobs, name=name, progress=phases.read,
                                written=phases.wrote)
        else:
            from popvision_py.importer.cluster import import_on_cluster

            run = import_on_cluster(client, paths, target, device_memory=memory, name=name, progress=phases.read,
                                    written=phases.wrote)
    info = run["import"]
    if picked.note():
        click.echo(picked.note())
    click.echo(f"Imported {len(paths):,} trace(s) ({info['events']:,} events, {ranks_named(info['ranks'])}): "
               f"{info['schedule']}, {len(run['stages']):,} stage(s), "
               f"{run['gradient_accumulation']:,} micro-batch(es), {run['device_iterations']:,} step(s).")
    for line in info["not_inferred"]:
        click.echo(f"  not in the trace: {line}")
    click.echo(f"Wrote {target}")
    from popvision_py.format.system import SUFFIX
    from popvision_py.importer.system import ALL_RANKS, ONE_FILE_PAST

    ranks = len(info["ranks"])
    files = f"{ranks} file(s)" if ranks <= ONE_FILE_PAST else f"one file, {ALL_RANKS}{SUFFIX}, of {ranks:,} ranks"
    click.echo(f"Wrote {folder / 'system'}: each rank's CPU timeline ({files}, for the System page)")


def _bar(ranks: int, shown: bool) -> Any:
    """The progress bar of the ranks read, then written, on stderr; where it would not show (``-q``, not a
    terminal), one that does nothing, without importing tqdm (its import, about 30 ms, is a tenth of a small
    trace's whole import)."""
    if not shown:
        return contextlib.nullcontext(SimpleNamespace(update=lambda n: None, reset=lambda: None,
                                                      set_description=lambda text: None))
    from tqdm import tqdm

    return tqdm(total=ranks, desc="Reading traces", unit="rank", file=sys.stderr, leave=False)


class _Phases:
    """The bar's two phases: the ranks read ("Reading traces"), then the ranks whose rows are written ("Writing
    profile": at thousands of ranks the write takes about as long as the read)."""

    def __init__(self, bar: Any) -> None:
        self.bar, self.writing = bar, False

    def read(self) -> None:
        self.bar.update(1)

    def wrote(self) -> None:
        if not self.writing:
            self.writing = True
            self.bar.reset()
            self.bar.set_description("Writing profile")
        self.bar.update(1)


def _cycle(value: str | None) -> int | None:
    """``--cycle``: a cycle's number from 1, or None for the newest (``latest`` or not given)."""
    if value is None or value.strip().lower() == "latest":
        return None
    if not (value.strip().isascii() and value.strip().isdigit() and 1 <= int(value) < 1 << 31):
        raise ConfigError(f"--cycle {value} is not a profiling cycle; give its number from 1 (the oldest), "
                          f"or latest.")
    return int(value)
