"""`popvision assumptions`: every figure the emulator assumes, with its value, interval and source."""

from __future__ import annotations

import json
import textwrap

import click

from popvision_py.render.format import assumption_value


@click.command("assumptions")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of objects: name, value, unit, low, high, "
              "source, valid, affects.")
@click.option("--markdown", is_flag=True, help="Print the table docs/emulator.md holds.")
def command(as_json: bool, markdown: bool) -> None:
    """List every assumption of the emulator: its value, unit, plausible interval (low to high, what
    `popvision run` puts a range on its answers with) and its source. Override one with
    `popvision run ... --assume NAME=VALUE`."""
    from engine.assumptions import describe

    rows = list(describe())
    if as_json:
        click.echo(json.dumps([r.as_json() for r in rows], indent=2))
        return
    if markdown:
        click.echo(markdown_table(rows))
        return
    lines = []
    for r in rows:
        lines += [f"{r.name}",
                  f"  value     {assumption_value(r.value)} {r.unit} (plausible {assumption_value(r.low)} to "
                  f"{assumption_value(r.high)}; valid {r.valid}; affects {' and '.join(r.affects)})"]
        lines += textwrap.wrap(r.source, width=100, initial_indent="  source    ", subsequent_indent="            ")
    lines.append(f"\n{len(rows)} assumptions. Override one with `popvision run MODEL --assume NAME=VALUE`: it is then "
                 "known and drops out of the run's ranges.")
    click.echo("\n".join(lines))


def markdown_table(rows: list) -> str:
    """The assumptions as docs/emulator.md's table: name, value, plausible interval, unit, source."""
    lines = ["| name | value | plausible (low to high) | valid range (unit) | affects | source |",
             "| --- | ---: | ---: | --- | --- | --- |"]
    lines += [f"| `{r.name}` | {assumption_value(r.value)} | {assumption_value(r.low)} to {assumption_value(r.high)} | "
              f"{r.valid} ({r.unit}) | "
              f"{', '.join(r.affects)} | {r.source} |" for r in rows]
    return "\n".join(lines)
