"""Online scoring, drift and validity alerts, the dashboard (HTML, server, headless Chromium
screenshot) and the `autometrics demo` / `versions` commands."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import urllib.request
import zlib

import numpy as np
import pytest

from .helpers import add_feedback, simpeval, write_traces


def _copy(url, tmp_path):
    import sqlalchemy as sa

    dst = tmp_path / "copy.db"
    shutil.copy(sa.engine.make_url(url).database, dst)
    return f"sqlite:///{dst}"


def test_online_scores_have_metrics_contributions_and_rationales(fitted_store):
    from autometrics.collectors.continuous import Monitor, MonitorConfig

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
    from autometrics.collectors.continuous import Monitor, MonitorConfig
    from autometrics.collectors.store import TraceStore

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
    from autometrics.collectors.continuous import Monitor, MonitorConfig
    from autometrics.evaluators.drift import psi, score_drift

    rng = np.random.default_rng(0)
    a = rng.normal(size=500)
    assert psi(a, rng.normal(size=500)) < 0.1 and psi(a, rng.normal(2, 1, 500)) > 1
    assert not score_drift(a, rng.normal(size=300))["alert"] and score_drift(a, rng.normal(1.5, 1, 300))["alert"]

    url = _copy(fitted_store, tmp_path)
    mon = Monitor(url, MonitorConfig(target="score", project="p", settle_seconds=0, n_boot=200))
    assert mon.check_drift() == []  # same traffic as at fit time, no new feedback
    # traffic changes: very different outputs arrive and get scored
    df = simpeval(150, seed=3).assign(output=lambda d: d.output.str.repeat(4))
    write_traces(mon.store, df, project="p", t0_ns=90_000_000_000, feedback=False)
    assert mon.score_new() == 150
    # late feedback that disagrees with the evaluator (human ratings reversed)
    sc = mon.scores_frame().head(120)
    add_feedback(mon.store, sc["trace_id"], -sc["score"].to_numpy() + rng.normal(scale=0.1, size=120), t0_ns=4 * 10**18)
    alerts = mon.check_drift()
    kinds = {a["kind"] for a in alerts}
    assert kinds == {"score_drift", "validity_decay"}, alerts
    assert mon.check_drift() == []  # a persisting condition is not re-alerted
    lv = mon.champion()["statistics"]["live_validity"]
    assert lv["level"] == "alert" and lv["window"]["tau"] < 0


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
    from autometrics.collectors.continuous import Monitor, MonitorConfig
    from autometrics.dashboards.render import write_dashboard

    mon = Monitor(fitted_store, MonitorConfig(target="score", project="p"))
    html = write_dashboard(mon, tmp_path / "d.html").read_text()
    for part in ("id='champion'", "id='heldout'", "id='versions'", "id='contributions'", "id='rationales'", "id='alerts'",
                 "scores over time", "Champion/challenger"):
        assert part.lower() in html.lower(), part
    body = html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "<script" not in body.lower() and "http://" not in body and "https://" not in body and "<link" not in body.lower()


def test_dashboard_server_on_loopback(fitted_store):
    from autometrics.collectors.continuous import Monitor, MonitorConfig
    from autometrics.dashboards.server import DashboardServer

    srv = DashboardServer(Monitor(fitted_store, MonitorConfig(target="score", project="p")), port=0).start()
    try:
        assert srv.url.startswith("http://127.0.0.1:")
        body = urllib.request.urlopen(srv.url, timeout=30).read().decode()
        assert "Evaluator versions" in body
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(srv.url + "etc/passwd", timeout=10)
    finally:
        srv.stop()


@pytest.mark.browser
def test_dashboard_renders_in_headless_chromium(fitted_store, tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        pytest.skip("Debian's chromium is not installed")
    from autometrics.collectors.continuous import Monitor, MonitorConfig
    from autometrics.dashboards.render import write_dashboard

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
