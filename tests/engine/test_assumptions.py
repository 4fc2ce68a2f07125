"""--assume: every assumption has a valid range, per-optimiser ones take NAME.OPTIMISER=VALUE, and
every bad value is one sentence with exit code 2 (issue 11, item 11)."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from engine.targets import Assumptions, make_target
from popvision_py.cli import main
from popvision_py.errors import ConfigError
from popvision_py.format import open_profile

# mnist's four weighted layers, weights + biases: conv 1->10 k5, conv 10->20 k5, linear 320->256, 256->10
MNIST_PARAMS = (1 * 25 * 10 + 10) + (10 * 25 * 20 + 20) + (320 * 256 + 256) + (256 * 10 + 10)  # 90,026
NAMES = [f.name for f in dataclasses.fields(Assumptions)]
EMULATOR_MD = Path(__file__).resolve().parents[2] / "docs" / "emulator.md"


def _run(*args: str):
    # catch_exceptions=False: a traceback fails the test rather than hiding in result.exception
    return CliRunner().invoke(main, ["run", *args], catch_exceptions=False)


def _one_sentence(result, profile_dir: Path) -> str:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ") and lines[0].endswith(".")
    assert "Traceback" not in result.output
    assert not (profile_dir / "profile.pop").exists()
    return lines[0]


BAD = {
    # dict-valued assumptions crashed with "TypeError: 'int' object is not subscriptable"
    "state for all optimisers negative": ("optimiser_state_bytes_per_param=-4",
                                          ["optimiser_state_bytes_per_param.adamw=-4", "a whole number in [0, 1,024]",
                                           "bytes per parameter"]),
    "one optimiser's flops negative": ("optimiser_flops_per_param.sgd=-1",
                                       ["optimiser_flops_per_param.sgd=-1", "a whole number in [0, 1,024]"]),
    "unknown optimiser": ("optimiser_state_bytes_per_param.adagrad=12",
                          ["no optimiser 'adagrad'", "adamw, adam, lamb, sgd"]),
    "per-optimiser key on a scalar": ("amp_efficiency.adam=0.5", ["amp_efficiency is one figure",
                                                                  "amp_efficiency=VALUE"]),
    # divided by zero
    "exchange bandwidth 0": ("exchange_bytes_per_cycle_per_tile=0",
                             ["exchange_bytes_per_cycle_per_tile=0", ">= 0.01", "bytes per cycle per tile"]),
    # was accepted and made runs faster
    "negative efficiency": ("amp_efficiency=-1",
                            ["amp_efficiency=-1", "in [0.001, 1]", "share of the planned AMP rate"]),
    "efficiency above 1": ("amp_efficiency=1.5", ["amp_efficiency=1.5", "in [0.001, 1]"]),
    "negative cycles": ("tile_sync_cycles=-30", ["tile_sync_cycles=-30", "a whole number in [0, 1,000,000,000]"]),
    "fractional cycles": ("exchange_latency_cycles=60.5", ["exchange_latency_cycles=60.5", "a whole number"]),
    "bytes beyond a billion": ("stack_bytes_per_tile=1e12", ["stack_bytes_per_tile=1000000000000.0",
                                                             "[0, 1,000,000,000]", "(bytes)"]),
    "infinite": ("host_call_latency_s=1e999", ["host_call_latency_s=inf", "in [0, 1]", "(seconds)"]),
    "not a number": ("amp_efficiency=abc", ["--assume amp_efficiency", "'abc' is not a number"]),
    "no equals sign": ("amp_efficiency", ["--assume takes NAME=VALUE"]),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_assumption_is_one_sentence_naming_it(tmp_path, case):
    # GIVEN a value outside the assumption's range (or a malformed --assume)
    assume, words = BAD[case]
    out = tmp_path / "profile"
    # WHEN the run is asked for
    result = _run("mnist", "--assume", assume, "--profile", "--profile-dir", str(out), "-q")
    # THEN one line on stderr names the assumption, the value and the valid range; exit 2; nothing written
    line = _one_sentence(result, out)
    for w in words:
        assert w in line, line


def test_an_unknown_assumption_lists_every_valid_name(tmp_path):
    line = _one_sentence(_run("mnist", "--assume", "amp_eficiency=0.5", "-q"), tmp_path)
    assert "Unknown assumption 'amp_eficiency'" in line
    listed = line.split("the assumptions are ", 1)[1].rstrip(".").split(", ")
    assert listed == sorted(NAMES) and len(listed) == len(dataclasses.fields(Assumptions))


@pytest.mark.parametrize("stages", ["", "   ", ";"])
def test_an_empty_stages_option_is_one_sentence(tmp_path, stages):
    # it used to be ignored: the run went ahead on the default partition
    line = _one_sentence(_run("mnist", "--stages", stages, "-q"), tmp_path)
    assert "--stages is empty" in line


def _optimiser_figures(tmp_path: Path, name: str, *args: str) -> tuple[int, int]:
    """(always-live optimiser_state bytes, update FLOPs) of an mnist training profile."""
    out = tmp_path / name
    result = _run("mnist", "--profile", "--profile-dir", str(out), "-q", *args)
    assert result.exit_code == 0, result.output
    with open_profile(out / "profile.pop") as p:
        memory, ops = p.read_pandas("tile_memory"), p.read_pandas("ops")
    state = memory[(memory["category"].astype(str) == "optimiser_state") & memory["always_live"]]["bytes"].sum()
    update = ops[ops["pass"].astype(str) == "update"]["flops"].sum()
    return int(state), int(update)


def test_a_per_optimiser_override_changes_that_optimisers_state_by_params_times_the_delta(tmp_path):
    # GIVEN mnist with Adam: two FP32 moments, 8 bytes of state per parameter, 10 FLOP per update
    default = _optimiser_figures(tmp_path, "default", "--optimiser", "adam")
    assert default == (8 * MNIST_PARAMS, 10 * MNIST_PARAMS)
    # WHEN Adam's state is set to 12 bytes per parameter
    adam12 = _optimiser_figures(tmp_path, "adam12", "--optimiser", "adam",
                                "--assume", "optimiser_state_bytes_per_param.adam=12")
    # THEN the optimiser state grows by parameters x 4 bytes; the update's FLOPs do not move
    assert adam12[0] - default[0] == MNIST_PARAMS * (12 - 8) == 360_104
    assert adam12[1] == default[1]
    # AND another optimiser's value leaves an Adam run alone
    assert _optimiser_figures(tmp_path, "sgd2", "--optimiser", "adam",
                              "--assume", "optimiser_state_bytes_per_param.sgd=2") == default
    # AND NAME=VALUE sets every optimiser's, Adam's among them
    assert _optimiser_figures(tmp_path, "all6", "--optimiser", "adam",
                              "--assume", "optimiser_state_bytes_per_param=6")[0] == 6 * MNIST_PARAMS


def test_a_per_optimiser_flops_override_changes_the_update_flops(tmp_path):
    # GIVEN SGD's 3 FLOP per parameter, WHEN set to 7, THEN the updates' FLOPs are parameters x 7
    sgd = _optimiser_figures(tmp_path, "sgd", "--optimiser", "sgd")
    sgd7 = _optimiser_figures(tmp_path, "sgd7", "--optimiser", "sgd", "--assume", "optimiser_flops_per_param.sgd=7")
    assert sgd == (4 * MNIST_PARAMS, 3 * MNIST_PARAMS)
    assert sgd7 == (4 * MNIST_PARAMS, 7 * MNIST_PARAMS)


def test_python_takes_the_same_per_optimiser_keys():
    target = make_target("mk2", 1)
    one = target.with_assumptions(**{"optimiser_state_bytes_per_param.adam": 12})
    assert one.assumptions.optimiser_state_bytes_per_param == {"adamw": 8, "adam": 12, "lamb": 8, "sgd": 4, "lars": 4}
    # optimiser names are case-insensitive, as --optimiser is
    assert target.with_assumptions(**{"optimiser_state_bytes_per_param.ADAM": 12}).assumptions == one.assumptions
    some = target.with_assumptions(optimiser_flops_per_param={"lamb": 20, "sgd": 5})
    assert some.assumptions.optimiser_flops_per_param == {"adamw": 12, "adam": 10, "lamb": 20, "sgd": 5, "lars": 8}
    # the defaults are untouched (each Assumptions holds its own dicts)
    assert target.assumptions.optimiser_state_bytes_per_param["adam"] == 8
    with pytest.raises(ConfigError, match=r"amp_efficiency=-1 is out of range"):
        Assumptions(amp_efficiency=-1)
    with pytest.raises(ConfigError, match=r"optimiser_state_bytes_per_param has no value for optimiser sgd"):
        Assumptions(optimiser_state_bytes_per_param={"adamw": 8, "adam": 8, "lamb": 8, "lars": 4})


def test_a_whole_number_written_as_a_float_is_taken_as_that_number(tmp_path):
    # 1e2 is 100, the default: the run is the one of the default, and the manifest records the int 100
    out = tmp_path / "p"
    # (with a data loader that keeps up: mnist's default is host-bound, which would hide the exchange)
    fast_host = ("--input", "synthetic")
    result = _run("mnist", "--assume", "exchange_latency_cycles=1e2", *fast_host, "--json", "-q", "--profile",
                  "--profile-dir", str(out))
    assert result.exit_code == 0, result.output
    default = json.loads(_run("mnist", *fast_host, "--json", "-q").stdout)
    summary = json.loads(result.stdout)
    # 10 device iterations per call: the call's 15 ms latency (19,950,000 cycles) over them, plus the IPUs' work
    assert summary["cycles_per_step"] == default["cycles_per_step"] == 2_396_136
    with open_profile(out / "profile.pop") as p:
        value = p.manifest["target"]["assumptions"]["exchange_latency_cycles"]
    assert value == 100 and isinstance(value, int)


@pytest.mark.parametrize("name", NAMES)
def test_each_range_admits_its_bounds_and_rejects_what_lies_beyond(name):
    # GIVEN the range the assumption declares
    field = {f.name: f for f in dataclasses.fields(Assumptions)}[name]
    valid = field.metadata["range"]
    key = f"{name}.adam" if field.metadata.get("per_optimiser") else name
    base = Assumptions()
    # THEN its ends are accepted (as given; whole numbers as int)
    for end in (valid.low, valid.high):
        if math.isfinite(end):
            updated = base.updated({key: end})
            got = getattr(updated, name)
            assert (got["adam"] if isinstance(got, dict) else got) == end
    # AND a value just below the low end, and just above a finite high end, is one sentence
    below = valid.low - (1 if valid.whole else valid.low / 2 or 0.5)
    outside = [below] + ([valid.high + 1] if math.isfinite(valid.high) else []) + [math.nan]
    for value in outside:
        with pytest.raises(ConfigError, match=rf"^Assumption {re.escape(key)}=\S+ is out of range: it must be "
                                              rf"{re.escape(valid.text())} \("):
            base.updated({key: value})


def test_the_docs_table_gives_each_assumptions_range():
    # GIVEN docs/emulator.md's table of assumptions: one row per assumption
    text = EMULATOR_MD.read_text()
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `(\w+)(?:\.\w+)?` \|.*$", text, flags=re.M)}
    for f in dataclasses.fields(Assumptions):
        # THEN its row names the range and the unit the code declares
        assert f.name in rows, f"docs/emulator.md has no row for {f.name}"
        assert f"{f.metadata['range'].text()} ({f.metadata['unit']})" in rows[f.name], rows[f.name]


def test_every_assumption_at_its_slowest_end_still_runs_within_int64(tmp_path):
    # GIVEN every assumption at the end of its range that makes a run slowest and biggest at once
    fields = dataclasses.fields(Assumptions)
    dividing = r"per_s$|per_s_per_core$|per_cycle|efficiency|share|cores_per"
    divides = {f.name for f in fields if re.search(dividing, f.name)}
    slowest = [f"{f.name}={f.metadata['range'].low if f.name in divides else f.metadata['range'].high}"
               for f in fields]
    args = [a for s in slowest for a in ("--assume", s)]
    # WHEN the biggest zoo run is emulated (gpt3-175b: p=8 x t=8 x r=4 on an IPU-POD256)
    result = _run("gpt", "--preset", "gpt3-175b", "--json", "-q", "--no-ranges", *args)
    # THEN it runs, and its step time is a positive count of cycles below 2**63
    assert result.exit_code == 0, result.output
    cycles = json.loads(result.stdout)["cycles_per_step"]
    assert 0 < cycles < 2**63
