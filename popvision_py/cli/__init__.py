"""The `popvision` command line: one module per command, all registered here.

Commands are thin: they parse options, call the library, pick a renderer. Every
``PopvisionError`` is caught once, in ``PopvisionGroup.invoke``, printed as its sentence on
stderr, and turned into its exit code (2); users never see a traceback.
"""

from __future__ import annotations

import importlib
import sys

import click

from popvision_py import __version__
from popvision_py.errors import PopvisionError

# command name -> module under popvision_py.cli holding a click command called `command`
COMMANDS: dict[str, str] = {
    "dashboard": "dashboard",
    "info": "info",
    "models": "models",
    "run": "run",
    "report": "report",
    "compare": "compare",
    "export-trace": "export_trace",
    "sql": "sql",
}


class PopvisionGroup(click.Group):
    """Loads command modules lazily (fast startup) and turns project errors into one line."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        module = COMMANDS.get(name)
        if module is None:
            return None
        return importlib.import_module(f"popvision_py.cli.{module}").command

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except PopvisionError as exc:
            click.echo(f"Error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            # Outputs are published atomically: each is either whole or not there at all.
            click.echo("Interrupted.", err=True)
            ctx.exit(130)


@click.group(cls=PopvisionGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="popvision")
def main() -> None:
    """popvision: emulate IPU runs, and read, report and view their profile.pop files."""


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
