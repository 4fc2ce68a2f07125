"""`popvision_py.emulation`: the request `popvision run` states from its options, built by the library the
command calls, emulates to what the command prints."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest
from click.testing import CliRunner

from engine.runner import MAX_TRACE_ROWS, emulate
from popvision_py.cli import main
from popvision_py.emulation import parse_assumptions, parse_checkpoints, parse_proportions, run_request
from popvision_py.errors import ConfigError
from popvision_py.run_figures import emulated_figures
from popvision_py.scripts import load_script


def test_run_request_puts_each_option_where_the_engine_reads_it():
    # GIVEN the values `popvision run bert-base --layers 4 --batch-size 8 --strategy pipelined
    # --assume amp_efficiency=0.5 --max-memory-gb 2` parses into (unset options are None)
    values = {"layers": 4, "micro_batch_size": 8, "strategy": "pipelined", "recompute": None,
              "assume": ("amp_efficiency=0.5",), "max_memory_gb": 2.0}
    # WHEN the library builds the request
    request = run_request("bert-base", values)
    # THEN the model's parameter, the request's own field, the option and the assumption each have their place
    assert request.params["layers"] == 4 and request.params["preset"] is None
    assert request.strategy == "pipelined" and request.stages is None
    assert request.options == {"micro_batch_size": 8}  # None: the model's default, not an option given
    assert request.assumptions == {"amp_efficiency": 0.5}
    assert request.max_memory_bytes == 2 * 2**30 and request.max_trace_rows == MAX_TRACE_ROWS


def test_the_options_text_is_read_or_refused_in_one_sentence():
    assert parse_assumptions(["amp_efficiency=0.5", "optimiser_state_bytes_per_param.adam=12"]) == {
        "amp_efficiency": 0.5, "optimiser_state_bytes_per_param.adam": 12}
    assert parse_proportions("0.15") == 0.15 and parse_proportions("0.1,0.3") == (0.1, 0.3)
    assert parse_checkpoints(" Stage ") == "stage" and parse_checkpoints("4") == 4
    with pytest.raises(ConfigError, match=r"^--assume takes NAME=VALUE, not 'amp_efficiency'\.$"):
        parse_assumptions(["amp_efficiency"])
    with pytest.raises(ConfigError, match=r"^--available-memory-proportion takes a number or a comma list"):
        parse_proportions("0.1,x")


def test_the_request_emulates_to_what_popvision_run_prints():
    # GIVEN `popvision run mnist --batch-size 8 --device-iterations 2 --no-ranges --json`
    printed = CliRunner().invoke(main, ["run", "mnist", "--batch-size", "8", "--device-iterations", "2",
                                        "--no-ranges", "--json"], catch_exceptions=False)
    assert printed.exit_code == 0, printed.output
    # WHEN the library's request for the same options is emulated
    request = run_request("mnist", {"micro_batch_size": 8, "device_iterations": 2}, ranges=False,
                          figures=emulated_figures)
    summary = emulate(request, load_script)
    # THEN its summary is the one the command printed
    assert json.loads(json.dumps(asdict(summary))) == json.loads(printed.output)
