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
    import popvision_py as pv
    from dashboards.app import create_app

    paths = [profile] + ([profile_b] if profile_b else [])
    for path in paths:  # a bad profile is reported (exit 2) before any server starts
        pv.open(path)
    if host not in LOCALHOST:
        click.echo(f"Warning: listening on {host}: anyone who can reach this address can read the profiles.", err=True)
    app = create_app(paths)
    # Compute the first page's figures while the server starts, so the first request is quick.
    threading.Thread(target=_warm, args=(app,), daemon=True).start()
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"popvision dashboard on http://{shown}:{port}/  (Ctrl-C to stop)", err=True)
    app.run(host=host, port=port, debug=debug, use_reloader=False)


def _warm(app) -> None:
    from dashboards import data

    try:
        data.current_for(app.server).warm()
    except Exception:  # noqa: BLE001 - warming is an optimisation; the page reports real errors itself
        pass
