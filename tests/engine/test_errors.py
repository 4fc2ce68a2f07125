"""Every clear error: one line, exit code 2, no traceback, no profile written."""

from __future__ import annotations

import pytest

from tests.engine.helpers import run_cli, write_model

CASES = {
    "ga below stages": (["mnist", "--gradient-accumulation", "4"], ["Gradient accumulation 4", "7 pipeline stages"]),
    "stages not ascending": (["mnist", "--stages", "B1@1 B2@0 B3@2 B4@3"], ["ascending"]),
    "block in no stage": (["mnist", "--stages", "B1@0 B2@1 B3@2"], ["Block B4 is in no stage"]),
    "too many ipus": (["mnist", "--replicas", "128"], ["512 IPUs"]),
    "system too small": (["mnist", "--system", "IPU-POD4", "--replicas", "2"], ["8 IPUs", "IPU-POD4"]),
    "unknown model": (["alexnet"], ["Unknown model 'alexnet'"]),
    "zero batch": (["mnist", "--batch-size", "0"], ["Micro batch size must be a positive integer"]),
    "negative device iterations": (["mnist", "--device-iterations", "-3"], ["Device iterations must be"]),
    "inference too few iterations": (["mnist", "--mode", "inference", "--device-iterations", "2"],
                                     ["Device iterations 2", "4 stages"]),
    "unknown block": (["mnist", "--stages", "B1,B9@0 B2@1 B3@2 B4@3"], ["block 'B9'"]),
    "bad preset": (["gpt", "--preset", "gpt5"], ["no preset 'gpt5'"]),
}


def _assert_clean_failure(result, profile_dir, words):
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("Error: ")
    assert "Traceback" not in result.output
    for w in words:
        assert w in lines[0]
    assert not (profile_dir / "profile.pop").exists()
    assert not profile_dir.exists() or not any(profile_dir.iterdir())


@pytest.mark.parametrize("case", list(CASES))
def test_clear_errors(tmp_path, case):
    args, words = CASES[case]
    out = tmp_path / "profile"
    result = run_cli("run", *args, "--profile", "--profile-dir", str(out), "-q")
    _assert_clean_failure(result, out, words)


@pytest.mark.parametrize("source, words", [
    ("raise RuntimeError('boom')\n", ["failed to import", "RuntimeError: boom"]),
    ("def build(options:\n", ["failed to import", "SyntaxError"]),
    ("import no_such_module_anywhere\n", ["failed to import", "ModuleNotFoundError"]),
    ("x = 1\n", ["defines no build(options)"]),
])
def test_a_user_model_file_that_fails_to_import(tmp_path, source, words):
    model = write_model(tmp_path, source, "broken.py")
    out = tmp_path / "profile"
    result = run_cli("run", model, "--profile", "--profile-dir", str(out), "-q")
    _assert_clean_failure(result, out, words)


@pytest.mark.parametrize("option, value, choices", [
    ("--arch", "mk9", "'mk1', 'mk2', 'bow'"),
    ("--strategy", "pipeline", "'pipelined', 'sharded', 'phased'"),
    ("--mode", "train", "'training', 'inference'"),
    ("--precision", "bf16", "'fp16', 'fp32'"),
    ("--optimiser", "rmsprop", "'adamw', 'adam', 'lamb', 'sgd', 'lars'"),
])
def test_a_bad_option_value_is_a_usage_error_naming_the_choices(tmp_path, option, value, choices):
    out = tmp_path / "profile"
    result = run_cli("run", "mnist", option, value, "--profile", "--profile-dir", str(out))
    assert result.exit_code == 2
    assert f"Error: Invalid value for '{option}': '{value}' is not one of {choices}." in result.output
    assert "Traceback" not in result.output
    assert not out.exists()


def test_the_python_api_names_an_unknown_architecture():
    from engine.targets import make_target
    from popvision_py.errors import ConfigError

    with pytest.raises(ConfigError, match="Unknown architecture 'mk9'; choose one of mk1, mk2, bow."):
        make_target("mk9")
