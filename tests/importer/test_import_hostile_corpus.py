"""The import's hostile corpus: the real GPipe traces of sample_profiles/pytorch_gpipe (4 ranks), damaged
by construction, each case labelled with what `popvision import` must do with it.

Every case runs the real program in its own process, under a 2 GiB address-space limit and a timeout,
into a folder holding an earlier import. The contract: one line "Error: ..." on stderr naming what is
wrong, exit 2, nothing on stdout and the folder byte for byte as it was; or, where the trace is merely
unusual, exit 0 and a profile whose tables are the ones the case's construction says (most: the
original import's, since what was changed is nothing the import reads). Never a traceback, a hang, a
signal or a profile written in part. docs/reliability.md keeps the table of cases and outcomes.
"""

from __future__ import annotations

import collections
import copy
import gzip
import json
import re
import resource
import shutil
import subprocess
import sys
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from popvision_py.format import open_profile

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "sample_profiles" / "pytorch_gpipe" / "traces"
MEMORY_LIMIT = 2 << 30  # address space of the import and its reading processes
TIMEOUT_S = 60  # one import of these traces takes about a second
TABLES = ("trace", "programs", "exchanges", "liveness", "tile_cycles", "tile_memory")
RANK = 1  # the rank whose trace a case changes (it sends and receives, so every kind of event is in it)


@dataclass(frozen=True)
class Case:
    """A hostile input: how it is built from the sample's traces and what the import must do with it.

    ``build`` writes the case's trace files into a folder. ``error``: words the one sentence holds (any of
    them), or None for a case the import takes; then ``check`` says what its profile must hold."""

    name: str
    group: str
    build: Callable[[Path], None]
    error: tuple[str, ...] | None = None
    check: str = "same"  # "same": the original's tables; "ranks=0,1,2": a subset, its tables checked


def original(rank: int) -> dict:
    with gzip.open(TRACES / f"rank{rank}.json.gz", "rb") as raw:
        return json.load(raw)


ORIGINALS = {r: original(r) for r in range(4)}


def others(folder: Path, skip: tuple[int, ...] = (RANK,)) -> None:
    for r in range(4):
        if r not in skip:
            shutil.copyfile(TRACES / f"rank{r}.json.gz", folder / f"rank{r}.json.gz")


def changed(mutate: Callable[[dict], object], rank: int = RANK, name: str | None = None) -> Callable[[Path], None]:
    """The four traces, rank ``rank``'s changed by ``mutate`` (its dict, in place) and written as plain JSON."""

    def build(folder: Path) -> None:
        trace = copy.deepcopy(ORIGINALS[rank])
        mutate(trace)
        (folder / (name or f"rank{rank}.json")).write_text(json.dumps(trace))
        others(folder, (rank,))

    return build


def as_text(edit: Callable[[bytes], bytes], suffix: str = ".json") -> Callable[[Path], None]:
    """The four traces, rank RANK's written as ``edit`` of its JSON text (``.json.gz``: of its gzip file)."""

    def build(folder: Path) -> None:
        if suffix == ".json.gz":
            data = edit((TRACES / f"rank{RANK}.json.gz").read_bytes())
        else:
            data = edit(json.dumps(ORIGINALS[RANK], indent=1).encode())
        (folder / f"rank{RANK}{suffix}").write_bytes(data)
        others(folder)

    return build


def first(trace: dict, test: Callable[[dict], bool]) -> dict:
    return next(e for e in trace["traceEvents"] if isinstance(e, dict) and test(e))


def cpu_op(e: dict) -> bool:
    return e.get("ph") == "X" and e.get("cat") == "cpu_op" and not e["name"].startswith("c10d::")


def step(e: dict) -> bool:
    return e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")


def memory(e: dict) -> bool:
    return e.get("name") == "[memory]"


def send(e: dict) -> bool:
    return e.get("name") == "c10d::send"


KINDS = {cpu_op: "an operator", step: "a ProfilerStep", memory: "a [memory] event", send: "a c10d::send"}


def set_in(test: Callable[[dict], bool], key: str, value: object, inside: str | None = None):
    """A mutation: ``key`` (of ``args`` where ``inside``) of the first event passing ``test`` set to ``value``."""

    def mutate(trace: dict) -> None:
        event = first(trace, test)
        (event[inside] if inside else event)[key] = value

    return mutate


def header(key: str, value: object, inside: str | None = None):
    def mutate(trace: dict) -> None:
        (trace[inside] if inside else trace)[key] = value

    return mutate


def events(edit: Callable[[list], object]):
    def mutate(trace: dict) -> None:
        edit(trace["traceEvents"])

    return mutate


def shifted(seconds: float):
    def mutate(trace: dict) -> None:
        trace["baseTimeNanoseconds"] += int(seconds * 1e9)

    return mutate


def in_events(text: bytes, inserted: bytes) -> bytes:
    """``inserted`` as the first entry of traceEvents."""
    at = text.index(b'"traceEvents": [') + len(b'"traceEvents": [')
    return text[:at] + inserted + b"," + text[at:]


def gz_member(folder: Path, name: str, chunks) -> None:
    """A gzip file streamed from ``chunks`` (a bomb is never held whole)."""
    with gzip.open(folder / name, "wb", compresslevel=9) as out:
        for chunk in chunks:
            out.write(chunk)


def bomb(folder: Path) -> None:
    """24 MiB of spaces inside traceEvents, gzipped to about 24 KiB."""
    head, tail = json.dumps(ORIGINALS[RANK]).encode().split(b'"traceEvents": [', 1)
    gz_member(folder, f"rank{RANK}.json.gz", [head + b'"traceEvents": [', *[b" " * (1 << 20)] * 24, tail])
    others(folder)


def event_bomb(folder: Path) -> None:
    """The trace's first operator repeated until it inflates 24 MiB, gzipped."""
    trace = ORIGINALS[RANK]
    head, tail = json.dumps(trace).encode().split(b'"traceEvents": [', 1)
    one = json.dumps(first(trace, cpu_op)).encode() + b","
    block = one * ((1 << 20) // len(one))
    gz_member(folder, f"rank{RANK}.json.gz", [head + b'"traceEvents": [', *[block] * 24, tail])
    others(folder)


def flip(data: bytes, at: int) -> bytes:
    out = bytearray(data)
    out[at] ^= 0xFF
    return bytes(out)


def huge_header(folder: Path) -> None:
    trace = dict(ORIGINALS[RANK])
    events_ = trace.pop("traceEvents")
    trace["traceName"] = "x" * (17 << 20)  # past the 16 MiB in which the header must end
    trace["traceEvents"] = events_
    (folder / f"rank{RANK}.json").write_text(json.dumps(trace))
    others(folder)


def subset(folder: Path) -> None:
    others(folder, (3,))


def no_rank_anywhere(folder: Path) -> None:
    for r in range(4):
        trace = copy.deepcopy(ORIGINALS[r])
        del trace["distributedInfo"]
        (folder / f"rank{r}.json").write_text(json.dumps(trace))


def duplicate_file(folder: Path) -> None:
    others(folder, ())
    shutil.copyfile(TRACES / "rank2.json.gz", folder / "rank2-again.json.gz")


def two_members(folder: Path) -> None:
    data = json.dumps(ORIGINALS[RANK]).encode()
    half = len(data) // 2
    (folder / f"rank{RANK}.json.gz").write_bytes(gzip.compress(data[:half]) + gzip.compress(data[half:]))
    others(folder)


def deep(n: int, opening: bytes = b"[", closing: bytes = b"]") -> bytes:
    return opening * n + closing * n


DEEP_ARGS = b'{"ph": "X", "cat": "cpu_op", "name": "x", "ts": 1, "dur": 0, "args": {"a": ' + deep(100_000) + b"}}"
HALF = len(json.dumps(ORIGINALS[RANK], indent=1).encode()) // 2

CASES = [
    Case("the sample as it is", "reference", lambda f: others(f, ())),
    # truncations
    *[Case(f"plain JSON cut at {k}/4", "truncation", as_text(lambda t, k=k: t[: len(t) * k // 4]),
           ("ends before its JSON does",)) for k in (1, 2, 3)],
    Case("plain JSON short of its last byte", "truncation", as_text(lambda t: t.rstrip()[:-1]),
         ("ends before its JSON does",)),
    Case("plain JSON cut inside its header", "truncation", as_text(lambda t: t[:200]),
         ('has no "traceEvents" array', "ends before its JSON does")),
    *[Case(f"gzip cut at {k}/4", "truncation", as_text(lambda t, k=k: t[: len(t) * k // 4], ".json.gz"),
           ("cannot be decompressed", "ends before its JSON does")) for k in (1, 2, 3)],
    Case("gzip without its trailer", "truncation", as_text(lambda t: t[:-8], ".json.gz"),
         ("cannot be decompressed", "ends before its JSON does")),
    # wrong types at every field the import reads
    *[Case(f"an entry of traceEvents that is {shown}", "type", as_text(lambda t, v=v: in_events(t, v)),
           ("not an event (an object)",)) for shown, v in (("a number", b"5"), ("a string", b'"x"'), ("null", b"null"),
                                                        ("an array", b"[]"))],
    *[Case(f"{KINDS[test]}'s {key} {label}", "type", changed(set_in(test, key, value)), (f"whose {key} is",))
      for key, test, label, value in (
          ("ph", cpu_op, "a number", 5), ("ph", cpu_op, "null", None),
          ("name", cpu_op, "a number", 5), ("name", cpu_op, "an array", []),
          ("cat", cpu_op, "a number", 5),
          ("ts", cpu_op, "a string", "4749474050999.57"), ("ts", cpu_op, "null", None), ("ts", cpu_op, "true", True),
          ("dur", cpu_op, "a string", "48.5"), ("dur", cpu_op, "null", None), ("dur", step, "an object", {}),
          ("tid", cpu_op, "a float", 1.5), ("tid", cpu_op, "an array", []),
          ("pid", step, "an array", []), ("pid", step, "negative", -1),
          ("args", send, "an array", []), ("ts", memory, "a string", "1"))],
    Case("a [memory] event's Total Allocated a string", "type", changed(set_in(memory, "Total Allocated", "1", "args")),
         ("Total Allocated is",)),
    Case("a [memory] event's Device Type a string", "type", changed(set_in(memory, "Device Type", "0", "args")),
         ("Device Type is",)),
    Case("a send's peer not a rank", "type", changed(set_in(send, "Concrete Inputs", ["", "", "x", "0"], "args")),
         ("peer (Concrete Inputs[2]) is",)),
    Case("a send's Input Dims a string", "type", changed(set_in(send, "Input Dims", "32x512", "args")),
         ("Input Dims is",)),
    Case("a send's Input type a number", "type", changed(set_in(send, "Input type", 5, "args")), ("Input type is",)),
    Case("a send's In msg nelems a string", "type", changed(set_in(send, "In msg nelems", "5", "args")),
         ("In msg nelems is",)),
    Case("a send's dtype a number", "type", changed(set_in(send, "dtype", 5, "args")), ("dtype is",)),
    Case("a send's Collective name a number", "type", changed(set_in(send, "Collective name", 5, "args")),
         ("Collective name is",)),
    *[Case(f"baseTimeNanoseconds {label}", "type", changed(header("baseTimeNanoseconds", value)),
           ("baseTimeNanoseconds of", "integer overflow"))
      for label, value in (("a string", "1790857026000000000"), ("a float", 1.5), ("negative", -1), ("2^63", 2**63))],
    Case("distributedInfo an array", "type", changed(header("distributedInfo", [])), ("distributedInfo of",)),
    *[Case(f"distributedInfo.rank {label}", "type", changed(header("rank", value, "distributedInfo")),
           ("distributedInfo.rank of",)) for label, value in (("a string", "1"), ("a float", 1.0), ("true", True),
                                                             ("negative", -1), ("10^12", 10**12),
                                                             ("equal to the world size", 4))],
    *[Case(f"distributedInfo.world_size {label}", "type", changed(header("world_size", value, "distributedInfo")),
           ("world_size of",)) for label, value in (("a string", "4"), ("0", 0), ("10^12", 10**12))],
    Case("deviceProperties an object", "type", changed(header("deviceProperties", {})), ("deviceProperties of",)),
    Case("a device's totalGlobalMem a string", "type",
         changed(header("deviceProperties", [{"totalGlobalMem": "80GB"}])), ("totalGlobalMem of",)),
    # numbers out of range
    *[Case(f"an event's {key} of {value:g}", "range", changed(set_in(cpu_op, key, value)), (words,))
      for key, value, words in (("ts", 1e300, "time stamp out of range"), ("ts", -1e300, "time stamp out of range"),
                                ("dur", -1.0, "negative or out of range"), ("dur", 1e300, "negative or out of range"))],
    Case("a [memory] Total Allocated of -1", "range", changed(set_in(memory, "Total Allocated", -1, "args")),
         ("Total Allocated is out of range",)),
    Case("a [memory] Total Allocated of 1e30", "range", changed(set_in(memory, "Total Allocated", 1e30, "args")),
         ("Total Allocated is out of range",)),
    Case("a send's peer rank 10^12", "range",
         changed(set_in(send, "Concrete Inputs", ["", "", "1000000000000", "0"], "args")), ("Concrete Inputs[2]",)),
    Case("a send's In msg nelems of 2^62", "range", changed(set_in(send, "In msg nelems", 2**62, "args")),
         ("out of range",)),
    Case("micro-batch 1,000 (of 8)", "range",
         changed(set_in(lambda e: e.get("name") == "Forward 0", "name", "Forward 1000")),
         ("names micro-batch 1,000 but holds",)),
    Case("micro-batch 10^11", "range", changed(set_in(lambda e: e.get("name") == "Forward 0", "name",
                                                      "Forward 100000000000")), ("out of range",)),
    Case("stage 10^9 of a 4-rank pipeline", "range",
         changed(set_in(lambda e: e.get("name") == "Forward 0", "name", "PP:1000000000F0")),
         ("names stage 1,000,000,000 but",)),
    Case("an operator 140 days after the profiled steps (outside them)", "range",
         changed(events(lambda ev: ev.append(dict(first({"traceEvents": ev}, cpu_op), ts=1.7e13))))),
    # duplicates
    Case("two files claiming rank 1", "duplicate", changed(header("rank", 1, "distributedInfo"), rank=2),
         ("Two traces are of rank 1",)),
    Case("one rank's file copied under another name", "duplicate", duplicate_file, ("Two traces are of rank 2",)),
    Case("an operator event twice", "duplicate",
         changed(events(lambda ev: ev.append(first({"traceEvents": ev}, cpu_op))))),
    Case("a key twice in an event (the last one read)", "duplicate",
         as_text(lambda t: in_events(t, b'{"ph": "X", "ph": "M", "name": "x", "ts": 1, "dur": 1}'))),
    # nesting
    Case("an array 100,000 deep in traceEvents", "nesting", as_text(lambda t: in_events(t, deep(100_000))),
         ("nests JSON values more than 64 deep",)),
    Case("an object 100,000 deep in an event's args", "nesting", as_text(lambda t: in_events(t, DEEP_ARGS)),
         ("nests JSON values more than 64 deep",)),
    Case("distributedInfo 100,000 deep", "nesting",
         as_text(lambda t: t.replace(b'"distributedInfo": {', b'"distributedInfo": {"x": ' + deep(100_000) + b",", 1)),
         ("nests JSON values more than 64 deep",)),
    Case("an event's args nesting 67 deep in all", "nesting",
         as_text(lambda t: in_events(t, b'{"ph": "M", "name": "x", "args": {"a": ' + deep(63) + b"}}")),
         ("nests JSON values more than 64 deep",)),
    Case("a metadata event's args nesting 41 deep in all", "nesting",
         as_text(lambda t: in_events(t, b'{"ph": "M", "name": "x", "args": {"a": ' + deep(37) + b"}}"))),
    Case("100,000 brackets inside an operator's name", "nesting",
         changed(set_in(cpu_op, "name", "[" * 100_000 + "{" * 100_000))),
    # huge strings
    Case("an operator's name of 16 MiB", "huge string", changed(set_in(cpu_op, "name", "a" * (16 << 20)))),
    Case("a header of 17 MiB (traceName)", "huge string", huge_header, ('has no "traceEvents" array',)),
    Case("a step number of 5,000 digits", "huge string", changed(set_in(step, "name", "ProfilerStep#" + "9" * 5000)),
         ("out of range",)),
    Case("a micro-batch number of 5,000 digits", "huge string",
         changed(set_in(lambda e: e.get("name") == "Forward 0", "name", "Forward " + "9" * 5000)), ("out of range",)),
    # gzip
    Case("gzip with a byte of its deflate stream flipped", "gzip", as_text(lambda t: flip(t, len(t) // 2), ".json.gz"),
         ("cannot be decompressed", "is not valid JSON", "ends before its JSON does")),
    Case("gzip with its CRC flipped", "gzip", as_text(lambda t: flip(t, len(t) - 6), ".json.gz"),
         ("cannot be decompressed",)),
    Case("gzip of gzip", "gzip", as_text(lambda t: gzip.compress(t), ".json.gz"), ("is not valid JSON",)),
    Case("gzip of nothing", "gzip", as_text(lambda t: gzip.compress(b""), ".json.gz"), ("is empty",)),
    Case("gzip bomb: 24 MiB of spaces", "gzip", bomb, ("inflates to more than 200 times",)),
    Case("gzip bomb: one operator repeated over 24 MiB", "gzip", event_bomb, ("inflates to more than 200 times",)),
    Case("gzip in two members", "gzip", two_members),
    Case("plain JSON named .json.gz", "gzip", as_text(lambda t: t, ".json.gz")),
    Case("raw deflate named .json.gz", "gzip", as_text(lambda t: zlib.compress(t), ".json.gz"), ("is not valid JSON",)),
    # ranks and world sizes
    Case("rank 1 of a world of 8 beside ranks of 4", "ranks", changed(header("world_size", 8, "distributedInfo")),
         ("of a run of 4 ranks and", "not traces of one run")),
    Case("one trace without distributedInfo", "ranks", changed(lambda t: t.pop("distributedInfo")),
         ("records its rank (distributedInfo) and",)),
    Case("no trace with distributedInfo (ranks by the files' order)", "ranks", no_rank_anywhere),
    Case("three ranks of four", "ranks", subset, check="ranks=0,1,2"),
    # traces of different runs mixed
    Case("rank 1 an hour later", "mixed runs", changed(shifted(3600)), ("not traces of one run",)),
    Case("rank 1 a day earlier", "mixed runs", changed(shifted(-86400)), ("not traces of one run",)),
    Case("rank 1 150 days later", "mixed runs", changed(shifted(150 * 86400)), ("not traces of one run",)),
]


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


@dataclass
class Outcome:
    case: Case
    code: int | None
    stdout: str
    stderr: str
    kept: bool  # the earlier import's folder is byte for byte as it was
    tables: dict | None = None
    run: dict | None = None


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def read_tables(path: Path) -> tuple[dict, dict]:
    with open_profile(path) as profile:
        return {name: profile.read_table(name) for name in TABLES}, profile.run


def run_case(case: Case, work: Path, earlier: Path) -> Outcome:
    folder, out = work / "in", work / "out"
    folder.mkdir(parents=True)
    case.build(folder)
    shutil.copytree(earlier, out)
    before = snapshot(out)
    try:
        done = subprocess.run([sys.executable, "-m", "popvision_py.cli", "import", str(folder), "-o", str(out), "-q"],
                              capture_output=True, text=True, timeout=TIMEOUT_S, preexec_fn=_limits, cwd=ROOT)
        code, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired:
        code, stdout, stderr = None, "", f"still running after {TIMEOUT_S} s"
    outcome = Outcome(case, code, stdout, stderr, snapshot(out) == before)
    if code == 0:
        outcome.tables, outcome.run = read_tables(out / "profile.pop")
    shutil.rmtree(work)
    return outcome


def problems(outcome: Outcome, reference: Outcome) -> list[str]:
    """What in ``outcome`` breaks the contract (nothing: an empty list)."""
    case = outcome.case
    said = f"exit {outcome.code}, stderr {outcome.stderr[-600:]!r}"
    if case.error is not None:
        lines = outcome.stderr.strip().splitlines()
        wrong = []
        if outcome.code != 2:
            wrong.append(f"not exit 2 ({said})")
        if len(lines) != 1 or not lines[0].startswith("Error: ") or not any(w in lines[0] for w in case.error):
            wrong.append(f"not one sentence saying any of {case.error} ({said})")
        if outcome.stdout or not outcome.kept:
            wrong.append("wrote something" if outcome.stdout else "the earlier import changed")
        return wrong
    if outcome.code != 0 or outcome.stderr.strip():
        return [f"not imported ({said})"]
    if case.check == "same":
        differ = [n for n in TABLES if not outcome.tables[n].equals(reference.tables[n])]
        return [f"tables {differ} differ from the original import's"] if differ else []
    ranks = [int(r) for r in case.check.split("=")[1].split(",")]
    wrong = []
    if outcome.run["import"]["ranks"] != ranks:
        wrong.append(f"ranks {outcome.run['import']['ranks']}, not {ranks}")
    trace, whole = outcome.tables["trace"].to_pandas(), reference.tables["trace"].to_pandas()
    if sorted(trace["ipu"].unique()) != list(range(len(ranks))):
        wrong.append("the trace's IPUs are not one per rank given")
    busy = trace[trace.phase != "idle"].groupby("ipu")["end_cycle"].count()
    if len(busy) != len(ranks):
        wrong.append("a rank given has no busy row")
    if not (trace["end_cycle"] >= trace["start_cycle"]).all() or len(trace) >= len(whole):
        wrong.append("the trace's rows are not a subset's")
    return wrong


def test_every_hostile_trace_is_one_sentence_or_imported_with_the_right_figures(tmp_path, capsys):
    # GIVEN the original import in a folder (the earlier profile every case's import must leave alone)
    earlier = tmp_path / "earlier"
    made = subprocess.run([sys.executable, "-m", "popvision_py.cli", "import", str(TRACES), "-o", str(earlier), "-q"],
                          capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ROOT)
    assert made.returncode == 0, made.stderr
    reference = Outcome(CASES[0], 0, "", "", True, *read_tables(earlier / "profile.pop"))
    # WHEN each case is imported by the real program, two at a time, under the memory limit
    with ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(lambda k: run_case(CASES[k], tmp_path / f"case{k}", earlier), range(len(CASES))))
    # THEN every case is its one sentence (exit 2, the earlier import kept) or imported with its figures
    failures = {o.case.name: p for o in outcomes if (p := problems(o, reference))}
    counts = collections.Counter((o.case.group, "refused" if o.code == 2 else "imported" if o.code == 0 else "other")
                                 for o in outcomes)
    with capsys.disabled():
        print(f"\n{len(outcomes)} cases:", dict(sorted(counts.items())))
    assert not failures, json.dumps(failures, indent=1)
    assert {o.case.name for o in outcomes if "Traceback" in o.stderr} == set()


def test_the_cases_are_distinct_labelled_and_in_the_docs():
    names = [c.name for c in CASES]
    assert len(set(names)) == len(names)
    assert {c.group for c in CASES} == {"reference", "truncation", "type", "range", "duplicate", "nesting",
                                        "huge string", "gzip", "ranks", "mixed runs"}
    docs = (ROOT / "docs" / "reliability.md").read_text()
    assert [n for n in names if f"| {n} |" not in docs] == []  # the table `python -m` this module prints


def main() -> None:
    """Print the table of cases and outcomes kept in docs/reliability.md (every case run as the test runs it)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        earlier = work / "earlier"
        subprocess.run([sys.executable, "-m", "popvision_py.cli", "import", str(TRACES), "-o", str(earlier), "-q"],
                       check=True, capture_output=True, cwd=ROOT)
        reference = Outcome(CASES[0], 0, "", "", True, *read_tables(earlier / "profile.pop"))
        with ThreadPoolExecutor(2) as pool:
            outcomes = list(pool.map(lambda k: run_case(CASES[k], work / f"case{k}", earlier), range(len(CASES))))
        print("| group | case | outcome (exit code: the sentence, or what was imported) | contract |")
        print("| --- | --- | --- | --- |")
        for o in outcomes:
            said = re.sub(r"[^\s(]*/in/", "", o.stderr.strip()) if o.code == 2 else ""  # file names without folders
            wrong = problems(o, reference)
            result = (f"2: {said.removeprefix('Error: ')[:160]}" if o.code == 2 else
                      f"{o.code}: " + ("the original's tables" if o.case.check == "same" else
                                       f"ranks {o.run['import']['ranks']}, their rows"))
            print(f"| {o.case.group} | {o.case.name} | {result.replace('|', '/')} | "
                  f"{'held' if not wrong else 'BROKEN: ' + '; '.join(wrong)} |")

if __name__ == "__main__":
    main()

