"""`popvision compare A B`: the run settings that differ, then every report of two profiles side by side
with the differences."""

from __future__ import annotations

import click

from popvision_py.cli.report import COMPARE_CHOICES, finish, output_options


@click.command("compare")
@click.argument("a", type=click.Path())
@click.argument("b", type=click.Path())
@output_options(sections=COMPARE_CHOICES)
def command(a: str, b: str, section: str, fmt: str, output: str | None) -> None:
    """Compare profiles A and B: the run settings that differ, then each figure of each report, b - a and
    the change in percent (a row one profile lacks counts as 0 bytes or cycles there; identifiers such as
    the worst tile or the bottleneck stage get no difference)."""
    from popvision_py.analysis.compare import Comparison
    from popvision_py.render import emit
    from popvision_py.render.document import build_comparison

    with Comparison(a, b) as comparison:
        finish(emit(build_comparison(comparison, section), fmt, output))
