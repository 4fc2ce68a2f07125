"""`popvision dashboard PROFILE [PROFILE_B]`: serve the Dash dashboard for one profile, or two to compare."""

from __future__ import annotations

import logging
import threading
from typing import Any

import click

LOCALHOST = ("127.0.0.1", "localhost", "::1")


@click.command("dashboard")
@click.argument("profile")
@click.argument("profile_b", required=False)
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on. Anything but localhost exposes your profiles to the network; "
                   "on a loopback address, requests naming another host are refused.")
@click.option("--port", default=8050, show_default=True, type=click.IntRange(1, 65535), help="Port to listen on.")
@click.option("--tune", "tune", type=click.Path(), default=None,
              help="A tune result (popvision tune -o tune.parquet): adds the What-if page.")
@click.option("--emulated-dir", type=click.Path(file_okay=False), default=None,
              help="Where the Verify and Emulate-and-compare actions write profiles [default: a temporary folder].")
@click.option("--system", "system", multiple=True, type=click.Path(),
              help="System timeline files (*.pvti.parquet) or folders for the System page [default: those in each "
                   "profile's folder's system/, its folder, its parent, or a poprun launch's folder].")
@click.option("--scheduler", metavar="tcp://HOST:PORT",
              help="Make the GPU pages' figures on an existing Dask cluster: its scheduler's address. Its workers "
                   "read the ranks' kernels a few ranks a task; they must see the profiles at the same paths.")
@click.option("--debug", is_flag=True, hidden=True, help="Dash's debug mode (reloader off).")
def command(profile: str, profile_b: str | None, host: str, port: int, tune: str | None, emulated_dir: str | None,
            system: tuple[str, ...], scheduler: str | None, debug: bool) -> None:
    """Open the dashboard for PROFILE in a browser (and compare it with PROFILE_B if given). Either may be a
    run's folder (its first profile); a poprun run's first two instances are compared when they differ.

    Only the profiles named here are served; the pages call them A and B.
    """
    from dashboards.data import served_profiles
    from popvision_py.tune.cluster import scheduler_client

    paths = served_profiles(profile, profile_b)
    with scheduler_client(scheduler) as client:  # held while the server runs
        _serve(_serving(paths, host, tune, emulated_dir, list(system) or None, client), host, port, debug)


def _serve(app, host: str, port: int, debug: bool) -> None:
    """Run ``app`` until Ctrl-C, its lines on the terminal."""
    if host not in LOCALHOST:
        click.echo(f"Warning: listening on {host}: anyone who can reach this address can read the profiles.", err=True)
    if not debug:
        # The terminal shows the start, warnings, and one line per refused or failed request;
        # not werkzeug's line for every page and asset fetched (--debug keeps them).
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        logging.getLogger("dash.dash").setLevel(logging.WARNING)  # its "Dash is running on", the line below again
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"popvision dashboard on http://{shown}:{port}/  (Ctrl-C to stop)", err=True)
    app.run(host=host, port=port, debug=debug, use_reloader=False)


def _serving(paths: list[str], host: str, tune: str | None, emulated_dir: str | None, system: list[str] | None,
             cluster: Any = None):
    """The Dash app for ``paths``, its profiles opened and read through; their warm-up started. ``cluster``: a Dask
    client whose workers make the GPU figures."""
    from dashboards import data
    from engine import rules
    from popvision_py.render.progress import reading_trace
    from popvision_py.emulation import run_fields

    # the dashboard imports neither: its fixes are checked by the planner's rules, its runs emulated by run_fields
    profiles = data.Profiles(paths, tune=tune, runner=run_fields, emulated_dir=emulated_dir, system=system,
                             planner=rules, cluster=cluster)
    if tune is not None:
        profiles.tune()  # a bad tune result is one sentence (exit 2) before any server starts
    for key in profiles.keys:  # a bad profile is reported (exit 2) before any server starts; opened once
        profiles.report(key)
    # Every table is then read through (page checksums, the reader's checks; the trace by the pass
    # that gives the first page its summary) while Dash is imported and the app built: decoding
    # leaves the GIL free. The server starts once the read-through has passed (about 3 s at 50M
    # trace rows), so no page meets a broken table; the rest of the warm-up goes on while it serves.
    checked = threading.Event()
    failure: list[BaseException] = []
    with reading_trace([profiles.report(key) for key in profiles.keys], "Checking the trace"):
        threading.Thread(target=_check, args=(profiles, checked, failure), daemon=True).start()
        from dashboards.app import create_app

        app = create_app(paths, host=host, tune=tune, runner=run_fields, emulated_dir=emulated_dir, system=system,
                         planner=rules, cluster=cluster)
        data.install(app.server, profiles)  # the app serves the Profiles being checked, not a fresh one
        checked.wait()
    if failure:
        raise failure[0]
    threading.Thread(target=_warm, args=(profiles,), daemon=True).start()
    return app


def wsgi(profile: str, profile_b: str | None = None, *, host: str = "127.0.0.1", tune: str | None = None,
         emulated_dir: str | None = None, system: list[str] | None = None):
    """The dashboard as a WSGI application (its Flask server), for a production server, as
    `popvision dashboard PROFILE [PROFILE_B]` serves it: e.g.
    ``gunicorn -w 1 --threads 8 -b 127.0.0.1:8050 'popvision_py.cli.dashboard:wsgi("profile.pop")'``.

    Each process that calls it opens, checks and warms its own copy of the profiles (the state is
    the app's, per process). ``host``: the address the server is bound to (requests naming another
    host are refused while it is a loopback address). A bad profile is its one sentence: under
    gunicorn, as the reason the application failed to load (gunicorn then stops, exit code 4).
    """
    from dashboards.data import served_profiles
    from popvision_py.errors import PopvisionError

    try:
        return _serving(served_profiles(profile, profile_b), host, tune, emulated_dir, system).server
    except PopvisionError as exc:
        try:
            from gunicorn.errors import AppImportError
        except ImportError:
            raise exc from None
        raise AppImportError(f"Error: {exc}") from None


def _check(profiles, checked: threading.Event, failure: list[BaseException]) -> None:
    try:
        profiles.check()
    except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which reports it
        failure.append(exc)
    finally:
        checked.set()


def _warm(profiles) -> None:
    try:
        profiles.warm()
    except Exception:  # noqa: BLE001 - warming is an optimisation; the check reports a broken profile
        pass
