"""Screenshots of a sweep in MLflow's UI, and of the docs site, taken by a real headless
browser, for the docs.

    python docs/screenshots.py --store-root /tmp/demo_store [--sweep quickstart]
    python docs/screenshots.py --docs-site
    python docs/screenshots.py --report runs/sweeps/quickstart/report.html

Serves the store's `mlflow.db` with the light `mlflow ui` a sweep prints (`ui_command`) on a free
loopback port, opens it in Chromium (Debian's `chromium`) driven by Playwright (`pip install
-e '.[screenshots]'`), and writes `docs/mlflow_*.png`: the experiments list after one click on
the experiment (once the browser is in model-training mode: MLflow 3.17 starts a new browser in
GenAI mode, and only its own switch or a URL changes that), the sweep's URL as printed (the
chart view on the frontier), the runs table of the same view, and the printed URL as a first
visit sees it in a 1400-px window (a new browser: MLflow's Assistant panel opens by itself
beside the frontier's card).

`--report` writes the top of a sweep's `report.html`, rendered by Chromium from file://, to
`docs/figures/report_<sweep>.png`.

`--docs-site` builds this checkout's docs site (`mkdocs build --strict`), serves it on a free
loopback port and writes `docs/docs_site_api.png` (the API reference) with Chromium's own
`--screenshot` (no Playwright).  Not the search: its index loads in a web worker, which
Chromium's virtual time (what lets `--screenshot` wait for scripts) never runs.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

DOCS = Path(__file__).resolve().parent
CHROMIUM = "/usr/bin/chromium"
#: Chromium on a closed network: no background connections, no sandbox as root.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1500, "height": 900}
#: A first visit's window (`mlflow_frontier_card.png`): the width the card must be read at.
ARRIVAL_VIEWPORT = {"width": 1400, "height": 900}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def serve(uri: str, port: int) -> subprocess.Popen:
    from sweeper.tracking.ui import ui_command

    argv = shlex.split(ui_command(uri, port))
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return server
        except OSError:
            time.sleep(0.5)
    os.killpg(server.pid, signal.SIGKILL)  # the CLI and its uvicorn
    raise SystemExit(f"mlflow ui did not answer on port {port} within 90 s")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python docs/screenshots.py", description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--store-root", help="a store.root a sweep ran into")
    where.add_argument("--docs-site", action="store_true",
                       help="screenshot the docs site's API page instead")
    where.add_argument("--report", metavar="REPORT_HTML",
                       help="screenshot a sweep's report.html (its top, 1400 px wide) into "
                            "docs/figures/report_<sweep>.png instead")
    parser.add_argument("--sweep", default="quickstart", help="the sweep's name (default: quickstart)")
    parser.add_argument("--out", default=str(DOCS), help="where the PNGs go (default: docs/)")
    parser.add_argument("--experiment", default="sweeper",
                        help="the MLflow experiment (tracking.experiment; default: sweeper)")
    args = parser.parse_args()
    if args.docs_site:
        for path in docs_site_screenshots(Path(args.out)):
            print(path)
        return 0
    if args.report:
        print(report_screenshot(Path(args.report), DOCS / "figures"))
        return 0
    from mlflow import MlflowClient
    from playwright.sync_api import sync_playwright

    from sweeper.tracking.ui import experiment_page, experiment_url

    store = Path(args.store_root).resolve()
    uri = f"sqlite:///{store / 'mlflow.db'}"
    experiment = MlflowClient(uri).get_experiment_by_name(args.experiment)
    if experiment is None:
        raise SystemExit(f"{uri} has no experiment {args.experiment!r}")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    printed = experiment_url(uri, experiment_page(experiment.experiment_id, args.sweep), port)
    out = Path(args.out)
    server = serve(uri, port)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport=VIEWPORT)
            # The one switch a new browser needs (kept per browser and host:port), then the click.
            page.goto(f"{base}/#/experiments")
            page.wait_for_timeout(3000)
            assistant = page.get_by_role("button", name="Close")  # MLflow's chat panel
            if assistant.count():
                assistant.last.click()
            page.get_by_text("Model training", exact=True).first.click()
            page.get_by_role("link", name="sweeper", exact=True).first.click()
            page.wait_for_timeout(4000)
            page.screenshot(path=str(out / "mlflow_experiment_click.png"))
            page.goto(printed)
            page.wait_for_timeout(8000)
            page.screenshot(path=str(out / "mlflow_frontier_charts.png"))
            page.goto(printed.replace("compareRunsMode=CHART", "compareRunsMode=TABLE"))
            page.wait_for_timeout(5000)
            name_cell = page.locator("[role=row]", has_text=args.sweep).first.locator(
                "[col-id='attributes.`Run Name`'] button")
            name_cell.first.click()  # expands the sweep's run: its cell runs
            page.wait_for_timeout(2000)
            page.screenshot(path=str(out / "mlflow_runs_table.png"))
            # As a user arrives: a new browser, the printed URL, MLflow's Assistant panel
            # opening by itself beside the card (MLflow 3.17, a UI on 127.0.0.1), 1400 px wide.
            arrival = browser.new_context(viewport=ARRIVAL_VIEWPORT).new_page()
            arrival.goto(printed)
            arrival.wait_for_timeout(10000)
            arrival.screenshot(path=str(out / "mlflow_frontier_card.png"))
            browser.close()
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the CLI and its uvicorn
        server.wait(timeout=30)
    for name in ("mlflow_experiment_click.png", "mlflow_frontier_charts.png",
                 "mlflow_frontier_card.png", "mlflow_runs_table.png"):
        print(out / name)
    return 0


def report_screenshot(report: Path, out: Path) -> Path:
    """The top of a sweep's report.html as Chromium renders it from file://, in a fresh
    profile: `report_<sweep>.png` (the sweep: the report's folder's name)."""
    import tempfile

    path = out / f"report_{report.resolve().parent.name}.png"
    with tempfile.TemporaryDirectory(prefix="sweeper-report-") as profile:
        subprocess.run([CHROMIUM, "--headless", *CHROMIUM_ARGS, f"--user-data-dir={profile}",
                        "--hide-scrollbars", f"--screenshot={path}", "--window-size=1400,1800",
                        report.resolve().as_uri()], check=True, timeout=120, capture_output=True)
    return path


#: The docs site's pages to screenshot: file name → path and query on the site.
SITE_PAGES = {"docs_site_api.png": "api/"}


def docs_site_screenshots(out: Path) -> list[Path]:
    """Build the docs site, serve it on 127.0.0.1 only, and screenshot `SITE_PAGES` in a
    fresh headless Chromium profile each."""
    import functools
    import tempfile
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:  # no request log on the terminal
            pass

    written = []
    with tempfile.TemporaryDirectory(prefix="sweeper-docs-") as scratch:
        site = Path(scratch) / "site"
        subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                        "--site-dir", str(site)], cwd=DOCS.parent, check=True, timeout=300,
                       env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
        server = ThreadingHTTPServer(("127.0.0.1", 0),
                                     functools.partial(Quiet, directory=str(site)))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            for name, page in SITE_PAGES.items():
                profile = Path(tempfile.mkdtemp(dir=scratch, prefix="chromium-"))
                url = f"http://127.0.0.1:{server.server_port}/{page}"
                subprocess.run([CHROMIUM, "--headless", *CHROMIUM_ARGS, f"--user-data-dir={profile}",
                                "--virtual-time-budget=5000", f"--screenshot={out / name}",
                                "--window-size=1400,1000", url],
                               check=True, timeout=120, capture_output=True)
                written.append(out / name)
        finally:
            server.shutdown()
            server.server_close()
    return written


if __name__ == "__main__":
    sys.exit(main())
