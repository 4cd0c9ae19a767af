"""The continuous loop never makes an unvalidated evaluator champion unless asked, and says so:
real SimpEval traces in a SQLite store, feedback whose ratings were moved between inputs (no
signal left) against the real ratings; the refit's alert is counted with the run's other alerts;
scores of an evaluator promoted with ``promote_unvalidated`` are marked unvalidated in Langfuse
(the spec-checked Langfuse test double, tests/langfuse_server.py) and on the dashboard."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from monitor_data import simpeval, write_traces
from waiting import wait_until


def _store(url, *, shuffled: bool, n=150):
    from autometrics.collectors.store import TraceStore
    from autometrics.evaluators.validity import group_permutation

    store = TraceStore(url)
    df = simpeval(n + 60, seed=3)
    lab = df.iloc[:n].copy()
    if shuffled:
        lab["score"] = lab["score"].to_numpy()[group_permutation(lab["input"].to_numpy(), np.random.default_rng(0))]
    write_traces(store, lab, project="p")
    write_traces(store, df.iloc[n:], project="p", t0_ns=9_000_000_000, feedback=False)
    return store


def _monitor(store, **over):
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig
    from autometrics.evaluators.validity import CrossFit

    cfg = MonitorConfig(target="score", project="p", settle_seconds=0, n_boot=200,
                        crossfit=CrossFit(repeats=2, permutations=99, n_boot=200), **over)
    return Monitor(store, cfg)


def test_shuffled_feedback_is_not_promoted_and_nothing_is_scored(sqlite_url):
    store = _store(sqlite_url, shuffled=True)
    mon = _monitor(store)
    out = mon.refit(force=True)
    assert out.outcome == "rejected" and out.message.startswith("not validated, so not promoted"), out
    assert [a["kind"] for a in out.alerts] == ["unvalidated"]
    assert mon.champion() is None and mon.score_new() == 0
    stored = mon.alerts()
    assert [a["kind"] for a in stored] == ["unvalidated"] and stored[0]["id"] == out.alerts[0]["id"]
    v = mon.versions(with_artifact=True)[0]
    assert v["artifact"]["validity"]["validated"] is False and v["statistics"]["validity"]["validated"] is False
    from autometrics.dashboards.render import render_dashboard

    page = render_dashboard(mon)
    assert "data-validated='false'" in page and "NOT validated and was not promoted" in page


def test_real_feedback_is_promoted_as_before(sqlite_url):
    store = _store(sqlite_url, shuffled=False)
    mon = _monitor(store)
    out = mon.refit(force=True)
    assert out.outcome == "promoted", out
    ch = mon.champion()
    assert ch["artifact"]["validity"]["validated"] is True
    assert ch["artifact"]["dataset"]["n_train"] == ch["statistics"]["n_train"]  # fitted on all of its training feedback
    assert not [a for a in out.alerts if a["kind"] == "unvalidated"]
    assert mon.score_new() == 210  # every trace, labelled or not


def test_promote_unvalidated_marks_every_score_unvalidated_in_langfuse(sqlite_url, langfuse_server):
    from autometrics.dashboards.langfuse_push import VALIDITY_NAME, LangfusePush, push_pending
    from autometrics.dashboards.render import render_dashboard

    store = _store(sqlite_url, shuffled=True)
    mon = _monitor(store, promote_unvalidated=True)
    out = mon.refit(force=True)
    assert out.outcome == "promoted" and out.message.startswith("UNVALIDATED"), out
    assert "unvalidated" in [a["kind"] for a in out.alerts]
    assert mon.score_new() == 210  # every trace, labelled or not
    pusher = LangfusePush()
    res = push_pending(mon, pusher, limit=500)
    assert res["scores"] == 210 and res["failed"] == 0
    assert pusher.flush(15)
    assert wait_until(lambda: sum(s["name"] == VALIDITY_NAME for s in langfuse_server.scores) >= 210, 15), langfuse_server.errors
    assert not langfuse_server.errors, langfuse_server.errors
    assert {s["value"] for s in langfuse_server.scores if s["name"] == VALIDITY_NAME} == {"unvalidated"}
    main = [s for s in langfuse_server.scores if s["name"] == "autometrics score"]
    assert len(main) == 210
    assert all(s["comment"].startswith("⚠ UNVALIDATED evaluator:") and s["metadata"]["validated"] is False for s in main)
    assert main[0]["metadata"]["validity"]["method"] == "cross-fit"
    pusher.shutdown(5)
    assert "data-validated='false'" in render_dashboard(mon)


def test_worker_once_counts_the_refit_alert_as_it_logs_it(sqlite_url, caplog):
    from autometrics.evaluators.continuous.worker import Worker, WorkerOptions

    store = _store(sqlite_url, shuffled=True)
    mon = _monitor(store)
    w = Worker(store, mon.cfg, WorkerOptions(jobstore=False), publishers=[])
    with caplog.at_level(logging.INFO, logger="autometrics"):
        out = w.run_once(force_refit=True)
    assert out["refit"].outcome == "rejected"
    assert [a["kind"] for a in out["alerts"]] == ["unvalidated"]
    assert any("alerts: unvalidated" in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]


@pytest.mark.parametrize("champion_validated,validated,expect", [(False, True, True), (True, False, False)])
def test_decide_rules(champion_validated, validated, expect):
    from autometrics.evaluators.continuous.refit import compare, decide

    y = np.arange(40, dtype=float)
    cmp = compare(y + np.random.default_rng(0).normal(0, 30, 40), y, y, n_boot=200)  # challenger worse than champion
    promote, why = decide(cmp, has_champion=True, validity={"validated": validated, "reason": "r"},
                          champion_validated=champion_validated)
    assert promote is expect, why
