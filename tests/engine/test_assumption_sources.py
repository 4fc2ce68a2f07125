"""Every assumption says where it comes from and how sure we are of it (issue 20, item 1), and
`popvision assumptions` lists them all."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from engine.assumptions import Assumptions, describe
from engine.options import OPTIMISERS
from popvision_py.cli import main

FIELDS = dataclasses.fields(Assumptions)
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("f", FIELDS, ids=[f.name for f in FIELDS])
def test_every_assumption_names_its_source_and_interval(f):
    # GIVEN one assumption's declaration
    m = f.metadata
    # THEN it has a source of some substance, a unit and what it affects
    assert len(m.get("source", "").strip()) >= 40, f"{f.name} has no source"
    assert m["unit"] and m["affects"] <= {"time", "memory"} and m["affects"]
    # AND an interval holding its default, inside the values it may take at all
    default = Assumptions()
    pairs = (m["uncertainty"].items() if m.get("per_optimiser") else [(None, m["uncertainty"])])
    for key, (low, high) in pairs:
        value = getattr(default, f.name)[key] if key else getattr(default, f.name)
        assert low <= value <= high, (f.name, key, low, value, high)
        assert low in m["range"] and high in m["range"], (f.name, low, high)


def test_no_assumption_is_fitted_to_an_application():
    # GIVEN every assumption's source, and the docs' assumption table
    texts = [d.source for d in describe()]
    doc = (ROOT / "docs" / "emulator.md").read_text()
    table = doc[doc.index("### Assumptions"):doc.index("### Work, tiles and time")]
    # THEN none says it was calibrated or fitted
    for text in [*texts, table]:
        assert not re.search(r"calibrat|fitted", text, re.IGNORECASE), text[:200]


def test_the_assumptions_command_lists_every_one_with_its_range():
    # WHEN a user asks for the assumptions as JSON
    result = CliRunner().invoke(main, ["assumptions", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    # THEN there is one object per assumption (per optimiser for the per-optimiser ones)
    expected = {f.name if not f.metadata.get("per_optimiser") else f"{f.name}.{o}"
                for f in FIELDS for o in (OPTIMISERS if f.metadata.get("per_optimiser") else [None])}
    assert {r["name"] for r in rows} == expected and len(rows) == len(expected)
    for r in rows:
        assert {"name", "value", "unit", "low", "high", "source"} <= set(r)
        assert r["low"] <= r["value"] <= r["high"] and r["source"]
    # AND the text form shows each one's value, interval and source
    text = CliRunner().invoke(main, ["assumptions"], catch_exceptions=False).stdout
    assert ("collective_link_efficiency\n  value     0.85 share of the collective bandwidth (plausible 0.5 to "
            "0.95") in text
    assert text.count("  source    ") == len(expected)


def test_the_docs_table_is_the_commands():
    # GIVEN the assumptions table in docs/emulator.md and the one `popvision assumptions --markdown` prints
    doc = (ROOT / "docs" / "emulator.md").read_text()
    table = doc.split("<!-- assumptions:begin -->\n", 1)[1].split("\n<!-- assumptions:end -->", 1)[0]
    printed = CliRunner().invoke(main, ["assumptions", "--markdown"], catch_exceptions=False).stdout.strip()
    # THEN they are the same: the docs say what the code assumes
    assert table.strip() == printed
