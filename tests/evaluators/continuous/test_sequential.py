"""Sequential change detection (evaluators/continuous/sequential.py): the CUSUM recursion, its
false-alarm budget on unchanged traffic (continuous and lumpy scores), detection delay against the
size of a change, the estimated change point, the failed/empty-rate detector, and the monitor's
alert (what moved, by how much, since when) on a real store."""

from __future__ import annotations

import numpy as np
import pytest
from autometrics.evaluators.continuous.sequential import (
    SequentialSettings,
    calibrate_mean,
    cusum_paths,
    sequential_message,
    start_state,
    update_state,
)
from monitor_data import simpeval, write_traces


def _loop(x, s0):
    out, s = [], s0
    for v in x:
        s = max(0.0, s + v)
        out.append(s)
    return np.array(out)


@pytest.mark.parametrize("s0", [0.0, 2.5])
def test_cusum_paths_is_the_recursion(s0):
    x = np.random.default_rng(3).normal(-0.1, 1, 500)
    assert np.allclose(cusum_paths(x, s0), _loop(x, s0))
    rows = np.random.default_rng(4).normal(size=(3, 50))
    assert np.allclose(cusum_paths(rows), np.stack([_loop(r, 0.0) for r in rows]))


def _lumpy(rng, n, p=(0.05, 0.1, 0.2, 0.5, 0.15)):
    return rng.choice(np.array([1.0, 2, 3, 4, 5]), size=n, p=p)


def _run(ref, stream, *, batch=100, settings=None, seed=0):
    """Feed a stream in worker-sized batches; the first alarm's trace count (None: none)."""
    st = start_state({"score": ref, "metrics": {}, "failed": [0] * len(ref)}, settings or SequentialSettings(), seed=seed)
    t = np.arange(len(stream), dtype=float) + 1e9
    for i in range(0, len(stream), batch):
        update_state(st, t[i:i + batch], stream[i:i + batch], {}, np.zeros(len(stream[i:i + batch])))
        if st["alarm"]:
            return st["alarm"]["at"], st
    return None, st


@pytest.mark.parametrize("kind", ["normal", "lumpy", "heavy"])
def test_unchanged_traffic_stays_within_the_false_alarm_budget(kind):
    """8 references x 10,000 unchanged traces each (restarting after an alarm): at 1 alarm per
    10,000 traces the count would be about 8; the bootstrap calibration (reference error included)
    keeps it below.  "heavy": Student-t scores with 2 degrees of freedom (infinite variance: a
    reference of 200 sees few of the extremes a long stream meets), held in by the clip."""
    rng = np.random.default_rng({"normal": 11, "lumpy": 12, "heavy": 13}[kind])
    draw = {"normal": lambda n: rng.normal(size=n), "lumpy": lambda n: _lumpy(rng, n),
            "heavy": lambda n: rng.standard_t(2, n)}[kind]
    alarms, traces = 0, 0
    for r in range(8):
        left = 10_000
        while left > 0:
            at, _ = _run(draw(200), draw(left), seed=100 * r + alarms)
            alarms += at is not None
            traces += at or left
            left -= at or left
    assert traces == 80_000 and alarms <= 8, alarms


@pytest.mark.parametrize("kind", ["normal", "lumpy"])
def test_delay_shrinks_with_the_size_of_the_change(kind):
    rng = np.random.default_rng(21)
    draw = (lambda n: rng.normal(size=n)) if kind == "normal" else (lambda n: _lumpy(rng, n))
    sd = 1.0 if kind == "normal" else float(np.std(_lumpy(np.random.default_rng(0), 100_000)))
    delays = {}
    for shift in (0.5, 3.0):
        d = []
        for r in range(12):
            stream = np.concatenate([draw(300), draw(1_000) - shift * sd])  # the change starts at trace 301
            at, st = _run(draw(200), stream, seed=r)
            assert at is not None and at > 300, (shift, r, at)
            d.append(at - 300)
            if shift == 3.0:
                assert abs(st["alarm"]["change_at"] - 301) <= 2  # the estimated change point
        delays[shift] = np.median(d), max(d)
    assert delays[3.0][1] <= 50 and delays[0.5][0] <= 200 and delays[3.0][0] < delays[0.5][0], delays


def test_lumpy_reference_gets_its_own_threshold():
    """A normal-theory threshold is not used: a lumpy reference gets a different h than a
    continuous one of the same mean and SD, both from the bootstrap."""
    rng = np.random.default_rng(5)
    lumpy = _lumpy(rng, 200, p=(0.0, 0.0, 0.1, 0.85, 0.05))
    normal = rng.normal(lumpy.mean(), lumpy.std(), 200)
    h_l, h_n = calibrate_mean(lumpy, 0.25, 10_000), calibrate_mean(normal, 0.25, 10_000)
    assert h_l > 0 and h_n > 0 and abs(h_l - h_n) > 0.5


def test_failed_or_empty_rate_and_metrics_say_what_moved():
    rng = np.random.default_rng(7)
    ref = {"score": rng.normal(size=200), "metrics": {"OutputLength": rng.normal(20, 4, 200), "Flat": np.ones(200)},
           "failed": [0] * 199 + [1]}
    st = start_state(ref, SequentialSettings(), seed=1)
    assert set(st["detectors"]) == {"score", "metric:OutputLength", "failed_or_empty"} and st["constant"] == ["metric:Flat"]
    n = 400
    failed = np.zeros(n)
    failed[300:] = rng.random(100) < 0.3  # 30 % of outputs empty from trace 301 on
    length = rng.normal(20, 4, n)
    length[300:] = 0.0
    update_state(st, np.arange(n) * 1e9 + 1e12, rng.normal(size=n), {"OutputLength": length, "Flat": np.ones(n)}, failed)
    a = st["alarm"]
    assert a is not None and 300 < a["at"] <= 320 and a["change_at"] == 301
    assert "metric:OutputLength" in a["detectors"]
    msg = sequential_message(st)
    assert "OutputLength fell from 19.7 to 0 (-5.1 SD of the reference)" in msg and "since about 1970-01-01 00:21 UTC" in msg
    assert "1 per 10,000 traces" in msg and "refit" in msg
    update_state(st, np.arange(n, n + 100) * 1e9 + 1e12, rng.normal(size=100), {"OutputLength": np.zeros(100)},
                 (rng.random(100) < 0.3).astype(float))
    assert "failed_or_empty" in st["detectors"] and st["detectors"]["failed_or_empty"]["alarm"] is not None
    assert "failed or empty outputs rose from 0.7%" in sequential_message(st)


def test_settings_are_checked():
    from autometrics.metricbank.errors import UserError

    with pytest.raises(UserError, match="ARL"):
        SequentialSettings(arl=10)
    with pytest.raises(UserError, match="allowance k"):
        SequentialSettings(k=0)
    with pytest.raises(UserError, match="clip must be above k"):
        SequentialSettings(clip=0.2)


def test_monitor_alerts_within_traces_of_a_truncation(fitted_store, tmp_path):
    """The issue's case on a real store: unchanged traffic after the fit, then outputs cut to three
    words. The sequential alert comes within a few dozen traces, names the score and the metric
    that moved, and dates the change; the windowed test needs its two full windows."""
    import shutil

    import sqlalchemy as sa
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig

    dst = tmp_path / "copy.db"
    shutil.copy(sa.engine.make_url(fitted_store).database, dst)
    mon = Monitor(f"sqlite:///{dst}", MonitorConfig(target="score", project="p", settle_seconds=0, n_boot=100))
    write_traces(mon.store, simpeval(150, seed=5), project="p", t0_ns=60_000_000_000, feedback=False)
    assert mon.score_new() == 150
    assert mon.check_drift() == []  # 140 + 150 unchanged after the fit: a reference of 200, 90 watched
    seq = mon.champion()["statistics"]["sequential"]
    assert seq["reference"]["n"] == 200 and seq["n"] == 90 and seq["alarm"] is None
    cut = simpeval(60, seed=6).assign(output=lambda d: d.output.str.split().str[:3].str.join(" "))
    write_traces(mon.store, cut, project="p", t0_ns=90_000_000_000, feedback=False)
    assert mon.score_new() == 60
    alerts = {a["kind"]: a for a in mon.check_drift()}
    assert set(alerts) == {"traffic_change"}  # 60 traces: no full window of 200 yet
    stored = [a for a in mon.alerts() if a["kind"] == "traffic_change"][0]
    alarm = stored["details"]["alarm"]
    assert alarm["change_ns"] == 90_000_000_000 and alarm["at"] - alarm["change_at"] < 50
    msg = alerts["traffic_change"]["message"]
    assert "the score fell from" in msg and "since about 1970-01-01 00:01 UTC" in msg
    assert any(d.startswith("metric:") for d in alarm["detectors"] + stored["details"]["alarm"].get("later", []))
    assert mon.check_drift() == []  # one alert per version
    from autometrics.dashboards.render import render_dashboard

    html = render_dashboard(mon)
    assert "id='sequential-state'" in html and "1 per 10,000 unchanged traces" in html and "traffic changed since" in html
    from autometrics.dashboards.langfuse_push import version_warnings  # what Langfuse gets on each scored trace

    warned = version_warnings(mon.champion(), mon.alerts())
    assert any(cat == "score-drift" and "traffic changed since" in msg for cat, msg in warned), warned


def test_concordance_is_a_per_label_kendall_tau():
    from autometrics.evaluators.continuous.sequential import concordance
    from scipy.stats import kendalltau

    rng = np.random.default_rng(9)
    ps, py = rng.normal(size=300), rng.integers(1, 6, 300).astype(float)
    s, y = rng.normal(size=50), rng.integers(1, 6, 50).astype(float)
    c = concordance(s, y, ps, py)
    i = 7
    keep = py != y[i]
    want = np.mean(np.sign(s[i] - ps[keep]) * np.sign(y[i] - py[keep]))
    assert c[i] == pytest.approx(want)
    # agreeing labels give a positive mean, reversed ones a negative one
    y_good = np.round(np.clip(3 + s * 1.2, 1, 5))
    py_good = np.round(np.clip(3 + ps * 1.2, 1, 5))
    assert concordance(s, y_good, ps, py_good).mean() > 0.5 > 0 > concordance(s, 6 - y_good, ps, py_good).mean()
    assert kendalltau(s, y_good).statistic > 0.5


def test_monitor_sequential_validity_finds_reversed_feedback(fitted_store, tmp_path):
    """Feedback after the fit: the first 60 labels (true SimpEval ratings) are the reference; 120
    more true ones raise nothing; then reversed ratings (a broken rating widget) raise a
    validity_change alert within a few dozen labels, dated at the first reversed one."""
    import shutil

    import sqlalchemy as sa
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig
    from monitor_data import add_feedback

    dst = tmp_path / "copy.db"
    shutil.copy(sa.engine.make_url(fitted_store).database, dst)
    mon = Monitor(f"sqlite:///{dst}", MonitorConfig(target="score", project="p", settle_seconds=0, n_boot=100))
    extra = simpeval(360, seed=8)
    ids = write_traces(mon.store, extra, project="p", t0_ns=70_000_000_000, feedback=False)
    assert mon.score_new() == 360
    t0 = 5 * 10**18
    add_feedback(mon.store, ids[:180], extra["score"].iloc[:180], t0_ns=t0, prefix="ok")
    mon.check_drift()
    sv = mon.champion()["statistics"]["sequential_validity"]
    assert len(sv["reference_values"]) == 60 and sv["n"] == 120 and not sv.get("alarm"), sv.get("state")
    assert not [a for a in mon.alerts() if a["kind"] == "validity_change"]
    reversed_at = t0 + 10**15
    add_feedback(mon.store, ids[180:], 100 - extra["score"].iloc[180:], t0_ns=reversed_at, prefix="rev")
    kinds = {a["kind"] for a in mon.check_drift()}
    assert "validity_change" in kinds, kinds
    (alert,) = [a for a in mon.alerts() if a["kind"] == "validity_change"]
    alarm = alert["details"]["alarm"]
    # the first reversed label is number 121 after the reference: found within 60, dated within 30 of it
    assert alarm["at"] - 120 <= 60 and 121 <= alarm["change_at"] <= 150 and alarm["change_ns"] >= reversed_at, alarm
    assert alert["message"].startswith("live validity fell since about") and "refit once it is trusted" in alert["message"]


def test_one_extreme_trace_cannot_raise_an_alarm_alone():
    """Clipping (Huber-type CUSUM): a single trace 40 reference SDs out, as a heavy tail the reference
    did not sample gives, moves the sum by at most clip - k; unclipped it crosses h at once."""
    rng = np.random.default_rng(9)
    ref, stream = rng.normal(size=200), rng.normal(size=600)
    stream[300] = 40.0
    assert _run(ref, stream)[0] is None
    at, _ = _run(ref, stream, settings=SequentialSettings(clip=100))
    assert at == 301


def test_a_one_sided_detector_gets_a_one_sided_threshold():
    """Live validity alarms only on a fall: its threshold spends the whole budget on that side, so it
    sits below the two-sided one on the same reference and stream draws."""
    ref = np.random.default_rng(17).normal(size=60)
    both, down = calibrate_mean(ref, 0.25, 10_000, clip=3.0), calibrate_mean(ref, 0.25, 10_000, clip=3.0, sides=("down",))
    assert 0 < down < both
    skewed = np.random.default_rng(18).exponential(size=200)  # a long upper tail: the rise side sets the two-sided h
    assert calibrate_mean(skewed, 0.25, 10_000, sides=("down",)) < calibrate_mean(skewed, 0.25, 10_000, sides=("up",))
