"""Screenshots of every dashboard page, for the README: ``python -m dashboards.screenshots PROFILE [PROFILE_B]``.

Starts the app on a free local port, opens each page in headless Chromium (selenium), waits until
its figures are drawn, and saves ``<out>/dashboard-<page>.png`` (the whole page, at 1440 px wide).
With two profiles the compare page is taken too, with ``--tune TUNE.parquet`` the What-if page.
Pages are taken for profile A.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import socket
import sys
import threading
import time
from pathlib import Path

import dash
from werkzeug.serving import make_server

from dashboards import data
from dashboards.app import any_kernels, create_app, shown

WIDTH = 1440


# Views of a page beside its default one: file name -> path with the query that opens them
# the tile map by dominant category, a tile's compute sets
VIEWS = {"memory-depth": "/memory?colour=category&tab=compute"}


def pages(comparing: bool, tuned: bool = False, kernels: bool = False) -> dict[str, str]:
    """File name (the page's module) -> path of each registered page, as the navigation lists them, then ``VIEWS``."""
    return {
        **{page["module"].rsplit(".", 1)[-1]: page["path"]
           for page in dash.page_registry.values()
           if shown(page, comparing, tuned, kernels)},
        **VIEWS,
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chrome(width: int = WIDTH, height: int = 1000):
    """A headless Chromium driver (Debian's chromium and chromedriver)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    binary = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if binary:
        options.binary_location = binary
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--disable-background-networking", "--disable-component-update", "--disable-sync",
                     "--no-first-run", "--hide-scrollbars", f"--window-size={width},{height}"):
        options.add_argument(argument)
    driver_path = shutil.which("chromedriver")
    service = Service(driver_path) if driver_path else Service()
    return webdriver.Chrome(service=service, options=options)


def wait_until_drawn(driver, timeout: float = 30.0) -> None:
    """Until the page has its content, every figure is drawn and no callback is pending."""
    deadline = time.monotonic() + timeout
    # null while anything is pending; once drawn, the boxes of the page's content and of every plot, so
    # that a layout still settling (plotly's autosize, a table filled late) shows as a change
    script = """
        const content = document.querySelector('#_pages_content');
        if (!content || !content.children.length) return null;
        if (document.querySelector('._dash-loading, ._dash-loading-callback')) return null;
        const graphs = [...document.querySelectorAll('.dash-graph')];
        if (!graphs.every(g => g.querySelector('.main-svg'))) return null;
        const box = el => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; };
        return JSON.stringify([box(content), ...[...document.querySelectorAll('.main-svg')].map(box)]);
    """
    seen, stable = None, 0
    while time.monotonic() < deadline:
        drawn = driver.execute_script(script)
        stable = stable + 1 if drawn is not None and drawn == seen else 0
        if stable == 2:  # drawn, and the same boxes three times over 0.3 s: plotly has finished laying out
            return
        seen = drawn
        time.sleep(0.15)
    raise TimeoutError("the page did not finish drawing")


def take(paths: list[str], out: Path, width: int = WIDTH, tune: str | None = None) -> list[Path]:
    """Screenshots of every page into ``out``; returns the files written."""
    app = create_app(paths, warm=True, tune=tune)
    port = _free_port()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # not a line per request on the terminal
    server = make_server("127.0.0.1", port, app.server, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    out.mkdir(parents=True, exist_ok=True)
    written = []
    driver = chrome(width)
    try:
        for name, path in pages(len(paths) == 2, tune is not None, any_kernels(data.current())).items():
            driver.set_window_size(width, 1000)
            driver.get(f"http://127.0.0.1:{port}{path}")
            wait_until_drawn(driver)
            height = driver.execute_script("return document.documentElement.scrollHeight")
            driver.set_window_size(width, min(int(height) + 20, 6000))
            time.sleep(0.6)
            wait_until_drawn(driver)
            file = out / f"dashboard-{name}.png"
            driver.save_screenshot(str(file))
            written.append(file)
    finally:
        driver.quit()
        server.shutdown()
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profiles", nargs="+", help="one profile, or two to include the compare page")
    parser.add_argument("--out", default="docs/img", help="folder for the PNG files (default docs/img)")
    parser.add_argument("--width", type=int, default=WIDTH)
    parser.add_argument("--tune", default=None, help="a tune result: the What-if page is taken too")
    args = parser.parse_args(argv)
    if len(args.profiles) > 2:
        parser.error("give one profile, or two")
    for file in take(args.profiles, Path(args.out), args.width, args.tune):
        print(file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
