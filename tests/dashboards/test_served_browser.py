"""The served dashboard in a real browser: Playwright driving Debian's Chromium against
``autometrics dashboard --serve`` (uvicorn, its own process) on a store of 10^5 scored traces.
A reader clicks from the list of projects to the overview, opens the other agreement figures,
filters the traces by user, model and label range in the form, pages, and opens a trace; every
count is checked against the store read independently with pandas."""

from __future__ import annotations

import shutil
import socket
import sqlite3
import subprocess
import sys

import pandas as pd
import pytest
from waiting import wait_for_http

pytestmark = [pytest.mark.browser, pytest.mark.slow]
EXTRA = 100_000


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    pytest.importorskip("playwright.sync_api", reason="needs playwright (the dev extra)")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        pytest.skip("chromium not installed (apt-get install chromium); .ci/run installs it")
    from dashboard_data import build_served_store

    db = tmp_path_factory.mktemp("served") / "traces.db"
    info = build_served_store(f"sqlite:///{db}", extra=EXTRA)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "autometrics._cli.main", "dashboard", "--store", f"sqlite:///{db}", "--project",
                             "p", "--target", "score", "--serve", "--port", str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    wait_for_http(f"{base}/health", proc, 60)
    if proc.poll() is not None:
        pytest.fail("the dashboard server did not start: " + proc.stdout.read()[-2000:])
    yield {"base": base, "db": db, "chromium": chromium, **info}
    proc.terminate()
    proc.wait(20)


@pytest.fixture(scope="module")
def truth(served):
    """The store as pandas sees it: per trace its champion score, user, model and newest label."""
    with sqlite3.connect(served["db"]) as conn:
        scores = pd.read_sql("SELECT trace_id, score, trace_start_ns FROM trace_scores WHERE evaluator_id = ?", conn,
                             params=(served["champion"]["id"],))
        spans = pd.read_sql("SELECT trace_id, user_id, model, input, parent_span_id FROM spans", conn)
        fb = pd.read_sql("SELECT trace_id, value, created_at_ns FROM feedback WHERE name = 'score'", conn)
    user = spans.groupby("trace_id")["user_id"].first()
    models = spans.dropna(subset=["model"]).groupby("trace_id")["model"].agg(set)
    label = fb.sort_values("created_at_ns").groupby("trace_id")["value"].last()
    root_input = spans[spans["parent_span_id"].isna()].set_index("trace_id")["input"]
    t = scores.set_index("trace_id")
    t["user"], t["models"], t["label"], t["input"] = user, models, label, root_input
    return t


def _count(page) -> str:
    return page.locator("#count b").inner_text()


def test_click_through_filter_page_and_open_a_trace(served, truth):
    from playwright.sync_api import sync_playwright

    assert len(truth) == EXTRA + 360
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=served["chromium"], args=["--no-sandbox"])
        page = browser.new_page()
        page.goto(served["base"] + "/")
        page.click("#scopes a:text('score')")
        assert page.url.endswith("/p/p/score")
        # one headline agreement figure; the others one click away
        assert page.locator(".cards > .stat").filter(has_text="Agreement with people").count() == 1
        assert not page.locator("#other-figures .stat").first.is_visible()
        page.click("#other-figures summary")
        assert page.locator("#other-figures .stat").first.is_visible()
        # a rationale's trace id opens its trace view
        page.locator("#rationales a").first.click()
        assert "/p/p/score/traces/" in page.url and page.locator("#input").inner_text().strip()

        page.click("nav a:text('traces')")
        assert _count(page) == "more than 100,000" and page.locator("#traces tr").count() == 51
        page.fill("input[name=user]", "user-3")
        page.fill("input[name=model]", "qwen2.5-7b")
        page.click("#filters button")
        assert "user=user-3" in page.url and "model=qwen2.5-7b" in page.url
        want = truth[(truth["user"] == "user-3") & truth["models"].apply(lambda m: isinstance(m, set) and "qwen2.5-7b" in m)]
        assert _count(page) == f"{len(want):,}"
        cells = page.locator("#traces tr td:nth-child(7)").all_inner_texts()
        assert cells and set(cells) == {"user-3"}
        assert set(page.locator("#traces tr td:nth-child(6)").all_inner_texts()) == {"qwen2.5-7b"}
        page.fill("input[name=label_min]", "50")
        page.click("#filters button")
        want = want[want["label"] >= 50]
        assert _count(page) == f"{len(want):,}" and 0 < len(want) < 500
        shown = [float(x) for x in page.locator("#traces tr td:nth-child(5)").all_inner_texts()]
        assert shown and min(shown) >= 50
        # the newest first, as in the store
        ids = [h.rsplit("/", 1)[1] for h in page.locator("a.trace").evaluate_all("els => els.map(e => e.getAttribute('href'))")]
        assert ids == want.sort_values("trace_start_ns", ascending=False).index[:len(ids)].tolist()
        page.click("a[rel=next]")
        assert "offset=50" in page.url and "label_min=50" in page.url
        second = page.locator("a.trace").first.get_attribute("href").rsplit("/", 1)[1]
        assert second == want.sort_values("trace_start_ns", ascending=False).index[50]
        page.locator("a.trace").first.click()
        assert page.locator("#input").inner_text().strip() == truth.loc[second, "input"].strip()
        assert page.locator(".score").count() >= 1 and "validated" in page.locator(".score").first.inner_text().lower()
        # a value the form would not send is named, not a stack trace
        resp = page.goto(served["base"] + "/p/p/score/traces?score_min=abc")
        assert resp.status == 400 and "score_min must be a number" in page.locator("#filter-error").inner_text()
        browser.close()
