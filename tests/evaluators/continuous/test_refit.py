"""Refit, champion/challenger and versions on a real SQLite store (and Postgres when available)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from monitor_data import simpeval, write_traces


def test_newest_holdout_is_newest_and_grouped():
    from autometrics.evaluators.continuous.refit import newest_holdout

    f = pd.DataFrame({"input": ["a", "a", "b", "c", "c", "d"], "feedback_ns": [1, 9, 2, 3, 4, 8]})
    train, hold = newest_holdout(f, 0.5)
    assert set(hold) == {0, 1, 5}  # groups a (newest 9) and d (8), kept whole
    assert not set(f.input[train]) & set(f.input[hold])


def test_paired_bootstrap_promotes_only_beyond_noise():
    from autometrics.evaluators.continuous.refit import compare, decide

    rng = np.random.default_rng(0)
    y = rng.normal(size=150)
    good = y + rng.normal(scale=0.5, size=150)
    bad = rng.normal(size=150)
    c = compare(good, bad, y, n_boot=300)
    assert decide(c, has_champion=True)[0] and c.ci_low > 0
    c2 = compare(good, good + rng.normal(scale=0.01, size=150), y, n_boot=300)
    ok, why = decide(c2, has_champion=True)
    assert not ok and "not better" in why
    assert decide(compare(bad, None, y, n_boot=100), has_champion=False)[0]
    small = compare(good[:8], bad[:8], y[:8], n_boot=100)
    assert decide(small, has_champion=True) == (False, "held-out feedback too small to compare (n=8 < 12)")


def test_refit_versions_champion_challenger_and_rollback(store_url):
    from autometrics.collectors.store import TraceStore
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig

    store = TraceStore(store_url)
    df = simpeval()
    mon = Monitor(store, MonitorConfig(target="score", project="p", settle_seconds=0, n_boot=200))
    assert mon.refit().outcome == "skipped"  # nothing yet
    # v1 fitted on little feedback with one weak metric (length ratio): a poor champion
    mon.cfg.metrics = ["LengthRatio"]
    write_traces(store, df.iloc[:60])
    r1 = mon.refit()
    assert r1.outcome == "rejected" and r1.message.startswith("not validated")  # too weak to be validated
    mon.cfg.promote_unvalidated = True  # the operator promotes it anyway
    r1 = mon.refit(force=True)
    assert r1.outcome == "promoted" and r1.version == 2 and r1.message.startswith("UNVALIDATED")
    mon.cfg.promote_unvalidated = False
    assert mon.refit().outcome == "skipped"  # no new feedback since v1
    # more ratings arrive (newer); the full metric set must beat that champion beyond noise
    mon.cfg.metrics = None
    write_traces(store, df.iloc[60:360], t0_ns=9_000_000_000)
    r2 = mon.refit()
    assert r2.outcome == "promoted", r2
    assert r2.statistics["holdout"]["ci_low"] > 0 and "beyond noise" in r2.message
    # same data quality again: kept as a rejected candidate with the reason
    write_traces(store, df.iloc[:40], t0_ns=20_000_000_000)
    r3 = mon.refit()
    assert r3.outcome == "rejected" and "not better than the champion" in r3.message
    vs = mon.versions()
    assert [(v["version"], v["status"]) for v in vs] == [(1, "rejected"), (2, "retired"), (3, "champion"), (4, "rejected")]
    st = vs[2]["statistics"]
    assert {"fit", "holdout", "reference_scores", "n_train", "n_holdout"} <= set(st)
    assert st["holdout"]["challenger"]["n"] == st["n_holdout"] > 0
    assert st["fit"]["test"]["tau"] is not None
    runs = mon.runs()
    assert [r["outcome"] for r in runs][:3] == ["rejected", "promoted", "skipped"]
    # rollback by hand
    mon.rollback(2)
    assert mon.champion()["version"] == 2
    assert [v["status"] for v in mon.versions()] == ["rejected", "champion", "retired", "rejected"]
    store.dispose()


def test_fit_for_refit_falls_back_without_llm_pipeline(monkeypatch, tmp_path):
    from autometrics.evaluators.continuous.refit import fit_for_refit, llm_pipeline_status

    monkeypatch.setenv("AUTOMETRICS_LOCAL_MODEL_PATH", str(tmp_path / "no-model.gguf"))  # as on a fresh machine
    ok, why = llm_pipeline_status("auto")
    assert not ok
    frame = simpeval(80)[["id", "input", "output", "score"]]
    fit = fit_for_refit(frame, "score", "Simplify", "auto", n_boot=50)
    if not ok:
        assert fit.method == "autometrics-nnls" and any("LLM pipeline not used" in n for n in fit.notes)
    assert all(not f["metric"].get("needs_reference", False) for f in fit.evaluator.features)
    assert fit_for_refit(frame, "score", None, None, n_boot=50).notes == []


def test_refit_error_is_an_outcome_not_an_exception(sqlite_url, monkeypatch):
    from autometrics.collectors.store import TraceStore
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig

    store = TraceStore(sqlite_url)
    write_traces(store, simpeval(60))
    mon = Monitor(store, MonitorConfig(target="score", project="p", n_boot=50))

    def boom(*a, **k):
        raise RuntimeError("metric exploded")

    monkeypatch.setattr("autometrics.evaluators.continuous.monitor.fit_for_refit", boom)
    out = mon.refit()
    assert out.outcome == "error" and "metric exploded" in out.message
    assert mon.alerts()[0]["kind"] == "refit_error"
    assert mon.runs()[0]["outcome"] == "error"
