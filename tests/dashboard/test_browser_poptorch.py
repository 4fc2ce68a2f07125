"""The dashboard on a profile a PopTorch program wrote (popvision's poptorch): every page draws in a real
Chromium with no console error."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.dashboard.test_browser import PAGES, errors, wait_for_figures

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # six pages in Chromium: about 15 s


@pytest.fixture(scope="module")
def poptorch_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-block model (IPUs 0 and 1 by BeginBlock) trained for one call, its profile asked for by
    Options.enableProfiling: DIR/training/profile.pop."""
    import poptorch

    class TwoBlocks(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = poptorch.BeginBlock(torch.nn.Linear(16, 16), "a", ipu_id=0)
            self.b = poptorch.BeginBlock(torch.nn.Linear(16, 4), "b", ipu_id=1)

        def forward(self, x, labels):
            out = self.b(torch.relu(self.a(x)))
            return out, torch.nn.functional.cross_entropy(out, labels)

    folder = tmp_path_factory.mktemp("poptorch")
    opts = poptorch.Options().deviceIterations(2).enableProfiling(str(folder))
    opts.Training.gradientAccumulation(3)
    model = TwoBlocks()
    poptorch.trainingModel(model, opts)(torch.randn(24, 16), torch.randint(0, 4, (24,)))
    return folder / "training" / "profile.pop"


def test_every_page_draws_a_poptorch_profile_without_console_errors(dash_duo, poptorch_profile: Path) -> None:
    from dashboards.app import create_app

    dash_duo.start_server(create_app([str(poptorch_profile)]))
    for path, graphs in PAGES.items():
        dash_duo.wait_for_page(url=f"{dash_duo.server_url}{path}")
        wait_for_figures(dash_duo, graphs)
        assert errors(dash_duo) == [], path
