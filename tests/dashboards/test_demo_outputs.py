"""What `autometrics demo --no-llm` shows a newcomer (issue #28): which data each τ of the champion is
computed on, and a static dashboard whose time axis, drift histogram, header and counts read right."""

from __future__ import annotations

import re

import pytest


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    import contextlib
    import io

    from autometrics.collectors.store import TraceStore
    from autometrics.demo import DEMO_PROJECT, TARGET, run_demo
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig

    out = tmp_path_factory.mktemp("demo")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        summary = run_demo(out / "autometrics-demo", no_llm=True, n_boot=200)
    store = TraceStore(f"sqlite:///{summary['store']}")
    mon = Monitor(store, MonitorConfig(target=TARGET, project=DEMO_PROJECT))
    yield printed.getvalue(), (out / "autometrics-demo" / "dashboard.html").read_text(), mon, summary
    store.dispose()


def test_the_terminal_says_which_data_each_tau_is_computed_on(demo):
    printed, _, mon, _ = demo
    ch = mon.champion()
    st = ch["statistics"]
    line = next(x for x in printed.splitlines() if "by the data each is computed on" in x)
    fit, hold = st["fit"]["test"], st["holdout"]["challenger"]
    assert f"{fit['tau']:.3f} cross-fitted on the {st['n_train']} older feedback points v{ch['version']} was fitted on" in line
    assert f"{hold['tau']:.3f} on the {hold['n']} newest points held out at refit #1" in line
    # every τ the demo printed about the champion is explained on that line
    for tau in re.findall(r"(?:τ|tau) (\d\.\d{3})", printed.split("champion v", 1)[1].split("\nthe τ of", 1)[0]):
        assert tau in line


def test_dashboard_header_counts_and_time_axis(demo):
    _, page, mon, summary = demo
    ch = mon.champion()
    st = ch["statistics"]
    assert "TraceStore(" not in page and f"store sqlite:///{summary['store']}" in page
    card = re.search(r"id='champion'>.*?</div></div>", page, flags=re.S).group(0)
    assert (f"on the {st['n_train']} older of {ch['n_feedback']} feedback points; the newest {st['n_holdout']} held out"
            in card)
    assert f">{st['n_train']} / {st['n_holdout']}<" in page  # the versions table, the same numbers
    ticks = re.findall(r'class="tick"[^>]*>([^<]+)<', page)
    assert len(ticks) >= 2 and len(set(ticks)) == len(ticks), ticks


def test_drift_histogram_compares_disjoint_windows_on_an_axis(demo):
    _, page, mon, _ = demo
    ch = mon.champion()
    drift = ch["statistics"]["drift"]
    ref = drift["reference"]
    scores = mon.store.scores_frame(ch["id"], columns=["trace_start_ns", "score"])
    after = int((scores["trace_start_ns"].astype(float) > float(ref["last_ns"])).sum())
    n_cur = min(after, mon.cfg.drift_window)
    assert 0 < n_cur < ref["n"]  # in the demo: fewer scores after the reference than in it
    assert f"the first online scores after the fit&#x27;s data (n={ref['n']})" in page
    assert f"online scores after the reference (n={n_cur})" in page
    assert f"({n_cur}/{mon.cfg.drift_window} scores after the reference)" in page  # the drift check's own count
    hist = page[page.index("aria-label=\"score distribution"):]
    hist = hist[:hist.index("</svg>")]
    axis = [int(v) for v in re.findall(r'class="ytick"[^>]*>(\d+)%<', hist)]  # the share axis, 0% up
    assert len(axis) == 5 and axis[0] == 0 and axis == sorted(set(axis))
    assert "share of the window" in hist and re.search(rf"<title>\d+ of {n_cur} scores in \[", hist)


@pytest.mark.parametrize(("span_s", "pattern"), [
    (1.5, r"\d\d:\d\d:\d\d\.\d{3}"), (2.4, r"\d\d:\d\d:\d\d"), (3 * 3600, r"\d\d:\d\d"), (1.5 * 86_400, r"\d\d-\d\d \d\d:\d\d"),
    (20 * 86_400, r"\d{4}-\d\d-\d\d"),
])
def test_time_ticks_are_distinct_in_a_format_for_their_span(span_s, pattern):
    from autometrics.dashboards.render import _time_ticks

    t0 = 1_796_542_000_000_000_000
    ticks, day = _time_ticks(t0, t0 + span_s * 1e9)
    labels = [lab for _, lab in ticks]
    assert len(labels) == 3 and len(set(labels)) == 3 and all(re.fullmatch(pattern, lab) for lab in labels), labels
    assert (day == "") == ("-" in labels[0])  # the day is said once, in the caption, when the ticks leave it out
