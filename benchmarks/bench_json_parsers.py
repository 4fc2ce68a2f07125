"""The JSON parsers `popvision import` could read a trace's events with, on one real rank trace: CPU time.

    .venv/bin/python benchmarks/bench_json_parsers.py TRACE.json [--repeat 3]

Each parser reads the file's ``traceEvents`` (the bytes from the array's ``[`` to its ``]``, read once
into memory first) into something the import can reduce:

- **ijson** (yajl2_c backend, the streaming parser the import falls back to): ``ijson.items`` over the
  whole file, event by event, each event a dict;
- **orjson**: ``orjson.loads`` of the array: a list of dicts, every event's ``args`` built whole;
- **msgspec, untyped**: ``msgspec.json.decode`` of the array: the same list of dicts;
- **msgspec, typed** (what the import uses, ``importer/ranges.py``): ``Decoder(list[Event])``, an
  ``Event`` struct holding the fields the import reads (``args`` kept as raw bytes, unknown fields
  skipped but still checked as JSON);
- **msgspec, typed, then reduced**: the same, plus ``reduce_events`` (the columns the import keeps).

Figures are the process's CPU time (user + system; best of ``--repeat``), not wall time, so that
other work on a shared machine does not count; MB/s is the array's bytes over that time. orjson is
not a dependency of the project: it is timed where it is installed.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def cpu_seconds(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        began = os.times()
        fn()
        ended = os.times()
        best = min(best, (ended.user - began.user) + (ended.system - began.system))
    return best


def main(argv: list[str] | None = None) -> int:
    import ijson
    import msgspec

    from popvision_py.importer import ranges

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path, help="one rank's trace (plain JSON)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    data = args.trace.read_bytes()
    start = data.index(b"[", data.index(b'"traceEvents"'))
    end = data.rindex(b"]", 0, data.rindex(b"}"))
    array = data[start:end + 1]
    events = ranges.EVENTS.decode(array)
    parsers: dict[str, Callable[[], object]] = {
        "ijson items (yajl2_c), event by event": lambda: sum(
            1 for _ in ijson.items(io.BytesIO(data), "traceEvents.item", use_float=True)),
        "msgspec, untyped (dicts)": lambda: msgspec.json.decode(array),
        "msgspec, typed (Event structs, args raw)": lambda: ranges.EVENTS.decode(array),
        "msgspec, typed, then reduced (the import's range)": lambda: ranges.reduce_events(
            ranges.EVENTS.decode(array), 0),
        "stdlib json.loads (dicts)": lambda: json.loads(array),
    }
    try:
        import orjson

        parsers["orjson.loads (dicts)"] = lambda: orjson.loads(array)
    except ImportError:
        print("orjson is not installed: not timed", file=sys.stderr)
    print(f"{args.trace}: {len(array) / 1e6:,.1f} MB of traceEvents, {len(events):,} events; CPU seconds, best of "
          f"{args.repeat}\n")
    print("| parser | CPU time | MB/s (one core) |")
    print("| --- | ---: | ---: |")
    for name, fn in parsers.items():
        seconds = cpu_seconds(fn, args.repeat)
        print(f"| {name} | {seconds:.2f} s | {len(array) / 1e6 / seconds:,.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
