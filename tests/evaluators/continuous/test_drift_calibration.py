"""Calibrated drift detection: PSI on discrete scores, permutation tests, the window state
machine (reference, non-overlapping windows, persistence), validity decay with both CIs, and the
monitor's alerts (what changed, how much, since when, what to do).  The full calibration is
measured by tests/benchmarks/drift_calibration.py; here it is asserted loosely, in seconds."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from monitor_data import simpeval, write_traces

LEVELS = np.array([0.4123456789, 0.5391267812, 0.6111111119])  # a support bot answering in three styles
MIX = [0.3, 0.4, 0.3]


def _stream(ref, windows):
    s = np.concatenate([ref, *windows])
    return np.arange(1, len(s) + 1), s


# ------------------------------------------------------------------ PSI on discrete data
def test_psi_bins_follow_the_distinct_values_of_lumpy_scores():
    from autometrics.evaluators.continuous.drift import psi, psi_bins

    rng = np.random.default_rng(0)
    ref, cur = rng.choice(LEVELS, 200, p=MIX), rng.choice(LEVELS, 200, p=MIX)
    assert psi_bins(ref, cur) == [LEVELS[0], LEVELS[1], np.inf]  # one bin per level, never a level split
    assert psi(ref, cur) < 0.05  # unchanged: about (3 - 1) * (1/200 + 1/200) by chance
    assert psi(ref, cur + 1e-13) == pytest.approx(psi(ref, cur))  # float noise does not split a level
    moved = rng.choice(LEVELS, 200, p=[0.6, 0.3, 0.1])
    assert psi(ref, moved) > 0.25
    # a level missing from one window: smoothing keeps the PSI finite
    assert np.isfinite(psi(ref, np.full(200, LEVELS[1])))


def test_psi_bins_on_mixed_and_continuous_scores():
    from autometrics.evaluators.continuous.drift import MIN_EXPECTED, psi, psi_bins

    rng = np.random.default_rng(1)
    a, b = rng.normal(size=400), rng.normal(size=400)
    assert len(psi_bins(a, b)) == 10 and psi(a, b) < 0.1 and psi(a, rng.normal(2, 1, 400)) > 1
    # half the mass on one value plus a continuous part: that value is one bin, the rest equal-mass bins
    lumpy = np.where(rng.random(400) < 0.5, 3.0, rng.normal(3, 1, 400))
    edges = psi_bins(lumpy[:200], lumpy[200:])
    assert 3.0 in edges and len(edges) >= 5
    # each bin holds at least MIN_EXPECTED expected scores of the smaller window
    small = rng.normal(size=30)
    edges = np.array(psi_bins(a, small))
    counts = np.bincount(np.searchsorted(edges, np.concatenate([a, small])), minlength=len(edges))
    assert counts.min() * 30 / 430 >= MIN_EXPECTED


def test_psi_chance_level_grows_as_windows_shrink():
    from autometrics.evaluators.continuous.drift import score_drift

    rng = np.random.default_rng(2)
    big = score_drift(rng.normal(size=400), rng.normal(size=400), permutations=199)
    small = score_drift(rng.normal(size=40), rng.normal(size=40), permutations=199)
    # about (bins - 1) * (1/n_ref + 1/n_cur): 9 * 2/400 = 0.045 vs 6 bins (>= 5 expected each) * 2/40 = 0.25
    assert 0.02 < big["psi_null"] < 0.08 and 0.12 < small["psi_null"] < 0.4
    assert not small["alert"] and small["psi_excess"] < small["psi"]


# ------------------------------------------------------------------ calibration, loosely
def test_null_windows_rarely_alarm_and_clear_shifts_do(simpeval_pool):
    """50 checks of unchanged traffic (continuous and lumpy scores): false alarms <= 10 %; a
    single window is significant at about its level; truncated outputs are found >= 80 %."""
    from autometrics.evaluators.continuous.drift import DriftThresholds, drift_windows

    scores, truncated = simpeval_pool
    th = DriftThresholds()
    rng = np.random.default_rng(3)
    for pool in (scores, LEVELS[rng.choice(3, 1000, p=MIX)]):
        alerts = single = 0
        for i in range(50):
            t, s = _stream(rng.choice(pool, 200), [rng.choice(pool, 200), rng.choice(pool, 200)])
            st = drift_windows(t, s, since_ns=0, reference_window=200, window=200, thresholds=th, seed=i, permutations=199)
            alerts += st["alert"]
            single += st["windows"][0]["alert"]
        assert alerts <= 5 and single <= 5, (alerts, single)
    found = 0
    for i in range(20):
        t, s = _stream(rng.choice(scores, 200), [rng.choice(truncated, 200), rng.choice(truncated, 200)])
        found += drift_windows(t, s, since_ns=0, reference_window=200, window=200, thresholds=th, seed=i,
                               permutations=199)["alert"]
    assert found >= 16


def test_lumpy_traffic_that_moved_between_levels_is_found():
    """Mass moving between the three levels (a new model version that deflects more) is what
    PSI sees; the min-p combination keeps the level of the single test."""
    from autometrics.evaluators.continuous.drift import score_drift

    rng = np.random.default_rng(4)
    hits = [score_drift(rng.choice(LEVELS, 200, p=MIX), rng.choice(LEVELS, 200, p=[0.6, 0.3, 0.1]), seed=i,
                        permutations=199)["alert"] for i in range(20)]
    assert sum(hits) >= 16
    d = score_drift(rng.choice(LEVELS, 200, p=MIX), rng.choice(LEVELS, 200, p=[0.6, 0.3, 0.1]), permutations=199)
    assert d["p_value"] >= min(d["p_ks"], d["p_psi"]) and d["bins"] == 3


@pytest.fixture(scope="module")
def simpeval_pool():
    """An LLM-free evaluator fitted on 40 % of SimpEval's inputs; its scores on the rest, as is
    and with every output cut to its first half (the built-in copy: no shared folder needed)."""
    from autometrics.evaluators.continuous.refit import fit_for_refit, holdout_predictions

    df = simpeval()
    inputs = df["input"].unique()
    fit_rows = df[df["input"].isin(inputs[: int(0.4 * len(inputs))])]
    pool = df[~df["input"].isin(fit_rows["input"])]
    ev = fit_for_refit(fit_rows[["id", "input", "output", "score"]], "score", None, n_boot=0).evaluator
    cut = pool.assign(output=pool["output"].map(lambda x: " ".join(str(x).split()[: max(1, len(str(x).split()) // 2)])))
    return holdout_predictions(ev, pool), holdout_predictions(ev, cut)


# ------------------------------------------------------------------ the window state machine
def test_windows_reference_persistence_and_since_when():
    from autometrics.evaluators.continuous.drift import DriftThresholds, drift_windows

    rng = np.random.default_rng(5)
    th = DriftThresholds()
    kw = {"since_ns": 1000, "reference_window": 100, "window": 50, "thresholds": th, "permutations": 199}
    before = np.arange(1, 40)  # traces the fit used (started before since_ns): never in the reference
    t = np.concatenate([before, 1000 + np.arange(1, 81)])
    s = np.concatenate([np.full(len(before), 99.0), rng.normal(size=80)])
    st = drift_windows(t, s, **kw)
    assert st["state"].startswith("collecting reference (80/100") and not st["alert"]
    t = np.concatenate([t, 1080 + np.arange(1, 61)])
    s = np.concatenate([s, rng.normal(size=60)])
    st = drift_windows(t, s, previous=st, **kw)
    assert st["reference"]["n"] == 100 and st["reference"]["first_ns"] == 1001 and st["reference"]["last_ns"] == 1100
    assert st["n_windows"] == 0 and st["state"].startswith("waiting for a window (40/50")
    # shifted traffic: one significant window is not an alert, two in a row are
    t = np.concatenate([t, 1140 + np.arange(1, 11)])
    s = np.concatenate([s, rng.normal(3, 1, 10)])
    st1 = drift_windows(t, s, previous=st, **kw)
    assert st1["n_windows"] == 1 and st1["windows"][0]["first_ns"] == 1101 and st1["windows"][0]["last_ns"] == 1150
    assert st1["windows"][0]["alert"] and not st1["alert"]  # 40 unchanged + 10 far off: significant, but once
    t = np.concatenate([t, 1150 + np.arange(1, 101)])
    s = np.concatenate([s, rng.normal(3, 1, 100)])
    st2 = drift_windows(t, s, previous=st1, **kw)
    assert [w["index"] for w in st2["windows"]] == [1, 2, 3] and st2["windows"][1]["first_ns"] == 1151  # no overlap
    assert st2["alert"] and st2["run"] == [1, 2, 3] and st2["since_ns"] == 1101
    again = drift_windows(t, s, previous=st2, **kw)  # same data: nothing new is tested, the verdict stands
    assert again["n_windows"] == 3 and again["alert"] and again["windows"] == st2["windows"]
    # the reference is frozen: dropping old scores (retention) does not move it
    keep = t > 1060
    pruned = drift_windows(t[keep], s[keep], previous=st2, **kw)
    assert pruned["reference"] == st2["reference"] and pruned["n_windows"] == 3
    # other thresholds: only the newest `persistence` windows are tested again
    other = drift_windows(t, s, previous=st2, **{**kw, "thresholds": DriftThresholds(psi_alert=50)})
    assert other["n_windows"] == 2 and not other["alert"] and other["skipped_windows"] == 1


def test_a_backlog_is_tested_up_to_a_bound_and_a_gap_breaks_a_run():
    from autometrics.evaluators.continuous.drift import drift_windows

    rng = np.random.default_rng(6)
    t, s = _stream(rng.normal(size=50), [rng.normal(3, 1, 30) for _ in range(6)])
    st = drift_windows(t, s, since_ns=0, reference_window=50, window=30, permutations=199, max_new_windows=3)
    assert st["skipped_windows"] == 3 and [w["index"] for w in st["windows"]] == [1, 2, 3]
    assert st["windows"][0]["after_gap"] and st["alert"] and st["run"] == [1, 2, 3]


# ------------------------------------------------------------------ validity decay
def test_validity_decay_uses_both_cis_and_finds_a_label_quality_drop():
    from autometrics.evaluators.continuous.drift import fit_agreement, validity_decay
    from autometrics.evaluators.stats import agreement

    rng = np.random.default_rng(7)

    def window(n, noise_share=0.0):
        x = rng.normal(size=n)
        y = x + rng.normal(scale=1.0, size=n)  # tau about 0.5
        bad = rng.random(n) < noise_share
        y[bad] = rng.normal(scale=1.4, size=int(bad.sum()))  # careless raters: labels unrelated to the output
        return x, y

    null = drops = 0
    for i in range(20):
        fx, fy = window(120)
        fit = agreement(fx, fy, n_boot=100, seed=i).to_dict()
        x, y = window(120)
        null += validity_decay(x, y, fit["tau"], fit=fit, n_boot=100, seed=i)["level"] == "alert"
        x, y = window(120, noise_share=0.5)
        vd = validity_decay(x, y, fit["tau"], fit=fit, n_boot=100, seed=i)
        drops += vd["level"] == "alert"
    assert null <= 2 and drops >= 16, (null, drops)
    assert vd["p_drop"] is not None and vd["z"] is not None and vd["fit"]["ci_low"] is not None
    # two held-out measurements pool into a narrower fit-time CI; one without a CI is left out
    a = {"tau": 0.5, "ci_low": 0.4, "ci_high": 0.6, "n": 100}
    b = {"tau": 0.4, "ci_low": 0.3, "ci_high": 0.5, "n": 100}
    f = fit_agreement(("holdout", a), ("test split", b), ("no ci", {"tau": 0.9, "n": 5}))
    assert f["tau"] == pytest.approx(0.45) and f["ci_high"] - f["ci_low"] < 0.2 and f["n"] == 200
    assert f["sources"] == ["holdout (n=100)", "test split (n=100)"]


# ------------------------------------------------------------------ the monitor's alerts
def test_monitor_alerts_say_what_how_much_since_when_and_what_to_do(fitted_store, tmp_path):
    import shutil

    import sqlalchemy as sa
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig

    dst = tmp_path / "copy.db"
    shutil.copy(sa.engine.make_url(fitted_store).database, dst)
    mon = Monitor(f"sqlite:///{dst}", MonitorConfig(target="score", project="p", settle_seconds=0, n_boot=100,
                                                    reference_window=100, drift_window=60))
    assert mon.champion()["statistics"]["fit_traces_until_ns"] > 0
    # unchanged traffic (other SimpEval rows, same generators): two more windows, no alert
    write_traces(mon.store, simpeval(80, seed=5), project="p", t0_ns=60_000_000_000, feedback=False)
    assert mon.score_new() == 80
    assert mon.check_drift() == []
    st = mon.champion()["statistics"]["drift"]
    assert st["reference"]["n"] == 100 and st["n_windows"] == 2 and not st["alert"]
    assert st["windows"][0]["first_ns"] > st["reference"]["last_ns"]  # windows after the reference, no overlap
    # truncated outputs: an alert after two significant windows, with its numbers and times
    cut = simpeval(120, seed=6).assign(output=lambda d: d.output.str.split().str[:3].str.join(" "))
    write_traces(mon.store, cut, project="p", t0_ns=90_000_000_000, feedback=False)
    assert mon.score_new() == 120
    alerts = {a["kind"]: a for a in mon.check_drift()}
    assert set(alerts) == {"score_drift", "traffic_change"}  # the sequential detector too (tests/.../test_sequential.py)
    alert = alerts["score_drift"]
    msg, det = alert["message"], [a for a in mon.alerts() if a["kind"] == "score_drift"][0]["details"]
    assert alert["kind"] == "score_drift" and msg.startswith("score drift since 1970-01-01 00:01:30 UTC")
    assert "mean" in msg and "KS" in msg and "PSI" in msg and "by chance" in msg and "What to do" in msg
    assert det["since_ns"] == 90_000_000_000 and det["run"] == [3, 4] and "scores" not in det["reference"]
    assert det["psi_excess"] >= 0.1 and det["p_value"] < 0.01
    assert pd.Series([w["alert"] for w in det["windows"]]).tolist() == [False, False, True, True]
