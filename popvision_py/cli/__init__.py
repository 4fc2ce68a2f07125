"""The `popvision` command line: one module per command, all registered here.

Commands are thin: they parse options, call the library, pick a renderer. Every
``PopvisionError`` is caught once, in ``PopvisionGroup.invoke``, printed as its sentence on
stderr, and turned into its exit code (2); users never see a traceback. Ctrl-C at any moment is
"Interrupted." and exit code 130: outputs are published atomically, so each is whole or not there.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
import traceback
from typing import NoReturn


def _exit_interrupted(signum: int, frame: object) -> None:
    """Ctrl-C while the program is still starting: nothing is open yet, so leave at once."""
    os.write(2, b"Interrupted.\n")
    os._exit(130)


# Run as a program (the `popvision` script, or `python -m popvision_py.cli`), not imported by a test
# or a library: from here until the command starts, Ctrl-C ends the process without a traceback.
PROGRAM = bool(sys.argv) and (sys.argv[0] == "-m" or os.path.basename(sys.argv[0]) == "popvision")
if PROGRAM and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _exit_interrupted)

import importlib  # noqa: E402 - after the handler, so that Ctrl-C during these imports is covered

import click  # noqa: E402

from popvision_py.version import __version__  # noqa: E402
from popvision_py.errors import PopvisionError  # noqa: E402
from popvision_py.cli.interrupts import _INTERRUPTS, _interrupt, interrupted  # noqa: E402, F401 - re-exported

# command name -> (module under popvision_py.cli holding a click command called `command`, the line
# `popvision --help` lists it with): the list is made from here, without importing any command's module
COMMANDS: dict[str, tuple[str, str]] = {
    "assumptions": ("assumptions", "List the emulator's assumptions, their values and ranges."),
    "dashboard": ("dashboard", "Open a profile (or two, compared) in the dashboard."),
    "info": ("info", "Show what a profile holds: target, run, tables."),
    "models": ("models", "List the model zoo."),
    "run": ("run", "Emulate a model: time per step, throughput, memory fit."),
    "report": ("report", "Report on a profile: memory, stages, exchange, operations..."),
    "compare": ("compare", "Compare two profiles, figure by figure."),
    "export-trace": ("export_trace", "Export the execution trace as Chrome trace-event JSON."),
    "import": ("import_traces", "Import PyTorch profiler traces as a profile.pop."),
    "sql": ("sql", "Run a SQL query over a profile's tables."),
    "tune": ("tune", "Search a model's mappings for the fastest that fit."),
}


# command name -> environment it runs in unless the user set otherwise, set before its module (and pyarrow, which
# reads it once) is imported. Arrow's allocations from the system's allocator, whose freed pages are handed back
# as the command goes: the import's once a few MiB of its windows have been dropped (``importer.parts.
# release_memory``); the report's before each run of ranks of a GPU section (``gpu_ranks``: the pool's
# ``release_unused``, glibc's ``malloc_trim`` here).
# Arrow's own (mimalloc) keeps what its threads freed: the import's memory would climb with the rows it writes,
# and the report's and the dashboard's are 10 to 20% more (``report --section all --format json``: 100 MB of
# traces in 4 ranks, 193 and 195 MiB against 168; 554 MB in 4,096 ranks, 323 MiB against 275 and 283; the
# dashboard's warm-up at 5 GB in 4 ranks, 514 MiB against 423; ``export-trace`` of 10 GB in 4 ranks, 285 against 200;
# the same documents).
ARROW_SYSTEM_POOL = {"ARROW_DEFAULT_MEMORY_POOL": "system"}
ENVIRONMENT: dict[str, dict[str, str]] = {"import": ARROW_SYSTEM_POOL, "report": ARROW_SYSTEM_POOL,
                                          "dashboard": ARROW_SYSTEM_POOL, "export-trace": ARROW_SYSTEM_POOL}


class PopvisionGroup(click.Group):
    """Loads command modules lazily (fast startup) and turns project errors into one line."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        for key, value in ENVIRONMENT.get(name, {}).items():
            os.environ.setdefault(key, value)
        return importlib.import_module(f"popvision_py.cli.{COMMANDS[name][0]}").command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands, each with its line from COMMANDS: listing them imports none of them (so
        `popvision --help` loads neither the engine nor pandas)."""
        with formatter.section("Commands"):
            formatter.write_dl([(name, COMMANDS[name][1]) for name in self.list_commands(ctx)])

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except BaseException as exc:
            # A Ctrl-C may surface as another error raised while cleaning up after it (a closed
            # Parquet file, say): what the user did was interrupt, so that is what we say.
            if interrupted(exc) or _INTERRUPTS:
                if PROGRAM:
                    signal.signal(signal.SIGINT, signal.SIG_IGN)
                click.echo("Interrupted.", err=True)
                ctx.exit(130)
            if not isinstance(exc, PopvisionError):
                raise
            click.echo(f"Error: {exc}", err=True)
            code = exc.exit_code
        # Out of the except block, the error and its traceback are let go: the frames it held (a
        # Parquet reader part way through a table, with Arrow's threads behind it) are closed now,
        # while Arrow is alive, not at the interpreter's exit, where a live Arrow thread aborts the
        # process ("terminate called without an active exception") after the sentence is printed.
        # Only as a program: a caller in process (a test, a script using CliRunner) goes on living,
        # and there a full collection of its large heap cost 70-90 ms per refused command.
        if PROGRAM:
            gc.collect()
        ctx.exit(code)

    def main(self, args=None, *rest, **extra):  # type: ignore[override]
        """As click's, run as a program: one Ctrl-C raises KeyboardInterrupt (so that partial
        outputs are discarded), later ones and any during exit are ignored; the process then ends
        with the command's exit code and nothing after it (``leave``)."""
        program = PROGRAM and args is None
        if program and signal.getsignal(signal.SIGINT) is _exit_interrupted:
            signal.signal(signal.SIGINT, _interrupt)
        try:
            return super().main(args, *rest, **extra)
        except KeyboardInterrupt:  # outside any command (click's own parsing)
            click.echo("Interrupted.", err=True)
            code = 130
        except SystemExit as exc:
            if not program:
                raise
            code = exit_code(exc)
        except BaseException:
            if not program:
                raise
            traceback.print_exc()  # a bug, not bad input: Python's own report and exit code
            code = 1
        finally:
            if program:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
        if not program:
            sys.exit(code)
        leave(code)


def exit_code(exc: SystemExit) -> int:
    """The status ``exc`` asks for, as the interpreter would give it (a message is printed, status 1)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def leave(code: int) -> NoReturn:
    """End the process now with ``code``, its output flushed, without the interpreter's shutdown.

    By the time a command returns (or its error has been printed), every output is published and
    closed. What the interpreter's shutdown would still do can only change the exit code: Arrow's
    thread pools are torn down there, and a worker thread still alive then aborts the process
    ("terminate called without an active exception", SIGABRT, exit 134; apache/arrow#34314), after
    the right sentence has been printed; a library's finaliser can also see a late Ctrl-C and end
    the process by SIGINT. ``os._exit`` skips that teardown (atexit handlers, finalisers, C++ static
    destructors), so the status is the command's: 0, 2 for bad input, 130 on Ctrl-C.
    """
    if "logging" in sys.modules:  # what atexit would have flushed
        with contextlib.suppress(Exception):
            sys.modules["logging"].shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe (`| head`) has nothing left to receive
            stream.flush()
    os._exit(code)


# popvision_py.format.expansion.ENV, named here so that the CLI starts without importing pyarrow
MAX_EXPANSION_ENV = "POPVISION_MAX_EXPANSION"


@click.group(cls=PopvisionGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="popvision")
@click.option("--max-expansion", type=click.FloatRange(min=1), envvar=MAX_EXPANSION_ENV, metavar="FACTOR",
              help="Read profiles that decode to up to FACTOR bytes per byte of their file (default 1000, plus "
                   "64 MiB; inf: no limit). A profile beyond it is refused as a decompression bomb; raise it "
                   f"only for a real profile you trust. Also set by ${MAX_EXPANSION_ENV}.")
def main(max_expansion: float | None) -> None:
    """popvision: emulate IPU runs or import PyTorch profiler traces, and read, report and view their
    profile.pop files."""
    if max_expansion is not None:  # the reader (and a dashboard's workers) read the limit from the environment
        os.environ[MAX_EXPANSION_ENV] = repr(max_expansion)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
