# The README's two commands: `make demo` (the main job) and `make test` (the whole suite).
# Both install what they need into ./.venv first; `make test` also installs Debian's Chromium
# and ChromeDriver for the real-browser dashboard tests when they are missing.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PROFILE_DIR ?= profile
MODEL  ?= mnist

.PHONY: demo test install browser samples bench clean

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
	@echo "Wrote report.html. Opening the dashboard on http://127.0.0.1:8050 ..."
	$(BIN)/popvision dashboard $(PROFILE_DIR)/profile.pop

test: install browser
	$(BIN)/python -m pytest -n 2 --dist loadgroup

samples: install
	$(BIN)/python sample_profiles/regenerate.py

clean:
	rm -rf $(VENV) $(PROFILE_DIR) report.html .pytest_cache
