"""Serve a profile's dashboard under an address-space limit and ask for its largest views (a subprocess of
tests/dashboard/test_memory_budget.py; prints one JSON line of what each callback answered and the peak RSS).

    python tests/dashboard/budget_probe.py PROFILE LIMIT_BYTES RAW_ROWS

The limit is ``resource.setrlimit(RLIMIT_AS)``: an allocation past it fails in this process (a
``MemoryError``, a callback answered 500) rather than growing it. ``RAW_ROWS`` scales the rows a view
reads at once (``trace_levels.RAW_ROWS``) to the profile, so the whole run is too wide to read as rows,
as a billion-row trace is with the default.
"""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def call(http, app, output: str, values: dict) -> tuple[int, str]:
    """POST one callback (the one whose output key starts with ``output``) with ``values`` by "id.property"."""
    key = next(k for k in app.callback_map if k.startswith(output))
    spec = app.callback_map[key]
    parts = key.strip(".").split("...") if key.startswith("..") else [key]
    outputs = [{"id": p.rsplit(".", 1)[0], "property": p.rsplit(".", 1)[1].split("@")[0]} for p in parts]

    def filled(items: list) -> list:
        return [{"id": i["id"], "property": i["property"], "value": values.get(f"{i['id']}.{i['property']}")}
                for i in items]

    inputs = filled(spec["inputs"])
    body = {"output": key, "outputs": outputs if key.startswith("..") else outputs[0], "inputs": inputs,
            "state": filled(spec.get("state", [])), "changedPropIds": [f"{inputs[0]['id']}.{inputs[0]['property']}"]}
    response = http.post("/_dash-update-component", json=body)
    return response.status_code, response.get_data(as_text=True)


def main(path: str, limit: int, raw_rows: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    from dashboards import ids
    from dashboards.app import create_app
    from dashboards.zoom import moves_id
    from engine import rules
    from popvision_py.analysis.trace import levels as trace_levels

    trace_levels.RAW_ROWS = raw_rows
    app = create_app([path], planner=rules)  # as `popvision dashboard` builds it: the insights' fixes checked
    profiles = app.server.extensions["popvision_profiles"]
    profiles.warm()
    http = app.server.test_client()
    http.get("/")
    report = profiles.report("a")
    start, end = report.trace.extent()
    span = end - start
    answers = {}
    answers["page"] = http.get("/trace").status_code, ""
    answers["timeline"] = call(http, app, "..trace-timeline.figure...", {"profile-choice.value": "a"})
    for share in (2, 16, 128, 1024, 16384):  # zooms from half the run down to single steps
        a = start + span // 3
        relayout = {"xaxis.range[0]": a, "xaxis.range[1]": a + span // share}
        answers[f"zoom_1/{share}"] = call(http, app, f"..{ids.TRACE_TIMELINE}.figure@", {
            f"{moves_id(ids.TRACE_TIMELINE)}.data": relayout, "profile-choice.value": "a"})
    tiles = {"trace-tile-choice.value": "worst 64", "trace-ipu.value": 0, "profile-choice.value": "a"}
    answers["tiles_whole_run"] = call(http, app, "..trace-tile-timeline", {**tiles, "trace-window.data": None})
    fits = report.trace.levels().fitting(start, end)
    answers["tiles_fitting"] = call(http, app, "..trace-tile-timeline", {**tiles, "trace-window.data": list(fits)})
    answers["balance_whole_run"] = call(http, app, "trace-tiles.figure", {
        "trace-step.value": None, "trace-balance-scope.value": "view", "trace-window.data": None,
        "trace-ipu.value": 0, "profile-choice.value": "a"})
    answers["operations"] = call(http, app, "..operations-description", {"profile-choice.value": "a",
                                                                          "operations-group.value": "op"})
    answers["operation_click"] = call(http, app, "..operations-selected", {
        "profile-choice.value": "a", "operations-group.value": "op",
        "operations-table.active_cell": {"row": 0, "column": 0, "column_id": "name"}})
    answers["program_tree"] = call(http, app, "..programs-tree", {"programs-ipu.value": 0, "programs-search.value": "",
                                                                  "profile-choice.value": "a"})
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    vm_peak = next(int(line.split()[1]) * 1024 for line in Path("/proc/self/status").read_text().splitlines()
                   if line.startswith("VmPeak:"))
    print(json.dumps({"answers": {k: [status, "zoom to" in text, text[:300]] for k, (status, text) in answers.items()},
                      "peak_rss_bytes": peak, "vm_peak_bytes": vm_peak, "fits": list(fits),
                      "rows": report.profile.num_rows("trace")}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
