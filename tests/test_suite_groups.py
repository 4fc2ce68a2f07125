"""`make test`'s sharing of the suite between workers holds (tests/conftest.py): under ``--dist loadgroup`` each
test's id ends with its group, which is what pytest-xdist keeps on one worker. pytest 9.2 with pytest-xdist 3.8
dropped it silently: every test was a group of its own."""

from __future__ import annotations

import pytest

from tests.conftest import group


def test_a_test_id_carries_its_group_under_make_test(request: pytest.FixtureRequest) -> None:
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("run without pytest-xdist's --dist loadgroup (make test runs with it)")
    assert request.node.nodeid.endswith(f"@{group(request.node)}"), request.node.nodeid


def test_a_browser_test_and_a_file_are_grouped_as_make_test_needs() -> None:
    # the groups themselves: every browser test one group, any other test its file's, or its folder's when the folder
    # shares costly fixtures
    class Item:
        def __init__(self, nodeid: str, keywords: tuple[str, ...] = (), fixturenames: tuple[str, ...] = ()) -> None:
            self.nodeid, self.keywords, self.fixturenames = nodeid, keywords, fixturenames

    assert group(Item("tests/dashboard/test_layout.py::test_x", ("browser",))) == "browser"
    assert group(Item("tests/dashboard/test_data.py::test_x", (), ("dash_duo",))) == "browser"
    assert group(Item("tests/test_sql.py::test_x")) == "test_sql.py"
    assert group(Item("tests/tune/test_search.py::test_x")) == "tune"
    assert group(Item("tests/engine/test_mapping.py::test_x")) == "test_mapping.py"
