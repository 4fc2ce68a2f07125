"""The hostile corpus: valid profiles mutated at the container, footer, page, manifest and value
level, read by every reading command.

Hypothesis draws each mutation (deterministically: the same corpus on every run). Every mutated
profile goes through ``info``, ``report --section all --format json``, ``compare X sample``,
``export-trace`` and ``sql``, and each command keeps the contract: exit 0 with the unmutated
profile's figures (the same output, byte for byte), or one line "Error: ..." on stderr and exit 2.
Never a traceback, a hang, or a different figure with exit 0.
"""

from __future__ import annotations

import collections
import io
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet  # noqa: F401 - pa.parquet
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from popvision_py.cli import main
from popvision_py.format import open_profile
from popvision_py.format import schema as S
from popvision_py.format.values import RUN_SIZES, TARGET_SIZES, bounds

from .test_checksums_and_values import edited, with_table
from .test_format import RUN, TARGET, rezip, tiny_tables, write_tiny

SAMPLE = Path(__file__).resolve().parent.parent / "sample_profiles" / "mnist_inference" / "profile.pop"
QUERY = "SELECT count(*), sum(end_cycle - start_cycle) FROM trace"
HANG_SECONDS = 60  # one command on a profile of a few hundred KB takes well under a second
CORPUS = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# outcomes of every command on every mutated profile, by level: printed and kept in docs/reliability.md
OUTCOMES: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)


def commands(profile: Path, trace_json: Path) -> dict[str, list[str]]:
    """Every command that reads a profile, as the corpus runs it."""
    return {
        "info": ["info", str(profile)],
        "report": ["report", str(profile), "--section", "all", "--format", "json"],
        "compare": ["compare", str(profile), str(SAMPLE), "--format", "json"],
        "export-trace": ["export-trace", str(profile), "-o", str(trace_json), "-q"],
        "sql": ["sql", str(profile), QUERY],
    }


class Hang(Exception):
    """A command ran for longer than HANG_SECONDS."""


def _hang(signum: int, frame: object) -> None:
    raise Hang(f"still running after {HANG_SECONDS} s")


@dataclass(frozen=True)
class Ran:
    """What one command did: its exit code, stdout, stderr, the trace file it wrote (export-trace),
    and the exception that ended it (None or SystemExit when the CLI ended it itself)."""

    code: int
    stdout: str
    stderr: str
    exported: bytes | None
    exception: BaseException | None


def outputs(profile: Path) -> dict[str, Ran]:
    """What each command does on ``profile``, run in-process; a command still running after
    HANG_SECONDS is stopped and reported as a hang."""
    trace_json = profile.with_suffix(".json")
    out = {}
    for name, args in commands(profile, trace_json).items():
        trace_json.unlink(missing_ok=True)
        previous = signal.signal(signal.SIGALRM, _hang)
        signal.alarm(HANG_SECONDS)
        try:
            result = CliRunner().invoke(main, args)
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
        assert not isinstance(result.exception, Hang), f"{name} hangs on {profile}"
        exported = trace_json.read_bytes() if trace_json.exists() else None
        out[name] = Ran(result.exit_code, result.stdout, result.stderr, exported, result.exception)
    return out


def keeps_the_contract(name: str, got: Ran, original: Ran, rewritten: str | None = None) -> str:
    """'identical' or 'refused'; an AssertionError naming what broke the contract otherwise.

    ``rewritten``: a table rewritten by hand, whose size in bytes (a fact of the container that
    ``info`` shows, not a figure of its values) is not compared.
    """
    stdout, stderr = got.stdout, got.stderr
    if got.code == 0:
        expected = original.stdout
        if rewritten is not None and name == "info":
            line = re.compile(rf"^(  {rewritten} +[\d,]+ +)[\d,]+$", re.MULTILINE)
            stdout, expected = line.sub(r"\1<bytes>", stdout), line.sub(r"\1<bytes>", expected)
        assert (stdout, got.exported) == (expected, original.exported), (
            f"{name} exits 0 with figures other than the unmutated profile's:\n{stdout[:2000]}")
        return "identical"
    assert got.exception is None or isinstance(got.exception, SystemExit), f"{name} escapes with {got.exception!r}"
    assert got.code == 2, f"{name} exits {got.code}: {stderr or stdout}"
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), f"{name} says more than one line:\n{stderr}"
    assert "Traceback" not in stderr and stdout == "", f"{name} prints beside its sentence:\n{stdout}"
    assert got.exported is None, f"{name} leaves a trace file behind after refusing"
    return "refused"


def check(level: str, mutated: bytes, path: Path, originals: dict, rewritten: str | None = None) -> None:
    """Write ``mutated`` at ``path`` (where the originals were made) and hold every command to the contract."""
    # a new file moved over the last (never rewritten in place: a reader may still map the last one)
    fresh = path.with_suffix(".new")
    fresh.write_bytes(mutated)
    os.replace(fresh, path)
    for name, got in outputs(path).items():
        outcome = keeps_the_contract(name, got, originals[name], rewritten)
        OUTCOMES[level][outcome] += 1
        OUTCOMES[level][f"{name} {outcome}"] += 1
    OUTCOMES[level]["profiles"] += 1


# -- the profiles mutated ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Unmutated:
    """A profile the corpus mutates: its path (where the mutated copies go too), its bytes, and what
    each command printed on it (for value mutations: by table, with that table rewritten unchanged)."""

    path: Path
    good: bytes
    originals: dict

    def __repr__(self) -> str:  # hypothesis prints the arguments of a failing example
        return f"Unmutated({self.path})"


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Unmutated:
    """The mnist_inference sample copied where its mutations go, and each command's output on it."""
    path = tmp_path_factory.mktemp("sample") / "profile.pop"
    shutil.copy(SAMPLE, path)
    originals = outputs(path)
    assert all(got.code == 0 for got in originals.values()), {n: g.stderr for n, g in originals.items()}
    return Unmutated(path, path.read_bytes(), originals)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Unmutated]:
    """The tiny profile, and, for each table, each command's output on the tiny profile with that table
    rewritten unchanged the way value mutations rewrite it (only the values then differ)."""
    folder = tmp_path_factory.mktemp("tiny")
    good = write_tiny(folder / "good.pop")
    path = folder / "profile.pop"
    originals = {}
    for table in S.TABLES:
        path.write_bytes(with_table(good, table, tiny_tables()[table]))
        originals[table] = outputs(path)
        assert all(got.code == 0 for got in originals[table].values()), (table, originals[table])
    return good, Unmutated(path, b"", originals)


# -- the mutations ------------------------------------------------------------------------------------


def flip(data: bytes, draw, low: int, high: int, most: int = 4) -> bytes:
    """``data`` with 1 to ``most`` bytes in [low, high) changed (each XORed with a non-zero byte)."""
    raw = bytearray(data)
    for _ in range(draw(st.integers(1, most), label="flips")):
        position = draw(st.integers(low, high - 1), label="position")
        raw[position] ^= draw(st.integers(1, 255), label="xor")
    return bytes(raw)


def structure(data: bytes) -> list[tuple[int, int]]:
    """The spans of the ZIP container's own bytes: each local header, the manifest, the central directory."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        spans = [(archive.start_dir, len(data))]
        for info in archive.infolist():
            name_length, extra_length = struct.unpack_from("<HH", data, info.header_offset + 26)
            start = info.header_offset + 30 + name_length + extra_length
            manifest = info.filename == S.MANIFEST_MEMBER
            spans.append((info.header_offset, start + info.file_size if manifest else start))
    return spans


@st.composite
def container_mutations(draw, data: bytes, spans: list[tuple[int, int]]) -> bytes:
    """The ZIP container broken: bytes of its headers, manifest or directory flipped, the file cut
    short, or bytes inserted or removed (every later offset then points elsewhere)."""
    how = draw(st.sampled_from(["flip", "truncate", "insert", "remove"]), label="how")
    if how == "flip":
        low, high = draw(st.sampled_from(spans), label="span")
        return flip(data, draw, low, high)
    at = draw(st.integers(0, len(data) - 1), label="at")
    if how == "truncate":
        return data[:at]
    if how == "insert":
        return data[:at] + draw(st.binary(min_size=1, max_size=64), label="inserted") + data[at:]
    return data[:at] + data[at + draw(st.integers(1, 64), label="removed"):]


def footer_spans(path: Path) -> dict[str, tuple[int, int]]:
    """Each table's Parquet footer (with its length and magic) as a span of the container."""
    with open_profile(path) as profile:
        out = {}
        for table in profile.tables:  # the profile's (a schema-4 sample has no kernels)
            offset, size = profile.member_span(table)
            out[table] = (offset + size - profile.footer_bytes(table), offset + size)
    return out


def page_spans(path: Path) -> dict[str, list[tuple[int, int]]]:
    """Each table's column chunks (their pages: dictionary and data) as spans of the container."""
    with open_profile(path) as profile:
        out = {}
        for table in profile.tables:
            offset, _ = profile.member_span(table)
            footer = profile.metadata(table)
            chunks = [footer.row_group(g).column(c)
                      for g in range(footer.num_row_groups) for c in range(footer.num_columns)]
            starts = [c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset for c in chunks]
            out[table] = [(offset + s, offset + s + c.total_compressed_size) for s, c in zip(starts, chunks)]
    return {table: spans for table, spans in out.items() if spans}


@pytest.fixture(scope="module")
def footers() -> dict[str, tuple[int, int]]:
    return footer_spans(SAMPLE)


@pytest.fixture(scope="module")
def pages() -> dict[str, list[tuple[int, int]]]:
    return page_spans(SAMPLE)


@st.composite
def value_mutations(draw) -> tuple[str, pd.DataFrame, bool]:
    """(table, its frame with one value the schema forbids, whether the frame needs nullable columns):
    a null, a number below or above the column's range (its type still holds it), a code the
    category does not know, an end before its start, or a row repeating another's key."""
    table = draw(st.sampled_from(list(S.TABLES)), label="table")
    spec = S.TABLES[table]
    frame = tiny_tables()[table]
    row = draw(st.integers(0, len(frame) - 1), label="row")
    kinds = ["null"] + (["ordered"] if spec.ordered else []) + (["key"] if spec.key and len(frame) > 1 else [])
    column = draw(st.sampled_from(spec.columns), label="column")
    values = column.values
    integer = pa.types.is_integer(column.type)
    if integer:
        kinds += ["below"] * (values.low is not None)
        kinds += ["above"] * (values.high is not None or values.below is not None)
    kinds += ["code"] * (values.codes is not None)
    kind = draw(st.sampled_from(kinds), label="kind")
    if kind == "null":
        frame = frame.astype({column.name: object})
        frame.loc[row, column.name] = None
        return table, frame, True
    if kind == "ordered":
        earlier, later = draw(st.sampled_from(spec.ordered), label="pair")
        # the end (or last step) put before its start, by as far as the column's type allows
        before = int(frame.loc[row, earlier]) - draw(st.integers(1, 2**31 - 1), label="by")
        return table, edited(table, later, row, before), False
    if kind == "key":
        other = draw(st.integers(0, len(frame) - 1).filter(lambda r: r != row), label="other")
        for name in spec.key:
            frame.loc[row, name] = frame.loc[other, name]
        return table, frame, False
    if kind == "code":
        word = draw(st.text(min_size=1, max_size=12).filter(lambda w: w not in values.codes), label="word")
        return table, edited(table, column.name, row, word), False
    limits = np.iinfo(column.type.to_pandas_dtype())
    if kind == "below":
        value = draw(st.integers(int(limits.min), values.low - 1), label="value")
    else:
        bound = values.high if values.high is not None else values.below
        # a named bound: the tiny profile's figure (its target's, its run's, or a table's rows)
        declared = bounds(TARGET, RUN, {name: len(rows) for name, rows in tiny_tables().items()})
        largest = declared[bound] if isinstance(bound, str) else bound
        if values.high is None:
            largest -= 1
        if largest >= limits.max:
            kind = "below"
            value = draw(st.integers(int(limits.min), values.low - 1), label="value")
        else:
            value = draw(st.integers(largest + 1, int(limits.max)), label="value")
    return table, edited(table, column.name, row, value), False


@st.composite
def manifest_mutations(draw, good: bytes) -> bytes:
    """The sample with one required field of its manifest's target or run configuration removed,
    of another JSON type, or beyond its range (the manifest otherwise as it was)."""
    where = draw(st.sampled_from(["target", "run"]), label="where")
    required = S.REQUIRED_TARGET_KEYS if where == "target" else S.REQUIRED_RUN_KEYS
    key = draw(st.sampled_from(sorted(required)), label="key")
    kind = required[key]
    bounds = {name: (low, high) for name, low, high in TARGET_SIZES + RUN_SIZES}
    others = st.one_of(st.none(), st.booleans(), st.text(max_size=8), st.lists(st.integers(), max_size=2),
                       st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), st.integers())
    if key in bounds:
        low, high = bounds[key]
        value = draw(st.one_of(st.integers(max_value=low - 1), st.integers(min_value=high + 1, max_value=2**80),
                               others.filter(lambda v: not isinstance(v, int) or isinstance(v, bool))), label="value")
    elif key == "clock_hz":
        value = draw(st.one_of(st.floats(max_value=0.0, allow_nan=False),
                               st.floats(min_value=1.001e12, allow_nan=False),
                               others.filter(lambda v: not isinstance(v, int) or isinstance(v, bool))), label="value")
    else:  # a string or a list: any other JSON type
        value = draw(others.filter(lambda v: not isinstance(v, kind)), label="value")
    contents = members_of(good)
    manifest = json.loads(contents[S.MANIFEST_MEMBER])
    if draw(st.booleans(), label="remove"):
        del manifest[where][key]
    else:
        manifest[where][key] = value
    contents[S.MANIFEST_MEMBER] = json.dumps(manifest, indent=2, sort_keys=True).encode()
    out = io.BytesIO()
    rezip(out, contents)
    return out.getvalue()


def members_of(data: bytes) -> dict[str, bytes]:
    """Each member of the container ``data``, by name (test_format.members, for bytes)."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {info.filename: archive.read(info) for info in archive.infolist()}


# -- the corpus ----------------------------------------------------------------------------------------


@CORPUS
@given(data=st.data())
def test_the_container_broken_is_refused_or_harmless(sample, data) -> None:
    # GIVEN the sample with its ZIP headers, manifest or directory damaged, cut short or shifted
    mutated = data.draw(container_mutations(sample.good, structure(sample.good)), label="profile")
    # WHEN every reading command reads it THEN each refuses it in one sentence or prints the sample's figures
    check("container", mutated, sample.path, sample.originals)


@CORPUS
@given(data=st.data())
def test_a_damaged_footer_is_refused_or_harmless(sample, footers, data) -> None:
    # GIVEN the sample with bytes of one table's Parquet footer (schema, offsets, statistics) flipped
    low, high = data.draw(st.sampled_from(sorted(footers.values())), label="footer")
    mutated = flip(sample.good, data.draw, low, high)
    # WHEN every reading command reads it THEN each refuses it in one sentence or prints the sample's figures
    check("footer", mutated, sample.path, sample.originals)


@CORPUS
@given(data=st.data())
def test_damaged_pages_are_refused_or_harmless(sample, pages, data) -> None:
    # GIVEN the sample with bytes flipped in the pages of one column chunk of one table
    table = data.draw(st.sampled_from(sorted(pages)), label="table")
    low, high = data.draw(st.sampled_from(pages[table]), label="chunk")
    mutated = flip(sample.good, data.draw, low, high)
    # WHEN every reading command reads it THEN each refuses it in one sentence or prints the sample's figures
    check("page", mutated, sample.path, sample.originals)


@CORPUS
@given(data=st.data())
def test_a_manifest_field_removed_or_out_of_range_is_refused_or_harmless(sample, data) -> None:
    # GIVEN the sample with one required field of its manifest removed, of the wrong type or out of range
    mutated = data.draw(manifest_mutations(sample.good), label="profile")
    # WHEN every reading command reads it THEN each refuses it in one sentence or prints the sample's figures
    check("manifest", mutated, sample.path, sample.originals)


@CORPUS
@given(mutation=value_mutations())
def test_a_value_the_schema_forbids_is_refused_or_harmless(tiny, mutation) -> None:
    # GIVEN the tiny profile with one table rewritten holding one value its schema forbids
    good, unmutated = tiny
    table, frame, nullable = mutation
    mutated = with_table(good, table, frame, nullable)
    # WHEN every reading command reads it THEN each refuses it in one sentence, or prints what it
    # printed with the table rewritten unchanged
    check("value", mutated, unmutated.path, unmutated.originals[table], rewritten=table)


def fixed_corpus(folder: Path) -> dict[str, Path]:
    """One hostile profile per level, chosen by hand: the sample cut in half, its trace footer and the
    middle of its trace's largest column chunk each with one byte flipped, and the tiny profile with
    a trace row that ends before it starts."""
    good = SAMPLE.read_bytes()
    footer_low, footer_high = footer_spans(SAMPLE)["trace"]
    page_low, page_high = max(page_spans(SAMPLE)["trace"], key=lambda span: span[1] - span[0])

    def flipped(position: int) -> bytes:
        raw = bytearray(good)
        raw[position] ^= 0x20
        return bytes(raw)

    mutated = {
        "container": good[: len(good) // 2],
        "footer": flipped((footer_low + footer_high) // 2),
        "page": flipped((page_low + page_high) // 2),
        "value": with_table(write_tiny(folder / "tiny.pop"), "trace", edited("trace", "end_cycle", 3, 45)),
    }
    paths = {}
    for level, data in mutated.items():
        paths[level] = folder / level / "profile.pop"
        paths[level].parent.mkdir()
        paths[level].write_bytes(data)
    return paths


@pytest.mark.parametrize("level", ["container", "footer", "page", "value"])
def test_the_real_program_neither_hangs_nor_crashes(tmp_path: Path, level: str) -> None:
    # GIVEN one hostile profile of the level
    profile = fixed_corpus(tmp_path)[level]
    root = Path(__file__).resolve().parents[1]
    for name, args in commands(profile, tmp_path / "trace.json").items():
        # WHEN the real program runs each reading command on it, in its own process
        done = subprocess.run([sys.executable, "-m", "popvision_py.cli", *args], capture_output=True, text=True,
                              timeout=HANG_SECONDS, cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
        # THEN it ends (the timeout above is the hang detector), and either refuses the profile in one
        # sentence or reads it (info reads no pages: the in-process corpus compares its figures)
        assert done.returncode in (0, 2), (name, done.returncode, done.stderr)
        assert "Traceback" not in done.stderr, (name, done.stderr)
        if done.returncode == 2:
            assert done.stderr.startswith("Error: ") and len(done.stderr.strip().splitlines()) == 1, (name, done.stderr)
            assert done.stdout == "", (name, done.stdout)


def test_every_command_kept_the_contract_on_every_profile(capsys) -> None:
    # THEN (after the levels, in file order) each profile of each level that ran had an outcome for
    # every command; the figures, printed, are the ones docs/reliability.md gives
    for level in ("container", "footer", "page", "manifest", "value"):
        counts = OUTCOMES[level]
        if counts["profiles"]:
            assert counts["identical"] + counts["refused"] == 5 * counts["profiles"], counts
            with capsys.disabled():
                each = ", ".join(f"{name} {counts[name + ' refused']}/{counts[name + ' identical']}"
                                 for name in commands(Path("p"), Path("t")))
                print(f"\n{level}: {counts['profiles']} profiles x 5 commands: {counts['refused']} refused, "
                      f"{counts['identical']} identical (refused/identical: {each})")


def test_sql_refuses_a_value_the_schema_forbids(tmp_path: Path) -> None:
    # GIVEN the tiny profile whose trace row 3 ends (cycle 45) before it starts (cycle 50): the corpus
    # found `sql` answering from it (DuckDB reads the members itself)
    good = write_tiny(tmp_path / "good.pop")
    bad = tmp_path / "profile.pop"
    bad.write_bytes(with_table(good, "trace", edited("trace", "end_cycle", 3, 45)))
    # WHEN a query sums the trace's durations
    result = CliRunner().invoke(main, ["sql", str(bad), QUERY])
    # THEN it is refused with the reader's sentence, exit 2
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (f"Error: Column trace.end_cycle of {bad} holds 45 at row 3, less than its "
                                     f"start_cycle 50.")


# -- bounds: values that would size work beyond the file ----------------------------------------------


def _sample_with(manifest_edit=None, table: str | None = None, edit=None, forged_statistics: bool = False) -> bytes:
    """The sample with its manifest edited (``manifest_edit(manifest)``), or one table rewritten with
    ``edit(frame)`` applied; ``forged_statistics``: the rewritten table's pages under the footer (and
    so the statistics) of the table as it was (both written plain, so every offset still holds)."""
    contents = members_of(SAMPLE.read_bytes())
    if manifest_edit is not None:
        manifest = json.loads(contents[S.MANIFEST_MEMBER])
        manifest_edit(manifest)
        contents[S.MANIFEST_MEMBER] = json.dumps(manifest).encode()
    if table is not None:
        with open_profile(SAMPLE) as profile:
            original = profile.read_table(table)
        frame = original.to_pandas()
        # the sample's own columns: a schema-1 sample lacks those a later version added
        schema = pa.schema([f for f in S.TABLES[table].schema if f.name in frame.columns])
        original = pa.Table.from_pandas(frame, schema=schema, preserve_index=False)
        edit(frame)
        edited_table = pa.Table.from_pandas(frame, schema=schema, preserve_index=False)

        def plain(data: pa.Table) -> bytes:
            sink = io.BytesIO()
            pa.parquet.write_table(data, sink, compression="none", use_dictionary=False)
            return sink.getvalue()

        new = plain(edited_table)
        if forged_statistics:
            old = plain(original)
            footer = int.from_bytes(old[-8:-4], "little") + 8
            assert len(old) == len(new) and footer == int.from_bytes(new[-8:-4], "little") + 8
            new = new[:-footer] + old[-footer:]
        contents[S.TABLES[table].member] = new
        manifest = json.loads(contents[S.MANIFEST_MEMBER])
        manifest["tables"][table]["footer_crc32"] = zlib.crc32(new[-(int.from_bytes(new[-8:-4], "little") + 8):])
        contents[S.MANIFEST_MEMBER] = json.dumps(manifest).encode()
    out = io.BytesIO()
    rezip(out, contents)
    return out.getvalue()


def _set(frame: pd.DataFrame, column: str, row: int, value: int) -> None:
    frame[column] = frame[column].astype(np.int64)
    frame.loc[row, column] = value


BOUND_CASES = {
    # name: (the hostile profile, the sentence after "Error: " with {p} the profile's path)
    "runs-a-string": (lambda: _sample_with(lambda m: m["run"].__setitem__("runs", "3")),
                      "The manifest of {p} has 'run.runs' of type string, expected integer."),
    "stages-not-objects": (lambda: _sample_with(lambda m: m["run"].__setitem__("stages", ["B1", 1])),
                           "The manifest of {p} has 'run.stages[0]' of type string, expected object."),
    "stage-ipu-a-list": (lambda: _sample_with(lambda m: m["run"]["stages"][2].__setitem__("ipu", [2])),
                         "The manifest of {p} has 'run.stages[2].ipu' of type list, expected integer."),
    "stages-past-int16": (lambda: _sample_with(lambda m: m["run"].__setitem__(
        "stages", [{"stage": s, "ipu": 0, "blocks": ["B1"]} for s in range(40_000)])),
        "The run configuration in the manifest of {p} lists 40,000 stages; it may list at most 32,767 "
        "(stage ids are 16-bit)."),
    "step-near-2^31": (lambda: _sample_with(table="trace", edit=lambda f: _set(f, "step", 7, 2**31 - 2)),
                       "Column trace.step of {p} holds 2,147,483,646 at row 7, above its largest value 40 "
                       "(the rows of programs is 41)."),
    "stage-beyond-the-stages": (lambda: _sample_with(table="programs", edit=lambda f: _set(f, "stage", 3, 32_767)),
                                "Column programs.stage of {p} holds 32,767 at row 3, above its largest value 3 "
                                "(the stages the run lists is 4)."),
    "run-near-2^31": (lambda: _sample_with(table="trace", edit=lambda f: _set(f, "run", 0, 2**31 - 2)),
                      "Column trace.run of {p} holds 2,147,483,646 at row 0, above its largest value 0 "
                      "(the run's runs is 1)."),
    "iteration-near-2^31": (lambda: _sample_with(table="trace", edit=lambda f: _set(f, "iteration", 9, 2**31 - 2)),
                            "Column trace.iteration of {p} holds 2,147,483,646 at row 9, above its largest value 99 "
                            "(the run's device_iterations is 100)."),
    "micro-batch-near-2^31": (lambda: _sample_with(table="trace", edit=lambda f: _set(f, "micro_batch", 1, 2**31 - 2)),
                              "Column trace.micro_batch of {p} holds 2,147,483,646 at row 1, above its largest value "
                              "0 (the run's gradient_accumulation is 1)."),
    "counts-beyond-the-trace": (lambda: _sample_with(lambda m: m["run"].update(
        device_iterations=2**31 - 1, gradient_accumulation=2**31 - 1)),
        "The run configuration in the manifest of {p} declares 4,611,686,014,132,420,609 micro-batches "
        "(runs x device_iterations x gradient_accumulation) but its trace has 3,929 rows; each has at least one."),
    "op-near-2^31": (lambda: _sample_with(table="variables", edit=lambda f: _set(f, "op_id", 2, 2**31 - 2)),
                     "Column variables.op_id of {p} holds 2,147,483,646 at row 2, above its largest value 8 "
                     "(the rows of ops is 9)."),
    "statistics-forged": (lambda: _sample_with(table="trace", edit=lambda f: _set(f, "step", 5, 40),
                                               forged_statistics=True),
                          "Table trace of {p} is corrupt (column step of row group 0 holds values from -1 to 40, "
                          "outside the -1 to 11 its footer's statistics state)."),
}


@pytest.mark.parametrize("case", sorted(BOUND_CASES))
def test_a_value_that_would_size_work_is_refused_in_one_sentence(tmp_path: Path, case: str) -> None:
    # GIVEN an earlier report of the sample, and the sample made hostile: a manifest field of the wrong
    # type, an id far beyond what the manifest declares, or statistics that disagree with their pages
    make, sentence = BOUND_CASES[case]
    earlier = tmp_path / "report.json"
    assert CliRunner().invoke(main, ["report", str(SAMPLE), "--format", "json", "-o", str(earlier)]).exit_code == 0
    kept = earlier.read_bytes()
    profile = tmp_path / "profile.pop"
    profile.write_bytes(make())
    for args in (["report", str(profile), "--section", "all", "--format", "json", "-o", str(earlier)],
                 ["export-trace", str(profile), "-o", str(tmp_path / "trace.json"), "-q"]):
        # WHEN a reading command reads it, in its own process with its memory limited to 4 GiB (the
        # ids would have it allocate 6 GiB to 80 GiB)
        root = Path(__file__).resolve().parents[1]
        done = subprocess.run(["bash", "-c", 'ulimit -v 4000000; exec "$@"', "-", sys.executable, "-m",
                               "popvision_py.cli", *args], capture_output=True, text=True, timeout=HANG_SECONDS,
                              cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
        # THEN it refuses in the one sentence, exit 2, and the earlier report is as it was
        assert (done.returncode, done.stderr.strip(), done.stdout) == (2, "Error: " + sentence.format(p=profile), "")
        assert earlier.read_bytes() == kept
        assert not (tmp_path / "trace.json").exists()
