"""`popvision sql PROFILE "SELECT ..."`: SQL over the profile's tables with DuckDB.

Only the tables the query names are read; each is handed to DuckDB as an Arrow table under its
schema name (ops, programs, tile_cycles, tile_memory, variables, liveness, trace, exchanges).
"""

from __future__ import annotations

import re

import click

from popvision_py.errors import PopvisionError
from popvision_py.format import schema as S


class QueryError(PopvisionError):
    """DuckDB could not run the query."""


def referenced_tables(query: str) -> list[str]:
    """The schema's tables the query mentions (as whole words, case-insensitive)."""
    return [t for t in S.TABLES if re.search(rf"(?<![\w.]){t}(?!\w)", query, re.IGNORECASE)]


def run_query(profile_path: str, query: str):
    """The query's result as a pandas DataFrame."""
    import duckdb

    from popvision_py.format import open_profile

    with open_profile(profile_path) as profile:
        con = duckdb.connect()
        try:
            for name in referenced_tables(query):
                con.register(name, profile.read_table(name))
            try:
                return con.execute(query).fetch_df()
            except duckdb.Error as exc:
                message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise QueryError(f"The query failed: {message}") from None
        finally:
            con.close()


@click.command("sql")
@click.argument("profile", type=click.Path())
@click.argument("query")
@click.option("--format", "fmt", type=click.Choice(["text", "csv", "json"]), default="text", show_default=True,
              help="Output format.")
@click.option("--max-rows", type=int, default=1000, show_default=True, help="Rows shown in text format.")
def command(profile: str, query: str, fmt: str, max_rows: int) -> None:
    """Run a SQL QUERY over PROFILE's tables (ops, programs, tile_cycles, tile_memory, variables, liveness, trace, exchanges)."""
    frame = run_query(profile, query)
    if fmt == "csv":
        click.echo(frame.to_csv(index=False), nl=False)
    elif fmt == "json":
        import json

        from popvision_py.render.jsonout import records
        click.echo(json.dumps(records(frame), indent=2))
    else:
        from popvision_py.render.text import table
        click.echo("\n".join(table(frame, max_rows=max_rows, clip=False)))
