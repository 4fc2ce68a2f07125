"""`popvision dashboard PROFILE [PROFILE_B]`: serve the Dash dashboard for one profile, or two to compare."""

from __future__ import annotations

import threading

import click

LOCALHOST = ("127.0.0.1", "localhost", "::1")


@click.command("dashboard")
@click.argument("profile")
@click.argument("profile_b", required=False)
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on. Anything but localhost exposes your profiles to the network.")
@click.option("--port", default=8050, show_default=True, type=click.IntRange(1, 65535), help="Port to listen on.")
@click.option("--debug", is_flag=True, hidden=True, help="Dash's debug mode (reloader off).")
def command(profile: str, profile_b: str | None, host: str, port: int, debug: bool) -> None:
    """Open the dashboard for PROFILE in a browser (and compare it with PROFILE_B if given).

    Only the profiles named here are served; the pages call them A and B.
    """
    from dashboards import data

    paths = [profile] + ([profile_b] if profile_b else [])
    profiles = data.Profiles(paths)
    for key in profiles.keys:  # a bad profile is reported (exit 2) before any server starts; opened once
        profiles.report(key)
    if host not in LOCALHOST:
        click.echo(f"Warning: listening on {host}: anyone who can reach this address can read the profiles.", err=True)
    # The first page's figures are computed while Dash is imported and the app built and started:
    # the trace pass they need (~2 s at 50M rows) is mostly decoding, which leaves the GIL free.
    threading.Thread(target=_warm, args=(profiles,), daemon=True).start()
    from dashboards.app import create_app

    app = create_app(paths)
    data.install(app.server, profiles)  # the app serves the Profiles being warmed, not a fresh one
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"popvision dashboard on http://{shown}:{port}/  (Ctrl-C to stop)", err=True)
    app.run(host=host, port=port, debug=debug, use_reloader=False)


def _warm(profiles) -> None:
    try:
        profiles.warm()
    except Exception:  # noqa: BLE001 - warming is an optimisation; the page reports real errors itself
        pass
