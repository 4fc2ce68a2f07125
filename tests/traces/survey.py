"""Count what recorded traces hold: ``python -m tests.traces.survey TRACES_DIR [KIND ...]``.

TRACES_DIR holds one folder per kind, as ``record`` writes them (``KIND/rank{r}.json``, ``meta.json``).
For each kind and rank it prints the file size, the top-level keys, the events by phase and category,
the threads, the annotation names (digits folded to N), the c10d / gloo events, the pipeline spans
in order, and the events that overlap another on their thread without nesting in it. The numbers in
CATALOGUE.md come from this.
"""

from __future__ import annotations

import collections
import json
import re
import sys
from pathlib import Path

PP_NAME = re.compile(r"^(Forward \d+|Backward \d+|PP:.*)$")
STACK_CHUNK = re.compile(r"stage\.py\(\d+\): (forward_one_chunk|backward_one_chunk|backward_weight_one_chunk)$")


def fold(name: str) -> str:
    return re.sub(r"\d+", "N", name)


def not_nested(events: list[dict]) -> collections.Counter:
    """(outer, inner) name pairs, digits folded, where ``inner`` starts inside ``outer`` on the
    same thread and ends after it."""
    pairs: collections.Counter = collections.Counter()
    by_tid = collections.defaultdict(list)
    for e in events:
        by_tid[e["tid"]].append(e)
    for evs in by_tid.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        open_: list[dict] = []
        for e in evs:
            open_ = [o for o in open_ if o["ts"] + o["dur"] > e["ts"]]
            for o in open_:
                if e["ts"] + e["dur"] > o["ts"] + o["dur"] + 1e-3:
                    pairs[(fold(o["name"]), fold(e["name"]))] += 1
            open_.append(e)
    return pairs


def survey_rank(path: Path) -> None:
    trace = json.loads(path.read_text())
    ev = trace["traceEvents"]
    print(f"### {path.parent.name}/{path.name}: {path.stat().st_size:,} bytes, {len(ev):,} events")
    print("keys:", ", ".join(trace))
    print("distributedInfo:", json.dumps(trace.get("distributedInfo")))
    ts = [e["ts"] for e in ev if isinstance(e.get("ts"), (int, float))]
    base_us = trace["baseTimeNanoseconds"] / 1000
    print(f"ts: {min(ts):.3f} .. {max(ts):.3f} us; base + min ts = {(base_us + min(ts)) / 1e6:.3f} s since the epoch")
    print("by phase:", dict(collections.Counter(e["ph"] for e in ev)))
    print("by (phase, cat):", dict(collections.Counter(f'{e["ph"]}/{e.get("cat")}' for e in ev)))
    threads = collections.Counter((e.get("tid"), e.get("cat")) for e in ev if e["ph"] == "X")
    print("X by (tid, cat):", dict(threads))
    print("thread_name:", sorted({(e["tid"], e["args"]["name"]) for e in ev
                                  if e["ph"] == "M" and e["name"] == "thread_name"}))
    ua = collections.Counter(fold(e["name"]) for e in ev if e.get("cat") == "user_annotation")
    print("user_annotation (folded):", dict(ua))
    comm = collections.Counter(e["name"] for e in ev if e["ph"] == "X"
                               and (e["name"].startswith(("c10d::", "gloo:", "record_param_comms"))))
    print("c10d / gloo:", dict(comm))
    py = [e for e in ev if e.get("cat") == "python_function"]
    if py:
        chunks = collections.Counter(e["name"] for e in py if STACK_CHUNK.search(e["name"]))
        waits = [e for e in py if e["name"].endswith("): _wait_batch_p2p")]
        mods = collections.Counter(e["name"] for e in py if e["name"].startswith("nn.Module: "))
        print(f"python_function: {len(py)} events, {len({e['name'] for e in py})} names")
        print("  chunk calls:", dict(chunks))
        print(f"  _wait_batch_p2p: {len(waits)}, total {sum(e['dur'] for e in waits) / 1000:.1f} ms")
        print("  nn.Module:", dict(mods))
    pp = sorted((e for e in ev if e["ph"] == "X" and PP_NAME.match(e["name"])), key=lambda e: e["ts"])
    if pp:
        print("pipeline spans in order:", " ".join(e["name"].replace("Forward ", "F").replace("Backward ", "B")
                                                    for e in pp))
    bad = not_nested([e for e in ev if e["ph"] == "X" and e.get("cat") in ("cpu_op", "user_annotation",
                                                                          "python_function")])
    print("not nested (outer, inner):", dict(bad.most_common(8)))
    mem = [e for e in ev if e.get("name") == "[memory]"]
    if mem:
        print(f"[memory]: {len(mem)} ({sum(e['args']['Bytes'] < 0 for e in mem)} with Bytes < 0); "
              f"max Total Allocated {max(e['args']['Total Allocated'] for e in mem):,}")
    print()


def main(argv: list[str]) -> int:
    root = Path(argv[0])
    kinds = argv[1:] or ["gpipe", "1f1b", "interleaved", "ddp", "fsdp"]
    for kind in kinds:
        meta_path = root / kind / "meta.json"
        print(f"## {kind}")
        if meta_path.is_file():
            print("meta:", meta_path.read_text().replace("\n", " "))
        for path in sorted((root / kind).glob("rank*.json"), key=lambda p: int(p.stem[4:])):
            survey_rank(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
