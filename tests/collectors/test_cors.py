"""A web page posts a thumbs-up to the collector from a real browser (headless Chromium): the
preflight and the POST pass for a configured origin, are blocked for another, and the item is
stored only in the first case."""

from __future__ import annotations

import http.server
import json
import shutil
import subprocess
import threading
from functools import partial

import pytest

PAGE = """<!doctype html><html><body><p id="out">pending</p><script>
fetch("%(url)s/v1/feedback", {method: "POST", headers: {"Authorization": "Bearer k", "Content-Type": "application/json"},
      body: JSON.stringify({trace_id: "%(tid)s", name: "thumbs", value: true})})
  .then(r => r.json().then(b => { document.getElementById("out").textContent = "status " + r.status + " accepted " + b.accepted; }))
  .catch(e => { document.getElementById("out").textContent = "blocked " + e.name; });
</script></body></html>"""


@pytest.fixture
def page_server(tmp_path):
    """A static page server on its own port: another origin than the collector's."""
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _open(chromium, url, profile) -> str:
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
           "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}", "--virtual-time-budget=5000",
           "--dump-dom", url]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


@pytest.mark.browser
@pytest.mark.parametrize("allowed", [True, False])
def test_feedback_from_a_web_page(tmp_path, page_server, allowed):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        pytest.skip("chromium not installed (apt-get install chromium); .ci/run installs it")
    from autometrics.collectors.server import CollectorServer
    from autometrics.collectors.store import TraceStore

    _, origin = page_server
    db = f"sqlite:///{tmp_path / 'c.db'}"
    srv = CollectorServer(db, port=0, api_keys=["k"], langfuse="off",
                          cors_origins=[origin + "/"] if allowed else ["https://elsewhere.example"]).start()
    try:
        tid = "cd" * 16
        (tmp_path / "page.html").write_text(PAGE % {"url": srv.url, "tid": tid}, encoding="utf-8")
        dom = _open(chromium, f"{origin}/page.html", tmp_path / "profile")
        stored = TraceStore(db).feedback_frame()
        if allowed:
            assert "status 200 accepted 1" in dom, dom[-500:]
            assert list(stored["trace_id"]) == [tid]
        else:
            assert "blocked TypeError" in dom, dom[-500:]  # the browser refused the preflight's answer
            assert stored.empty
    finally:
        srv.stop()


def test_preflight_answers(tmp_path):
    import http.client

    from autometrics.collectors.server import CollectorServer

    srv = CollectorServer(f"sqlite:///{tmp_path / 'c.db'}", port=0, api_keys=["k"], langfuse="off",
                          cors_origins=["https://app.example.com"]).start()
    try:
        def ask(method, origin, path="/v1/feedback", body=None, headers=None):
            c = http.client.HTTPConnection(*srv.httpd.server_address[:2], timeout=5)
            c.request(method, path, body=body, headers={"Origin": origin, **(headers or {})})
            r = c.getresponse()
            r.read()
            return r.status, dict(r.getheaders())

        code, h = ask("OPTIONS", "https://APP.example.com")
        assert code == 204 and h["Access-Control-Allow-Origin"] == "https://APP.example.com"
        assert "Authorization" in h["Access-Control-Allow-Headers"] and "POST" in h["Access-Control-Allow-Methods"]
        code, h = ask("OPTIONS", "https://evil.example")
        assert code == 403 and "Access-Control-Allow-Origin" not in h
        assert ask("OPTIONS", "https://app.example.com", "/nowhere")[0] == 404
        # a refused key still lets the page read why (the CORS headers ride on the 401)
        code, h = ask("POST", "https://app.example.com", body=json.dumps({}), headers={"Content-Type": "application/json"})
        assert code == 401 and h["Access-Control-Allow-Origin"] == "https://app.example.com"
    finally:
        srv.stop()
