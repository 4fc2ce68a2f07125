"""The dashboard's shell: the app, navigation built from the page registry, the profile choice.

``create_app(paths)`` serves the profiles named at start (``"a"`` and, to compare, ``"b"``); the
pages under ``pages/`` register themselves, and find their data through ``dashboards.data``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import dash
import flask
from dash import ALL, Input, Output, dcc, html
from dash import _callback as _dash_callback

from dashboards import data, ids

HERE = Path(__file__).resolve().parent
NAV_LINK = "nav-link"
LOG = logging.getLogger("popvision.dashboard")


def create_app(paths: list[str], *, warm: bool = False) -> dash.Dash:
    """The Dash app serving the profiles at ``paths`` (one, or two to compare).

    The paths are opened lazily, on first use; the CLI opens them first to report a bad profile
    before any server starts. ``warm=True`` computes what the first page shows right away.
    """
    profiles = data.Profiles([str(p) for p in paths])
    # Dash runs every page module again for each new app, and each run adds the page's
    # `dash.callback`s to Dash's global list; an app built earlier in this process but never
    # served (tests, scripts) would leave its copies there, doubling every callback.
    _dash_callback.GLOBAL_CALLBACK_LIST.clear()
    _dash_callback.GLOBAL_CALLBACK_MAP.clear()
    app = dash.Dash(
        "dashboards",
        use_pages=True,
        pages_folder="pages",
        assets_folder=str(HERE / "assets"),
        title="popvision",
        update_title=None,
        serve_locally=True,
        suppress_callback_exceptions=False,
    )
    data.install(app.server, profiles)
    app.server.before_request(lambda: refuse_malformed_callbacks(app))
    app.layout = shell
    app.callback(
        Output({"type": NAV_LINK, "index": ALL}, "className"),
        Input("_pages_location", "pathname"),
        Input({"type": NAV_LINK, "index": ALL}, "href"),
    )(highlight_navigation)
    if warm:
        profiles.warm()
    return app


def refuse_malformed_callbacks(app: dash.Dash) -> flask.Response | None:
    """Answer a callback request that no page of this app could have sent with 400, not a 500.

    Dash assumes its own front end sent the body; anything else (a script, a stale tab, a fuzzer)
    would otherwise raise inside Dash and log a traceback per request.
    """
    request = flask.request
    if request.method != "POST" or not request.path.endswith("_dash-update-component"):
        return None
    body = request.get_json(silent=True)
    problem = None
    if not isinstance(body, dict):
        problem = "the body is not a JSON object"
    elif not isinstance(body.get("output"), str) or body["output"] not in app.callback_map:
        problem = "it names no callback of this dashboard"
    elif not isinstance(body.get("inputs", []), list) or not isinstance(body.get("state", []), list):
        problem = "its inputs are not lists"
    elif not isinstance(body.get("changedPropIds", []), list):
        problem = "its changedPropIds is not a list"
    if problem is None:
        return None
    LOG.warning("Refused a callback request from %s: %s.", request.remote_addr, problem)
    return flask.Response(f"Bad callback request: {problem}.", status=400, mimetype="text/plain")


def navigation(comparing: bool) -> list[dcc.Link]:
    """One link per registered page, in registry order; the compare page only with two profiles."""
    links = []
    for page in dash.page_registry.values():
        if page.get("needs_two_profiles") and not comparing:
            continue
        links.append(
            dcc.Link(
                [html.Span(page.get("icon", "•"), className="nav-icon"), page["name"]],
                href=page["relative_path"],
                id={"type": NAV_LINK, "index": page["relative_path"]},
                className="nav-link",
            )
        )
    return links


def shell() -> html.Div:
    """The page frame (run per request): header with the profile choice, navigation, page content."""
    profiles = data.current()
    options = [{"label": profiles.label(key), "value": key} for key in profiles.keys]
    choice = dcc.RadioItems(
        id=ids.PROFILE,
        options=options,
        value=profiles.keys[0],
        persistence=True,
        persistence_type="session",
        className="profile-choice",
        inputClassName="profile-radio",
        labelClassName="profile-label",
        style={} if profiles.comparing else {"display": "none"},
    )
    single = [] if profiles.comparing else [html.Span(profiles.label("a")[4:], className="profile-name")]
    header = html.Header(
        [
            html.Div([html.Span("popvision", className="brand"), html.Span("profile dashboard", className="brand-sub")],
                     className="brand-box"),
            html.Div(single + [choice], className="profile-box"),
        ],
        className="topbar",
    )
    return html.Div(
        [
            header,
            html.Div(
                [html.Nav(navigation(profiles.comparing), id=ids.NAV, className="sidebar"),
                 html.Main(dash.page_container, className="content")],
                className="frame",
            ),
        ],
        className="app",
    )


def highlight_navigation(pathname: str | None, hrefs: list[str]) -> list[str]:
    """Marks the link of the page shown."""
    return ["nav-link active" if href == (pathname or "/") else "nav-link" for href in hrefs]
