"""`popvision export-trace PROFILE -o trace.json`: the execution trace as Chrome trace-event JSON.

One process per IPU, every trace row one complete ("X") event named after its program step (idle
rows: "idle"), category = phase, times in microseconds (cycles / clock_hz x 1e6). Perfetto and
chrome://tracing open it. The trace is streamed in batches and each batch is formatted by Arrow
compute kernels, so memory stays bounded and no Python code runs per row.
"""

from __future__ import annotations

import json
import os

import click
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from popvision_py.analysis.tables import PASSES, PHASES, codes, numbers
from popvision_py.format import open_profile
from popvision_py.format.atomic import atomic_output

COLUMNS = ["run", "iteration", "micro_batch", "ipu", "stage", "pass", "step", "phase", "start_cycle", "end_cycle"]


def _strings(values: np.ndarray) -> pa.Array:
    return pc.cast(pa.array(values), pa.string())


def export(path: str | os.PathLike[str], output: str | os.PathLike[str], batch_rows: int = 1 << 20) -> int:
    """Write the trace of ``path`` to ``output``; returns the number of "X" events written."""
    with open_profile(path) as profile:
        clock = float(profile.target["clock_hz"])
        programs = profile.read_pandas("programs", ["ipu", "step", "name"])
        n_ipus = max(int(profile.target["num_ipus"]), int(programs["ipu"].max()) + 1 if len(programs) else 0)
        width = int(programs["step"].max()) + 2 if len(programs) else 1
        # (ipu, step + 1) -> index into `names` (JSON-escaped); step -1 (idle) and unknown steps use the phase name
        names = [json.dumps(str(n))[1:-1] for n in programs["name"].astype(str)]
        lut = np.full((n_ipus + 1) * width, -1, np.int64)
        lut[programs["ipu"].to_numpy().astype(np.int64) * width + programs["step"].to_numpy() + 1] = np.arange(len(names))
        label = pa.array(names + list(PHASES) + ["unknown"], pa.string())
        phase_words = pa.array(list(PHASES) + ["unknown"], pa.string())
        pass_words = pa.array(list(PASSES) + ["unknown"], pa.string())
        meta = {"format": "popvision trace export", "profile": str(profile.path), "clock_hz": clock,
                "model": profile.run.get("model"), "strategy": profile.run.get("strategy")}
        count = 0
        with atomic_output(output) as out:
            out.write(b'{"displayTimeUnit":"ns","otherData":' + json.dumps(meta).encode() + b',"traceEvents":[\n')
            ipus = sorted(set(range(int(profile.target["num_ipus"]))) | set(programs["ipu"].astype(int)))
            head = [json.dumps({"name": "process_name", "ph": "M", "pid": i, "tid": 0, "args": {"name": f"IPU {i}"}})
                    for i in ipus]
            head += [json.dumps({"name": "process_sort_index", "ph": "M", "pid": i, "tid": 0,
                                 "args": {"sort_index": i}}) for i in ipus]
            out.write(",\n".join(head).encode())
            for batch in profile.iter_batches("trace", COLUMNS, batch_rows):
                if batch.num_rows == 0:
                    continue
                ipu = numbers(batch["ipu"]).astype(np.int64)
                step = numbers(batch["step"]).astype(np.int64)
                phase = codes(batch["phase"], PHASES).astype(np.int64)
                key = np.clip(ipu, 0, n_ipus) * width + np.clip(step + 1, 0, width - 1)
                name_ix = np.where((step >= 0) & (ipu < n_ipus) & (step + 1 < width), lut[key], -1)
                name_ix = np.where(name_ix >= 0, name_ix, len(names) + phase)
                start = numbers(batch["start_cycle"])
                end = numbers(batch["end_cycle"])
                ts = pa.array(start / clock * 1e6)
                dur = pa.array((end - start) / clock * 1e6)
                parts = [
                    ',\n{"name":"', label.take(pa.array(name_ix)), '","cat":"', phase_words.take(pa.array(phase)),
                    '","ph":"X","pid":', _strings(ipu), ',"tid":0,"ts":', pc.cast(ts, pa.string()),
                    ',"dur":', pc.cast(dur, pa.string()), ',"args":{"step":', _strings(step),
                    ',"stage":', _strings(numbers(batch["stage"])),
                    ',"pass":"', pass_words.take(pa.array(codes(batch["pass"], PASSES).astype(np.int64))),
                    '","micro_batch":', _strings(numbers(batch["micro_batch"])),
                    ',"iteration":', _strings(numbers(batch["iteration"])), ',"run":', _strings(numbers(batch["run"])),
                    ',"start_cycle":', _strings(start), ',"end_cycle":', _strings(end), "}}",
                ]
                text = pc.binary_join_element_wise(*parts, "")
                # the string array's data buffer holds the rows back to back: write it in one go
                offsets = np.frombuffer(text.buffers()[1], dtype=np.int32, count=len(text) + 1, offset=text.offset * 4)
                out.write(memoryview(text.buffers()[2])[offsets[0]: offsets[-1]])
                count += batch.num_rows
            out.write(b"\n]}\n")
    return count


@click.command("export-trace")
@click.argument("profile", type=click.Path())
@click.option("-o", "--output", type=click.Path(), required=True, help="The trace-event JSON file to write.")
def command(profile: str, output: str) -> None:
    """Export PROFILE's execution trace as Chrome trace-event JSON (open it in Perfetto or chrome://tracing)."""
    events = export(profile, output)
    click.echo(f"Wrote {events:,} events to {output}", err=True)
