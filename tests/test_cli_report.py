"""`popvision report`, `compare`, `export-trace` and `sql` from the command line (click's CliRunner).

Every section runs in every format on the synthetic profiles and on every sample profile in
sample_profiles/.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from popvision_py.analysis.report import Report
from popvision_py.cli import main
from popvision_py.format import open_profile
from popvision_py.render.rank_words import in_words
from tests import synthetic

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted(ROOT.glob("sample_profiles/**/*.pop"))
SECTIONS = ["all", "summary", "memory", "liveness", "stages", "exchange", "operations", "programs", "tiles", "system",
            "critical-path", "gpu"]
# compare sets the device's figures side by side, not the ops, the program trees, each tile's balance or the
# host's timelines
COMPARED = ["all", "summary", "memory", "liveness", "stages", "exchange"]
FORMATS = ["text", "json", "csv", "md", "html"]
# One heading each section's text and Markdown carry, whatever the profile
HEADINGS = {
    "summary": "Insights",
    "memory": "Memory per IPU",
    "liveness": "Not-always-live memory peak per IPU",
    "stages": "Pipeline figures",
    "exchange": "Exchange by kind",
    "programs": "Program tree: each IPU's control program, its loops, segments, ops and steps",
    "operations": "Operations: each op and pass over the run, costliest first",
    "system": "System timeline: host time per process",  # the one line without system timeline files
    "tiles": "Tile balance per IPU: compute sets over the run",  # an imported trace: the one line under it
    "gpu": "GPU time per rank within the profiled steps: idle, compute, communication, memory",  # or why none
}


@pytest.fixture(scope="module")
def synthetic_profiles(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli")
    return [synthetic.oom_pipeline(folder / "oom.pop"), synthetic.exchange_heavy_pipeline(folder / "exchange.pop")]


def invoke(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def run_report(profile: Path, section: str, fmt: str, tmp_path: Path) -> None:
    out = tmp_path / f"{section}.{fmt}"
    args = ["report", profile, "--section", section, "--format", fmt]
    if fmt in ("csv", "html"):
        args += ["-o", out]
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    if fmt == "json":
        doc = json.loads(result.stdout)
        assert doc["format"] == "popvision-report" and doc["kind"] == "report"
        assert set(doc["sections"]) == (set(SECTIONS[1:]) if section == "all" else {section})
    elif fmt == "csv":
        files = sorted(p.name for p in out.iterdir())
        assert files and all(name.endswith(".csv") for name in files)
        with open(out / files[0], newline="") as handle:
            assert next(csv.reader(handle))  # a header row
    elif fmt == "html":
        page = out.read_text()
        assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
        # an imported trace's tiles section is one line ("A rank has no tiles: ..."), without a figure
        assert page.count("Plotly.newPlot") >= 1 or section in ("summary", "system", "critical-path") or (
            section == "programs" and "gpipe" in str(out)) or (section == "tiles" and "A rank has no tiles" in page) \
            or (section == "gpu" and "GPU kernels" in page)  # no sample holds kernels: the sentence why, no figure
        assert page.count("plotly.js v") <= 1  # plotly.js inlined once at most
    else:
        # the title (a Markdown heading in md), the profile's path, and the headings of the section(s) asked for
        title = "# popvision report: " if fmt == "md" else "popvision report: "
        assert result.stdout.startswith(title) and str(profile) in result.stdout
        lines = {line.lstrip("#").strip() for line in result.stdout.splitlines()}
        imported = Report(profile).imported  # its headings say rank for IPU
        for name, heading in HEADINGS.items():
            heading = in_words(heading) if imported else heading
            # an imported trace's sections of what it cannot have (a compiled program, tiles) are only a note: left
            # out of the whole report, shown (the note) when asked for alone
            unread = imported and name in ("programs", "tiles")
            assert (heading in lines) == (section == name if unread else section in ("all", name)), (name, heading)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("section", SECTIONS)
def test_every_section_in_every_format_on_synthetic_profiles(synthetic_profiles, section, fmt, tmp_path):
    for profile in synthetic_profiles:
        run_report(profile, section, fmt, tmp_path / profile.stem)


def test_the_sample_profiles_are_there():
    # They are committed (sample_profiles/regenerate.py makes them): without them the next test
    # would check nothing.
    assert len(SAMPLES) >= 6, SAMPLES


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("section", SECTIONS)
def test_every_section_in_every_format_on_sample_profiles(section, fmt, tmp_path):
    for profile in SAMPLES:
        run_report(profile, section, fmt, tmp_path / profile.parent.name)


def test_text_report_is_aligned_and_says_what_is_wrong(synthetic_profiles):
    result = invoke("report", synthetic_profiles[0], "--section", "memory")
    lines = result.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.strip().startswith("ipu  always_live_bytes"))
    assert set(lines[header + 1].replace(" ", "")) == {"-"}
    column = "always_live_bytes"
    assert lines[header + 2].index("4,400") + len("4,400") == lines[header].index(column) + len(column)
    summary = invoke("report", synthetic_profiles[0], "--section", "summary").stdout
    assert "out of memory" in summary and "Offload the optimiser" in summary


def test_json_report_figures_by_hand(synthetic_profiles):
    doc = json.loads(invoke("report", synthetic_profiles[1], "--format", "json").stdout)
    assert doc["sections"]["summary"]["figures"]["step_cycles"] == 4500
    kinds = {r["kind"]: r for r in doc["sections"]["exchange"]["by_kind"]}
    assert kinds["inter_ipu"]["bytes"] == 64000
    assert doc["sections"]["exchange"]["bandwidth"][0]["efficiency_pct"] is None  # NaN -> null


def test_json_report_is_laid_out_as_json_dumps_indents_it():
    # GIVEN the largest sample's whole report (every section) as its JSON is written
    import popvision_py
    from popvision_py.render import jsonout
    from popvision_py.render.document import build_report

    doc = build_report(popvision_py.open(ROOT / "sample_profiles" / "bert_large_out_of_memory" / "profile.pop"), "all")
    written = jsonout.render(doc)
    # THEN it is, byte for byte, what Python's json writes with an indent of two (the layout before the
    # faster encoder), and reads back to the same values
    assert written == (json.dumps(jsonout.to_dict(doc), indent=2, allow_nan=False) + "\n").encode()
    assert json.loads(written) == json.loads(json.dumps(jsonout.to_dict(doc)))
    # AND it is written in pieces, a block at a time, more than one a section
    assert len(list(jsonout.chunks(doc))) > 2 * len(doc.sections())


def test_json_pieces_join_to_json_dumps_for_the_shapes_a_block_can_take():
    # GIVEN documents with no block, empty tables and figures, a tree, a name given twice in a section, a
    # string holding a line break, and text that is not ASCII
    import numpy as np

    from popvision_py.analysis.common.tables import Table
    from popvision_py.render import jsonout
    from popvision_py.render.document import Document

    empty = Document("report", "t", [])
    doc = Document("compare", "t", ["a.pop", "b.pop"])
    doc.add("summary.figures", "S", {"n": 1, "x": float("nan"), "name": "line\nbreak", "µ": [1, [2, {}]]})
    doc.add("summary.none", "S", {})
    doc.add("memory.rows", "M", Table({"ipu": np.array([0, 1]), "bytes": np.array([2.5, np.inf])}))
    doc.add("memory.empty", "M", Table({}))
    doc.add("memory.rows", "M again", Table({"ipu": np.array([7])}))
    doc.add("programs.tree", "P", Table({"node": np.array([0, 1]), "parent": np.array([-1, 0]),
                                         "name": np.array(["root", "leaf"], object)}), tree=True)
    doc.add("tiles.hidden", "H", Table({"t": np.array([1])}), hidden=True)
    for d in (empty, doc):
        # THEN the pieces join to what json.dumps writes with an indent of two, and a newline
        want = (json.dumps(jsonout.to_dict(d), indent=2, allow_nan=False) + "\n").encode()
        assert b"".join(jsonout.chunks(d)) == want == jsonout.render(d)
    # AND the name given twice keeps its first place and its last table; the hidden block is left out
    sections = json.loads(jsonout.render(doc))["sections"]
    assert list(sections) == ["summary", "memory", "programs"]
    assert list(sections["memory"]) == ["rows", "empty"] and sections["memory"]["rows"] == [{"ipu": 7}]


def test_json_records_convert_whole_columns_to_the_values_plain_gives():
    # GIVEN columns of each kind a report holds: ints, bools, floats with NaN and infinities, strings,
    # a nullable pandas integer, in a Table and in a DataFrame
    import numpy as np
    import pandas as pd

    from popvision_py.analysis.common.tables import Table
    from popvision_py.render import jsonout

    columns = {"n": np.array([1, -2, 3], np.int16), "ok": np.array([True, False, True]),
               "x": np.array([0.5, np.nan, -np.inf], np.float32), "name": np.array(["a", "b", "c"], object)}
    frame = pd.DataFrame(columns).assign(maybe=pd.array([1, None, 3], dtype="Int64"))
    # THEN each row's values are plain's, value by value (NaN and infinities null), with their JSON types
    for table in (Table(columns), frame):
        rows = jsonout.records(table)
        by_value = [{c: jsonout.plain(table[c].tolist()[i]) for c in rows[0]} for i in range(3)]
        assert rows == by_value
        assert json.dumps(rows[1]).startswith('{"n": -2, "ok": false, "x": null, "name": "b"')
        assert [type(v) for v in rows[0].values()][:4] == [int, bool, float, str]


def test_report_to_file_with_o(synthetic_profiles, tmp_path):
    out = tmp_path / "r.md"
    assert invoke("report", synthetic_profiles[0], "--format", "md", "-o", out).exit_code == 0
    assert out.read_text().startswith("# popvision report")


@pytest.mark.parametrize("fmt", ["html", "csv"])
def test_html_and_csv_need_o(synthetic_profiles, fmt):
    result = invoke("report", synthetic_profiles[0], "--format", fmt)
    assert result.exit_code == 2
    assert "-o PATH" in result.output


def test_bad_choice_names_the_valid_ones(synthetic_profiles):
    result = invoke("report", synthetic_profiles[0], "--section", "nope")
    assert result.exit_code == 2 and "'summary'" in result.output


def test_missing_profile_is_one_sentence(tmp_path):
    result = invoke("report", tmp_path / "none.pop")
    assert result.exit_code == 2 and "Traceback" not in result.output and "does not exist" in result.output


@pytest.mark.parametrize("table", ["ops", "programs", "tile_memory", "variables", "liveness", "exchanges"])
def test_a_table_corrupt_inside_its_pages_is_one_sentence(table, tmp_path):
    # GIVEN a sample profile with bytes of the table's first data page flipped (its footer is intact,
    # so the file opens; the page checksum fails only when the table is decoded, which for
    # --section all happens in the background thread that decodes the small tables)
    from tests.test_format import members, rezip

    contents = members(SAMPLES[0])
    data = bytearray(contents[f"{table}.parquet"])
    data[40:56] = bytes(b ^ 0xFF for b in data[40:56])
    contents[f"{table}.parquet"] = bytes(data)
    bad = rezip(tmp_path / "bad.pop", contents)
    # WHEN every section is asked for THEN one sentence names the table, exit 2, no traceback
    result = CliRunner().invoke(main, ["report", str(bad), "--section", "all"])
    assert result.exit_code == 2
    assert result.output == (f"Error: Table {table} of {bad} is corrupt (could not verify page integrity, CRC "
                             f"checksum verification failed for page_ordinal 0).\n")


IDENTIFIERS = {"worst_ipu", "worst_tile", "fits", "bottleneck_stage", "peak_step"}


@pytest.mark.parametrize("fmt", FORMATS)
def test_compare_profile_with_itself_shows_no_difference(synthetic_profiles, fmt, tmp_path):
    a = synthetic_profiles[1]
    args = ["compare", a, a, "--format", fmt] + (["-o", tmp_path / "c"] if fmt in ("csv", "html") else [])
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    if fmt == "json":
        doc = json.loads(result.stdout)
        assert doc["kind"] == "compare"
        rows = [r for name, s in doc["sections"].items() if name != "compare" for r in s["comparison"]]
        # identifiers (which tile, IPU, stage, step) have no difference; every other figure held differs by 0
        held = [r for r in rows if r["a"] is not None and r["b"] is not None]
        assert rows and all(r["difference"] == 0 or r["figure"].split()[-1] in IDENTIFIERS for r in held)


def test_compare_two_profiles_every_section(synthetic_profiles):
    # GIVEN the out-of-memory profile (A) and the exchange-heavy one (B)
    for section in COMPARED:
        # WHEN each section is compared, as text and as JSON
        result = invoke("compare", *synthetic_profiles, "--section", section)
        assert result.exit_code == 0, result.output
        doc = json.loads(invoke("compare", *synthetic_profiles, "--section", section, "--format", "json").stdout)
        # THEN the document holds the section(s) asked for, each with its comparison rows
        asked = set(COMPARED[1:]) if section == "all" else {section}
        assert set(doc["sections"]) == {"compare"} | asked
        assert all(doc["sections"][name]["comparison"] for name in asked)
        if section == "all":
            rows = {(name, r["figure"]): r for name in asked for r in doc["sections"][name]["comparison"]}
    # AND the figures are the ones computed by hand (tests/synthetic.py): a step of 100 + 4 x 300 + 200 + 10
    # cycles against the exchange-heavy 4,500; IPU 0 holds 4,400 + 200 bytes against 4 x 100 + 400 + 200
    step = rows["summary", "step_cycles"]
    assert (step["a"], step["b"], step["difference"]) == (1510, 4500, 2990)
    assert (rows["memory", "ipu 0 total_bytes"]["a"], rows["memory", "ipu 0 total_bytes"]["b"]) == (4600, 1000)
    optimiser = rows["memory", "ipu 0 optimiser_state always-live bytes"]  # B holds no optimiser state: 0 bytes
    assert (optimiser["b"], optimiser["difference"]) == (0, -optimiser["a"]) and optimiser["a"] > 0


def test_export_trace_is_valid_trace_event_json_matching_the_trace(synthetic_profiles, tmp_path):
    # GIVEN the exchange-heavy profile; WHEN its trace is exported
    profile = synthetic_profiles[1]
    out = tmp_path / "trace.json"
    result = invoke("export-trace", profile, "-o", out)
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    # THEN one X event per trace row, with the row's duration in microseconds, one process per IPU
    with open_profile(profile) as p:
        trace = p.read_pandas("trace")
        clock = p.target["clock_hz"]
    events = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(events) == len(trace)
    assert sorted(round(e["dur"] * clock / 1e6) for e in events) == sorted(trace["end_cycle"] - trace["start_cycle"])
    assert sorted(round(e["ts"] * clock / 1e6) for e in events) == sorted(trace["start_cycle"])
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {0: "IPU 0", 1: "IPU 1"}
    assert {e["cat"] for e in events} == {"compute", "exchange", "sync", "stream", "idle"}
    assert any(e["name"] == "S0/fwd/exchange" for e in events)


def test_export_trace_streams_in_batches(synthetic_profiles, tmp_path):
    from popvision_py.export_trace import export

    out = tmp_path / "t.json"
    count = export(synthetic_profiles[1], out, batch_rows=7)
    assert len([e for e in json.loads(out.read_text())["traceEvents"] if e["ph"] == "X"]) == count == 52


def test_export_trace_needs_o(synthetic_profiles):
    result = invoke("export-trace", synthetic_profiles[0])
    assert result.exit_code == 2
    assert "Error: Missing option '-o' / '--output'." in result.output


def test_sql_over_the_tables(synthetic_profiles):
    q = "SELECT phase, sum(end_cycle - start_cycle) AS cycles FROM trace GROUP BY phase ORDER BY cycles DESC"
    text = invoke("sql", synthetic_profiles[1], q)
    assert text.exit_code == 0 and text.stdout.splitlines()[0].split() == ["phase", "cycles"]
    rows = json.loads(invoke("sql", synthetic_profiles[1], q, "--format", "json").stdout)
    assert rows[0] == {"phase": "exchange", "cycles": 4000}
    csv_out = invoke("sql", synthetic_profiles[1], "SELECT count(*) AS n FROM ops", "--format", "csv").stdout
    assert csv_out.splitlines() == ["n", "6"]


def test_sql_error_is_one_sentence(synthetic_profiles):
    result = invoke("sql", synthetic_profiles[1], "SELECT * FROM nope")
    assert result.exit_code == 2 and result.output.startswith("Error: There is no table nope: the tables are ")
    assert "Traceback" not in result.output and result.output.count("\n") == 1
    result = invoke("sql", synthetic_profiles[1], "SELECT nothing FROM trace")
    assert result.exit_code == 2 and "The query failed" in result.output and "Traceback" not in result.output


def test_json_to_stdout_and_to_a_file_are_the_same_bytes(synthetic_profiles, tmp_path):
    # GIVEN a whole report as JSON, written to stdout and to -o FILE (both a block at a time)
    out = tmp_path / "r.json"
    to_stdout = invoke("report", synthetic_profiles[1], "--section", "all", "--format", "json")
    assert invoke("report", synthetic_profiles[1], "--section", "all", "--format", "json", "-o", out).exit_code == 0
    # THEN both hold the same bytes, one JSON document
    assert to_stdout.exit_code == 0 and to_stdout.stdout_bytes == out.read_bytes()
    assert json.loads(out.read_bytes())["sections"]["summary"]["figures"]["step_cycles"] == 4500


def test_a_long_tables_rows_are_encoded_a_piece_at_a_time_and_join_to_json_dumps(monkeypatch):
    # GIVEN tables longer than a piece (3 rows here): 0 to 9 rows of ints, floats with a NaN and strings, as a
    # Table and as a DataFrame whose index is not its rows' positions, then a block of figures
    import numpy as np
    import pandas as pd

    from popvision_py.analysis.common.tables import Table
    from popvision_py.render import jsonout
    from popvision_py.render.document import Document

    monkeypatch.setattr(jsonout, "PIECE_ROWS", 3)
    for n in (0, 1, 3, 4, 7, 9):
        x = np.linspace(0, 1, n)
        x[n // 2:n // 2 + 1] = np.nan
        columns = {"step": np.arange(n), "x": x, "name": np.array([f"rank {i}" for i in range(n)], object)}
        doc = Document("report", "t", [])
        doc.add("liveness.by_step", "L", Table(columns))
        doc.add("liveness.frame", "F", pd.DataFrame(columns, index=np.arange(n)[::-1] + 5))
        doc.add("liveness.after", "A", {"k": 1})
        pieces = list(jsonout.chunks(doc))
        # THEN the pieces join to what json.dumps writes with an indent of two, byte for byte
        want = (json.dumps(jsonout.to_dict(doc), indent=2, allow_nan=False) + "\n").encode()
        assert b"".join(pieces) == want
        # AND the rows are the table's, in order (the frame's by position), the NaN as null
        sections = json.loads(want)["sections"]["liveness"]
        for rows in (sections["by_step"], sections["frame"]):
            assert [r["step"] for r in rows] == list(range(n))
            assert [r["name"] for r in rows] == [f"rank {i}" for i in range(n)]
            assert [r["x"] is None for r in rows] == [bool(v) for v in np.isnan(x)]
        # AND no piece holds more than a piece's rows (without the pieces, a table's rows came in one)
        assert max(p.count(b'"step"') for p in pieces) == min(n, 3)


def test_a_process_id_is_printed_as_the_traces_and_ps_print_it_and_a_count_with_separators():
    import numpy as np

    from popvision_py.analysis.common.answer import Table
    from popvision_py.render import html, markdown, text

    # GIVEN a system row of process 3113936 (HTA's trace_diff control's) and its 4,271 events
    row = Table({"process": np.array(["rank-3"], dtype=object), "pid": np.array([3113936]),
                 "events": np.array([4271])})
    # THEN text, Markdown and HTML print the pid whole, and the count with its thousands separator
    assert text.table(row)[2].split() == ["rank-3", "3113936", "4,271"]
    assert markdown.table(row)[2] == "| rank-3 | 3113936 | 4,271 |"
    page = html._table(row.frame())
    assert "<td class='n'>3113936</td>" in page and "<td class='n'>4,271</td>" in page


def test_csv_and_html_write_a_long_table_without_keeping_it_as_a_frame(tmp_path):
    # GIVEN a document of a long table (5,000 steps, the liveness section's shape) and a figure of it
    import numpy as np

    from popvision_py.analysis.common.tables import Table
    from popvision_py.render import csvout, html
    from popvision_py.render.document import Document

    n = 5_000
    by_step = Table({"ipu": np.zeros(n, np.int64), "step": np.arange(n), "name": np.array(["op"] * n, object),
                     "total_bytes": np.arange(n) * 10, "not_always_live_bytes": np.arange(n)})
    doc = Document("report", "t", [])
    doc.add("liveness.by_step", "Memory over steps", by_step)
    # WHEN it is written as CSV and as an HTML page
    csvout.write(doc, tmp_path / "csv")
    page = html.render(doc).decode()
    # THEN the CSV file has every row, the page the first 200 and how many more, and the table holds no frame
    # of its rows after either (a frame kept by the table held a 10 GB import's rows for the rest of the command)
    assert (tmp_path / "csv" / "liveness.by_step.csv").read_text().count("\n") == n + 1
    assert page.count("<tr>") == 201 and "... 4,800 more rows" in page
    assert by_step._frame is None
