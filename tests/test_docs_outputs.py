"""The command outputs shown in README.md and docs/*.md are what their commands print now (issue 37).

Each shown output sits between ``<!-- output: COMMAND -->`` and ``<!-- /output -->`` markers just after its
command; ``scripts/regen_docs.py`` writes them. Here each command runs again (in a scratch folder, as
the script runs it) and its excerpt must equal the block, wall-clock times aside. The README's
``tune bert-large --system POD16`` takes minutes: its shown figures are checked by emulating the shown
best candidate and the start again, each a few seconds, and comparing them with the shown rows.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("regen_docs", ROOT / "scripts" / "regen_docs.py")
regen = importlib.util.module_from_spec(spec)
sys.modules["regen_docs"] = regen
spec.loader.exec_module(regen)

BLOCKS = list(regen.blocks())
TUNE = "popvision tune bert-large --system POD16"


def test_every_shown_output_has_its_command_beside_it_and_a_way_to_make_it():
    # GIVEN the marked blocks of the README and docs
    commands = [b.command for b in BLOCKS]
    # THEN each command the script knows is shown once, and each shown one is known
    assert sorted(commands) == sorted(regen.SHOWN), "markers and scripts/regen_docs.py's SHOWN disagree"
    # AND each marker follows a block that shows its command, so the output is printed by the command beside it
    for block in BLOCKS:
        before = block.doc.read_text()[:block.start].rstrip().split("\n")[-8:]
        assert any(block.command in line for line in before), f"{block.name()}: the command is not just above"


@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in BLOCKS if not regen.SHOWN[b.command].slow], ids=lambda b: b.command[:60])
def test_a_shown_output_is_what_its_command_prints(block):
    # WHEN the shown command runs again
    printed = regen.produce(block.command)
    # THEN the block shows what it prints (regenerate with: python scripts/regen_docs.py)
    assert regen.comparable(printed) == regen.comparable(block.lines), block.name()


def run_json(command: str) -> dict:
    """``popvision run ... --json`` of a shown command, in the scratch folder."""
    with regen.scratch() as folder:
        out = regen.run(command + " --json -q", Path(folder))
    return json.loads(out)


def number(text: str) -> float:
    return float(text.replace(",", ""))


def check_row(row: str, run: dict, start_samples_per_s: float) -> None:
    """A shown tune row against the emulated run: samples/s, its range, vs start, fits, worst tile, headroom,
    IPUs and batch, each as rounded for the table."""
    m = re.match(r"\s*\d+\*?\s+([\d,.]+)\s+([\d,.]+) to ([\d,.]+)\s+([\d.]+)x\s+(\S+)\s+([\d.]+)%\s+([\d,]+) KiB\s+"
                 r"(\d+)\s+([\d,]+)\s", row)
    assert m, row
    samples, low, high, vs, fits, worst, headroom, ipus, batch = m.groups()
    assert number(samples) == pytest.approx(run["samples_per_second"], abs=0.05)
    for shown, emulated in zip((low, high), run["throughput_range"]):  # three significant figures
        assert number(shown) == pytest.approx(emulated, rel=0.006)
    assert number(vs) == pytest.approx(run["samples_per_second"] / start_samples_per_s, abs=0.005)
    assert fits == ("yes" if run["fit_verdict"] == "fits" else run["fit_verdict"])
    assert number(worst) == pytest.approx(100 * run["worst_tile_bytes"] / run["bytes_per_tile"], abs=0.05)
    assert number(headroom) == pytest.approx((run["bytes_per_tile"] - run["worst_tile_bytes"]) / 1024, abs=0.5)
    assert int(ipus) == run["num_ipus"] * run["replicas"]
    assert number(batch) == run["samples_per_step"]


@pytest.mark.slow
def test_the_readmes_tune_output_holds_for_its_best_candidate_and_its_start():
    # GIVEN the README's tune output (the whole search takes minutes; scripts/regen_docs.py runs it)
    block = next(b for b in BLOCKS if b.command == TUNE)
    lines = list(block.lines)
    best = next(line for line in lines if re.match(r"\s+1\*?\s", line))
    start = next(line for line in lines if line.rstrip().endswith("(the start)"))
    command = next(line for line in lines if re.match(r"\s+#1\s+popvision run ", line)).split("#1", 1)[1].strip()
    # WHEN the start (the zoo's default on the system) and the shown best candidate's command are emulated again
    start_run = run_json("popvision run bert-large --system IPU-POD16")
    best_run = run_json(command)
    # THEN both rows show what they print now
    check_row(start, start_run, start_run["samples_per_second"])
    check_row(best, best_run, start_run["samples_per_second"])
    # AND the Pareto front's ends and the compare's throughput row agree
    stripped = [line.strip() for line in lines]
    tag = "(#1, borderline)" if best_run["fit_verdict"] == "borderline" else "(#1)"
    assert f"16 IPUs  {best_run['samples_per_second']:,.1f} samples/s  {tag}" in stripped
    assert any(line.startswith(f"4 IPUs  {start_run['samples_per_second']:,.1f} samples/s") for line in stripped)
    throughput = next(line for line in lines if "throughput_samples_per_s" in line).split()
    assert number(throughput[2]) == pytest.approx(start_run["samples_per_second"], abs=0.005)


def test_a_changed_figure_is_found(tmp_path):
    # GIVEN a doc whose shown output has one figure changed from what its command prints
    block = next(b for b in BLOCKS if b.command.startswith("popvision report gpipe/"))
    changed = [re.sub(r"1\.8x", "1.9x", line) for line in block.lines]
    assert changed != list(block.lines)
    doc = tmp_path / "doc.md"
    doc.write_text("```\n" + block.command + "\n```\n\n<!-- output: " + block.command + " -->\n```\n"
                   + "\n".join(changed) + "\n```\n<!-- /output -->\n")
    # WHEN it is compared with what the command prints
    shown = next(regen.blocks([doc]))
    printed = regen.produce(shown.command)
    # THEN they differ, and rewriting puts the printed figure back
    assert regen.comparable(printed) != regen.comparable(shown.lines)
    assert regen.rewrite(doc, {shown.command: printed})
    assert next(regen.blocks([doc])).lines == tuple(printed)


def test_the_script_checks_without_writing(tmp_path):
    # GIVEN the script's --check on one cheap command
    script = str(ROOT / "scripts" / "regen_docs.py")
    done = subprocess.run([sys.executable, script, "--check", "--only", "--max-candidates 8"],
                          capture_output=True, text=True, timeout=300)
    # THEN the docs agree with it (exit 0) and it names what it ran
    assert done.returncode == 0, done.stdout + done.stderr
    assert "running docs/tune.md: popvision tune mnist --system POD16 --max-candidates 8" in done.stderr
