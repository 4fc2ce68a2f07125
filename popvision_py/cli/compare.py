"""`popvision compare A B`: the run settings that differ, then every report of two profiles side by side
with the differences."""

from __future__ import annotations

import click

from popvision_py.cli.report import COMPARE_CHOICES, finish, output_options


@click.command("compare")
@click.argument("a", type=click.Path())
@click.argument("b", type=click.Path(), required=False)
@output_options(sections=COMPARE_CHOICES)
def command(a: str, b: str | None, section: str, fmt: str, output: str | None) -> None:
    """Compare profiles A and B: the run settings that differ, then each figure of each report, b - a and
    the change in percent (a row one profile lacks counts as 0 bytes or cycles there; identifiers such as
    the worst tile or the bottleneck stage get no difference). A and B may be runs' folders (their first
    profile); A alone, a poprun run's folder, compares its first two instances."""
    from popvision_py.analysis.compare import Comparison
    from popvision_py.errors import ConfigError
    from popvision_py.format.runs import run_profiles
    from popvision_py.render import emit
    from popvision_py.render.document import build_comparison

    runs = run_profiles(a)
    if b is None:
        if len(runs) < 2:
            raise ConfigError(f"{a} holds one profile; give a second to compare it with (popvision compare A B).")
        a, b = str(runs[0][1]), str(runs[1][1])
    else:
        a, b = str(runs[0][1]), str(run_profiles(b)[0][1])

    with Comparison(a, b) as comparison:
        finish(emit(build_comparison(comparison, section), fmt, output))
