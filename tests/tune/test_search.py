"""`popvision tune` finds what brute force finds, and every row's request and command re-run it."""

from __future__ import annotations

import dataclasses

import itertools
import json
import shlex
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from engine.runner import RunRequest, emulate
from popvision_py.cli import main
from popvision_py.format.tunefile import read_tune
from popvision_py.tune.space import SearchSettings, Space
from tests.tune.conftest import BLOCKS, tune


def every_contiguous_split(blocks: list[str], ipus: int) -> list[str]:
    """Every split of ``blocks`` into 1..ipus contiguous stages, stage k on IPU k, as --stages text."""
    out = []
    for depth in range(1, min(ipus, len(blocks)) + 1):
        for cuts in itertools.combinations(range(1, len(blocks)), depth - 1):
            edges = [0, *cuts, len(blocks)]
            out.append(" ".join(f"{','.join(blocks[a:b])}@{k}" for k, (a, b) in enumerate(zip(edges, edges[1:]))))
    return out


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, dict, str, str]:
    """The stages-only search of the uneven model on an IPU-POD4 (one local worker)."""
    from tests.tune.conftest import UNEVEN_MODEL

    folder = tmp_path_factory.mktemp("tune")
    model = folder / "uneven.py"
    model.write_text(UNEVEN_MODEL)
    out = folder / "tune.parquet"
    result = tune(str(model), "--system", "POD4", "--search", "stages", "--workers", "1", "-q",
                  "-o", str(out), "--profile-dir", str(folder / "best"))
    assert result.exit_code == 0, result.output
    rows, meta = read_tune(out)
    return rows, meta, str(model), result.output


def test_the_best_split_is_the_one_brute_force_finds(searched) -> None:
    rows, meta, model, _ = searched
    # GIVEN every contiguous split of the five blocks over one to four IPUs, each emulated here
    # (gradient accumulation 8, the model's default, is at least 2N-1 for N <= 4)
    speeds = {}
    for stages in every_contiguous_split(BLOCKS, 4):
        s = emulate(RunRequest(model=model, options={"system": "IPU-POD4"}, strategy="pipelined", stages=stages,
                               ranges=False))
        if s.fits:
            speeds[stages] = s.samples_per_second
    assert len(speeds) == 1 + 4 + 6 + 4
    best_stages = max(speeds, key=speeds.get)
    # THEN tune emulated all fifteen (the start, one stage on IPU 0, is one of them) and its best is brute force's best
    assert (rows["status"] == "ok").sum() == 15
    best = rows[rows["rank"] == 1].iloc[0]
    assert best["samples_per_second"] == pytest.approx(speeds[best_stages], rel=1e-12)
    assert json.loads(best["key"])["stages"] == best_stages
    # AND the ranks follow the throughputs, fastest first
    ok = rows[rows["status"] == "ok"]
    assert list(ok["rank"]) == list(range(1, 16))
    assert ok["samples_per_second"].is_monotonic_decreasing
    assert sorted(ok["samples_per_second"]) == pytest.approx(sorted(speeds.values()), rel=1e-12)


def test_the_pareto_front_is_the_fastest_for_each_ipu_count_that_beats_fewer(searched) -> None:
    rows, *_ = searched
    ok = rows[rows["status"] == "ok"]
    # a row is on the front when no row on as few IPUs is as fast
    fastest = ok.groupby("ipus")["samples_per_second"].max().sort_index()
    expected = fastest[fastest > fastest.cummax().shift(fill_value=0)]
    front = ok[ok["pareto"]].set_index("ipus")["samples_per_second"].sort_index()
    assert list(front.index) == list(expected.index)
    assert list(front) == pytest.approx(list(expected))


def test_a_rows_request_and_command_run_what_the_row_says(searched) -> None:
    rows, meta, model, _ = searched
    row = rows[rows["rank"] == 2].iloc[0]
    # GIVEN the second-best row: its request re-runs it in the engine
    again = emulate(RunRequest(**json.loads(row["request"])))
    assert again.samples_per_second == row["samples_per_second"]
    # AND its command, run as `popvision run`, prints the same throughput and worst tile
    words = shlex.split(row["command"])
    assert words[:3] == ["popvision", "run", model]
    result = CliRunner().invoke(main, [*words[1:], "--json", "-q"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output)
    assert printed["samples_per_second"] == pytest.approx(row["samples_per_second"], rel=1e-12)
    assert 100 * printed["worst_tile_bytes"] / printed["bytes_per_tile"] == pytest.approx(row["worst_tile_pct"])
    # AND its changes are the flags that differ from the start's command
    assert row["changes"] == f"--stages {shlex.quote(json.loads(row['key'])['stages'])}"


def test_the_output_names_the_best_its_command_its_profile_and_the_compare(searched) -> None:
    rows, meta, model, output = searched
    best = rows[rows["rank"] == 1].iloc[0]
    assert best["command"] in output
    assert Path(meta["best_profile"]).is_file() and Path(meta["start_profile"]).is_file()
    assert f"Best profile:   {meta['best_profile']}" in output
    assert "Best against the start (popvision compare):" in output and "throughput_samples_per_s" in output
    start = rows[rows["is_start"]].iloc[0]
    assert meta["start_command"] == start["command"]
    assert json.loads(start["key"])["stages"] == "B0..B4@0"


def test_the_memory_estimate_never_exceeds_what_the_emulator_plans() -> None:
    # GIVEN bert-large's mappings on an IPU-POD16 that the estimate lets through
    # (round 1's mappings, and round 2's settings of the one- and two-IPU mappings, optimiser on chip among them)
    space = Space(RunRequest(model="bert-large"), SearchSettings(system="IPU-POD16"))
    first = space.round_one()
    narrow = [c for c in first if len(c.config["stages"].split()) <= 2 and c.config["replication_factor"] <= 2]
    cands = first + space.round_two(narrow[:4])
    kept = [c for c in cands if not c.reason]
    refused = [c for c in cands if c.reason.startswith("IPU ")]
    assert refused, "the lower bound prunes something on bert-large"
    # WHEN a spread of them is emulated (every 25th, across depths, shards, replicas and settings)
    for cand in kept[::25]:
        summary = emulate(dataclasses.replace(space.request(cand.config), ranges=False))
        estimate = space.ipu_bytes(cand)
        # THEN the estimate of every IPU's bytes is at most the emulator's peak on that IPU (a lower bound)
        peaks = summary.peak_bytes_per_ipu
        assert len(peaks) >= len(estimate)
        assert all(e <= p for e, p in zip(estimate, peaks)), (cand.key, list(estimate), peaks)


def test_a_global_batch_fixes_samples_per_update_and_the_planner_refuses_short_pipelines(uneven: str,
                                                                                           tmp_path: Path) -> None:
    out = tmp_path / "tune.parquet"
    # GIVEN a search of splits, replicas and micro-batches that keeps 64 samples per weight update
    result = tune(uneven, "--system", "POD4", "--search", "stages,replicas,batch", "--global-batch", "64",
                  "--refine", "1", "--workers", "1", "-q", "--no-profile", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert "Global batch 64 samples per weight update." in result.output
    rows, meta = read_tune(out)
    requests = rows[rows["status"] != "rejected"]["request"].map(json.loads)
    # THEN every candidate runs micro-batch x accumulation x replicas = 64, the start too (the model's
    # micro-batch 16 and accumulation 8 make 128: the start accumulates 4 instead, so "vs start" compares
    # like with like)
    samples = requests.map(lambda r: r["options"]["micro_batch_size"] * r["options"]["gradient_accumulation"]
                           * r["options"]["replication_factor"])
    assert set(samples) == {64}
    start = json.loads(rows.loc[rows["is_start"], "request"].iloc[0])["options"]
    assert (start["micro_batch_size"], start["gradient_accumulation"]) == (16, 4)
    assert {r["options"]["micro_batch_size"] for r in requests} >= {8, 16}
    # AND a 4-IPU pipeline at micro-batch 16 (accumulation 64 / 16 = 4, under 2 x 4 - 1 = 7) is refused by
    # the planner's rule, with its sentence, and never emulated
    short = rows[rows["reason"].str.startswith("Gradient accumulation 4 is below the 7 pipeline stages of a 4-stage")]
    assert len(short) and (short["status"] == "rejected").all() and short["samples_per_second"].isna().all()
    assert (short["seconds"] == 0).all()
    assert short["worst_tile_pct"].isna().all() and short["headroom_bytes"].isna().all() and not short["fits"].any()
    assert short["rank"].isna().all() and not short["pareto"].any()


def test_phased_execution_where_the_weights_cannot_fit_on_chip() -> None:
    # GIVEN GPT-3 2.7B (5.4 GB of FP16 weights; an IPU has 0.94 GB of tile memory), its splits over an IPU-POD16
    space = Space(RunRequest(model="gpt", params={"preset": "gpt3-2.7b", "ipus": 4}),
                  SearchSettings(system="IPU-POD16", search=("stages", "phased")))
    model = space.plan.model
    params = {b: 0 for b in model.blocks}
    for op in model.ops:
        params[op.block] += op.params
    capacity = 1472 * 638_976
    for cand in space.round_one()[1:]:
        # THEN a split is phased exactly when some IPU's own weights (2 bytes a parameter) exceed its memory
        held = [2 * sum(params[b] for b in s["blocks"]) for s in cand.stages]
        assert (cand.config["strategy"] == "phased") == (max(held) > capacity), cand.key
    # AND both kinds are there: shallow splits phased, deep ones (8 and 16 IPUs) pipelined, none refused
    kinds = {c.config["strategy"] for c in space.round_one()[1:] if not c.reason}
    assert kinds == {"phased", "pipelined"}


def test_a_candidate_that_fails_is_a_row_with_its_reason_and_json_prints_every_row(tmp_path: Path) -> None:
    from tests.tune.conftest import UNEVEN_MODEL

    # GIVEN a model whose build fails at micro-batch 32 (one of the batches searched around 16)
    model = tmp_path / "picky.py"
    model.write_text(UNEVEN_MODEL.replace("    m = Model(", "    if options.micro_batch_size == 32:\n"
                                          "        raise ValueError('no room for 32')\n    m = Model(", 1))
    out = tmp_path / "tune.parquet"
    result = tune(str(model), "--system", "POD4", "--search", "batch", "--workers", "1", "-q", "--no-profile",
                  "--json", "-o", str(out))
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output)
    rows, meta = read_tune(out)
    # THEN the search finished: micro-batches 8 and 16 ran, 32 is a row with the build's sentence
    assert len(printed["rows"]) == len(rows) == 3
    failed = rows[rows["key"].map(lambda k: json.loads(k)["micro_batch_size"] == 32)].iloc[0]
    assert failed["status"] == "rejected"
    assert failed["reason"] == "Model picky's build() failed: ValueError: no room for 32"
    assert pd.isna(failed["rank"]) and not failed["fits"]
    assert sorted(rows["status"]) == ["ok", "ok", "rejected"]
    # AND --json prints the same rows and metadata as the file holds
    assert [r["key"] for r in printed["rows"]] == list(rows["key"])
    assert printed["meta"]["model"] == meta["model"] == str(model)


@pytest.mark.slow
def test_bert_large_on_a_pod4_beats_or_matches_the_zoos_default_mapping(tmp_path: Path) -> None:
    out = tmp_path / "tune.parquet"
    # GIVEN the mapping search of bert-large on an IPU-POD4 (issue 15's check, on a smaller system)
    result = tune("bert-large", "--system", "POD4", "--search", "stages,sharding,replicas", "--workers", "2", "-q",
                  "--no-profile", "--top", "1", "-o", str(out))
    assert result.exit_code == 0, result.output
    rows, meta = read_tune(out)
    # THEN the start row is the zoo's default mapping, with the figures `popvision run bert-large` has
    default = emulate(RunRequest(model="bert-large", options={"system": "IPU-POD4"}, ranges=False))
    start = rows[rows["is_start"]].iloc[0]
    assert start["samples_per_second"] == default.samples_per_second
    assert start["worst_tile_pct"] == pytest.approx(100 * default.worst_tile_bytes / default.bytes_per_tile)
    # AND the best row fits and is at least as fast
    best = rows[rows["rank"] == 1].iloc[0]
    assert best["fits"] and best["status"] == "ok"
    assert best["samples_per_second"] >= default.samples_per_second
    assert best["command"] in result.output


def test_the_table_shows_each_rows_global_batch_when_they_differ(uneven, tmp_path) -> None:
    # GIVEN a search over micro-batch and accumulation without a fixed global batch
    result = tune(uneven, "--system", "POD4", "--search", "batch", "--workers", "1", "-q", "--no-profile",
                  "-o", str(tmp_path / "tune.parquet"))
    assert result.exit_code == 0, result.output
    # THEN the table says the batches differ, and each shown row's batch column is its command's
    # micro-batch x gradient accumulation x replicas
    assert "Candidates train with different global batches" in result.output
    table = result.output.split("\n\n")[1].splitlines()
    header = table[0]
    assert header.split()[:11] == ["rank", "samples/s", "range", "of", "samples/s", "vs", "start", "fits", "worst",
                                   "tile", "headroom"]
    # the columns are right-aligned under their headers: the batch is what ends where "batch" does
    batch_end = header.index("batch") + len("batch")
    commands = {line.split()[0]: shlex.split(line.split(None, 1)[1]) for line in
                result.output.split("Commands:\n")[1].split("\n\n")[0].splitlines()}
    assert len(table[1:-1]) >= 2  # at least two rows, or no two batches could differ
    for line in table[1:-1]:
        words = line.split()
        label = "start" if words[0] == "-" else "#" + words[0].rstrip("*")  # the start may rank
        argv = commands[label]
        value = {flag: int(argv[argv.index(flag) + 1]) for flag in ("--batch-size", "--gradient-accumulation",
                                                                   "--replicas")}
        batch = line[:batch_end].split()[-1]
        global_batch = value["--batch-size"] * value["--gradient-accumulation"] * value["--replicas"]
        assert int(batch.replace(",", "")) == global_batch
    rows, _ = read_tune(tmp_path / "tune.parquet")
    assert rows["changes"].str.contains("--batch-size").any()


@pytest.mark.parametrize("args, sentence", [
    (["--global-batch", "7"], "--global-batch 7 is not a multiple of the start's samples per step, micro-batch 40 x "
                              "1 replica(s) = 40; give a multiple of 40, or a --batch-size or --replicas "
                              "that divides 7."),
    (["--global-batch", "80"], "At --global-batch 80 the start would accumulate 2 micro-batches: Gradient accumulation "
                               "2 is below the 7 pipeline stages of a 4-stage training pipeline (2N-1 for N=4). Give a "
                               "larger --global-batch, or a start that runs at this one (--batch-size, --stages)."),
    (["--global-batch", "800", "--mode", "inference"],
     "--global-batch is samples per weight update, and mnist runs inference (no weight update); leave it out."),
], ids=["not-a-multiple", "too-few-for-the-pipeline", "inference"])
def test_a_global_batch_the_start_cannot_run_is_one_sentence(args: list[str], sentence: str, tmp_path: Path) -> None:
    # GIVEN mnist's start (micro-batch 40, 1 replica, a 4-stage pipeline); WHEN a search asks for a global
    # batch the start cannot train with
    out = tmp_path / "tune.parquet"
    result = tune("mnist", "--system", "POD4", *args, "--workers", "1", "-q", "--no-profile", "-o", str(out))
    # THEN one sentence says what to change, before any candidate is emulated or anything written
    assert (result.exit_code, result.output) == (2, f"Error: {sentence}\n")
    assert not out.exists()


def test_round_two_moves_each_cut_of_a_fast_mapping_by_one_block_where_round_one_could_not_try_every_split() -> None:
    from engine.zoo import balanced_stages

    # GIVEN bert-large (26 blocks): C(25, 3) = 2,300 four-stage splits, far over --max-splits 32, so round 1
    # tries the memory-aware split and not its neighbours
    space = Space(RunRequest(model="bert-large"), SearchSettings(system="IPU-POD16", search=("stages",)))
    aware = [len(s.blocks) for s in balanced_stages(space.plan.model, 4, "pipelined", memory_aware=True).stages]
    edges = list(itertools.accumulate(aware))[:-1]  # its three cuts

    def cuts(cand) -> tuple[int, ...]:
        return tuple(itertools.accumulate(len(s["blocks"]) for s in cand.stages))[:-1]

    first = [c for c in space.round_one() if len(c.stages) == 4 and [s["ipu"] for s in c.stages] == [0, 1, 2, 3]]
    mapping = next(c for c in first if cuts(c) == tuple(edges))
    neighbours = {tuple(e + step if k == j else e for j, e in enumerate(edges)) for k in range(3) for step in (-1, 1)}
    assert not neighbours & {cuts(c) for c in first}
    # WHEN round 2 refines that mapping
    second = space.round_two([mapping])
    # THEN it tries each of the six splits with one cut moved a block, at the mapping's settings, on IPUs 0..3
    moved = [c for c in second if c.config["stages"] != mapping.config["stages"]]
    assert {cuts(c) for c in moved} == neighbours
    for c in moved:
        assert [s["ipu"] for s in c.stages] == [0, 1, 2, 3]
        same = {k: v for k, v in c.config.items() if k != "stages"}
        assert same == {k: v for k, v in mapping.config.items() if k != "stages"}
