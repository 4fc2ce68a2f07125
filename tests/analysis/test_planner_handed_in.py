"""The insights' fixes are checked against the planner the Report is handed (docs/architecture.md, "passed
in"): ``popvision_py.open`` hands in the planner's rules; a Report made without a planner suggests no fix,
and one whose planner refuses a configuration never shows it.

GIVEN the out-of-memory BERT-Large sample, whose insights suggest five fixes.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import popvision_py as pv
from engine import rules
from popvision_py.analysis.report import Report

ROOT = Path(__file__).resolve().parents[2]
BERT_LARGE = ROOT / "sample_profiles" / "bert_large_out_of_memory" / "profile.pop"
# What the analysis asks of a planner (analysis.fixes.Planner)
PLANNER_NAMES = ("SYSTEMS", "LARGEST_SYSTEM", "check_run", "ipus_used", "system_holding", "runs_as_pipeline",
                 "pipeline_stages")


def test_open_hands_the_report_the_planners_rules():
    # WHEN the library opens the profile
    with pv.open(BERT_LARGE) as report:
        rows = report.summary.insights()
        fixes = report.summary.fixes()
        # THEN its Report holds the planner's rules, and the insights carry the five fixes they accept
        assert report.planner is rules
    assert sum(fix is not None for fix in fixes) == 5
    assert [c.split()[:3] for c in rows["command"] if c] == [["popvision", "run", "bert-large"]] * 5


def test_a_report_without_a_planner_shows_each_finding_alone():
    # WHEN the same profile is opened with and without a planner
    with pv.open(BERT_LARGE) as checked, Report(BERT_LARGE) as unchecked:
        with_fixes, alone = checked.summary.insights(), unchecked.summary.insights()
        fixes = unchecked.summary.fixes()
    # THEN without one, each finding is listed once, in the same order, with no suggestion, effect or
    # command, and no Fix behind it: nothing unchecked is shown
    assert list(alone["finding"]) == list(dict.fromkeys(with_fixes["finding"]))
    assert set(alone["suggestion"]) == set(alone["effect"]) == set(alone["command"]) == {""}
    assert fixes == [None] * len(alone)
    # AND the out-of-memory finding does not claim that no change helps (it was not asked)
    memory = alone[alone["topic"] == "memory"]["finding"].tolist()
    assert len(memory) == 1 and "No change" not in memory[0]


def test_a_fix_the_planner_refuses_is_never_shown():
    # GIVEN a planner that refuses every configuration
    refusing = SimpleNamespace(**{name: getattr(rules, name) for name in PLANNER_NAMES})
    refusing.check_run = lambda run: "This planner runs nothing."
    # WHEN the Report is handed it
    with Report(BERT_LARGE, planner=refusing) as report:
        rows = report.summary.insights()
        fixes = report.summary.fixes()
    # THEN no fix is suggested: the out-of-memory finding says no change it can estimate helps, and the
    # precision finding gives the planner's own sentence
    assert set(rows["command"]) == {""} and fixes == [None] * len(rows)
    memory = rows[rows["topic"] == "memory"]["finding"].tolist()
    assert len(memory) == 1 and memory[0].endswith("lowers the worst tile.")
    precision = rows[rows["topic"] == "precision"]["finding"].tolist()
    assert len(precision) == 1 and precision[0].endswith(" This planner runs nothing.")
