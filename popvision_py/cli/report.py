"""`popvision report PROFILE`: the reports of one profile as text, JSON, CSV, Markdown or HTML."""

from __future__ import annotations

import click

SECTION_CHOICES = ["all", "summary", "memory", "liveness", "stages", "exchange"]
FORMAT_CHOICES = ["text", "json", "csv", "md", "html"]


def output_options(func):
    """--section, --format and -o, shared by `report` and `compare`."""
    func = click.option("-o", "--output", type=click.Path(), default=None,
                        help="Write here (atomically) instead of stdout; a folder for csv. Required for csv and html.")(func)
    func = click.option("--format", "fmt", type=click.Choice(FORMAT_CHOICES), default="text", show_default=True,
                        help="Output format.")(func)
    func = click.option("--section", type=click.Choice(SECTION_CHOICES), default="all", show_default=True,
                        help="Which report.")(func)
    return func


def finish(written: list) -> None:
    for path in written:
        click.echo(f"Wrote {path}", err=True)


@click.command("report")
@click.argument("profile", type=click.Path())
@output_options
def command(profile: str, section: str, fmt: str, output: str | None) -> None:
    """Report on PROFILE: summary and insights, memory, liveness, stages, exchange."""
    from popvision_py.analysis.report import Report
    from popvision_py.render import emit
    from popvision_py.render.document import build_report

    with Report(profile) as report:
        doc = build_report(report, section, figures=fmt == "html")
        finish(emit(doc, fmt, output))
