"""How long each dashboard page takes to draw in a real browser, and how tall it is.

Usage::

    .venv/bin/python benchmarks/bench_pages.py PROFILE OUT [page ...]

Starts the dashboard on PROFILE (after its warm-up, as ``popvision dashboard`` serves), opens each page (or
the pages named: ``memory``, ``liveness``, ...) in headless Chromium until its figures are drawn
(``dashboards.screenshots.wait_until_drawn``, at most 240 s), and prints the time, the page's height in
pixels and its console errors; a screenshot of each goes to OUT. A page the browser cannot draw in time is
said so, and the next one opened.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from werkzeug.serving import make_server  # noqa: E402

from dashboards import data  # noqa: E402
from dashboards import screenshots as s  # noqa: E402
from dashboards.app import any_kernels, create_app  # noqa: E402

WAIT_S = 240
WIDTH = 1280  # the window of the figures in docs/performance.md


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", help="the profile.pop to open")
    parser.add_argument("out", type=Path, help="folder for the screenshots")
    parser.add_argument("pages", nargs="*", help="the pages to open (default: every one)")
    args = parser.parse_args(argv)
    start = time.monotonic()
    app = create_app([args.profile], warm=True)
    print(f"warm-up {time.monotonic() - start:.1f} s", flush=True)
    port = s._free_port()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = make_server("127.0.0.1", port, app.server, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        for name, path in s.pages(False, False, any_kernels(data.current())).items():
            if args.pages and name not in args.pages:
                continue
            print(_visit(port, name, path, args.out), flush=True)
    finally:
        server.shutdown()
    return 0


def _visit(port: int, name: str, path: str, out: Path) -> str:
    """One page opened until drawn: its time, height and console errors, its screenshot saved."""
    driver = s.chrome(WIDTH)
    driver.set_page_load_timeout(WAIT_S)
    driver.set_script_timeout(WAIT_S)
    start = time.monotonic()
    try:
        driver.get(f"http://127.0.0.1:{port}{path}")
        s.wait_until_drawn(driver, WAIT_S)
        drawn = time.monotonic() - start
        height = int(driver.execute_script("return document.documentElement.scrollHeight"))
        driver.set_window_size(WIDTH, min(height + 20, 8000))
        time.sleep(0.6)  # the resized window's figures redrawn before the screenshot
        driver.save_screenshot(str(out / f"{name}.png"))
        logs = [e["message"][:200] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        return f"{name}: drawn in {drawn:.1f} s, {height:,} px tall, {len(logs)} console errors {logs[:2]}"
    except Exception as error:  # a page the browser cannot draw: said, and the next one opened
        return (f"{name}: not drawn after {time.monotonic() - start:.1f} s: {type(error).__name__} "
                f"{(str(error).splitlines() or [''])[0][:200]}")
    finally:
        driver.quit()


if __name__ == "__main__":
    sys.exit(main())
