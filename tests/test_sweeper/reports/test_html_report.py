"""The sweep's HTML report (`sweeper.reports.sweep_page`, `sweeper.html_report`): one file with
every section, nothing loaded from elsewhere, its data downloadable from the page itself, its
claim's μ-GDP checked against Opacus's; and, in a real headless Chromium, a page that renders,
keeps its text extractable and sends no request (the check proven by a page planted to send one).
"""

from __future__ import annotations

import base64
import html.parser
import http.server
import io
import json
import math
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pandas as pd
import pytest

from sweeper.reports.sweep_page import SECTIONS, PageInputs, claim_rows, mu_gdp, sweep_page
from testkit.report_frames import audit_table, lira_frame

#: Attributes that make a browser fetch what they name (or navigate to it on its own).
LOADING_ATTRIBUTES = {"src", "href", "xlink:href", "srcset", "poster", "data", "action",
                      "formaction", "background", "ping", "manifest", "codebase", "cite",
                      "longdesc", "lowsrc", "dynsrc", "profile", "archive", "classid", "icon"}
#: Elements that load or run something by being there.
LOADING_ELEMENTS = {"script", "iframe", "frame", "object", "embed", "link", "base", "applet",
                    "audio", "video", "source", "track", "portal"}


class PageScan(html.parser.HTMLParser):
    """What a page would load from elsewhere, and its sections, read by Python's own parser."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.sections: list[str] = []
        self.outside: list[str] = []
        self.downloads: dict[str, str] = {}
        self.csp = ""
        self._in_style = False
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        if tag == "section" and "id" in values:
            self.sections.append(values["id"])
        if tag in LOADING_ELEMENTS:
            self.outside.append(f"<{tag}> element")
        if tag == "meta" and values.get("http-equiv", "").lower() == "refresh":
            self.outside.append("<meta http-equiv=refresh>")
        if tag == "meta" and values.get("http-equiv", "").lower() == "content-security-policy":
            self.csp = values.get("content", "")
        if tag == "a" and "download" in values:
            self.downloads[values["download"]] = values.get("href", "")
        for name, value in values.items():
            if name in LOADING_ATTRIBUTES and not (value.startswith("data:") or value.startswith("#")):
                self.outside.append(f"<{tag} {name}={value[:60]!r}>")
            if name == "style":
                self.outside += css_loads(value)
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.outside += css_loads(data)
        else:
            self.text.append(data)


def css_loads(css: str) -> list[str]:
    """What CSS text would load: @import, and url() of anything but data: or an in-page #id."""
    found = [f"@import {m[:60]!r}" for m in re.findall(r"@import[^;]*", css, flags=re.I)]
    for target in re.findall(r"url\(\s*['\"]?([^)'\"]*)", css, flags=re.I):
        if not (target.startswith("data:") or target.startswith("#")):
            found.append(f"url({target[:60]!r})")
    return found


def scan(page: str) -> PageScan:
    scanner = PageScan()
    scanner.feed(page)
    scanner.close()
    return scanner


def audit_inputs(tmp_path: Path) -> PageInputs:
    """An audit sweep's page: input-canary audits of two ε, their trials' scores pooled."""
    from sweeper.reports.engine_audit import pooled_audits
    from sweeper.reports.loading import load_scores
    from sweeper.store.artifacts import ArtifactStore

    store = ArtifactStore(str(tmp_path / "store"))
    cells = audit_table(store, 0).assign(eval_records=40, members=20, baseline=0.5,
                                        violation=False, bound=0.9, epsilon_last_iterate=0.8)
    audits = pooled_audits(cells, load_scores(cells, str(tmp_path / "store")))
    return PageInputs(name="audit", cells=cells, audits=audits,
                      config={"train": {"accountant": "prv"}, "metrics": {"violation_alpha": 0.001}})


def lira_inputs() -> PageInputs:
    return PageInputs(name="lira", cells=lira_frame(),
                      config={"train": {"accountant": "rdp"}, "metrics": {"violation_alpha": 0.001}})


def test_the_page_has_every_section_and_loads_nothing_from_elsewhere(tmp_path):
    for inputs in (lira_inputs(), audit_inputs(tmp_path)):
        page = sweep_page(inputs)
        found = scan(page)
        assert found.sections == list(SECTIONS)
        assert found.outside == []
        assert "default-src 'none'" in found.csp
        assert "<svg" in page and "frontier" in page  # the figure inline, not a file beside it
        assert not re.search(r"https?://", page)  # not even a link a reader could click


@pytest.mark.parametrize("planted", [
    '<img src="https://example.org/logo.png">', '<script src="//cdn.example.org/x.js"></script>',
    '<link rel="stylesheet" href="theme.css">', "<style>@import 'fonts.css';</style>",
    '<div style="background: url(http://example.org/bg.png)"></div>',
    '<svg><image xlink:href="figure.png"/></svg>', '<img srcset="a.png 2x">',
    '<meta http-equiv="refresh" content="0; url=https://example.org">',
    '<iframe srcdoc="x"></iframe>', "<style>p{background:url('x.png')}</style>"])
def test_the_scan_catches_each_way_a_page_loads_from_elsewhere(planted):
    page = sweep_page(lira_inputs()).replace("</main>", planted + "</main>")
    assert scan(page).outside, planted


def test_the_page_holds_its_data_as_downloads(tmp_path):
    inputs = audit_inputs(tmp_path)
    downloads = scan(sweep_page(inputs)).downloads
    assert {"cells.csv", "frontier_pooled.csv", "audits_pooled.csv", "configuration.json"} <= set(downloads)

    def content(name: str) -> bytes:
        head, _, data = downloads[name].partition(",")
        assert head.startswith("data:") and head.endswith(";base64")
        return base64.b64decode(data)

    cells = pd.read_csv(io.BytesIO(content("cells.csv")))
    assert list(cells.columns) == list(inputs.cells.columns)
    assert cells["tp"].tolist() == inputs.cells["tp"].tolist()
    pooled = pd.read_csv(io.BytesIO(content("frontier_pooled.csv")))
    # two ε, one p, one attack and policy: the two trials of each pooled, ΣTP / (ΣTP + ΣFP)
    assert len(pooled) == 2 and pooled["n_trials"].tolist() == [2, 2]
    assert pooled["precision"].tolist() == pytest.approx([24 / 32, 24 / 32])
    audits = pd.read_csv(io.BytesIO(content("audits_pooled.csv")))
    assert audits["observations"].tolist() == [80, 80]  # 2 trials × 40 canaries, joined
    assert json.loads(content("configuration.json")) == inputs.config


def test_mu_gdp_is_exact_at_full_batch_and_opacus_clt_under_sampling():
    """q = 1: T Gaussian mechanisms of μ = 1/σ compose to √T/σ (by hand: 100 steps, σ = 2 →
    5).  q < 1: the central-limit μ, as Opacus's GDP accountant computes it."""
    from opacus.accountants.analysis.gdp import compute_mu_poisson

    assert mu_gdp(1.0, 100, 2.0) == (pytest.approx(5.0), True)
    for q, steps, sigma in ((0.01, 3000, 1.1), (0.1, 200, 0.8), (0.5, 10, 4.0)):
        mu, exact = mu_gdp(q, steps, sigma)
        assert not exact
        assert mu == pytest.approx(compute_mu_poisson(steps=steps, noise_multiplier=sigma,
                                                      sample_rate=q), rel=1e-12)
    assert math.isnan(mu_gdp(1.0, 100, 0.0)[0])  # no noise: no μ


def test_the_claim_says_the_sampler_accountant_and_what_each_epsilon_is(tmp_path):
    from sweeper.store.artifacts import ArtifactStore

    cells = pd.concat([audit_table(ArtifactStore(tmp_path), 0),
                       pd.DataFrame([{"epsilon": math.inf, "delta": 1e-5}])], ignore_index=True)
    rows = claim_rows(cells, {"train": {"accountant": "prv", "rate_from": "expected"}})
    assert [row["ε claimed"] for row in rows] == ["1", "4", "∞"]
    assert "Poisson" in rows[0]["sampler"] and "q = 0.1" in rows[0]["sampler"]
    assert "100 steps" in rows[0]["sampler"] and rows[0]["accountant"] == "prv"
    assert rows[0]["μ-GDP"].startswith("≈") and "CLT" in rows[0]["μ-GDP"]
    assert rows[2]["sampler"].startswith("none: non-private")
    full = claim_rows(cells.assign(dp_sample_rate=1.0).iloc[:1], {"train": {}})
    assert full[0]["μ-GDP"] == "10 (exact)"  # √100 / 1


def test_a_violation_and_a_control_that_fails_are_said_on_the_page():
    cells = lira_frame()
    flagged = cells.index[(cells["attack"] == "lira_online") & (cells["epsilon"] == 8.0)][0]
    cells.loc[flagged, ["violation", "violation_reason"]] = [True, "precision+audit_cp"]
    page = sweep_page(PageInputs(name="broken", cells=cells, config={}))
    text = " ".join(scan(page).text)
    assert "1 cell(s) prove a violation" in text
    assert "precision+audit_cp" in text
    assert "Not run: the sweep has no ε = ∞ cell" in text  # lira_frame has ε 1 and 8 only
    assert "agrees" in text  # always_member's precision is the share of members


def test_the_command_refuses_a_sweep_that_is_not_there_in_one_line(tmp_path, capsys):
    from sweeper.cli.report_command import EXIT_REFUSED, main

    assert main(["--store-root", str(tmp_path), "--experiment", "absent"]) == EXIT_REFUSED
    assert main(["--store-root", str(tmp_path), "--experiment", "../up"]) == EXIT_REFUSED
    assert main(["--store-root", str(tmp_path), "--out", str(tmp_path)]) == EXIT_REFUSED
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 3 and all(line.startswith("error: ") for line in said)
    assert "absent" in said[0] and "is a folder" in said[2]


def test_a_sweep_missing_cells_gets_its_report_saying_so_and_exit_3(tmp_path, capsys):
    from sweeper.cli.report_command import EXIT_INCOMPLETE, EXIT_OK, main
    from sweeper.store.artifacts import ArtifactStore

    ArtifactStore(str(tmp_path)).write_manifest("half", {"name": "half", "cells": ["absent"],
                                                         "config": {"report": "frontier"}})
    argv = ["--store-root", str(tmp_path), "--experiment", "half"]
    assert main(argv) == EXIT_INCOMPLETE
    assert "INCOMPLETE" in capsys.readouterr().err
    page = (tmp_path / "sweeps" / "half" / "report.html").read_text()
    assert "1 missing" in page and "the sweep is incomplete" in page
    assert main([*argv, "--allow-partial"]) == EXIT_OK


@pytest.mark.skipif(shutil.which("chromium") is None,
                    reason="chromium is not installed (apt-get install chromium; .ci/apt-packages)")
def test_a_report_in_headless_chromium_renders_its_text_and_sends_no_request(tmp_path):
    """Each page (a fixed grid's, an audit's) is opened from file:// in Chromium: its
    screenshot is written, its DOM holds every section's words, and Chromium's net log shows no
    request made by the page.  The net-log check is proven on a page planted with an image on a
    local server, whose request the server sees and the check catches."""
    served: list[str] = []

    class Recorder(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the standard library's name
            served.append(self.path)
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        planted = tmp_path / "planted.html"
        planted.write_text(f'<html><body><img src="http://127.0.0.1:{server.server_port}/x.png">'
                           "</body></html>")
        _, requests = open_in_chromium(planted, tmp_path / "planted")
        assert served and set(served) == {"/x.png"}
        assert requests and set(requests) == {f"http://127.0.0.1:{server.server_port}/x.png"}
        asked = len(served)
        for name, inputs in (("lira", lira_inputs()), ("audit", audit_inputs(tmp_path))):
            page = tmp_path / f"{name}.html"
            page.write_text(sweep_page(inputs))
            dom, requests = open_in_chromium(page, tmp_path / name)
            assert requests == []
            assert (tmp_path / name / "shot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            words = " ".join(scan(dom).text)
            for title in SECTIONS.values():
                assert title in words
            assert "attack precision = P(member | flagged)" in dom  # the SVG's text, as text
        assert len(served) == asked  # the reports asked the server nothing
    finally:
        server.shutdown()


#: Chromium on a closed network, in a profile of its own (the project's settings).
CHROMIUM = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync"]


def open_in_chromium(page: Path, folder: Path) -> tuple[str, list[str]]:
    """(the rendered DOM, the URLs the page itself requested), from Chromium's net log: a
    request the page makes names the page's origin as its initiator (a file:// page's is
    "null"); the browser's own background requests name none ("not an origin")."""
    folder.mkdir(parents=True, exist_ok=True)
    common = [*CHROMIUM, f"--log-net-log={folder / 'net.json'}", "--window-size=1400,2600"]
    subprocess.run([*common, f"--user-data-dir={folder / 'shot-profile'}",
                    f"--screenshot={folder / 'shot.png'}", page.as_uri()],
                   capture_output=True, timeout=120, check=True)
    requests = page_requests(folder / "net.json")
    dom = subprocess.run([*common, f"--user-data-dir={folder / 'dom-profile'}", "--dump-dom",
                          page.as_uri()], capture_output=True, text=True, timeout=120,
                         check=True).stdout
    return dom, requests + page_requests(folder / "net.json")


def page_requests(net_log: Path) -> list[str]:
    log = json.loads(net_log.read_text())
    start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    return [event["params"]["url"] for event in log["events"]
            if event["type"] == start and event.get("params", {}).get("url")
            and event["params"].get("initiator") != "not an origin"]
