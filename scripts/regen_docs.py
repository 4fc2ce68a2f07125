"""The command outputs shown in README.md and docs/*.md, printed again by their commands (issue 37).

An output shown in the docs sits between two markers, just after the command that prints it:

    <!-- output: popvision report gpipe/profile.pop --section summary -->
    ```
    ...what the command prints, or the excerpt SHOWN names...
    ```
    <!-- /output -->

``python scripts/regen_docs.py`` runs each marked command and rewrites its block in place. Each runs in a
scratch folder that sees the repository's ``sample_profiles/``, ``examples/`` and ``tests/`` (so a path in a
command reads as it does from the repository root, and nothing it writes lands in the checkout), after the
setup commands ``SHOWN`` gives it; the scratch folder's path is taken out of what it prints. ``--check`` rewrites
nothing and exits 1 naming each block that differs; ``--only TEXT`` runs the markers whose command
contains TEXT. tests/test_docs_outputs.py compares every block with what its command prints now.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
BIN = Path(sys.executable).parent
ELIDED = "..."
MARKER = re.compile(r"^<!-- output: (?P<command>.+?) -->\n(?P<body>.*?)^<!-- /output -->\n", re.S | re.M)
FENCE = re.compile(r"\A```[a-z]*\n(?P<text>.*?)\n?```\n\Z", re.S)
# What changes from one run to the next without any figure changing: wall-clock times.
UNSTABLE = ((re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?Z?"), "<time>"),
            (re.compile(r"\b(in|took|after) \d[\d.,]* ?(ms|s|min|minutes|seconds)\b"), r"\1 <duration>"))

# A region of an output: from the first line matching the pattern (after the previous region), up to the
# line matching the second pattern (not included), or that many lines, or None: to the end.
Region = tuple[str, "str | int | None"]


@dataclass(frozen=True)
class Shown:
    """How a marked command's output is shown: the excerpt (``regions``; none: all of it, a run of left-out
    lines is one ``...`` line), the commands run before it, and whether it takes minutes (``slow``: the
    test checks it by a fast equivalent, tests/test_docs_outputs.py)."""

    regions: tuple[Region, ...] = ()
    setup: tuple[str, ...] = ()
    slow: bool = False


SHOWN: dict[str, Shown] = {
    # README.md, "What-if: popvision tune": about 1.5 minutes on 2 cores
    "popvision tune bert-large --system POD16": Shown(
        regions=((r"^bert-large on ", r"^Commands:"), (r"^Commands:", 2), (r"^Pareto front", r"^Best against"),
                 (r"^Best against", 1), (r"^Configuration: the settings", r"^$"),
                 (r"^  summary  throughput_samples_per_s ", 1)),
        slow=True),
    # README.md, "Real PyTorch traces"
    "popvision report gpipe/profile.pop --section summary": Shown(
        regions=((r"^Insights$", r"^$"),), setup=("popvision import sample_profiles/pytorch_gpipe/traces -o gpipe",)),
    # docs/emulator.md, "Ranges and the fit verdict"
    "popvision run resnet50 --replicas 16 --batch-size 20 --gradient-accumulation 6 --available-memory-proportion 0.15 "
    "--optimiser sgd --recompute --host-processes 8 --stages \"stem..layer1.0@0 layer1.1..layer1.2@0 layer2.0@0 "
    "layer2.1..layer2.2@0 layer2.3..layer3.0@0 layer3.1..layer3.3@0 layer3.4..head@0\"": Shown(),
    # docs/reports.md, "Verify"
    "popvision report p/profile.pop --section summary --verify": Shown(
        regions=((r"^Fixes re-emulated", r"^  \[\w+\] device-iterations"), (r"^  \[\w+\] device-iterations", 1)),
        setup=("popvision run mnist --profile --profile-dir p --input synthetic",)),
    # docs/tune.md, the cap
    "popvision tune mnist --system POD16 --max-candidates 8 --no-profile": Shown(
        regions=((r"^The search stopped", 2),)),
    # docs/tune.md, a borderline best
    "popvision tune mnist --batch-size 6500 --assume host_tensor_samples_per_s_per_core=1e9 --system POD4 "
    "--search batch --no-profile": Shown(regions=((r"^The best candidate \(#1\) is BORDERLINE", 2),)),
}


class ShownError(Exception):
    """A marker or an output that does not fit what SHOWN says."""


@dataclass(frozen=True)
class Block:
    """One marked block: its file, its command and the lines shown."""

    doc: Path
    command: str
    lines: tuple[str, ...]
    start: int  # offset of the marker in the file

    def name(self) -> str:
        return f"{self.doc.relative_to(ROOT)}: {self.command}"


def blocks(docs: Sequence[Path] = DOCS) -> Iterator[Block]:
    """Every marked block of ``docs``."""
    for doc in docs:
        text = doc.read_text()
        for match in MARKER.finditer(text):
            fence = FENCE.match(match["body"])
            if not fence:
                raise ShownError(f"{doc.relative_to(ROOT)}: the output of {match['command']} is not one fenced block")
            yield Block(doc, match["command"], tuple(fence["text"].split("\n")), match.start())


def scratch() -> tempfile.TemporaryDirectory:
    """A folder to run commands in that sees the repository's sample profiles, examples and tests."""
    folder = tempfile.TemporaryDirectory(prefix="popvision-docs-")
    for name in ("sample_profiles", "examples", "tests"):
        os.symlink(ROOT / name, Path(folder.name) / name)
    return folder


def run(command: str, folder: Path) -> str:
    """What ``command`` prints on stdout, run in ``folder`` with this environment's popvision, the folder's
    path taken out."""
    argv = shlex.split(command)
    if argv[0] == "popvision":
        argv[0] = str(BIN / "popvision")
    done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "COLUMNS": "200"})
    if done.returncode:
        raise ShownError(f"{command} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    real = str(Path(folder).resolve())
    return done.stdout.replace(real + "/", "").replace(str(folder) + "/", "")


def excerpt(text: str, regions: Sequence[Region]) -> list[str]:
    """The lines of ``text`` that ``regions`` name, each run of lines left out as one ``...`` line."""
    lines = text.rstrip("\n").split("\n")
    if not regions:
        return lines
    keep = [False] * len(lines)
    at = 0
    for start, end in regions:
        first = next((i for i in range(at, len(lines)) if re.search(start, lines[i])), None)
        if first is None:
            raise ShownError(f"no line matches {start!r} (after line {at + 1} of the output)")
        if end is None:
            stop = len(lines)
        elif isinstance(end, int):
            stop = min(first + end, len(lines))
        else:
            stop = next((i for i in range(first + 1, len(lines)) if re.search(end, lines[i])), len(lines))
        keep[first:stop] = [True] * (stop - first)
        at = stop
    shown: list[str] = []
    for i, line in enumerate(lines):
        if keep[i]:
            shown.append(line)
        elif not shown or shown[-1] != ELIDED:
            shown.append(ELIDED)
    return shown


def produce(command: str) -> list[str]:
    """The lines a marked command's block shows, from running it now."""
    if command not in SHOWN:
        raise ShownError(f"{command}: not in scripts/regen_docs.py's SHOWN (how its output is shown)")
    shown = SHOWN[command]
    with scratch() as folder:
        for setup in shown.setup:
            run(setup, Path(folder))
        return excerpt(run(command, Path(folder)), shown.regions)


def comparable(lines: Sequence[str]) -> list[str]:
    """``lines`` without what changes between runs of the same figures: wall-clock times, trailing spaces."""
    out = []
    for line in lines:
        for pattern, replacement in UNSTABLE:
            line = pattern.sub(replacement, line)
        out.append(line.rstrip())
    return out


def rewrite(doc: Path, outputs: dict[str, list[str]]) -> bool:
    """``doc`` with each of ``outputs``' commands' blocks replaced; True if the file changed."""
    text = doc.read_text()

    def replace(match: re.Match) -> str:
        if match["command"] not in outputs:
            return match[0]
        body = "\n".join(outputs[match["command"]])
        return f"<!-- output: {match['command']} -->\n```\n{body}\n```\n<!-- /output -->\n"

    new = MARKER.sub(replace, text)
    if new != text:
        doc.write_text(new)
    return new != text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="rewrite nothing; exit 1 if a shown output differs")
    parser.add_argument("--only", default="", help="only the markers whose command contains this text")
    args = parser.parse_args(argv)
    found = [b for b in blocks() if args.only in b.command]
    differ = []
    outputs: dict[str, list[str]] = {}
    for block in found:
        print(f"running {block.name()}", file=sys.stderr, flush=True)
        outputs[block.command] = produce(block.command)
        if comparable(outputs[block.command]) != comparable(block.lines):
            differ.append(block.name())
    if args.check:
        for name in differ:
            print(f"differs: {name}")
        return 1 if differ else 0
    for doc in sorted({b.doc for b in found}):
        if rewrite(doc, outputs):
            print(f"rewrote {doc.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ShownError as exc:
        print(f"regen_docs: {exc}", file=sys.stderr)
        sys.exit(2)
