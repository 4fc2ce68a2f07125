# The README's two commands: `make demo` (the main job) and `make test` (the whole suite).
# Both install what they need into ./.venv first; `make test` also installs Debian's Chromium
# and ChromeDriver for the real-browser dashboard tests when they are missing.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PROFILE_DIR ?= profile
MODEL  ?= mnist

.PHONY: demo test install browser samples bench clean test-matrix smoke-oldest

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "torch==2.13.0"  # the CPU wheel, before the extras ask for torch
	$(BIN)/python -m pip install --quiet -e ".[test,torch]"
	touch $(STAMP)

install: $(STAMP)

browser:
	@if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then :; else \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium chromium-driver; fi

# Run a model with --profile, export the reports, then serve the dashboard (Ctrl-C stops it).
demo: install
	$(BIN)/popvision run $(MODEL) --profile --profile-dir $(PROFILE_DIR)
	$(BIN)/popvision report $(PROFILE_DIR)/profile.pop
	$(BIN)/popvision report $(PROFILE_DIR)/profile.pop --format html -o report.html
	$(BIN)/popvision dashboard $(PROFILE_DIR)/profile.pop

test: install browser
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n 2 --dist loadgroup --durations=25  # the 25 slowest tests, to keep the suite short

# The test matrix (docs/development.md, "Test matrix"): the suite on the oldest and the newest Python the
# package supports, each with the lowest versions pyproject.toml declares (constraints-lowest.txt) and with
# the day's newest, every one in its own .venvs/ENV. No torch in these (off the CPU wheel torch is gigabytes
# of CUDA): its tests skip. The browser tests run where chromium and chromedriver are installed.
PYENV_ROOT ?= $(HOME)/.pyenv
PYTHON_OLDEST ?= $(or $(lastword $(sort $(wildcard $(PYENV_ROOT)/versions/3.10.*/bin/python))),python3.10)
PYTHON_NEWEST ?= $(or $(lastword $(sort $(wildcard $(PYENV_ROOT)/versions/3.13.*/bin/python))),python3.13)
PYTHON_py310 := $(PYTHON_OLDEST)
PYTHON_py313 := $(PYTHON_NEWEST)
MATRIX ?= py310-lowest py310-newest py313-lowest py313-newest
# pip runs on every call: the lowest stay where the constraints pin them, the newest move to the day's releases
PIP_lowest := -c constraints-lowest.txt
PIP_newest := --upgrade --upgrade-strategy eager

.PRECIOUS: .venvs/%/bin/python  # an environment, not a by-product of the rule chain

.venvs/%/bin/python:
	$(PYTHON_$(firstword $(subst -, ,$*))) -m venv .venvs/$*
	.venvs/$*/bin/python -m pip install --quiet --upgrade pip

matrix-install-%: .venvs/%/bin/python
	.venvs/$*/bin/python -m pip install --quiet $(PIP_$(lastword $(subst -, ,$*))) -e ".[test]"
	.venvs/$*/bin/python -m pip check

# Each environment's summary goes to .venvs/ENV/summary.txt and the full output to .venvs/ENV/pytest.log;
# the table at the end is what docs/development.md records.
test-matrix: $(MATRIX:%=matrix-install-%)
	@status=0; for env in $(MATRIX); do \
	  echo "== $$env: $$(.venvs/$$env/bin/python tests/versions.py)"; \
	  .venvs/$$env/bin/python -m pytest -n 2 --dist loadgroup -q -p no:cacheprovider > .venvs/$$env/pytest.log 2>&1 || status=1; \
	  tail -n 1 .venvs/$$env/pytest.log | tee .venvs/$$env/summary.txt; \
	done; \
	echo; echo "test matrix, $$(date -u +%Y-%m-%d):"; \
	for env in $(MATRIX); do echo "  $$env  $$(.venvs/$$env/bin/python tests/versions.py)  $$(cat .venvs/$$env/summary.txt)"; done; \
	exit $$status

# CI's smoke of the oldest combination: Python 3.10 with the lowest declared versions runs every command
# (tests/smoke.py) and the tests of the format, the reader and the CLI's report and sql.
SMOKE_TESTS := tests/test_declared_versions.py tests/test_format.py tests/test_cli_report.py tests/test_sql.py tests/analysis/test_programs.py \
               tests/engine/test_scale.py::test_the_emulator_does_not_import_pandas
smoke-oldest: matrix-install-py310-lowest
	rm -rf .venvs/py310-lowest/smoke
	.venvs/py310-lowest/bin/python tests/versions.py
	.venvs/py310-lowest/bin/python tests/smoke.py .venvs/py310-lowest/smoke
	.venvs/py310-lowest/bin/python -m pytest -n 2 --dist loadgroup -q -p no:cacheprovider $(SMOKE_TESTS)

samples: install
	$(BIN)/python sample_profiles/regenerate.py

clean:
	rm -rf $(VENV) .venvs $(PROFILE_DIR) report.html .pytest_cache
