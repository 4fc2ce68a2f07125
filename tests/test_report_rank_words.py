"""A report of an imported trace speaks of ranks and ns, not IPUs, cycles and tiles, in the formats people read
(text, Markdown, HTML), while JSON and CSV keep the profile's own names for scripts."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from popvision_py.cli import main
from tests.importer.test_import_memory_not_recorded import MIB

ROOT = Path(__file__).resolve().parent.parent
IMPORTED = ROOT / "sample_profiles" / "pytorch_gpipe" / "profile.pop"
IPU_RUN = ROOT / "sample_profiles" / "mnist_pipelined" / "profile.pop"


def report(profile: Path, fmt: str) -> str:
    result = CliRunner().invoke(main, ["report", str(profile), "--section", "all", "--format", fmt],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def key_figures(text: str, title: str) -> dict[str, str]:
    """The ``name  value`` lines under ``title`` in a text report, up to the next blank line."""
    lines = text.splitlines()
    start = lines.index(title) + 2
    end = lines.index("", start)
    return dict(line.strip().split(None, 1) for line in lines[start:end])


def test_an_imported_report_names_ranks_and_ns_and_leaves_out_the_tiles():
    text, doc = report(IMPORTED, "text"), json.loads(report(IMPORTED, "json"))
    # THEN the headings say rank, never IPU, and the key figures ns, never cycles
    assert "Memory per rank" in text.splitlines() and "Memory per IPU" not in text
    assert "Time by phase (ns summed over ranks)" in text.splitlines()
    figures = key_figures(text, "Summary")
    assert {"ranks", "total_ns", "step_ns", "fullest_rank", "fullest_rank_bytes", "device_bytes"} <= set(figures)
    assert not {"num_ipus", "total_cycles", "worst_ipu", "worst_tile", "oom_tiles", "bytes_per_tile"} & set(figures)
    # AND the run's strategy is the schedule PyTorch ran, not the IPU word the import maps it to
    import popvision_py

    with popvision_py.open(IMPORTED) as r:
        ran = r.run["import"]["schedule"]
    assert "strategy" not in figures and figures["schedule"] == ran and doc["sections"]["summary"]["figures"][
        "strategy"] == "pipelined"
    # AND the figures are the profile's own, renamed: as JSON gives them under the profile's names
    raw = json.dumps(doc)
    assert '"num_ipus"' in raw and '"total_cycles"' in raw and '"worst_tile"' in raw
    found = doc["sections"]["summary"]["figures"]
    assert figures["ranks"] == f"{found['num_ipus']:,}" and figures["total_ns"] == f"{found['total_cycles']:,}"
    # AND no table column of the text names an IPU, a cycle or a tile's figure
    headers = [line.split() for line in text.splitlines() if line.startswith("  ") and "  ---" not in line]
    words = {word for row in headers for word in row}
    assert not {"ipu", "src_ipu", "dst_ipu", "max_tile_bytes", "oom_tiles", "compute_cycles"} & words
    # AND the pipeline figures hold no re-timing of supersteps, which ranks do not run in (JSON: none, null)
    stages = key_figures(text, "Pipeline figures")
    assert {"bottleneck_stage", "step_ns"} <= set(stages) and not {"balanced_step_ns", "balance_gain_pct"} & set(stages)
    assert doc["sections"]["stages"]["figures"]["balanced_step_cycles"] is None
    # AND Markdown says the same
    markdown = report(IMPORTED, "md")
    assert "### Memory per rank" in markdown and "| ranks |" in markdown and "| num_ipus |" not in markdown


def test_an_ipu_report_keeps_its_words():
    text = report(IPU_RUN, "text")
    assert "Memory per IPU" in text.splitlines() and "num_ipus" in key_figures(text, "Summary")


def test_a_spread_of_many_ranks_names_its_figures_in_a_ranks_words(tmp_path):
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import make_gpu_trace

    from popvision_py.importer import find_traces, import_traces

    # GIVEN an import of 40 ranks (past 32: each per-rank table shown as its figures' spread)
    make_gpu_trace.make(tmp_path / "t", total_mb=0.05, ranks=40, layers=2, bucket=1, jobs=1, spread=0.0)
    import_traces(find_traces([str(tmp_path / "t")]), tmp_path / "p" / "profile.pop")
    text = report(tmp_path / "p" / "profile.pop", "text")
    # WHEN its memory per rank is read
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Memory per rank (40 ranks"))
    rows = lines[start + 4:lines.index("", start)]
    figures = [row.split()[0] for row in rows]
    # THEN the spread's rows are the ranks' figures without a tile's, and every rank counted in each
    assert figures == ["always_live_bytes", "not_always_live_bytes", "total_bytes", "capacity_bytes",
                       "headroom_bytes", "used_pct"]
    assert all(row.split()[1] == "40" for row in rows)


def plotly_figures(page: str) -> list[dict]:
    """The figures of an HTML report: the JSON of each ``Plotly.newPlot(id, data, layout, ...)`` call."""
    decoder, out, at = json.JSONDecoder(), [], 0
    while (at := page.find("Plotly.newPlot(", at)) >= 0:
        at = page.index(",", at) + 1  # past the div's id
        data, end = decoder.raw_decode(page, at + len(page[at:]) - len(page[at:].lstrip()))
        rest = page[end:].lstrip()[1:]
        layout, _ = decoder.raw_decode(rest.lstrip())
        out.append({"data": data, "layout": layout})
        at = end
    return out


def html_report(profile: Path, out: Path) -> str:
    result = CliRunner().invoke(main, ["report", str(profile), "--section", "all", "--format", "html", "-o", str(out)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return out.read_text()


def test_the_html_reports_figures_say_rank_for_an_imported_trace_and_ipu_for_an_ipu_run(tmp_path):
    imported = plotly_figures(html_report(IMPORTED, tmp_path / "imported.html"))
    ipu = plotly_figures(html_report(IPU_RUN, tmp_path / "ipu.html"))
    assert imported and ipu

    def words(figs: list[dict]) -> str:  # every title, axis title, trace name and category label
        out = []
        for f in figs:
            layout = f["layout"]
            out += [layout.get("title", {}).get("text") or ""]
            out += [layout.get(axis, {}).get("title", {}).get("text") or "" for axis in ("xaxis", "yaxis")]
            for trace in f["data"]:
                out.append(str(trace.get("name") or ""))
                labels = [trace.get(attr) for attr in ("x", "y") if isinstance(trace.get(attr), list)]
                out += [v for values in labels for v in values if isinstance(v, str)]
        return "\n".join(out)

    said = words(imported)
    # THEN no title, axis or label of an imported trace's figures names an IPU, a cycle or a tile
    assert "IPU" not in said and "cycles" not in said.lower() and "tile" not in said.lower(), said
    assert "Memory per rank" in said and "Rank 0" in said and "Time by phase, summed over the ranks" in said
    # in a trace's phases and its times in ms (plotly's ticks read ns as '1.4B'), no IPU's sync
    assert "exposed communication" in said and "copies and sets" in said and "sync" not in said
    assert "Time (ns) per micro-batch per stage" in said
    # AND an IPU run's figures keep their words
    assert "Memory per IPU" in words(ipu) and "IPU 0" in words(ipu)


def test_the_html_exchange_matrix_of_many_ranks_sums_groups_of_them():
    import numpy as np
    import pandas as pd

    from popvision_py.render import figures

    # GIVEN 100 ranks in a ring, rank i sending i + 1 bytes to rank i + 1, and the host 7 bytes to rank 5
    ranks = np.arange(100)
    matrix = pd.DataFrame({"src_ipu": np.r_[ranks, -1], "dst_ipu": np.r_[(ranks + 1) % 100, 5],
                           "bytes": np.r_[ranks + 1, 7]})
    # WHEN drawn
    fig = figures.exchange_matrix(matrix)
    heat = fig.data[0]
    z = np.asarray(heat.z)
    # THEN past 64 ranks a side each cell is a pair of consecutive ranks (50 groups), the host its own row
    assert fig.layout.title.text == "Bytes from source to destination (groups of 2 IPUs)"
    assert list(heat.y) == ["host", *[f"IPU {2 * g}-{2 * g + 1}" for g in range(50)]]
    assert list(heat.x) == [f"IPU {2 * g}-{2 * g + 1}" for g in range(50)]
    # AND every byte is in it, each cell the sum of its ranks' pairs: group 0 (ranks 0, 1) sends 1 byte to itself
    # (0 -> 1) and 2 bytes to group 1 (1 -> 2); the last group sends 100 bytes round to group 0
    assert z.sum() == (ranks + 1).sum() + 7
    assert z[1, 0] == 1 and z[1, 1] == 2 and z[50, 0] == 100 and z[0, 2] == 7
    # AND 64 ranks or fewer keep a cell a rank
    small = figures.exchange_matrix(matrix[matrix["src_ipu"] < 10].assign(dst_ipu=lambda m: m["dst_ipu"] % 10))
    assert list(small.data[0].x)[:3] == ["IPU 0", "IPU 1", "IPU 2"] and "groups" not in small.layout.title.text


def test_the_html_liveness_of_many_ranks_is_a_band_and_the_fullest_ranks():
    import numpy as np
    import pandas as pd

    from popvision_py.render import figures

    # GIVEN 40 ranks over 3 steps, rank r holding r + s bytes at step s, rank 39 a peak of 1,000 at step 1
    ranks, steps = np.repeat(np.arange(40), 3), np.tile(np.arange(3), 40)
    total = ranks + steps
    total[(ranks == 39) & (steps == 1)] = 1000
    by_step = pd.DataFrame({"ipu": ranks, "step": steps, "total_bytes": total, "name": "s"})
    # WHEN drawn
    fig = figures.liveness(by_step)
    lines = {t.name: t for t in fig.data}
    # THEN the band is the least, median and most over the 40 ranks at each step (by hand: least s, median
    # 19.5 + s, most 39 + s but 1,000 at step 1), and the 3 fullest ranks (39, 38, 37) are lines
    assert list(lines["least"].y) == [0, 1, 2] and list(lines["median"].y) == [19.5, 20.5, 21.5]
    assert list(lines["most"].y) == [39, 1000, 41]
    assert [t.name for t in fig.data][3:] == ["IPU 37", "IPU 38", "IPU 39"]
    assert "over 40 IPUs" in fig.layout.title.text
    # AND 32 ranks or fewer are a line each
    assert len(figures.liveness(by_step[by_step["ipu"] < 32]).data) == 32


def test_a_comparison_of_two_imported_traces_speaks_of_ranks_and_ns_and_json_keeps_the_names(tmp_path):
    from tests.importer.test_import_some_ranks import import_ranks

    # GIVEN ranks 5 and 6 of a job, imported twice: once as they are, once with rank 6's memory peak at 9 MiB
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = import_ranks(tmp_path / "a", [5, 6], 8, {}), import_ranks(tmp_path / "b", [5, 6], 8, {6: 9})
    # WHEN they are compared in text
    result = CliRunner().invoke(main, ["compare", str(a), str(b)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    text = result.output
    # THEN each rank is named by its trace's number, the figures in ns, the schedule in PyTorch's words, and no
    # figure of a tile, a FLOP or an IPU's own exchange kinds is listed
    cells = [re.split(r"\s{2,}", line.strip()) for line in text.splitlines()
             if line.startswith(("  memory ", "  summary ", "  stages "))]
    rows = {row[1]: row[2:] for row in cells}  # section, figure, a, b, difference, difference_pct
    assert rows["rank 6 total_bytes"] == [f"{5 * MIB:,}", f"{9 * MIB:,}", f"{4 * MIB:,}", f"{100 * 4 / 5:.0f}"]
    assert "total_ns" in rows and "ranks" in rows and "fullest_rank" in rows
    assert "a_schedule  data parallel" in text
    # AND two data-parallel runs have no bottleneck stage: no value, not a stage numbered -1
    assert rows["bottleneck_stage"] == ["-", "-", "-", "-"]
    for ipu_word in ("ipu 0", "ipu 1", "total_cycles", "oom_tiles", "worst_tile", "flop", "remote_buffer", "sync_",
                     "balanced_step", "balance_gain"):
        assert ipu_word not in text, ipu_word
    # AND JSON keeps the profile's own names and numbers
    doc = json.loads(CliRunner().invoke(main, ["compare", str(a), str(b), "--format", "json"]).output)
    figures = [r["figure"] for r in doc["sections"]["memory"]["comparison"]]
    assert "ipu 1 total_bytes" in figures and doc["sections"]["compare"]["profiles"]["a_strategy"] == "sharded"


def test_a_gpu_traces_report_reads_in_pytorchs_words_without_an_ipus_blocks(tmp_path):
    from tests.dashboard.test_gpu_page import import_unnamed_peers

    # GIVEN a one-rank GPU trace (events(): an all-reduce of 250 µs, a copy of 40 µs and a set of 10 µs) that also ran
    # a SendRecv and a Recv kernel whose peer no c10d call names (as HTA's sampled traces hold them)
    profile = import_unnamed_peers(tmp_path)
    # WHEN its whole report is read
    text = report(profile, "text")
    figures = {**key_figures(text, "Summary"), **key_figures(text, "Time by phase (ns summed over ranks)")}
    # THEN it holds no figure a trace cannot have (FLOPs, syncs) and names the phases as PyTorch users do: the copy
    # and the set are 50 µs
    assert not {"total_flops", "flop_utilisation_pct", "sync_ns", "sync_pct"} & set(figures)
    assert figures["copies_ns"] == f"{50_000:,}" and "exposed_comm_ns" in figures
    # AND its exchange kinds are PyTorch's, none of an IPU's own (within a chip, to the host, to remote buffers)
    kinds = table_rows(text, "Exchange by kind")
    assert sorted(row[0] for row in kinds) == ["collective", "point-to-point"]
    # AND the transfers whose peer the trace does not name say so: the SendRecv's destination, the Recv's source; and
    # the all-reduce goes to its group, not to its own rank
    title = "Costliest exchange steps (-: a collective's group, or a peer the traces do not name)"
    costliest = table_rows(text, title)
    ends = {row[2].split("(")[0]: (row[-6], row[-5]) for row in costliest if "Recv" in row[2] or "AllReduce" in row[2]}
    assert ends == {"ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t": ("0", "-"), "ncclDevKernel_Recv": ("-", "0"),
                    "ncclKernel_AllReduce_RING_LL_Sum_bf16": ("0", "-")}
    # AND the rank-to-rank matrix, whose rows do not say whose they are, says what a rank to itself is
    from popvision_py.render.rank_words import ITSELF

    assert f"Rank-to-rank matrix ({ITSELF})" in text
    # AND the operators' table has no id, block, FLOP or variable column, and its kinds in PyTorch's words
    header = table_header(text, "Operations: each op and pass over the run, costliest first")
    assert header[:3] == ["name", "kind", "stage"] and not {"op_id", "block", "flops", "variables"} & set(header)
    # AND the blocks of what a trace cannot have are left out, the missing tiles said once
    for title in ("Host input", "Program tree", "Tile balance", "Out-of-memory tiles", "Best contiguous split"):
        assert title not in text, title
    assert text.count("A rank has no tiles") == 1
    exchange = CliRunner().invoke(main, ["report", str(profile), "--section", "exchange"]).output
    assert "Exchange by kind" in exchange and "Host input" not in exchange
    # AND JSON keeps the profile's own names and every block, for scripts
    doc = json.loads(report(profile, "json"))
    assert {r["kind"] for r in doc["sections"]["exchange"]["by_kind"]} >= {"internal", "inter_ipu", "host"}
    assert "sync_cycles" in doc["sections"]["exchange"]["figures"] and "tree" in doc["sections"]["programs"]


def table_rows(text: str, title: str) -> list[list[str]]:
    """The body rows of a text report's table under ``title``, their cells split at runs of two spaces."""
    lines = text.splitlines()
    start = lines.index(title) + 4  # title, ====, header, ----
    end = lines.index("", start) if "" in lines[start:] else len(lines)
    return [re.split(r"\s{2,}", line.strip()) for line in lines[start:end]]


def table_header(text: str, title: str) -> list[str]:
    lines = text.splitlines()
    return lines[lines.index(title) + 2].split()


def test_an_html_tables_long_kernel_name_is_cut_and_whole_on_hover():
    import html as html_text

    import pandas as pd

    from popvision_py.render.html import MAX_CELL, _table

    # GIVEN a CUDA kernel's name with its template arguments (HTA's trace_filter holds ones of 2,000 characters)
    name = "void split_embedding_backward<" + "at::GenericPackedTensorAccessor<c10::Half, 1ul>, " * 40 + ">"
    page = _table(pd.DataFrame({"name": [name], "kernels": [2]}))
    # THEN its cell shows the first MAX_CELL characters, cut with an ellipsis, and the whole name on hover
    cell = re.search(r"<td class='' title='([^']*)'>([^<]*)</td>", page)
    assert html_text.unescape(cell[1]) == name
    assert html_text.unescape(cell[2]) == name[:MAX_CELL - 1] + "…"
    # AND a number stays a number's cell
    assert "<td class='n'>2</td>" in page
