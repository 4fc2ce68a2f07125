"""The dashboard's shell: the app, navigation built from the page registry, the profile choice.

``create_app(paths)`` serves the profiles named at start (``"a"`` and, to compare, ``"b"``); the
pages under ``pages/`` register themselves, and find their data through ``dashboards.data``.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dash
import flask
from dash import ALL, Input, Output, dcc, html
from dash import _callback as _dash_callback
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from dashboards import data, ids
from popvision_py.errors import ProfileError

if TYPE_CHECKING:
    from popvision_py.analysis.findings.fixes import Planner

HERE = Path(__file__).resolve().parent
NAV_LINK = "nav-link"
LOG = logging.getLogger("popvision.dashboard")
CALLBACK_PATH = "_dash-update-component"
# The largest request a page sends is a callback body of about a kilobyte (a trace zoom's
# relayoutData, a tile's clickData, the navigation's hrefs): 1,369 bytes at most over every
# request of tests/dashboard/test_browser.py. 1 MiB is over 700 times that, and small enough
# that large bodies cannot grow the server: a larger Content-Length is refused before any of
# the body is read, and a chunked body is cut off at the limit.
MAX_BODY_BYTES = 1 << 20
LOOPBACK_NAMES = ("localhost",)


def create_app(paths: list[str], *, warm: bool = False, host: str = "127.0.0.1", tune: str | None = None,
               runner: Callable[[dict[str, Any], Path], None] | None = None,
               emulated_dir: str | None = None, system: list[str] | None = None,
               planner: Planner | None = None, cluster: Any = None) -> dash.Dash:
    """The Dash app serving the profiles at ``paths`` (one, or two to compare).

    The paths are opened lazily, on first use; the CLI opens them (and reads them through) first
    to report a bad profile before any server starts. ``warm=True`` computes what the first page
    shows right away. ``host`` is the address the server will listen on: while it is a loopback
    address, requests naming any other host are refused (DNS rebinding). ``tune`` adds the What-if
    page for that tune result; ``runner`` (RunRequest fields, profile path) emulates the Summary's
    "Verify" and the What-if page's "Emulate and compare" into ``emulated_dir`` (see ``data.Profiles``);
    ``system``: the system timeline files or folders the System page shows (else those beside each profile);
    ``planner``: the planner's rules the Summary page's fixes are checked against (``analysis.fixes.Planner``;
    without one the page suggests no fix); ``cluster``: a Dask client whose workers make the GPU pages' figures
    (``Report.cluster``; `popvision dashboard --scheduler`).
    """
    profiles = data.Profiles([str(p) for p in paths], tune=tune, runner=runner, emulated_dir=emulated_dir,
                             system=system, planner=planner, cluster=cluster)
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
    server = app.server
    # werkzeug stops reading a chunked body (no Content-Length) at this many bytes, silently: one
    # byte more than allowed shows that the body went on (refuse_malformed_callbacks).
    server.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES + 1
    # Dash registered hooks of its own when it was built: the Host and size checks run before them;
    # the callback check after them, once Dash has gathered the pages' callbacks (on the first request).
    server.before_request_funcs.setdefault(None, [])[:0] = [lambda: refuse_foreign_hosts(host), refuse_large_bodies]
    server.before_request(lambda: refuse_malformed_callbacks(app))
    server.register_error_handler(Exception, lambda error: answer_failure(app, error))
    app.layout = shell
    app.callback(
        Output({"type": NAV_LINK, "index": ALL}, "className"),
        Input("_pages_location", "pathname"),
        Input({"type": NAV_LINK, "index": ALL}, "href"),
    )(highlight_navigation)
    if warm:
        profiles.warm()
    return app


def _refuse(status: int, answer: str, logged: str) -> flask.Response:
    """One line in the server's log, and ``answer`` (one sentence) as the plain-text response."""
    LOG.warning("Refused a request from %s for %s: %s", flask.request.remote_addr, flask.request.path, logged)
    return flask.Response(answer, status=status, mimetype="text/plain")


def guards_host(host: str) -> bool:
    """Whether a server listening on ``host`` answers only requests naming a loopback host.

    True for a loopback address or name (the default 127.0.0.1); False once ``--host`` opened it to
    another interface, where people reach it by names this process cannot know.
    """
    return _loopback(host.strip("[]").lower())


def _loopback(name: str) -> bool:
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _host_name(header: str) -> str:
    """The host of a Host header, without its port: ``[::1]:8050`` -> ``::1``."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    name = header.rpartition(":")[0] if header.count(":") == 1 else header
    return name.rstrip(".")


def refuse_foreign_hosts(host: str) -> flask.Response | None:
    """403 for a request whose Host is not the bound address or a loopback name, while bound to loopback.

    A web page on another site can make a browser resolve its own name to 127.0.0.1 (DNS
    rebinding) and read the dashboard's answers; such requests carry that site's name as Host.
    """
    if not guards_host(host):
        return None
    header = flask.request.headers.get("Host", "")
    name = _host_name(header)
    if name == host.strip("[]").lower() or _loopback(name):
        return None
    return _refuse(403, f"Refused: this dashboard answers requests for {host} and localhost only, not for "
                        f"{header[:100] or 'an empty Host'} (start it with --host to serve other names).",
                   f"its Host header is {header[:100]!r}.")


def refuse_large_bodies() -> flask.Response | None:
    """413 for a declared body over ``MAX_BODY_BYTES``, before any of it is read."""
    length = flask.request.content_length
    if length is None or length <= MAX_BODY_BYTES:
        return None
    return _too_large(length)


def _too_large(length: int | None) -> flask.Response:
    size = f"{length:,} bytes" if length is not None else "a chunked body"
    return _refuse(413, f"Refused: {size} is over this dashboard's limit of {MAX_BODY_BYTES:,} bytes per request.",
                   f"{size} is over the limit of {MAX_BODY_BYTES:,} bytes.")


def refuse_malformed_callbacks(app: dash.Dash) -> flask.Response | None:
    """Answer a callback request that no page of this app could have sent with 400, not a 500.

    Dash assumes its own front end sent the body; anything else (a script, a stale tab, a fuzzer)
    would otherwise raise inside Dash and log a traceback per request. The body is read here
    (werkzeug stops one byte past ``MAX_BODY_BYTES``) and parsed once; Dash reuses the parse.
    """
    request = flask.request
    if request.method != "POST" or not request.path.endswith(CALLBACK_PATH):
        return None
    if len(request.get_data(cache=True)) > MAX_BODY_BYTES:
        return _too_large(request.content_length)
    try:
        body = request.get_json(silent=True)
    except RecursionError:  # nesting deeper than Python's stack, e.g. [[[[...]]]]
        body = None
    problem = _callback_problem(app, body)
    if problem is None:
        return None
    return _refuse(400, f"Bad callback request: {problem}.", f"{problem}.")


def _callback_problem(app: dash.Dash, body: object) -> str | None:
    """Why ``body`` is not a request one of ``app``'s pages could send (None if it could be)."""
    if not isinstance(body, dict):
        return "the body is not a JSON object"
    output = body.get("output")
    if not isinstance(output, str) or output not in app.callback_map:
        return "it names no callback of this dashboard"
    spec = app.callback_map[output]
    for part in ("inputs", "state"):
        sent = body.get(part, [])
        if not isinstance(sent, list) or len(sent) != len(spec.get(part, [])):
            return f"its {part} are not the {len(spec.get(part, []))} the callback takes"
        if not all(_is_property(item) or isinstance(item, list) and all(map(_is_property, item)) for item in sent):
            return f"its {part} are not component properties"
    outputs = body.get("outputs")
    if not (_is_property(outputs) or isinstance(outputs, list) and all(
            _is_property(item) or isinstance(item, list) and all(map(_is_property, item)) for item in outputs)):
        return "its outputs are not component properties"
    changed = body.get("changedPropIds", [])
    if not isinstance(changed, list) or not all(isinstance(item, str) for item in changed):
        return "its changedPropIds is not a list of names"
    return None


def _is_property(item: object) -> bool:
    """``{"id": ..., "property": "..."}``, the shape the front end gives every input, state and output."""
    return isinstance(item, dict) and "id" in item and isinstance(item.get("property"), str)


def answer_failure(app: dash.Dash, error: Exception) -> flask.Response | HTTPException:
    """Every exception a request raises: one line in the log (a traceback only with ``--debug``).

    A callback that raises was sent values its page never sends (an IPU the profile lacks, text
    for a number): the request is answered 400. A profile that cannot be read (checked at start,
    but a file can change under a running server) and anything else is the server's fault: 500.
    """
    if isinstance(error, RequestEntityTooLarge):  # werkzeug's own check, should a body be read elsewhere
        return _too_large(flask.request.content_length)
    if isinstance(error, HTTPException):  # 404, 405...: werkzeug's own answer, as before
        return error
    request = flask.request
    callback = request.method == "POST" and request.path.endswith(CALLBACK_PATH) \
        and not isinstance(error, ProfileError)
    where = error.__traceback__
    while where is not None and where.tb_next is not None:
        where = where.tb_next
    origin = f" at {Path(where.tb_frame.f_code.co_filename).name}:{where.tb_lineno}" if where is not None else ""
    message = (str(error).splitlines() or [""])[0][:300].rstrip(".")
    LOG.warning("%s request from %s for %s failed%s: %s%s.", "Callback" if callback else "The",
                request.remote_addr, request.path, origin, type(error).__name__, f": {message}" if message else "",
                exc_info=error if app.server.debug else None)
    if callback:
        return flask.Response("Bad callback request: the page never sends these values.", status=400,
                              mimetype="text/plain")
    return flask.Response("The dashboard could not answer this request; its terminal says why.", status=500,
                          mimetype="text/plain")


def _replayable(profiles: Any) -> bool:
    """Whether the What-if page has an imported pipeline to re-time (without a tune result)."""
    return any(data.replayable(profiles.report(key)) for key in profiles.keys)


def any_kernels(profiles: Any) -> bool:
    """Whether the GPU page has a GPU trace's kernels to show."""
    return any(data.has_kernels(profiles.report(key)) for key in profiles.keys)


def shown(page: dict[str, Any], comparing: bool, tuned: bool, kernels: bool = False) -> bool:
    """Whether a registered page is listed: the compare page only with two profiles, the What-if page
    only with a tune result (or an imported pipeline), the GPU page only for a profile holding GPU kernels."""
    return ((comparing or not page.get("needs_two_profiles")) and (tuned or not page.get("needs_tune"))
            and (kernels or not page.get("needs_kernels")))


def navigation(comparing: bool, tuned: bool = False, kernels: bool = False) -> list[dcc.Link]:
    """One link per page ``shown``, in registry order."""
    links = []
    for page in dash.page_registry.values():
        if not shown(page, comparing, tuned, kernels):
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
                [html.Nav(navigation(profiles.comparing, profiles.tune_path is not None or _replayable(profiles),
                                     any_kernels(profiles)), id=ids.NAV, className="sidebar"),
                 html.Main(dash.page_container, className="content")],
                className="frame",
            ),
        ],
        className="app",
    )


def highlight_navigation(pathname: str | None, hrefs: list[str]) -> list[str]:
    """Marks the link of the page shown."""
    return ["nav-link active" if href == (pathname or "/") else "nav-link" for href in hrefs]
