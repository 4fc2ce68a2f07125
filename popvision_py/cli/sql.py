"""`popvision sql PROFILE "SELECT ..."`: SQL over the profile's tables with DuckDB.

Every table (ops, programs, tile_cycles, tile_memory, variables, liveness, trace, exchanges) is a
view under its schema name over its member, which DuckDB's own Parquet reader scans in place
through popvision_py.format.memberfs: a query reads only the columns it uses, skips the row groups
its filters rule out, and a table it does not name costs nothing.
"""

from __future__ import annotations

import click

from popvision_py.errors import PopvisionError
from popvision_py.format import schema as S


class QueryError(PopvisionError):
    """The query is empty, not text, or DuckDB could not run it."""


def checked_query(query: str) -> str:
    """The query, if it holds a statement and is text; else a QueryError saying what is wrong.

    A shell hands Python the bytes of an argument; bytes that are not UTF-8 arrive as lone
    surrogates (PEP 383), which DuckDB cannot take.
    """
    try:
        query.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(query[exc.start])
        if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8, escaped (PEP 383)
            position = len(query[: exc.start].encode("utf-8")) + 1
            raise QueryError(
                f"The query is not UTF-8 text: byte 0x{code - 0xDC00:02x} at byte {position} is not a character."
            ) from None
        raise QueryError(
            f"The query is not text: character {exc.start + 1} is a lone surrogate (U+{code:04X})."
        ) from None
    if not query.strip():
        raise QueryError('The query is empty; give a SQL statement, e.g. "SELECT count(*) FROM trace".')
    return query


def run_query(profile_path: str, query: str):
    """The query's result as a pandas DataFrame."""
    import duckdb

    from popvision_py.format import open_profile
    from popvision_py.format.memberfs import MemberFileSystem

    query = checked_query(query)
    with open_profile(profile_path) as profile, MemberFileSystem(profile) as members:
        con = duckdb.connect()
        try:
            # only the profile's tables: no scans of whatever Python objects happen to be in scope
            con.execute("SET python_enable_replacements = false")
            con.register_filesystem(members)
            for name, spec in S.TABLES.items():
                con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet('{members.protocol}://{spec.member}')")
            result = con.execute(query)
            if result is None:  # only comments or semicolons: no statement ran
                raise QueryError('The query holds no statement; give one, e.g. "SELECT count(*) FROM trace".')
            return result.fetch_df()
        except duckdb.Error as exc:
            if members.corrupt is not None:  # a column chunk failed its page checksums as DuckDB read it
                raise members.corrupt from None
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
