"""A report shows what run folders say and runs none of it: every text field of a run (its folder's name, meta.json,
points.csv) set to HTML, a script, backticks and a javascript: link; report.html has no element, attribute or link
from them, and shows their text. Chromium, where it is installed, opens the page and sees no script run."""

from __future__ import annotations

import json
from html.parser import HTMLParser

import pandas as pd
import pytest
from small_report import write_run

from bench.cli import main

HOSTILE = "<img src=x onerror=alert(12)>`</code><script>alert(13)</script>[link](javascript:alert(14))"
NAME = "<img src=x onerror=alert(12)>`x`"  # a folder name: no slash


class Elements(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def _hostile_run(tmp_path):
    run = write_run(tmp_path / "runs", NAME)
    meta = json.loads((run / "meta.json").read_text())
    for key in ("cpu_model", "hostname", "machine", "threads_reason", "torch", "python", "command"):
        meta[key] = HOSTILE
    (run / "meta.json").write_text(json.dumps(meta))
    points = pd.read_csv(run / "points.csv")
    for column in ("error", "time_flag", "status"):
        points[column] = points[column].astype(object)
    points.loc[0, ["status", "error"]] = ["error", HOSTILE]
    points.loc[1, ["time_reliable", "time_flag"]] = [False, HOSTILE]
    points.to_csv(run / "points.csv", index=False)
    return run


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    _hostile_run(tmp)
    assert main(["report", "--results", str(tmp / "runs"), "--out", str(tmp / "report")]) == 0
    return tmp / "report" / "report.html"


def test_nothing_a_run_folder_says_becomes_an_element(page):
    found = Elements()
    found.feed(page.read_text())
    scripts = [attrs for tag, attrs in found.tags if tag == "script"]
    assert len(scripts) == 1  # the page's own, in its head
    assert not [(tag, a) for tag, attrs in found.tags for a in attrs if a.startswith("on")]
    assert not [attrs for tag, attrs in found.tags if tag == "img" and attrs.get("src") == "x"]
    links = [attrs.get("href", "") for tag, attrs in found.tags if tag == "a"]
    assert not [h for h in links if h.lower().startswith("javascript")]
    text = "".join(found.text)
    assert "onerror=alert(12)" in text and "alert(13)" in text  # shown, as text


def test_chromium_runs_no_script_from_a_run_folder(page):
    from test_report_browser import _missing

    reason = _missing()
    if reason:
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright
    from test_report_browser import _chromium

    dialogs = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        tab = browser.new_page()
        tab.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        tab.goto(page.as_uri())
        tab.wait_for_timeout(500)
        shown = tab.inner_text("body")
        browser.close()
    assert dialogs == [] and "onerror=alert(12)" in shown
