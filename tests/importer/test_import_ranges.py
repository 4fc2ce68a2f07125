"""The byte-range reader (importer/ranges.py): where it cuts ``traceEvents``, and that what it reads is what
the streaming parser reads, on the sample traces and on traces whose strings hold brackets, braces and
escaped quotes, written in Kineto's layout or on one line; and the profile written a window of each rank's
time at a time (importer/tables.py) as it is written whole."""

from __future__ import annotations

import dataclasses
import gzip
import json
import shutil
from pathlib import Path

import msgspec
import numpy as np
import pytest

from popvision_py.importer import ranges
from popvision_py.importer.read import RankTrace, read_rank, read_stream

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_profiles" / "pytorch_gpipe" / "traces"
HOSTILE_NAMES = ["aten::x{", "aten::}y", "a[b]c", "}, {", '},{"ph": "X"}', 'q"}{', "\\", '\\"]', "[[[{{{",
                 "tab\tand\nnewline}", 'PP:1F0 {"x": [1]}']  # as values: json.dumps escapes them


def fields(t: RankTrace) -> dict:
    return {f.name: getattr(t, f.name) for f in dataclasses.fields(t)}


def assert_same(a: RankTrace, b: RankTrace, but: tuple[str, ...] = ()) -> None:
    fa, fb = fields(a), fields(b)
    for key, value in fa.items():
        if key in but:
            continue
        if isinstance(value, np.ndarray):
            assert value.dtype == fb[key].dtype and np.array_equal(value, fb[key]), key
        else:
            assert value == fb[key], key


def both_readers_agree(path: Path, monkeypatch, range_bytes: int, search_bytes: int) -> RankTrace:
    """``path`` read by the fast reader cut into byte ranges of ``range_bytes`` (more than five of them) and by
    the streaming reader: the two keep the same rank, field for field; the fast reader's rank."""
    monkeypatch.setattr(ranges, "RANGE_BYTES", range_bytes)
    monkeypatch.setattr(ranges, "SEARCH_BYTES", search_bytes)
    fast, stream = ranges.read_fast(path), read_stream(path)
    assert len(ranges.rank_ranges(path)[0].ranges) > 5
    assert_same(fast, stream)
    return fast


def kineto(header: dict, events: list[dict]) -> str:
    """A trace as Kineto writes one: the header's keys, then one event per object, each on lines of its own."""
    head = ",\n  ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in header.items())
    body = ",\n  ".join("{\n    " + ",\n    ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in e.items())
                         + "\n  }" for e in events)
    return "{\n  " + head + ',\n  "traceEvents": [\n  ' + body + '\n  ],\n  "traceName": "x.json"\n}\n'


def one_line(header: dict, events: list[dict]) -> str:
    return json.dumps({**header, "traceEvents": events, "traceName": "x.json"})


def hostile_events() -> list[dict]:
    """Operators and annotations whose names and args hold every character a careless cut would trip on."""
    events: list[dict] = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
                           "ts": 10.0, "dur": 1000.0}]
    for k in range(60):
        name = HOSTILE_NAMES[k % len(HOSTILE_NAMES)]
        events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": 20.0 + 10 * k,
                       "dur": 5.5, "args": {"Concrete Inputs": [name, "[256, 512]", "}{"], "Input Dims": [[2, 3]]}})
        if k % 7 == 0:
            events.append({"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": 21.0 + 10 * k,
                           "args": {"Total Allocated": 1000 + k, "Device Type": 0, "Addr": 5}})
        if k % 11 == 0:
            events.append({"ph": "X", "cat": "user_annotation", "name": f"Forward {k % 4}", "pid": 1, "tid": 1,
                           "ts": 20.0 + 10 * k, "dur": 8.0, "args": {"note": "] } {[ \"quoted\" ]"}})
    return events


HEADER = {"schemaVersion": 1, "deviceProperties": [], "distributedInfo": {"rank": 0, "world_size": 1},
          "baseTimeNanoseconds": 1_700_000_000_000_000_000}


def boundaries(text: str) -> set[tuple[int, int]]:
    """Every true boundary between two events of ``text`` (bytes): (end of one event, start of the next)."""
    data = text.encode()
    decoder = json.JSONDecoder()
    at = data.index(b"[", data.index(b'"traceEvents"')) + 1
    found = set()
    s = text  # ASCII here: byte offsets are character offsets
    pos = len(s[:at]) + (len(s[at:]) - len(s[at:].lstrip()))
    while True:
        _, end = decoder.raw_decode(s, pos)
        rest = s[end:].lstrip()
        if not rest.startswith(","):
            return found
        nxt = len(s) - len(rest[1:].lstrip())
        found.add((end, nxt))
        pos = nxt


@pytest.mark.parametrize("layout", [kineto, one_line])
def test_a_cut_at_any_byte_finds_a_true_boundary_between_events_or_none(layout):
    # GIVEN a trace whose names and args hold {, }, [, ], escaped quotes and "}, {" inside strings
    text = layout(HEADER, hostile_events())
    data = text.encode()
    assert data.isascii()
    true = boundaries(text)
    start = data.index(b"[", data.index(b'"traceEvents"')) + 1
    # WHEN a range is to end at each byte of the events in turn
    found = {ranges.find_boundary(data, start, target, len(data)) for target in range(start, len(data))}
    # THEN every cut is a boundary between two whole events (a one-line trace's cut inside a string is none)
    assert found - {None} <= true
    assert len(found - {None}) >= (len(true) if layout is kineto else len(true) // 4)


@pytest.mark.parametrize("layout", [kineto, one_line])
@pytest.mark.parametrize("gz", [False, True])
def test_ranges_of_a_few_hundred_bytes_read_what_the_streaming_parser_reads(layout, gz, tmp_path, monkeypatch):
    # GIVEN the hostile trace, plain or gzipped, and ranges of a few hundred bytes (dozens of them)
    text = layout(HEADER, hostile_events()).encode()
    path = tmp_path / ("rank0.json.gz" if gz else "rank0.json")
    path.write_bytes(gzip.compress(text) if gz else text)
    monkeypatch.setattr(ranges, "RANGE_BYTES", 300)
    monkeypatch.setattr(ranges, "SEARCH_BYTES", 256)
    plan, sources = ranges.rank_ranges(path)
    cut = list(sources)
    # WHEN it is read by ranges, and by the streaming parser
    fast, stream = ranges.read_fast(path), read_stream(path)
    # THEN it was cut into many ranges, and both readers keep the same columns, figure for figure
    assert len(cut) >= (10 if layout is kineto else 2)
    assert fast.events == len(hostile_events())
    assert_same(fast, stream)
    assert {"Forward 0", "ProfilerStep#1"} <= set(fast.names)


def test_a_range_cut_inside_an_event_falls_back_to_the_streaming_parser(tmp_path, monkeypatch):
    # GIVEN a trace whose events' args hold objects laid out as Kineto lays out events ("},\n  {" inside one)
    events = hostile_events()
    text = kineto(HEADER, events).replace('"Addr": 5}', '"Addr": [{"a": 1},\n  {"b": 2}]}')
    path = tmp_path / "rank0.json"
    path.write_text(text)
    monkeypatch.setattr(ranges, "RANGE_BYTES", 300)
    monkeypatch.setattr(ranges, "SEARCH_BYTES", 256)
    # WHEN it is read by ranges THEN a range does not decode and the fast path gives it up
    with pytest.raises(ranges.Fallback):
        ranges.read_fast(path)
    # AND the import's reader reads it as the streaming parser does
    assert_same(read_rank(path), read_stream(path))


def test_a_range_is_read_while_a_view_of_the_last_one_is_still_held(tmp_path):
    # GIVEN files of 50 and 80 bytes, the first read into the process's buffer and a view of it still held (as a
    # decoded event's raw args hold one: a Dask worker under load once stopped with "BufferError: Existing exports
    # of data: object cannot be re-sized")
    first, second, third = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    first.write_bytes(b"a" * 50)
    second.write_bytes(b"b" * 80)
    third.write_bytes(b"c" * 80)
    held = memoryview(ranges._read_into(str(first), 0, 50, b"[", b"]"))
    # WHEN the next range, of another size, is read THEN it is read whole, and the held view is unchanged
    assert bytes(ranges._read_into(str(second), 0, 80, b"[", b"]")) == b"[" + b"b" * 80 + b"]"
    assert bytes(held) == b"[" + b"a" * 50 + b"]"
    # AND one of the same size as a view still held is not written over it
    again = memoryview(ranges._BUFFER)
    assert bytes(ranges._read_into(str(third), 0, 80, b"[", b"]")) == b"[" + b"c" * 80 + b"]"
    assert bytes(again) == b"[" + b"b" * 80 + b"]"
    held.release()
    again.release()
    # AND with no view held, the next range reuses the buffer
    buffer = ranges._BUFFER
    assert bytes(ranges._read_into(str(first), 0, 50, b"[", b"]")) == b"[" + b"a" * 50 + b"]"
    assert ranges._BUFFER is buffer


@pytest.mark.parametrize("rank", range(4))
def test_the_sample_traces_read_by_ranges_are_the_streaming_parsers_figures(rank, tmp_path, monkeypatch):
    # GIVEN a rank of the real GPipe sample, gzipped as committed and inflated, in ranges of 64 KiB
    gz = SAMPLE / f"rank{rank}.json.gz"
    plain = tmp_path / f"rank{rank}.json"
    plain.write_bytes(gzip.decompress(gz.read_bytes()))
    monkeypatch.setattr(ranges, "RANGE_BYTES", 64 << 10)
    monkeypatch.setattr(ranges, "SEARCH_BYTES", 4 << 10)
    stream = read_stream(gz)
    # WHEN each is read by ranges (no fall back: the fast path takes a real trace as it is)
    # THEN the columns are the streaming parser's, figure for figure
    for path in (gz, plain):
        assert len(list(ranges.rank_ranges(path)[1])) > 10
        fast = ranges.read_fast(path)
        assert_same(fast, stream, but=("path",) if path == plain else ())
    assert stream.events > 2000 and len(stream.busy) > 100 and len(stream.memory_ts) > 100


def test_nesting_is_counted_outside_strings_only():
    # GIVEN ranges of events, with and without brackets in strings and escaped quotes
    assert ranges.range_depth(b'{"a": [[1]]}, {"b": 2}') == 3
    assert ranges.range_depth(b'{"a": "[[[[{{{{"}, {"b": "\\"[[["}') == 1
    assert ranges.range_depth(b'{"a": "\\\\"}, {"b": [[["\\\\\\""]]]}') == 4
    assert ranges.range_depth(b'{"a": "x"}') == 1
    assert ranges.range_depth(b"[" * 70 + b"]" * 70) == 70


def _depth_by_hand(text: bytes) -> int | None:
    """The deepest nesting of ``text``, a byte at a time: in a string a backslash escapes the next byte, a quote
    opens or closes a string, a bracket outside one opens or closes a level. None for a text JSON cannot hold (a
    backslash outside a string)."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in text:
        if escaped:
            escaped = False
        elif byte == ord("\\"):
            if not in_string:
                return None
            escaped = True
        elif byte == ord('"'):
            in_string = not in_string
        elif not in_string and byte in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        elif not in_string and byte in b"]}":
            depth -= 1
    return deepest


def test_the_nesting_of_any_text_is_the_depth_a_byte_at_a_time_gives():
    # GIVEN 5,000 random texts of quotes, brackets, backslashes and other bytes
    rng = np.random.default_rng(7)
    alphabet = np.frombuffer(b'[]{}""\\\\ab,:', np.uint8)
    texts = [rng.choice(alphabet, size=int(rng.integers(0, 60))).tobytes() for _ in range(5000)]
    # WHEN each that JSON can hold (no backslash outside a string) is counted, as bytes and as a bytearray
    # THEN its depth is the one a byte-at-a-time scan gives
    checked = 0
    for text in texts:
        by_hand = _depth_by_hand(text)
        if by_hand is not None:
            assert ranges.range_depth(text) == ranges.range_depth(bytearray(text)) == by_hand, text
            checked += 1
    assert checked > 1000


def test_a_trace_the_fast_path_refuses_says_what_the_streaming_parser_says(tmp_path):
    # GIVEN an operator whose duration is a string (the fast path's typed events refuse it)
    trace = json.loads(gzip.decompress((SAMPLE / "rank1.json.gz").read_bytes()))
    next(e for e in trace["traceEvents"] if e.get("cat") == "cpu_op")["dur"] = "48.5"
    path = tmp_path / "rank1.json"
    path.write_text(json.dumps(trace))
    # WHEN it is read THEN the fast path gives it up, and the sentence is the streaming parser's
    with pytest.raises(ranges.Fallback):
        ranges.read_fast(path)
    with pytest.raises(Exception, match="whose dur is \"48.5\", not a duration") as raised:
        read_rank(path)
    assert str(raised.value).startswith(str(path))


def test_the_event_struct_keeps_the_last_of_a_key_given_twice_as_a_dict_does():
    # GIVEN an event with "ph" twice (a dict, as ijson builds it, keeps the last)
    events = ranges.EVENTS.decode(b'[{"ph": "X", "ph": "M", "name": "x", "ts": 1, "dur": 1}]')
    # THEN the typed event keeps the last too
    assert events[0].ph == "M"
    with pytest.raises(msgspec.ValidationError):
        ranges.EVENTS.decode(b'[{"ph": "X", "ts": true}]')  # a bool is no time


def test_an_import_in_parallel_processes_reads_what_one_process_reads(tmp_path, monkeypatch):
    # GIVEN the sample's four ranks, three inflated, and ranges small enough for a rank to be read by both processes
    from popvision_py.importer import read_traces

    folder = tmp_path / "traces"
    folder.mkdir()
    for rank in range(3):
        (folder / f"rank{rank}.json").write_bytes(gzip.decompress((SAMPLE / f"rank{rank}.json.gz").read_bytes()))
    shutil.copy(SAMPLE / "rank3.json.gz", folder / "rank3.json.gz")  # and one gzipped
    paths = sorted(folder.iterdir())
    monkeypatch.setattr("popvision_py.importer.IN_PROCESS_BYTES", 0)
    monkeypatch.setattr(ranges, "RANGE_BYTES", 256 << 10)  # ranges are planned here, decoded there
    # WHEN they are read in two processes, and in this one
    parallel, here = read_traces(paths, jobs=2), read_traces(paths, jobs=1)
    # THEN each rank's columns are the same
    for a, b in zip(parallel, here):
        assert_same(a, b)


@pytest.mark.parametrize("busy_rows", [3, 40, 10**9])
def test_a_profile_written_a_window_of_time_at_a_time_has_the_same_tables(busy_rows, tmp_path):
    # GIVEN the sample's traces, read
    from popvision_py.format import open_profile
    from popvision_py.importer import find_traces, read_traces
    from popvision_py.importer.profile import write_profile

    traces = read_traces(find_traces([str(SAMPLE)]), jobs=1)
    # WHEN the profile is written with each rank's time line cut into windows of a few busy rows, and whole
    write_profile(tmp_path / "windows" / "profile.pop", traces, name="x", busy_rows=busy_rows)
    write_profile(tmp_path / "whole" / "profile.pop", read_traces(find_traces([str(SAMPLE)]), jobs=1), name="x",
                  busy_rows=1 << 40)
    # THEN every table holds the same rows (a row across a window's end is one row)
    with open_profile(tmp_path / "windows" / "profile.pop") as a, open_profile(tmp_path / "whole" / "profile.pop") as b:
        for table in ("trace", "programs", "exchanges", "liveness", "tile_cycles", "tile_memory", "trace_levels"):
            x, y = a.read_table(table).to_pandas(), b.read_table(table).to_pandas()
            for column in x.columns:
                if str(x[column].dtype) == "category":
                    x[column], y[column] = x[column].astype(str), y[column].astype(str)
            assert x.equals(y), table
        assert len(a.read_table("trace")) == 2830
        assert a.run["import"]["hidden_comm_ns"] == b.run["import"]["hidden_comm_ns"]


@pytest.mark.parametrize("pad", [0, 70_000, 200_000])
def test_a_header_past_the_first_bytes_looked_at_is_read_whole(pad, tmp_path):
    # GIVEN a trace whose header holds a string of `pad` characters before its events (Kineto's: a few KiB; the
    # fast reader first looks for the events' start in FIRST_HEAD_BYTES)
    assert ranges.FIRST_HEAD_BYTES == 1 << 16
    header = {**HEADER, "traceName": "x" * pad}
    path = tmp_path / "rank0.json"
    path.write_text(kineto(header, hostile_events()))
    # WHEN it is read by ranges (one, as a small rank is) and by the streaming parser
    plan = ranges.plan_plain(path, path.stat().st_size)
    fast, stream = ranges.read_fast(path), read_stream(path)
    # THEN the header is the whole of it, and both readers keep the same columns
    assert plan.header["traceName"] == "x" * pad and plan.header["distributedInfo"] == HEADER["distributedInfo"]
    assert plan.ranges[0][0] == path.read_bytes().index(b"{", path.read_bytes().index(b'"traceEvents"'))
    assert_same(fast, stream)


def test_a_reader_of_many_small_ranges_looks_at_its_heap_once_a_range_bytes_of_them(tmp_path, monkeypatch):
    # GIVEN a worker's resident set read through a counter, always 1 GiB more than the last time (so that every
    # look finds the heap grown), and trims counted
    looks: list[int] = []
    trims: list[int] = []
    monkeypatch.setattr(ranges, "_HEAP", {"resident": 0, "read": 0})
    monkeypatch.setattr(ranges, "_resident", lambda: looks.append(1) or len(looks) << 30)
    monkeypatch.setattr(ranges, "release_memory", lambda: trims.append(1))
    monkeypatch.setattr(ranges, "RANGE_BYTES", 50_000)
    path = tmp_path / "rank0.json"
    path.write_text(kineto(HEADER, hostile_events()))
    size = path.stat().st_size
    assert 10_000 < size < 20_000
    # WHEN the same small trace (one range) is read 12 times
    for _ in range(12):
        ranges.read_fast(path)
    # THEN the resident set was looked at after the first range (the baseline), then once every `per` ranges (the
    # ranges that make RANGE_BYTES), and the heap trimmed at each of those looks (it had grown): not 12 looks and
    # 11 trims
    per = -(-50_000 // ranges_bytes(path))
    assert per >= 3
    assert len(looks) == 1 + 11 // per
    assert len(trims) == len(looks) - 1


def ranges_bytes(path: Path) -> int:
    """The bytes a one-range trace's range decodes: the file from its events' start, after the top's prefix."""
    plan = ranges.plan_plain(path, path.stat().st_size)
    start, end, _ = plan.ranges[0]
    return len(ranges.TOP) + end - start


def test_the_annotations_read_as_communication_in_flight_are_those_classify_keeps_so():
    # GIVEN names of every kind classify tells apart, some of them also named like communication
    from popvision_py.importer.parts import COMM_FLIGHT, KIND, Spans, classify

    names = ["nccl:all_reduce", "gloo:broadcast", "ncclKernel_AllReduce", "ncclDevKernel_Generic", "ProfilerStep#3",
             "Forward 2", "PP:1F3", "PP:0SEND_F1", "Optimizer.step#SGD.step", "DistributedDataParallel.forward",
             "nccl:ProfilerStep#1", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "my_region",
             "nccl:all_gather Forward 2", "xnccl:all_reduce"]
    # WHEN each is classified as an annotation (its args saying 1,024 floats)
    for name in names:
        spans = Spans()
        classify(spans, name, "user_annotation", 0, 10, {"args": {"In msg nelems": 1024, "dtype": "Float"}})
        kept_as_flight = bool(spans.rows) and spans.rows[0][2] == KIND["comm_flight"]
        # THEN the fast reader's rule (the name of communication in flight) says so exactly where classify keeps it
        # as communication in flight
        assert bool(COMM_FLIGHT.match(name)) == kept_as_flight, name
    assert sum(bool(COMM_FLIGHT.match(n)) for n in names) == 6
