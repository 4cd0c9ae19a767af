"""Online scoring, drift and validity alerts, the dashboard (HTML, server, headless Chromium
screenshot) and the `autometrics demo` / `versions` commands."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest
from monitor_data import add_feedback, simpeval, write_traces


def _copy(url, tmp_path):
    import sqlalchemy as sa

    dst = tmp_path / "copy.db"
    shutil.copy(sa.engine.make_url(url).database, dst)
    return f"sqlite:///{dst}"


def test_online_scores_have_metrics_contributions_and_rationales(fitted_store):
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig

    mon = Monitor(fitted_store, MonitorConfig(target="score", project="p"))
    ch = mon.champion()
    sc = mon.scores_frame()
    assert len(sc) == 360 and sc["score"].notna().all() and (sc["evaluator_id"] == ch["id"]).all()
    feats = [f["feature"] for f in ch["artifact"]["features"]]
    row = sc.iloc[0]
    assert set(json.loads(row["metrics"])) == set(feats) == set(json.loads(row["contributions"]))
    contrib = json.loads(row["contributions"])
    assert abs(ch["artifact"]["intercept"] + sum(contrib.values()) - row["score"]) < 1e-6  # contributions explain the score
    rats = json.loads(row["rationales"])
    assert 1 <= len(rats) <= 3 and all("the score by" in r["text"] for r in rats)
    assert mon.score_new() == 0  # nothing left


def test_unscorable_and_young_traces(sqlite_url):
    from autometrics.collectors.store import TraceStore
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig

    store = TraceStore(sqlite_url)
    write_traces(store, simpeval(60), project="p")
    mon = Monitor(store, MonitorConfig(target="score", project="p", n_boot=50, settle_seconds=0))
    assert mon.refit().outcome == "promoted"
    store.write([{"trace_id": "e" * 32, "span_id": "1" * 16, "name": "x", "project": "p", "start_time_ns": 5, "end_time_ns": 6}])
    assert mon.score_new() == 61
    bad = mon.scores_frame().set_index("trace_id").loc["e" * 32]
    assert bad["score"] is None or np.isnan(bad["score"])
    assert "no output" in bad["error"]
    mon.cfg.settle_seconds = 3600  # traces younger than an hour wait (their root span may still be open)
    import time

    now = time.time_ns()
    store.write([{"trace_id": "f" * 32, "span_id": "2" * 16, "name": "x", "project": "p", "start_time_ns": now, "end_time_ns": now,
                  "output": "fresh"}])
    assert mon.score_new() == 0


def test_drift_and_validity_alerts(fitted_store, tmp_path):
    from autometrics.evaluators.continuous.drift import psi, score_drift
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig

    rng = np.random.default_rng(0)
    a = rng.normal(size=500)
    assert psi(a, rng.normal(size=500)) < 0.1 and psi(a, rng.normal(2, 1, 500)) > 1
    assert not score_drift(a, rng.normal(size=300))["alert"] and score_drift(a, rng.normal(1.5, 1, 300))["alert"]

    url = _copy(fitted_store, tmp_path)
    mon = Monitor(url, MonitorConfig(target="score", project="p", settle_seconds=0, n_boot=200, reference_window=100, drift_window=50))
    assert mon.check_drift() == []  # same traffic as at fit time, no new feedback
    # traffic changes: very different outputs arrive and get scored
    df = simpeval(150, seed=3).assign(output=lambda d: d.output.str.repeat(4))
    write_traces(mon.store, df, project="p", t0_ns=90_000_000_000, feedback=False)
    assert mon.score_new() == 150
    # late feedback that disagrees with the evaluator (human ratings reversed)
    sc = mon.scores_frame().head(120)
    # (reversed ranks: the scores of outputs far out of the training range sit close together near the
    # label's bound, so a noise term on the score scale would not reverse their order)
    add_feedback(mon.store, sc["trace_id"], -sc["score"].rank().to_numpy() + rng.normal(scale=0.1, size=120), t0_ns=4 * 10**18)
    alerts = mon.check_drift()
    kinds = {a["kind"] for a in alerts}
    assert kinds == {"score_drift", "traffic_change", "validity_decay"}, alerts
    assert mon.check_drift() == []  # a persisting condition is not re-alerted
    lv = mon.champion()["statistics"]["live_validity"]
    assert lv["level"] == "alert" and lv["window"]["tau"] < 0


def test_drift_thresholds_decide_whether_an_alert_fires():
    from autometrics.evaluators.continuous.drift import DriftThresholds, score_drift, validity_decay

    rng = np.random.default_rng(1)
    ref, cur = rng.normal(size=400), rng.normal(0.6, 1, 300)
    d = score_drift(ref, cur)
    assert d["alert"] and 0.2 <= d["psi"] < 1.0 and d["thresholds"] == {"ks_alpha": 0.01, "psi_alert": 0.1, "min_scores": 30}
    assert not score_drift(ref, cur, thresholds=DriftThresholds(psi_alert=1.0))["alert"]  # same data, higher bar
    assert not score_drift(ref, cur, thresholds=DriftThresholds(ks_alpha=d["p_value"] / 10))["alert"]
    small = score_drift(ref, cur[:40], thresholds=DriftThresholds(min_scores=50))
    assert not small["alert"] and "need 50 each" in small["reason"]
    assert score_drift(ref, cur[:40])["reason"] is None  # 40 >= 30: tested with the defaults
    # validity: a weak but real agreement on 60 new points
    y = rng.normal(size=60)
    pred = y + rng.normal(scale=2.5, size=60)
    base = validity_decay(pred, y, None, n_boot=200)
    assert base["level"] in ("ok", "warning")
    p = base["window"]["p_value"]
    assert validity_decay(pred, y, None, n_boot=200, thresholds=DriftThresholds(validity_p=min(0.99, p * 2)))["level"] == "ok"
    assert validity_decay(pred, y, None, n_boot=200, thresholds=DriftThresholds(validity_p=p / 2))["level"] == "warning"
    assert validity_decay(pred, y, None, n_boot=200, thresholds=DriftThresholds(validity_min_n=61))["level"] is None
    for bad in ({"ks_alpha": 0}, {"psi_alert": -1}, {"validity_p": 1.5}, {"min_scores": 1}):
        with pytest.raises(ValueError):
            DriftThresholds(**bad)


def test_worker_drift_flags_change_whether_an_alert_fires(fitted_store, tmp_path, capsys):
    """`autometrics worker --once` on shifted traffic: with --drift-psi above the shift no drift
    alert; with the default thresholds the same data raises it."""
    from autometrics._cli.main import main
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig

    url = _copy(fitted_store, tmp_path)
    mon = Monitor(url, MonitorConfig(target="score", project="p"))
    df = simpeval(150, seed=3).assign(output=lambda d: d.output.str.repeat(4))
    write_traces(mon.store, df, project="p", t0_ns=90_000_000_000, feedback=False)
    run = ["worker", "--store", url, "--project", "p", "--target", "score", "--no-llm", "--once", "--settle-seconds", "0",
           "--langfuse", "off", "--dashboard", str(tmp_path / "d.html"), "--min-new-feedback", "100000",
           "--drift-reference-window", "100", "--drift-window", "50"]
    assert main(run + ["--drift-psi", "1000", "--no-sequential-drift"]) == 0
    assert "scored 150 traces; 0 new alert(s)" in capsys.readouterr().out
    assert not mon.alerts()
    assert main(run) == 0  # defaults: permutation p < 0.01 and PSI >= 0.1 above chance, in 2 windows in a row; CUSUM on
    assert "2 new alert(s)" in capsys.readouterr().out
    assert {a["kind"] for a in mon.alerts()} == {"score_drift", "traffic_change"}
    (alert,) = [a for a in mon.alerts() if a["kind"] == "score_drift"]
    assert alert["details"]["thresholds"]["psi_alert"] == 0.1 and alert["details"]["psi_excess"] >= 0.1
    assert main(run + ["--drift-ks-alpha", "2"]) == 2  # a bad threshold is a usage error, not a traceback
    err = capsys.readouterr().err
    assert err.startswith("error: argument --drift-ks-alpha: must be between 0 and 1") and "Traceback" not in err


def _png_pixels(path):
    """(width, height, variety) of an 8-bit RGB/RGBA PNG (what Chromium writes).  ``variety`` counts
    distinct byte triples in sampled rows of the (still filtered) scanlines: a blank page gives a
    handful, a rendered page with text and charts hundreds.  No image library needed."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, w, h, bpp = 8, b"", 0, 0, 3
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and ctype in (2, 6)
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp + 1
    colours = set()
    for y in range(0, h, max(1, h // 60)):
        line = raw[y * stride + 1:(y + 1) * stride]
        colours.update(line[i:i + 3] for i in range(0, len(line), bpp * 7))
    return w, h, len(colours)


def test_dashboard_html_is_self_contained(fitted_store, tmp_path):
    from autometrics.dashboards.render import write_dashboard
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig

    mon = Monitor(fitted_store, MonitorConfig(target="score", project="p"))
    html = write_dashboard(mon, tmp_path / "d.html").read_text()
    for part in ("id='champion'", "id='heldout'", "id='versions'", "id='contributions'", "id='rationales'", "id='alerts'",
                 "scores over time", "Champion/challenger"):
        assert part.lower() in html.lower(), part
    body = html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "<script" not in body.lower() and "http://" not in body and "https://" not in body and "<link" not in body.lower()


def _warning_counts(html: str) -> tuple[int, int, int, int]:
    """(alerts shown in the card, warnings shown in the card, alert items listed, warning items listed)."""
    import re

    n_alerts = int(re.search(r"<span id='n-alerts'>(\d+)</span>", html).group(1))
    n_warnings = int(re.search(r"<span id='n-warnings'>(\d+)</span>", html).group(1))
    section = html.split("<div id='alerts'>", 1)[1].split("<h2>", 1)[0]
    return n_alerts, n_warnings, section.count("<div class='alert'"), section.count("<div class='warn'")


def test_dashboard_warning_count_matches_the_listed_warnings(fitted_store, tmp_path):
    """The card counts both kinds that the section lists: the evaluator's own warnings (low
    significance, small n) and the stored drift/validity alerts."""
    import sqlalchemy as sa
    from autometrics.collectors.store.schema import evaluator_versions
    from autometrics.dashboards.render import render_dashboard
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig

    mon = Monitor(_copy(fitted_store, tmp_path), MonitorConfig(target="score", project="p"))
    a, w, la, lw = _warning_counts(render_dashboard(mon))  # whatever the fixture's champion has, card and list agree
    assert (a, w) == (la, lw)
    ch = mon.champion()
    stats = dict(ch["statistics"], warnings=["held-out agreement on the newest feedback is not significant (p=0.21 > 0.05, n=18)",
                                             "small held-out set (n=18 < 30): the comparison is noisy"])
    with mon.store.engine.begin() as c:
        c.execute(evaluator_versions.update().where(evaluator_versions.c.id == ch["id"]).values(statistics=json.dumps(stats)))
    html = render_dashboard(mon)
    assert _warning_counts(html) == (0, 2, 0, 2)  # evaluator warnings only: counted, not "0 warnings"
    assert "p=0.21 &gt; 0.05" in html and "small held-out set" in html
    mon.add_alert("score_drift", "alert", "score drift: KS=0.4", evaluator_id=ch["id"])
    mon.add_alert("small_n", "warning", "new champion was validated on only 18 held-out feedback points", evaluator_id=ch["id"])
    html = render_dashboard(mon)
    assert _warning_counts(html) == (1, 3, 1, 3)
    section = html.split("<div id='alerts'>", 1)[1].split("<h2>", 1)[0]
    assert section.count("data-source='evaluator'") == 2 and section.count("data-source='monitor'") == 2
    assert "No warnings or alerts" not in html
    with mon.store.engine.begin() as c:
        c.execute(sa.text("DELETE FROM monitor_alerts"))
        c.execute(evaluator_versions.update().where(evaluator_versions.c.id == ch["id"]).values(
            statistics=json.dumps(dict(stats, warnings=[]))))
    html = render_dashboard(mon)
    assert _warning_counts(html) == (0, 0, 0, 0) and "No warnings or alerts" in html


def test_served_dashboard_pages(fitted_store):
    """The served app (in process): index → overview → trace list → trace view, all linked; a
    bad filter value is named; an unknown scope or trace is a 404."""
    import re

    from autometrics.dashboards.app import create_app
    from starlette.testclient import TestClient

    c = TestClient(create_app(fitted_store))
    home = c.get("/")
    assert home.status_code == 200 and "/p/p/score" in home.text
    over = c.get("/p/p/score")
    assert over.status_code == 200 and "Evaluator versions" in over.text and "id='other-figures'" in over.text
    assert over.headers["content-security-policy"].startswith("default-src 'none'")
    listing = c.get("/p/p/score/traces?version=all")
    assert listing.status_code == 200
    ids = re.findall(r"class='trace' href='(/p/p/score/traces/[0-9a-f]{32})'", listing.text)
    assert ids
    view = c.get(ids[0])
    assert view.status_code == 200 and "id='input'" in view.text and "contribution to the score" in view.text
    # the label filter reads each trace's newest label: the count is the scored traces whose one is >= 50
    from autometrics.collectors.store import TraceStore

    fb = TraceStore(fitted_store).feedback_frame(names=["score"]).sort_values(["created_at_ns", "id"])
    want = int((fb.groupby("trace_id")["value"].last() >= 50).sum())
    assert want > 0 and f"<b>{want:,}</b> scored trace(s)" in c.get("/p/p/score/traces?version=all&label_min=50").text
    bad = c.get("/p/p/score/traces?label_min=high")
    assert bad.status_code == 400 and "label_min must be a number" in bad.text
    assert c.get("/p/p/nope").status_code == 404 and c.get("/p/p/score/traces/" + "0" * 32).status_code == 404
    assert c.get(ids[0].replace("/p/p/score/", "/p/other/score/")).status_code == 404  # a trace only under its own scope
    far = c.get("/p/p/score/traces?from=9999-01-01T00:00&offset=99999999999999999999")
    assert far.status_code == 400 and "between 1970 and 2200" in far.text
    assert c.get("/etc/passwd").status_code == 404


@pytest.mark.browser
def test_dashboard_renders_in_headless_chromium(fitted_store, tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        pytest.skip("Debian's chromium is not installed")
    from autometrics.dashboards.render import write_dashboard
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig

    page = write_dashboard(Monitor(fitted_store, MonitorConfig(target="score", project="p")), tmp_path / "dashboard.html")
    shot = tmp_path / "shot.png"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
                    "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars",
                    "--window-size=1280,2000", f"--screenshot={shot}", page.as_uri()],
                   check=True, timeout=120, capture_output=True)
    w, h, colours = _png_pixels(shot)
    assert (w, h) == (1280, 2000)
    assert colours > 30  # charts, badges and text rendered, not a blank page


def test_demo_no_llm_end_to_end(tmp_path, capsys):
    """`autometrics demo --no-llm` on the built-in data, as a fresh process (as a user runs it)."""
    env = {"AUTOMETRICS_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "autometrics._cli.main", "demo", "--no-llm", "--out", str(tmp_path / "demo")],
                         capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "refit #1: refit promoted v1" in out.stdout
    assert "online scoring: 360 traces scored" in out.stdout
    assert "Open the dashboard: file://" in out.stdout
    assert (tmp_path / "demo" / "dashboard.html").exists()
    from autometrics._cli.main import main

    scope = ["--store", f"sqlite:///{tmp_path / 'demo' / 'traces.db'}", "--project", "demo-simpeval", "--target", "score"]
    assert main(["versions", "list", *scope]) == 0
    ls = capsys.readouterr().out
    assert "v1" in ls and "v2" in ls and "tau" in ls, ls
    assert main(["versions", "compare", "1", "2", "--n-boot", "200", *scope]) == 0
    assert "tau(v2) - tau(v1)" in capsys.readouterr().out
    assert main(["versions", "rollback", "2", *scope]) == 0
    assert "v2 is the champion again" in capsys.readouterr().out
    assert main(["versions", "show", "2", "--out", str(tmp_path / "v2"), *scope]) == 0
    assert (tmp_path / "v2" / "evaluator.json").exists() and (tmp_path / "v2" / "report.md").exists()


def test_served_dashboard_reaches_names_with_slash_and_percent(fitted_store, tmp_path):
    """Projects and targets are free text: one named ``team/support bot 100%`` is listed, linked and
    opened like any other on the real server (uvicorn decodes %2F before routing, so the links
    escape ``/`` and ``%`` once more; Starlette's TestClient decodes twice, hence a real server)."""
    import re
    import socket
    import urllib.error
    import urllib.request

    import sqlalchemy as sa
    from autometrics.collectors.store import TraceStore
    from waiting import wait_for_http

    db = tmp_path / "copy.db"
    shutil.copy(TraceStore(fitted_store).sqlite_path(), db)
    store = TraceStore(f"sqlite:///{db}")
    name = "team/support bot 100%"
    with store.engine.begin() as c:
        for table in sa.inspect(store.engine).get_table_names():
            if "project" in {col["name"] for col in sa.inspect(store.engine).get_columns(table)}:
                c.execute(sa.text(f"UPDATE {table} SET project = :n WHERE project = 'p'"), {"n": name})
    store.engine.dispose()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "autometrics._cli.main", "dashboard", "--store", f"sqlite:///{db}", "--serve",
                             "--project", name, "--target", "score", "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"

    def get(path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(base + path, timeout=30) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    try:
        assert wait_for_http(f"{base}/health", proc, 60), proc.stdout.read()[-2000:] if proc.poll() is not None else "no answer"
        code, home = get("/")
        assert code == 200 and "store sqlite:///" in home and "TraceStore(" not in home
        links = re.findall(r"href='(/p/[^']+/score)'", home)
        assert links == ["/p/team%252Fsupport%20bot%20100%2525/score"], links
        code, over = get(links[0])
        assert code == 200 and "Evaluator versions" in over and "team/support bot 100%" in over
        code, listing = get(links[0] + "/traces?version=all")
        ids = re.findall(r"class='trace' href='(/p/[^']+/score/traces/[0-9a-f]{32})'", listing)
        assert code == 200 and ids and get(ids[0])[0] == 200
        assert get("/p/team/support%20bot%20100%25/score")[0] == 404  # unescaped: another path, not a wrong page
    finally:
        proc.terminate()
        proc.wait(20)
