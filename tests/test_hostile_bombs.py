"""Decompression bombs: profiles whose tables declare far more rows than their bytes hold, refused from
their footers before anything is decoded (popvision_py/format/expansion.py, docs/reliability.md).

Each bomb is the mnist_inference sample with one table replaced by one written here with pyarrow: rows of
one valid value repeated, which Parquet compresses to almost nothing. Every reading command runs it in
its own process under a 2 GiB address-space limit (``RLIMIT_AS``): the bombs would decode to 4.8 GB.
"""

from __future__ import annotations

import inspect
import io
import json
import os
import re
import resource
import subprocess
import sys
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from popvision_py import errors as E
from popvision_py.cli import MAX_EXPANSION_ENV
from popvision_py.format import open_profile
from popvision_py.format import schema as S
from popvision_py.format.expansion import ENV, FREE_BYTES, MAX_EXPANSION, decoded_bytes

from .test_format import rezip
from .test_hostile_corpus import SAMPLE, members_of

ROOT = Path(__file__).resolve().parents[1]
MEMORY_LIMIT = 2 << 30
BATCH = 1 << 20
BOMB_ROWS = 100_000_000
TRACE_ROW_BYTES = 48  # as the footer counts a trace row: 8 columns of int32 (int16 stored as int32,
# dictionary indices) and 2 of int64; 100M rows is 4.8 GB, over twice the memory limit


def table_bytes(spec: S.TableSchema, rows: int, value: dict[str, object], *, small: bool,
                store_schema: bool = True) -> bytes:
    """``rows`` rows of the table ``spec``, every column holding one value (``value`` by column, else 0),
    written by pyarrow in batches of 1 Mi rows. ``small``: as a bomb maker would, one page per column
    chunk and no statistics (about 25,000 times smaller than decoded); else pyarrow's defaults.
    ``store_schema=False``: without the Arrow schema, so that strings read back as plain strings."""
    columns = []
    for column in spec.columns:
        chosen = value.get(column.name, 0)
        if pa.types.is_dictionary(column.type):
            columns.append(pa.DictionaryArray.from_arrays(pa.nulls(BATCH, pa.int32()).fill_null(0), pa.array([chosen])))
        else:
            columns.append(pa.nulls(BATCH, column.type).fill_null(chosen))
    batch = pa.record_batch(columns, schema=spec.schema)
    options: dict[str, object] = dict(write_statistics=False, data_page_size=1 << 30) if small else {}
    if small and "max_rows_per_page" in inspect.signature(pq.ParquetWriter.__init__).parameters:
        options["max_rows_per_page"] = 1 << 30  # pyarrow 20 on; earlier ones bound pages by bytes alone
    sink = io.BytesIO()
    with pq.ParquetWriter(sink, spec.schema, compression="zstd", write_page_checksum=True, store_schema=store_schema,
                          **options) as writer:
        for start in range(0, rows, BATCH):
            writer.write_batch(batch.slice(0, min(BATCH, rows - start)))
    return sink.getvalue()


def sample_with(table: str, data: bytes, rows: int) -> bytes:
    """The sample with ``table``'s member replaced by ``data``, the manifest's rows and footer checksum
    agreeing with it (so that only its size is wrong)."""
    contents = members_of(SAMPLE.read_bytes())
    contents[S.TABLES[table].member] = data
    manifest = json.loads(contents[S.MANIFEST_MEMBER])
    footer = int.from_bytes(data[-8:-4], "little") + 8
    manifest["tables"][table].update(rows=rows, footer_crc32=zlib.crc32(data[-footer:]))
    contents[S.MANIFEST_MEMBER] = json.dumps(manifest).encode()
    out = io.BytesIO()
    rezip(out, contents)
    return out.getvalue()


TRACE = {"pass": "forward", "phase": "compute", "end_cycle": 1}


@pytest.fixture(scope="module")
def bomb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bomb") / "profile.pop"
    path.write_bytes(sample_with("trace", table_bytes(S.TABLES["trace"], BOMB_ROWS, TRACE, small=True), BOMB_ROWS))
    return path


def run_limited(args: list[str], env: dict[str, str] | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    """``args`` run by Python in its own process, its address space limited to ``MEMORY_LIMIT``."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))

    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          preexec_fn=limit, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def refusal(path: Path) -> re.Pattern:
    return re.compile(
        rf"Error: {re.escape(str(path))} would decode to 4\.8 GB, ([\d,]+) times its ([\d.]+) KB \(its trace table "
        rf"declares 100,000,000 rows\), beyond the 1,000 times its size that popvision reads; if it is a real "
        rf"profile and not a decompression bomb, read it with popvision --max-expansion FACTOR or {ENV}\.")


@pytest.mark.parametrize("command", ["info", "report", "sql", "export-trace", "compare", "dashboard"])
def test_a_bomb_is_one_sentence_and_exit_2_within_a_memory_limit(bomb: Path, tmp_path: Path, command: str) -> None:
    # GIVEN a profile of 177 KB whose trace declares 100,000,000 rows of one value (4.8 GB decoded)
    out = tmp_path / "out"
    args = {"info": [str(bomb)], "report": [str(bomb), "--section", "all", "-o", str(out)],
            "sql": [str(bomb), "SELECT count(*) FROM trace"], "export-trace": [str(bomb), "-o", str(out), "-q"],
            "compare": [str(SAMPLE), str(bomb)], "dashboard": [str(bomb), "--port", "1"]}[command]
    # WHEN the command reads it, in a process limited to 2 GiB
    done = run_limited(["-m", "popvision_py.cli", command, *args])
    # THEN one sentence, exit 2, nothing on stdout, no output written (the dashboard never serves)
    match = refusal(bomb).fullmatch(done.stderr.strip())
    assert done.returncode == 2 and match, done.stderr
    assert done.stdout == "" and not out.exists()
    # the ratio it states is the 4.8 GB a person counts (100M rows x 48 bytes, plus the dictionaries) over the file
    stated = int(match.group(1).replace(",", ""))
    expansion = BOMB_ROWS * TRACE_ROW_BYTES / bomb.stat().st_size
    assert expansion <= stated < 1.01 * expansion


def test_the_limit_is_lifted_by_the_flag_or_the_environment(bomb: Path) -> None:
    # GIVEN the bomb, and a user who trusts it
    member = len(members_of(bomb.read_bytes())["trace.parquet"])
    for flag, env in ((["--max-expansion", "inf"], {}), ([], {ENV: "30000"})):
        # WHEN `info` reads it with the limit raised
        done = run_limited(["-m", "popvision_py.cli", *flag, "info", str(bomb)], env=env)
        # THEN it opens (info reads the footers only) and shows the declared rows
        assert done.returncode == 0, done.stderr
        assert re.search(rf"^  trace +100,000,000 +{member:,}$", done.stdout, re.M), done.stdout
    # a limit below the bomb's ratio still refuses it
    done = run_limited(["-m", "popvision_py.cli", "--max-expansion", "20000", "info", str(bomb)])
    assert done.returncode == 2 and "beyond the 20,000 times its size" in done.stderr
    # the option and the environment are one setting, with one name
    assert MAX_EXPANSION_ENV == ENV


@pytest.mark.parametrize("value", ["abc", "0.5", "nan", "-1"])
def test_a_limit_that_is_not_a_number_is_one_sentence(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(ENV, value)
    with pytest.raises(E.ExpansionError, match=rf"^{ENV} is '{re.escape(value)}'; it must be a number of at least 1"):
        open_profile(SAMPLE)


def test_a_bomb_written_with_pyarrows_defaults_is_refused(tmp_path: Path) -> None:
    # GIVEN 30,000,000 rows of one value written with pyarrow's defaults (a page per 20,000 rows, statistics)
    rows = 30_000_000
    path = tmp_path / "profile.pop"
    path.write_bytes(sample_with("trace", table_bytes(S.TABLES["trace"], rows, TRACE, small=False), rows))
    # WHEN it is opened THEN it is refused: 1.4 GB from about 1.1 MB, over 1,000 times its size (and the
    # 64 MiB any profile may decode to)
    with pytest.raises(E.ExpansionError, match=r"would decode to 1\.4 GB, 1,\d{3} times its 1\.\d MB"):
        open_profile(path)


def test_a_keyed_table_beyond_its_manifest_is_refused_before_decoding(tmp_path: Path) -> None:
    # GIVEN the sample's liveness with 10,000,000 rows, where (ipu, step) is a key: the manifest's 4 IPUs
    # and 41 program steps allow 164
    rows = 10_000_000
    path = tmp_path / "profile.pop"
    path.write_bytes(sample_with("liveness", table_bytes(S.TABLES["liveness"], rows, {}, small=True), rows))
    # WHEN it is opened THEN one sentence names the table, its rows and the figures that bound them
    with pytest.raises(E.ExpansionError) as caught:
        open_profile(path)
    assert str(caught.value) == (f"Table liveness of {path} declares 10,000,000 rows, more than the 164 its manifest "
                                 "allows (one row per ipu, step: ipu 0 to 3 and step 0 to 40).")


def test_strings_decode_as_one_copy_of_each_value(tmp_path: Path) -> None:
    # GIVEN the sample's ops with 100,000 rows whose name, stored as a plain string column, is one
    # value of 1 MB: as strings, 100 GB; the file holds it once, in a dictionary page
    rows, name = 100_000, "x" * (1 << 20)
    data = table_bytes(S.TABLES["ops"], rows, {"name": name, "pass": "forward", "kind": "matmul", "block": "B1"},
                       small=False, store_schema=False)
    path = tmp_path / "profile.pop"
    path.write_bytes(sample_with("ops", data, rows))
    # WHEN the reader decodes the table in a process limited to 2 GiB
    code = ("import sys; from popvision_py.format import open_profile\n"
            "t = open_profile(sys.argv[1]).read_table('ops'); c = t.column('name').combine_chunks()\n"
            "print(t.num_rows, c.type, len(c.dictionary), len(c.dictionary[0].as_py()))")
    done = run_limited(["-c", code, str(path)])
    # THEN all its rows are there, the name column a dictionary of the one 1 MB value
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["100000", "dictionary<values=string,", "indices=int32,", "ordered=0>", "1",
                                   "1048576"]


def test_real_profiles_decode_well_within_the_limit(tmp_path: Path) -> None:
    # GIVEN the committed samples and a large profile shaped like the emulator's (delta-encoded cycles,
    # iterations repeated): 1M trace rows of benchmarks/make_large_profile.py
    large = tmp_path / "large.pop"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "make_large_profile.py"), str(large),
                    "--rows", "1000000"], check=True, capture_output=True, cwd=ROOT)
    for path in [*sorted((ROOT / "sample_profiles").glob("*/profile.pop")), large]:
        # WHEN each is opened under the default limit THEN it opens, decoding to under a third of the
        # limit (the margin docs/reliability.md states)
        with open_profile(path) as profile:
            decoded = sum(decoded_bytes(profile.metadata(t)) for t in profile.tables)
        assert decoded <= FREE_BYTES + MAX_EXPANSION / 3 * path.stat().st_size, path


def figures(paths: list[Path]) -> list[tuple[str, int, int, float]]:
    """(profile, file bytes, decoded bytes, ratio) of each profile: the table of docs/reliability.md."""
    rows = []
    os.environ[ENV] = "inf"
    for path in paths:
        with open_profile(path) as profile:
            decoded = sum(decoded_bytes(profile.metadata(t)) for t in profile.tables)
        rows.append((str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path), path.stat().st_size, decoded,
                     decoded / path.stat().st_size))
    return rows


# python -m tests.test_hostile_bombs [PROFILE...]: the samples, the given profiles, two bombs
if __name__ == "__main__":
    import tempfile

    folder = Path(tempfile.mkdtemp())
    bombs = {"bomb, pyarrow's defaults (30M rows)": (30_000_000, False),
             "bomb, one page a chunk (100M rows)": (BOMB_ROWS, True)}
    made = []
    for name, (count, small) in bombs.items():
        made.append(folder / f"{name.split('(')[1][:-1].replace(' ', '-')}-{'small' if small else 'defaults'}.pop")
        made[-1].write_bytes(sample_with("trace", table_bytes(S.TABLES["trace"], count, TRACE, small=small), count))
    print("| profile | file | decoded | decoded / file |\n| --- | ---: | ---: | ---: |")
    for name, size, decoded, ratio in figures([*sorted((ROOT / "sample_profiles").glob("*/profile.pop")),
                                               *map(Path, sys.argv[1:]), *made]):
        print(f"| {name} | {size:,} | {decoded:,} | {ratio:,.1f} |")
