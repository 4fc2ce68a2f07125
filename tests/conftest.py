"""How the suite is shared between pytest-xdist's workers (`make test` runs `pytest -n 2 --dist loadgroup`).

Each test file runs whole on one worker, so a module's fixtures are built once. Every test that
drives the browser runs on one worker, one after another: Dash's test servers take their ports from
one count that starts at 58050 in every process, so two workers would serve at the same port. A
folder whose session fixtures are costly (recorded traces, poprun launches, emulated profiles) stays
on one worker, so they are built once. Without ``-n`` the marks change nothing. xdist keeps a group
together by the group's name at the end of each test's id (``tests/test_suite_groups.py`` checks it).
"""

from __future__ import annotations

import signal

import pytest

# Folders whose tests share costly session-scoped fixtures (their conftest.py).
SHARED_FIXTURES = ("analysis", "importer", "popdist", "poptorch", "tune", "traces")
BROWSER_FIXTURES = {"dash_duo", "dash_br", "dash_thread_server", "dash_process_server"}


def group(item: pytest.Item) -> str:
    """The xdist group of a test: ``browser``, its folder, or its file."""
    if "browser" in item.keywords or BROWSER_FIXTURES & set(getattr(item, "fixturenames", ())):
        return "browser"
    parts = item.nodeid.split("::")[0].split("/")
    if len(parts) > 2 and parts[1] in SHARED_FIXTURES:
        return parts[1]
    return parts[-1]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.xdist_group(group(item)))


def pytest_configure(config: pytest.Config) -> None:
    # A suite started in the background by a non-interactive shell (`make test &`, nohup) inherits SIGINT
    # ignored, and so would every program a test starts: the Ctrl-C tests would wait on a program that
    # never hears it. The tests' programs get Python's own handler back.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
