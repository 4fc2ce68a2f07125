"""benchmarks/run.py: every case runs end to end at tiny size and writes the table (a smoke test: the
figures are not checked), keeping every figure when a bench misses one of its own targets (issue 11,
item 16), and stopping with one sentence when a bench writes none.

The run with a missed target is the smoke test too: every bench but the dashboard's is the real
one, and the dashboard's wraps the real one (one run of the whole harness, about a minute)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# A bench_dashboard.py that runs the real one, then reports its slowest callback at 900 ms and exits 1,
# as the real bench does when a callback is over its 500 ms budget.
# The real bench, then its first callback made to take 9 s: the slowest whatever the real ones took (on a loaded
# machine a real one may take over its 500 ms itself, and the bench exit with 1).
_MISSING_DASHBOARD = """
import json, subprocess, sys
from pathlib import Path
args = sys.argv[1:]
assert subprocess.run([sys.executable, {real!r}, *args]).returncode in (0, 1)
out = Path(args[args.index("--json") + 1])
figures = json.loads(out.read_text())
first = next(iter(figures["profiles"][0]["callbacks"].values()))
first["median_s"] = 9.0
out.write_text(json.dumps(figures))
sys.exit(1)
"""


@pytest.mark.slow
def test_a_bench_that_misses_a_target_leaves_a_not_met_row_and_the_whole_table(tmp_path: Path) -> None:
    # GIVEN the harness beside the real benches, except that the dashboard bench misses its budget
    # (run.py finds the benches beside itself; the real ones are linked, so they still run from the repo)
    benches = tmp_path / "benchmarks"
    benches.mkdir()
    for script in (ROOT / "benchmarks").glob("*.py"):
        if script.name == "run.py":
            (benches / "run.py").write_text(script.read_text())
        elif script.name != "bench_dashboard.py":
            (benches / script.name).symlink_to(script)
    (benches / "bench_dashboard.py").write_text(
        _MISSING_DASHBOARD.format(real=str(ROOT / "benchmarks" / "bench_dashboard.py")))
    doc = tmp_path / "performance.md"
    doc.write_text("# Performance\n\nProse that must stay.\n")
    # WHEN the harness runs every case at tiny size
    result = subprocess.run(
        [sys.executable, str(benches / "run.py"), "--quick", "--no-browser", "--tmp", str(tmp_path / "work"),
         "--out", str(doc)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )
    # THEN the run succeeds and says the dashboard bench missed a target
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "benchmarks/bench_dashboard.py exited with code 1 (a target missed); its figures are kept" in result.stdout
    # AND the table has every area, with the missed callback shown at 9,000 ms and marked not met
    text = doc.read_text()
    assert "Prose that must stay." in text
    for area in ("engine", "format", "analysis", "sql", "dashboard"):
        assert f"| {area} |" in text, area
    assert "case A: engine / writer-only time" in text and "`popvision info` at every size" in text
    # AND issue 35's table after it, between its own markers, with its rows against the floors
    floors = text[text.index("<!-- floors: generated"):text.index("<!-- end of the floors -->")]
    assert text.index("<!-- end of generated figures -->") < text.index("<!-- floors: generated")
    for area, figure in (("report", "/ DuckDB's query for the same aggregates"), ("sql", "/ DuckDB's whole process"),
                         ("start-up", "`popvision info`"), ("start-up", "`popvision --help`")):
        assert any(line.startswith(f"| {area} |") and figure in line for line in floors.splitlines()), figure
    slowest = [line for line in text.splitlines() if line.startswith("| dashboard | slowest callback, median")]
    assert len(slowest) == 1
    cells = [cell.strip() for cell in slowest[0].strip("|").split("|")]
    assert cells[2] == "< 500 ms" and cells[3].startswith("9000 ms (") and cells[4] == "**not met**"
    # AND every figure is kept as JSON, the dashboard's too
    facts = json.loads((tmp_path / "work" / "results.json").read_text())
    assert set(facts) >= {"machine", "engine", "format", "analysis", "sql", "dashboard", "floors"}
    assert max(c["median_s"] for c in facts["dashboard"]["profiles"][0]["callbacks"].values()) == 9.0


def test_a_bench_that_writes_no_figures_stops_the_run_with_one_sentence(tmp_path: Path) -> None:
    # GIVEN the harness beside an engine bench that fails before writing anything
    benches = tmp_path / "benchmarks"
    benches.mkdir()
    (benches / "run.py").write_text((ROOT / "benchmarks" / "run.py").read_text())
    (benches / "bench_engine.py").write_text("import sys\nsys.exit(3)\n")
    doc = tmp_path / "performance.md"
    doc.write_text("# Performance\n")
    # WHEN the harness runs
    result = subprocess.run(
        [sys.executable, str(benches / "run.py"), "--quick", "--tmp", str(tmp_path / "work"), "--out", str(doc)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    # THEN it stops with a sentence naming the bench and its exit code, and the document is untouched
    assert result.returncode == 1
    assert result.stderr.strip() == "benchmarks/bench_engine.py exited with code 3 and wrote no figures"
    assert doc.read_text() == "# Performance\n"
