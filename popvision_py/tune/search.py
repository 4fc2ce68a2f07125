"""The search of `popvision tune` on a Dask client: two rounds, resume, interruption.

Round 1 emulates the mappings (``Space.round_one``); round 2 the settings of the fastest mappings
that fit and of the fastest that do not (``Space.round_two``), chosen by their figures and keys,
never by the order they finished in, so the same search gives the same candidates and the same
table on any cluster. Candidates refused before emulation are rows with their reason; candidates a
previous result (``--resume``) already holds are taken from it, not emulated again. The budget
(``--max-candidates``) counts candidates to emulate; when it cuts a round, what it keeps is spread
over the round's space (``popvision_py.tune.cap``).

Every candidate is emulated without its sensitivity pass and ranked by its central estimate. Then
the candidates the text shows (``table.ranged_keys``: the top rows, the start, the Pareto front and,
when none fits, the closest that do not) are emulated once more with it (``evaluate_ranges``,
about 20 emulations each, on the same workers): their rows carry the fit verdict and the ranges.
Ranges a previous result holds are taken from it; a previous result written before ranges existed
has none, and the candidates shown are ranged now.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pandas as pd

from engine import rules
from engine.runner import RunRequest
from popvision_py.errors import ConfigError, first_line
from popvision_py.format.tunefile import write_tune
from popvision_py.tune.cap import Kept, keep_mappings, keep_settings
from popvision_py.tune.evaluate import NOT_EMULATED, NOT_RANGED, RANGE_FIELDS, evaluate, evaluate_ranges
from popvision_py.tune.space import Candidate, Space
from popvision_py.tune.table import ranged_keys, ranked

T = TypeVar("T")
RESULT_FIELDS = ("status", "reason", "samples_per_second", "seconds_per_step", "worst_tile_pct", "headroom_bytes",
                 "fits", "seconds", *RANGE_FIELDS)


def request_json(request: RunRequest) -> str:
    """A candidate's ``RunRequest`` fields as JSON, without ``profile`` and ``progress``."""
    fields = dataclasses.asdict(request)
    fields.pop("profile")
    fields.pop("progress")
    return json.dumps(fields, sort_keys=True)


def as_result(raw: dict[str, Any]) -> dict[str, Any]:
    """``evaluate``'s answer as the figures of a row."""
    worst, capacity = raw.get("worst_tile_bytes"), raw.get("bytes_per_tile")
    return {"status": raw["status"], "reason": raw["reason"], "samples_per_second": raw["samples_per_second"],
            "seconds_per_step": raw["seconds_per_step"],
            "worst_tile_pct": 100.0 * worst / capacity if worst is not None else None,
            "headroom_bytes": capacity - worst if worst is not None else None,
            "fits": bool(raw["fits"]), "seconds": float(raw["seconds"]), **NOT_RANGED}


@dataclass
class Outcome:
    """The search's rows (``tunefile.COLUMNS`` and ``evaluate.RANGE_FIELDS``), its metadata, and what happened
    (``ranged``: candidates whose ranges were computed now)."""

    rows: pd.DataFrame
    meta: dict[str, Any]
    interrupted: bool = False
    emulated: int = 0
    reused: int = 0
    ranged: int = 0


@dataclass
class Search:
    """One search of ``space`` on ``client``; ``previous`` rows (from --resume) are not emulated again. The
    ``top`` rows the table shows (``table.ranged_keys``) are ranged."""

    space: Space
    client: Any  # distributed.Client
    previous: pd.DataFrame | None = None
    on_result: Callable[[int, int, float | None], None] = lambda done, total, best: None
    top: int = 10
    range_shown: bool = True  # False: central estimates only (benchmarks/bench_tune.py times the search alone)
    done: dict[str, dict[str, Any]] = field(default_factory=dict)
    candidates: dict[str, Candidate] = field(default_factory=dict)
    emulated: int = 0
    reused: int = 0
    ranged: int = 0
    capped: int = 0
    capped_by_round: list[int] = field(default_factory=lambda: [0, 0])

    def run(self) -> Outcome:
        settings = self.space.settings
        interrupted = False
        budget = settings.max_candidates
        try:
            first = self._capped(keep_mappings(self.space.round_one(), budget), round_=1)
            self._evaluate(first.candidates, total=len(first.candidates))
            mappings = self._fastest(first.candidates)
            second = [c for c in self.space.round_two(mappings) if c.key not in self.candidates]
            second = self._capped(keep_settings(second, budget - first.emulate), round_=2)
            self._evaluate(second.candidates, total=len(first.candidates) + len(second.candidates))
            if self.range_shown:
                self._range(ranged_keys(self.rows(), self.top))
        except KeyboardInterrupt:
            interrupted = True
        meta = self.meta()
        return Outcome(self.rows(), meta, interrupted, self.emulated, self.reused, self.ranged)

    def _capped(self, kept: Kept, round_: int) -> Kept:
        """Record what the cap kept of a round (``popvision_py.tune.cap``) and what it cut."""
        self.capped += kept.cut
        self.capped_by_round[round_ - 1] += kept.cut
        for c in kept.candidates:
            self.candidates[c.key] = c
        return kept

    def _fastest(self, cands: list[Candidate]) -> list[Candidate]:
        """The ``refine`` fastest candidates that fit and the ``refine`` fastest that do not, by figures then key."""
        out = []
        for status in ("ok", "oom"):
            emulated = [c for c in cands if self.done.get(c.key, {}).get("status") == status]
            emulated.sort(key=lambda c: (-self.done[c.key]["samples_per_second"], c.key))
            out += emulated[:self.space.settings.refine]
        return out

    def _evaluate(self, cands: list[Candidate], total: int) -> None:
        previous = self.previous.set_index("key") if self.previous is not None and len(self.previous) else None
        todo = []
        for c in cands:
            if c.key in self.done:
                continue
            if previous is not None and c.key in previous.index:
                # (a result written before ranges existed reads with them null: read_tune)
                self.done[c.key] = {name: _plain(previous.at[c.key, name]) for name in RESULT_FIELDS}
                self.reused += 1
            elif c.reason:  # refused before emulation: the row evaluate gives a run the planner refuses
                self.done[c.key] = as_result({"status": "rejected", "reason": c.reason, **NOT_EMULATED, "seconds": 0.0})
            else:
                todo.append(c)
        base = total - len(cands)
        best = self.best()
        self.on_result(base + len(cands) - len(todo), total, best)
        if not todo:
            return
        futures = {self.client.submit(evaluate, request_json(self.space.request(c.config)), pure=False): c
                   for c in todo}
        finished = base + len(cands) - len(todo)
        for cand, raw in self._gathered(futures):
            self.done[cand.key] = as_result(raw)
            self.emulated += 1
            finished += 1
            if raw["status"] == "ok" and (best is None or raw["samples_per_second"] > best):
                best = raw["samples_per_second"]
            self.on_result(finished, total, best)

    def _range(self, keys: list[str]) -> None:
        """Run the sensitivity pass (``evaluate_ranges``) of the candidates ``keys`` lacking their ranges; each
        row takes the verdict and ranges (its ``seconds`` stay its central emulation's)."""
        todo = [key for key in keys if self.done[key]["fit_verdict"] is None]
        if not todo:
            return
        futures = {self.client.submit(evaluate_ranges, request_json(self.space.request(self.candidates[key].config)),
                                      pure=False): key for key in todo}
        finished, total, best = len(self.candidates), len(self.candidates) + len(todo), self.best()
        self.on_result(finished, total, best)
        for key, raw in self._gathered(futures):
            self.done[key].update({name: raw[name] for name in RANGE_FIELDS})
            self.ranged += raw["fit_verdict"] is not None
            finished += 1
            self.on_result(finished, total, best)

    def _gathered(self, futures: dict[Any, T]) -> Iterator[tuple[T, dict[str, Any]]]:
        """(what each future stands for, its task's answer) as they finish; the unfinished are cancelled when
        the caller stops (Ctrl-C)."""
        from distributed import as_completed

        try:
            for future in as_completed(futures):
                try:
                    raw = future.result()
                except Exception as exc:  # noqa: BLE001 - the task never raises: this is the cluster failing it
                    raise ConfigError(f"The Dask workers could not run popvision's task ({type(exc).__name__}: "
                                      f"{first_line(exc)}); each worker needs popvision installed (or on its "
                                      f"PYTHONPATH).") from None
                yield futures[future], raw
        finally:
            unfinished = [f for f in futures if not f.done()]
            if unfinished:
                self.client.cancel(unfinished)

    def best(self) -> float | None:
        speeds = [r["samples_per_second"] for r in self.done.values() if r["status"] == "ok"]
        return max(speeds) if speeds else None

    def rows(self) -> pd.DataFrame:
        """Every finished candidate as a row, ranked."""
        records = []
        for key, result in self.done.items():
            cand = self.candidates[key]
            request = self.space.request(cand.config)
            records.append({"key": key, **result, "rank": None, "pareto": False,
                            "ipus": rules.ipus_used(self.space.run_dict(cand)), "is_start": cand.is_start,
                            "changes": self.space.changes(cand.config), "command": self.space.command(request),
                            "request": request_json(request)})
        frame = pd.DataFrame.from_records(records, columns=[
            "key", *RESULT_FIELDS, "rank", "pareto", "ipus", "is_start", "changes", "command", "request"])
        frame["headroom_bytes"] = pd.array(frame["headroom_bytes"], dtype="Int64")
        for name in ("samples_per_second", "seconds_per_step", "worst_tile_pct", "seconds", *RANGE_FIELDS[1:]):
            frame[name] = frame[name].astype(float)
        return ranked(frame)

    def meta(self) -> dict[str, Any]:
        s = self.space.settings
        start = self.space.start
        return {"model": self.space.base.model, "system": s.system,
                "start_key": start.key, "start_command": self.space.command(self.space.request(start.config)),
                "global_batch": s.global_batch, "search": list(s.search), "max_candidates": s.max_candidates,
                "max_splits": s.max_splits, "refine": s.refine, "capped": self.capped,
                "capped_mappings": self.capped_by_round[0], "capped_settings": self.capped_by_round[1],
                "base_request": json.loads(json.dumps(dataclasses.asdict(self.space.base), default=str))}


def _plain(value: Any) -> Any:
    """A pandas cell as a plain Python value (None for missing)."""
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return None
    return value.item() if hasattr(value, "item") else value


def same_search(meta: dict[str, Any], other: dict[str, Any]) -> str | None:
    """Why a previous result's metadata belongs to another search (None if it is this one's)."""
    for name, label in (("model", "model"), ("system", "system"), ("start_key", "starting configuration"),
                        ("global_batch", "global batch")):
        if meta.get(name) != other.get(name):
            return f"its {label} is {other.get(name)!r}, this search's is {meta.get(name)!r}"
    if meta.get("base_request") != other.get("base_request"):
        # a key holds the searched settings only: other run options (optimiser, precision...) must match
        return "other run options were given"
    return None


def keep_finished(output: str, rows: pd.DataFrame, meta: dict[str, Any], previous: pd.DataFrame | None = None) -> str:
    """Write the candidates a stopped search finished (``rows``) to ``output``, with every row of the ``previous``
    result (--resume) it had not come to yet, and say how to go on from them. With none, nothing is written: a
    file already at ``output`` (an earlier search's result) is left as it was."""
    if previous is not None and len(previous):
        unseen = previous[~previous["key"].isin(rows["key"])]
        if len(unseen):
            rows = ranked(pd.concat([rows, unseen], ignore_index=True))
    if not len(rows):
        return f"Stopped before any candidate finished; {output} was not written."
    write_tune(output, rows, meta)
    return (f"Stopped with {len(rows):,} candidates finished, kept in {output}; run the same command with "
            f"--resume {output} to go on from them.")
