"""`popvision sql PROFILE "SELECT ..."`: SQL over the profile's tables (``popvision_py.sql.run_query``,
DuckDB locked down to the profile's tables), rendered as text, CSV or JSON to stdout or -o."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from popvision_py.cli.interrupts import _INTERRUPTS, deferred
from popvision_py.sql import MEMORY_LIMIT, run_query


def checked_output(output: str | None) -> Path | None:
    """Where to write: None for stdout (no -o, or -o -); else the path, checked as every command's -o is
    (``atomic.check_output``): a regular file replaced atomically, a device or FIFO written into, a
    directory, socket or symbolic link to a file refused before the query runs."""
    if output is None or output == "-":
        return None
    from popvision_py.format.atomic import check_output

    check_output(output)
    return Path(output)


def render(frame: Any, fmt: str, max_rows: int) -> str:
    """The result (a Table) as text, CSV or JSON."""
    if fmt == "csv":
        from popvision_py.render.csvout import table_csv
        return table_csv(frame)
    if fmt == "json":
        import json

        from popvision_py.render.jsonout import records
        return json.dumps(records(frame), indent=2) + "\n"
    from popvision_py.render.text import table
    return "\n".join(table(frame, max_rows=max_rows, clip=False)) + "\n"


@click.command("sql")
@click.argument("profile", type=click.Path())
@click.argument("query")
@click.option("--format", "fmt", type=click.Choice(["text", "csv", "json"]), default="text", show_default=True,
              help="Output format.")
@click.option("--max-rows", type=int, default=1000, show_default=True, help="Rows shown in text format.")
@click.option("-o", "--output", type=str, default=None, metavar="PATH",
              help="Write the result here (atomically) instead of stdout; '-' is stdout. A device or FIFO "
                   "is written into; symlinks to files and directories are refused.")
@click.option("--memory-limit", default=MEMORY_LIMIT, show_default=True, metavar="SIZE",
              help="DuckDB's memory bound (e.g. 512MB, 4GiB); a query needing more is refused.")
@click.option("--timeout", type=float, default=None,
              help="Interrupt the query after SECONDS (default: no limit).", metavar="SECONDS")
def command(profile: str, query: str, fmt: str, max_rows: int, output: str | None, memory_limit: str,
            timeout: float | None) -> None:
    """Run a SQL QUERY over PROFILE's tables (ops, programs, tile_cycles, tile_memory, variables, liveness,
    trace, exchanges).

    PROFILE may also be a tune result (popvision tune -o tune.parquet): its candidates are the table tune.
    The query reads those tables and nothing else: files, COPY, ATTACH, INSTALL/LOAD and SET are refused.
    """
    with deferred():  # a Ctrl-C inside DuckDB's module set-up would abort the process, not interrupt it
        import duckdb  # noqa: F401
    destination = checked_output(output)
    # the query also stops on a Ctrl-C the CLI's handler noted (DuckDB may swallow the KeyboardInterrupt)
    result = run_query(profile, query, memory_limit=memory_limit, timeout=timeout,
                       interrupted=lambda: bool(_INTERRUPTS))
    text = render(result, fmt, max_rows)
    if destination is None:
        click.echo(text, nl=False)
        return
    from popvision_py.format.atomic import atomic_output

    with atomic_output(destination) as out:
        out.write(text.encode("utf-8"))
    click.echo(f"Wrote {destination}", err=True)
