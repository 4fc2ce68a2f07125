"""The summary page's findings as built by ``insight_list`` (no browser): fix, effect and command shown
only when the analysis gives them."""

from __future__ import annotations

import importlib

import pandas as pd
from dash import dcc, html


def texts(component) -> list[str]:
    """Every string in a component tree, in order."""
    if isinstance(component, str):
        return [component]
    children = getattr(component, "children", None)
    if children is None:
        return []
    if not isinstance(children, (list, tuple)):
        children = [children]
    return [text for child in children for text in texts(child)]


def find(component, kind) -> list:
    found = [component] if isinstance(component, kind) else []
    children = getattr(component, "children", None) or []
    for child in children if isinstance(children, (list, tuple)) else [children]:
        found += find(child, kind)
    return found


def test_a_finding_without_a_fix_shows_no_empty_fix_effect_or_command(app):
    # the app fixture built the app, which registers the page modules (they cannot be imported before)
    summary = importlib.import_module("dashboards.pages.summary")
    # GIVEN one finding whose fix is in its own text (no suggestion, effect or command) and one with all three
    command = "popvision run mnist --gradient-accumulation 20 --profile --profile-dir profile-gradient-accumulation-20"
    insights = pd.DataFrame({
        "severity": ["warning", "warning"], "topic": ["stages", "stages"],
        "finding": ["Stage 2 is the bottleneck: split its blocks more finely.", "IPUs are idle 40.2% of the time."],
        "suggestion": ["", "Raise gradient accumulation from 10 to 20."],
        "effect": ["", "The fill-and-flush share falls from 23.1% to 13.0%."],
        "command": ["", command],
    })
    # WHEN the page lists them
    first, second = summary.insight_list(insights).children
    # THEN the first is its finding alone
    assert texts(first) == ["warning", "stages", "Stage 2 is the bottleneck: split its blocks more finely."]
    assert find(first, dcc.Clipboard) == []
    # AND the second has its fix, its effect and its command, which the copy button copies whole
    assert texts(second)[3:7] == ["Fix: ", "Raise gradient accumulation from 10 to 20.",
                                  "Effect: ", "The fill-and-flush share falls from 23.1% to 13.0%."]
    code = find(second, html.Code)
    assert len(code) == 1 and "".join(texts(code[0])) == command
    (clipboard,) = find(second, dcc.Clipboard)
    assert clipboard.content == command


def test_popvision_dashboard_hands_the_profiles_the_planners_rules(oom_profile, monkeypatch):
    import dash
    from click.testing import CliRunner

    from dashboards import data
    from engine import rules
    from popvision_py.cli import main

    # GIVEN `popvision dashboard` on the out-of-memory run, its server kept from starting
    monkeypatch.setattr(dash.Dash, "run", lambda self, **kwargs: None)
    result = CliRunner().invoke(main, ["dashboard", str(oom_profile)])
    assert result.exit_code == 0, result.output
    # THEN the profiles it serves check their fixes with the planner's rules (the dashboard imports
    # neither the rules nor the engine), and the findings carry the commands of the fixes they accept
    profiles = data.current()
    assert profiles.planner is rules
    assert any(profiles.report("a").summary.insights()["command"])


def test_a_dashboard_built_without_a_planner_suggests_no_fix(oom_profile):
    from dashboards import data

    # GIVEN the profiles served without a planner (as a script building the app itself may)
    insights = data.Profiles([str(oom_profile)]).report("a").summary.insights()
    # THEN the findings are listed, each alone: no fix, effect or command to copy or verify
    assert len(insights) > 0
    assert set(insights["suggestion"]) == set(insights["command"]) == {""}
