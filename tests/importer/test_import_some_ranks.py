"""An import of some ranks of a larger job (say ranks 100 to 139 of 256) holds them as IPUs 0 to 39; the reports a
person reads (text, Markdown, HTML) name each by its rank, as its trace does, in every section: the overview, the
key figures, the tables and, past ``MANY_RANKS``, the ranks furthest past the median. JSON and CSV keep the
profile's own IPU numbers (docs/reports.md)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from popvision_py.cli import main
from tests.importer.test_import_memory_not_recorded import MIB, gpu_trace


def import_ranks(folder: Path, ranks: list[int], world: int, peak_mib: dict[int, int]) -> Path:
    """One small GPU trace a rank (``gpu_trace``'s: a 1 ms step, CUDA memory of 3 MiB then 5 MiB, or the rank's
    ``peak_mib``), each naming its rank in a world of ``world``, imported: the profile's path."""
    for rank in ranks:
        trace = gpu_trace(memory=True)
        trace["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world}
        if rank in peak_mib:
            trace["traceEvents"][-1]["args"]["Total Allocated"] = peak_mib[rank] * MIB
        (folder / f"rank{rank}.json").write_text(json.dumps(trace))
    result = CliRunner().invoke(main, ["import", str(folder), "-o", str(folder / "out"), "-q"])
    assert result.exit_code == 0, result.output
    return folder / "out" / "profile.pop"


def report(profile: Path, *args: str) -> str:
    result = CliRunner().invoke(main, ["report", str(profile), *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_one_rank_of_eight_is_named_rank_5_in_every_section_a_person_reads(tmp_path):
    # GIVEN the trace of rank 5 of a job of 8 ranks, alone (it is the profile's IPU 0)
    profile = import_ranks(tmp_path, [5], 8, {})
    # THEN the overview, the memory table and the summary's key figures say rank 5, never rank 0
    overview = report(profile)
    assert "peak 5.0 MiB allocated on rank 5" in overview
    # AND the overview says the data-parallel run has no pipeline, and what each section adds in a rank's words
    assert "no pipeline to balance (data parallel: each rank runs the whole model)" in overview
    # AND its speed is its step's, 1 ms: 1,000 steps a second (each rank its own batches, not one rank's micro-batch)
    assert "  speed     1 ms a step, 1,000 steps/s" in overview.splitlines()
    assert "memory per rank and by category" in overview and "IPU" not in overview and "tile" not in overview
    memory = report(profile, "--section", "memory").splitlines()
    table = memory[memory.index(next(line for line in memory if line.strip().startswith("rank  always"))) + 2]
    assert table.split()[0] == "5"
    summary = report(profile, "--section", "summary")
    assert "fullest_rank              5" in summary
    # AND a run without a pipeline has no bottleneck stage, said in words, not as stage -1
    stages = report(profile, "--section", "stages")
    figures = dict(line.strip().split(None, 1) for line in stages.split("Pipeline figures")[1].split("\n\n")[0]
                   .splitlines()[2:])
    assert figures["bottleneck_stage"] == "none: no pipeline"
    # AND JSON keeps the profile's own numbering: IPU 0
    doc = json.loads(report(profile, "--section", "summary", "--format", "json"))
    assert doc["sections"]["summary"]["figures"]["worst_ipu"] == 0


def test_past_many_ranks_the_fullest_is_named_by_its_rank(tmp_path):
    # GIVEN ranks 100 to 139 of a job of 256, rank 117 (IPU 17) peaking at 9 MiB and the others at 5 MiB
    profile = import_ranks(tmp_path, list(range(100, 140)), 256, {117: 9})
    # THEN the memory section's spread over the 40 ranks names rank 117 as the furthest past the median
    memory = report(profile, "--section", "memory").splitlines()
    total = next(line for line in memory if line.strip().startswith("total_bytes")).split()
    assert total[-2:] == ["117", f"(+{100 * (9 - 5) / 5:.1f}%)"]  # 9 MiB against the median's 5: +80%
    assert "peak 9.0 MiB allocated on rank 117" in report(profile)
    # AND the HTML report's figures label the ranks by their numbers (the memory per rank's bars: 100 to 139)
    page = report(profile, "--format", "html", "-o", str(tmp_path / "r.html"))
    html = (tmp_path / "r.html").read_text()
    assert "Wrote" in page and '"Rank 117"' in html and '"Rank 139"' in html and '"Rank 17"' not in html
