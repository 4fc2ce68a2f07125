"""Fixtures of the dashboard tests: sample profiles, apps, and headless Chromium for ``dash_duo``.

The browser tests run with the plain ``pytest`` command: ``pytest_configure`` turns on Dash's
``--headless`` option and ``pytest_setup_options`` hands selenium Debian's Chromium. Without a
Chromium and chromedriver on the machine, the tests marked ``browser`` are skipped, saying why.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests import synthetic

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
CHROMEDRIVER = shutil.which("chromedriver")
SAMPLES = Path(__file__).resolve().parents[2] / "sample_profiles"


def pytest_configure(config: pytest.Config) -> None:
    # The equivalent of `--webdriver Chrome --headless` on every run.
    config.option.webdriver = "Chrome"
    config.option.headless = True


def pytest_setup_options():
    from selenium.webdriver.chrome.options import Options

    options = Options()
    if CHROMIUM:
        options.binary_location = CHROMIUM
    for argument in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        # The machine has no network: keep Chromium from trying.
        "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
        "--window-size=1400,1000",
    ):
        options.add_argument(argument)
    return options


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if CHROMIUM and CHROMEDRIVER:
        return
    if os.environ.get("CI"):
        # `make test` installs them; in CI a skip would hide a broken install.
        raise pytest.UsageError("CI needs chromium and chromedriver for the browser tests "
                                "(apt-get install chromium chromium-driver).")
    skip = pytest.mark.skip(reason="needs chromium and chromedriver (apt-get install chromium chromium-driver)")
    for item in items:
        if "browser" in item.keywords:
            item.add_marker(skip)


# Chromium logs an object handed to console.error as "Object" (Dash's renderer logs each callback's error so): the
# page's console.error writes each object's text instead (an Error's name, message and stack; anything else as
# JSON), so that a test failing on console errors says what they were.
READABLE_CONSOLE_ERRORS = """
(() => {
  const error = console.error.bind(console);
  const text = (value) => {
    if (value instanceof Error) return `${value.name}: ${value.message}\\n${value.stack}`;
    if (value && typeof value === "object") {
      try { return JSON.stringify(value).slice(0, 4000); } catch (e) { return String(value); }
    }
    return value;
  };
  console.error = (...values) => error(...values.map(text));
})();
"""


@pytest.fixture(autouse=True)
def readable_console_errors(request: pytest.FixtureRequest) -> None:
    """A browser test's console errors logged with their text (``READABLE_CONSOLE_ERRORS``), on every page it opens."""
    if "dash_duo" in request.fixturenames:
        driver = request.getfixturevalue("dash_duo").driver
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": READABLE_CONSOLE_ERRORS})


@pytest.fixture(scope="session")
def profiles_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dashboard-profiles")


# The shape every dashboard profile shares: blocks of 100, 60, 40 and 120 forward cycles in two stages
# of two blocks, 6 micro-batches, 2 iterations, 64 tiles of 2,000 bytes, a 50-cycle exchange between
# the stages and 5-cycle syncs.
SHAPE = dict(fwd_cycles=[100, 60, 40, 120], stages=[2, 2], micro_batches=6, iterations=2, tiles_per_ipu=64,
             bytes_per_tile=2000, exchange_bytes=8000, exchange_cycles=50, sync_cycles=5)


@pytest.fixture(scope="session")
def pipelined_profile(profiles_dir: Path) -> Path:
    """A two-stage pipelined training run with host, inter-IPU and remote-buffer traffic."""
    return synthetic.write_pipeline_profile(profiles_dir / "pipelined.pop", **SHAPE, host_bytes=1000, host_cycles=20,
                                            remote_bytes=4000, remote_cycles=30)


@pytest.fixture(scope="session")
def oom_profile(profiles_dir: Path) -> Path:
    """The same shape, with IPU 0 over capacity (out-of-memory tiles to mark and click)."""
    return synthetic.write_pipeline_profile(profiles_dir / "oom.pop", **SHAPE, weight_bytes=[90000, 20000, 400, 400],
                                            optimiser_bytes=[20000, 0, 0, 0])


@pytest.fixture(scope="session")
def sharded_profile(profiles_dir: Path) -> Path:
    """The pipelined run's model, sharded: one IPU busy at a time."""
    return synthetic.write_pipeline_profile(profiles_dir / "sharded.pop", **SHAPE, strategy="sharded")


@pytest.fixture()
def app(oom_profile: Path):
    """The dashboard on the out-of-memory run, its fixes checked by the planner's rules as `popvision dashboard`'s."""
    from dashboards.app import create_app
    from engine import rules

    return create_app([str(oom_profile)], planner=rules)


@pytest.fixture()
def compare_app(pipelined_profile: Path, sharded_profile: Path):
    from dashboards.app import create_app
    from engine import rules

    return create_app([str(pipelined_profile), str(sharded_profile)], planner=rules)


@pytest.fixture(scope="session")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A real tune result (mnist candidates emulated for real, tests/tunefiles.py) and a real mnist profile."""
    from tests.engine.helpers import run_cli
    from tests.tunefiles import write_mnist_tune

    folder = tmp_path_factory.mktemp("whatif")
    write_mnist_tune(folder / "tune.parquet")
    result = run_cli("run", "mnist", "--profile", "--profile-dir", str(folder / "p"), "-q",
                     "--input", "synthetic")
    assert result.exit_code == 0, result.output
    return {"tune": folder / "tune.parquet", "profile": folder / "p" / "profile.pop"}


@pytest.fixture()
def whatif_app(made: dict[str, Path], tmp_path: Path):
    """The dashboard on ``made``'s profile and tune result, emulating candidates into ``tmp_path``."""
    from dashboards.app import create_app
    from engine import rules
    from popvision_py.emulation import run_fields

    return create_app([str(made["profile"])], tune=str(made["tune"]), runner=run_fields, planner=rules,
                      emulated_dir=str(tmp_path / "emulated"))
