"""The collector on granian (``collector serve --front granian``): the same endpoints as the
built-in server, served as an ASGI app by a maintained server process.  Real clients: the
OpenTelemetry SDK's OTLP/HTTP exporter and plain HTTP; refusals checked for their status; every
acknowledged span and feedback item is in the store after ``kill -9`` of the server."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from waiting import wait_for_http

pytest.importorskip("granian", reason="needs granian (the observe extra)")
KEY = "granian-test-key"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def granian_collector(tmp_path):
    port = _port()
    env = {**os.environ, "AUTOMETRICS_COLLECTOR_BODY_TIMEOUT": "2", "LANGFUSE_PUBLIC_KEY": ""}
    proc = subprocess.Popen([sys.executable, "-m", "autometrics._cli.main", "collector", "serve", "--front", "granian", "--store",
                             f"sqlite:///{tmp_path / 'c.db'}", "--port", str(port), "--api-key", KEY, "--langfuse", "off",
                             "--cors-origin", "https://app.example"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    wait_for_http(f"{url}/health", proc, 30)
    if proc.poll() is not None:
        pytest.fail("granian collector did not start: " + proc.stdout.read()[-2000:])
    yield {"url": url, "proc": proc, "db": f"sqlite:///{tmp_path / 'c.db'}"}
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)


def test_endpoints_refusals_and_nothing_acknowledged_lost(granian_collector):
    import httpx
    from autometrics.collectors.store import TraceStore
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    url = granian_collector["url"]
    tp = TracerProvider(resource=Resource.create({"service.name": "bot", "autometrics.project": "bot"}))
    tp.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{url}/v1/traces", headers={"Authorization": f"Bearer {KEY}"})))
    tracer = tp.get_tracer("app")
    tids = []
    for i in range(40):  # SimpleSpanProcessor: each span exported (and acknowledged) when it ends
        with tracer.start_as_current_span("chat", attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
                                                              "gen_ai.input.messages": f'[{{"role":"user","content":"q{i}"}}]',
                                                              "gen_ai.output.messages": f'[{{"role":"assistant","content":"a{i}"}}]'}) as sp:
            tids.append(format(sp.get_span_context().trace_id, "032x"))
    tp.shutdown()
    auth = {"Authorization": f"Bearer {KEY}"}
    fb = httpx.post(f"{url}/v1/feedback", json=[{"trace_id": t, "name": "thumbs", "value": i % 2 == 0} for i, t in enumerate(tids)],
                    headers=auth, timeout=10)
    assert fb.status_code == 200 and fb.json()["accepted"] == 40
    # refusals, each with its own status
    assert httpx.post(f"{url}/v1/feedback", json={"trace_id": tids[0], "name": "x", "value": 1}, timeout=5).status_code == 401
    assert httpx.post(f"{url}/v1/feedback", json={"trace_id": "nope", "name": "x", "value": 1}, headers=auth,
                      timeout=5).status_code == 400
    port = int(url.rsplit(":", 1)[1])
    s = socket.create_connection(("127.0.0.1", port), timeout=10)  # 1 GB announced: refused before a byte is read
    s.sendall((f"POST /v1/traces HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\nContent-Type: application/x-protobuf\r\n"
               "Content-Length: 1000000000\r\n\r\n").encode())
    assert s.recv(100).startswith(b"HTTP/1.1 413")
    s.close()
    assert httpx.get(f"{url}/v1/nothing", timeout=5).status_code == 404
    pre = httpx.options(f"{url}/v1/feedback", headers={"Origin": "https://app.example", "Access-Control-Request-Method": "POST"},
                        timeout=5)
    assert pre.status_code == 204 and pre.headers["access-control-allow-origin"] == "https://app.example"
    # a body that stops arriving is answered 408 at the body deadline (2 s here), not held
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall((f"POST /v1/feedback HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
               "Content-Length: 100\r\n\r\n{").encode())
    t0 = time.monotonic()
    answer = s.recv(200).decode("latin-1")
    s.close()
    assert answer.startswith("HTTP/1.1 408") and time.monotonic() - t0 < 6
    # kill -9: everything acknowledged is stored
    os.killpg(granian_collector["proc"].pid, signal.SIGKILL)
    granian_collector["proc"].wait(10)
    store = TraceStore(granian_collector["db"])
    assert store.count("spans") == 40
    assert set(store.feedback_frame(names=["thumbs"])["trace_id"]) == set(tids)
