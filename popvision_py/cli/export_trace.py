"""`popvision export-trace PROFILE -o trace.json`: the execution trace as Chrome trace-event JSON
(``popvision_py.export_trace``), for Perfetto or chrome://tracing."""

from __future__ import annotations

import sys

import click

from popvision_py.export_trace import Window, export
from popvision_py.format.atomic import check_output


@click.command("export-trace")
@click.argument("profile", type=click.Path())
@click.option("-o", "--output", type=click.Path(), required=True, help="The trace-event JSON file to write.")
@click.option("--iterations", metavar="A:B",
              help="Only iterations A to B-1, counted over the whole trace (run x iterations per run + "
                   "iteration, as the Gantt chart counts them); also A:, :B, or N for one iteration.")
@click.option("--from", "from_cycle", metavar="CYCLE", help="Only rows that end after CYCLE.")
@click.option("--to", "to_cycle", metavar="CYCLE", help="Only rows that start before CYCLE.")
@click.option("--ipu", "ipus", multiple=True, metavar="N", help="Only IPU N (repeat for several IPUs).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def command(profile: str, output: str, iterations: str | None, from_cycle: str | None, to_cycle: str | None,
            ipus: tuple[str, ...], quiet: bool) -> None:
    """Export PROFILE's execution trace as Chrome trace-event JSON (open it in Perfetto or chrome://tracing).

    One process per IPU, one track per stage and pass (and per kind of step outside the stages).
    """
    window = Window.parse(iterations, from_cycle, to_cycle, ipus)
    check_output(output)  # a destination that would be refused is refused before the profile is read
    events = export(profile, output, window=window, progress=not quiet and sys.stderr.isatty())
    click.echo(f"Wrote {events:,} events to {output}" + (f" ({window.describe()})" if window else ""), err=True)
