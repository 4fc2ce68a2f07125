"""The benchmark harness runs end to end at tiny size (its figures are not checked: it is a smoke test)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_harness_runs_every_case_and_writes_the_table(tmp_path: Path) -> None:
    # GIVEN a performance document with prose around the figures
    doc = tmp_path / "performance.md"
    doc.write_text("# Performance\n\nProse that must stay.\n")
    # WHEN the harness runs every case at tiny size
    result = subprocess.run(
        [sys.executable, "benchmarks/run.py", "--quick", "--no-browser", "--tmp", str(tmp_path / "work"),
         "--out", str(doc)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # THEN the document holds a table with a row for every area, and the prose is still there
    text = doc.read_text()
    assert "Prose that must stay." in text
    for area in ("engine", "format", "analysis", "dashboard"):
        assert f"| {area} |" in text
    assert "case A: engine / writer-only time" in text and "`popvision info` at every size" in text
    # AND every figure is kept as JSON
    facts = json.loads((tmp_path / "work" / "results.json").read_text())
    assert set(facts) >= {"machine", "engine", "format", "analysis", "dashboard"}
