"""The collector over real HTTP on loopback: OTLP protobuf/JSON/gzip, feedback, auth, limits,
health, the SDK's remote mode, and durability of acknowledged feedback across kill -9."""

from __future__ import annotations

import gzip
import http.client
import json
import os
import signal
import subprocess
import sys
import threading

import pytest
from autometrics.collectors.store import SCHEMA_VERSION
from otlp_client import otlp_request as _otlp_request
from otlp_client import post as _post

KEY = {"Authorization": "Bearer test-key"}


def test_otlp_protobuf_gzip_and_json(collector):
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    body = gzip.compress(_otlp_request(20, bad=1).SerializeToString())
    code, data, hdr = _post(collector.url, "/v1/traces", body, {**KEY, "Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"})
    assert code == 200 and hdr["Content-Type"] == "application/x-protobuf"
    resp = ExportTraceServiceResponse.FromString(data)
    assert resp.partial_success.rejected_spans == 1  # the all-zero trace id

    j = {"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "node-app"}}]},
                            "scopeSpans": [{"scope": {"name": "js"}, "spans": [{
                                "traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174", "name": "answer",
                                "kind": 1, "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": "1700000001000000000",
                                "attributes": [{"key": "gen_ai.output.messages", "value": {"stringValue": "[{\"role\":\"assistant\",\"parts\":[{\"type\":\"text\",\"content\":\"hi there\"}]}]"}},
                                               {"key": "gen_ai.usage.output_tokens", "value": {"intValue": "7"}}],
                                "status": {"code": 2, "message": "boom"}}]}]}]}
    code, data, hdr = _post(collector.url, "/v1/traces", json.dumps(j).encode(), {**KEY, "Content-Type": "application/json"})
    assert code == 200 and hdr["Content-Type"] == "application/json" and json.loads(data) == {}
    sp = collector.store.spans_frame()
    assert len(sp) == 21
    js = sp[sp["project"] == "node-app"].iloc[0]
    assert (js["trace_id"], js["output"], js["output_tokens"], js["status"]) == ("5b8efff798038103d269b633813fc60c", "hi there", 7, "ERROR")
    assert set(sp[sp["project"] == "go-service"]["input"]) == {f"hello {i}" for i in range(20)}
    # a client retry of the same batch is acknowledged but not stored twice
    _post(collector.url, "/v1/traces", body, {**KEY, "Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"})
    assert collector.store.count("spans") == 21


def test_feedback_endpoint_and_validation(collector):
    t = "ab" * 16
    code, data, _ = _post(collector.url, "/v1/feedback", json.dumps({"trace_id": t, "name": "thumbs", "value": "up"}).encode(), KEY)
    assert code == 200 and json.loads(data)["accepted"] == 1
    many = [{"trace_id": t, "name": "stars", "value": v, "kind": "likert", "id": f"k{v}"} for v in (2, 5)]
    code, data, _ = _post(collector.url, "/v1/feedback", json.dumps(many).encode(), KEY)
    assert code == 200 and json.loads(data)["ids"] == ["k2", "k5"]
    for bad, msg in [({"trace_id": "nope", "name": "x", "value": 1}, "trace_id"),
                     ({"trace_id": t, "name": "x"}, "value"),
                     ({"trace_id": t, "name": "x", "value": "meh", "kind": "thumbs"}, "thumbs"),
                     ({"trace_id": t, "name": "x", "value": 1, "extra": 1}, "unknown field")]:
        code, data, _ = _post(collector.url, "/v1/feedback", json.dumps(bad).encode(), KEY)
        assert code == 400 and msg in json.loads(data)["error"], data
    code, _, _ = _post(collector.url, "/v1/feedback", b"{not json", KEY)
    assert code == 400
    fb = collector.store.feedback_frame()
    assert sorted(fb["value"]) == [1.0, 2.0, 5.0] and set(fb["source"]) == {"collector"}


def test_auth_limits_and_health(collector):
    t = json.dumps({"trace_id": "ab" * 16, "name": "x", "value": 1}).encode()
    assert _post(collector.url, "/v1/feedback", t, {})[0] == 401
    assert _post(collector.url, "/v1/feedback", t, {"Authorization": "Bearer wrong"})[0] == 401
    assert _post(collector.url, "/v1/feedback", t, {"X-API-Key": "test-key"})[0] == 200
    assert _post(collector.url, "/v1/traces", b"x", {**KEY, "Content-Type": "text/plain"})[0] == 415
    assert _post(collector.url, "/v1/traces", b"garbage", {**KEY, "Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"})[0] == 400
    assert _post(collector.url, "/v1/traces", b"\x0a\xff\xff", {**KEY, "Content-Type": "application/x-protobuf"})[0] == 400
    assert _post(collector.url, "/v1/nope", b"", KEY)[0] == 404
    collector.max_body = 1000
    assert _post(collector.url, "/v1/traces", b"x" * 5000, {**KEY, "Content-Type": "application/x-protobuf"})[0] == 413
    collector.max_body, collector.max_decompressed = 16 << 20, 10_000
    bomb = gzip.compress(b"\0" * 1_000_000)
    assert _post(collector.url, "/v1/traces", bomb, {**KEY, "Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"})[0] == 413
    c = http.client.HTTPConnection(*collector.httpd.server_address[:2], timeout=5)
    c.request("GET", "/health")
    r = c.getresponse()
    h = json.loads(r.read())
    assert r.status == 200 and h["status"] == "ok" and h["schema_version"] == SCHEMA_VERSION and h["counters"]["http_401"] == 2
    assert "test-key" not in json.dumps(h)


def test_collector_refuses_to_start_without_keys(tmp_path):
    from autometrics._cli.main import main
    from autometrics.collectors.server import CollectorServer

    with pytest.raises(ValueError, match="API key"):
        CollectorServer(f"sqlite:///{tmp_path / 'x.db'}", port=0)
    assert main(["collector", "serve", "--store", f"sqlite:///{tmp_path / 'x.db'}", "--port", "0"]) == 2


def test_sdk_remote_mode_through_collector(capture, collector):
    capture.configure(collector_url=collector.url, api_key="test-key", project="remote", langfuse=False)

    @capture.observe(model="m")
    def f(x):
        return f"out {x}"

    tids = []
    for i in range(30):
        f(i)

    @capture.observe
    def g():
        tids.append(capture.current_trace_id())

    g()
    capture.feedback(tids[0], "thumbs", True)
    assert capture.flush(10)
    st = capture.stats()
    assert st["span_written"] == 31 and st["feedback_written"] == 1 and not st.get("span_failed")
    assert collector.store.count("spans") == 31 and collector.store.count("feedback") == 1
    assert set(collector.store.spans_frame()["project"]) == {"remote"}


def _start_collector_process(db: str) -> tuple[subprocess.Popen, int]:
    p = subprocess.Popen([sys.executable, "-m", "autometrics._cli.main", "collector", "serve", "--store", f"sqlite:///{db}", "--port", "0",
                          "--no-auth", "--langfuse", "off"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "LANGFUSE_PUBLIC_KEY": ""})
    line = p.stdout.readline()
    assert "listening on" in line, (line, p.stderr.read() if p.poll() is not None else "")
    return p, int(line.split("http://127.0.0.1:")[1].split()[0])


def test_kill_9_right_after_ack_loses_nothing_acknowledged(tmp_path):
    from autometrics.collectors.store import TraceStore

    db = str(tmp_path / "durable.db")
    proc, port = _start_collector_process(db)
    acked: list[str] = []
    lock = threading.Lock()
    killed = threading.Event()
    target = 300  # kill right after the 300th acknowledgement, with other requests in flight

    def client(w: int):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        for i in range(10_000):
            if killed.is_set():
                return
            fid = f"w{w}-{i}"
            body = json.dumps({"trace_id": f"{w + 1:02x}" * 16, "name": "thumbs", "value": i % 2, "kind": "thumbs", "id": fid})
            try:
                c.request("POST", "/v1/feedback", body=body, headers={"Content-Type": "application/json"})
                r = c.getresponse()
                r.read()
            except OSError:
                return
            if r.status == 200:
                with lock:
                    acked.append(fid)
                    if len(acked) >= target and not killed.is_set():
                        os.kill(proc.pid, signal.SIGKILL)
                        killed.set()

    threads = [threading.Thread(target=client, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    proc.wait(10)
    assert killed.is_set() and proc.returncode == -signal.SIGKILL
    stored = set(TraceStore(f"sqlite:///{db}").feedback_frame()["id"])
    missing = [a for a in acked if a not in stored]
    assert len(acked) >= target and not missing, f"{len(missing)} acknowledged feedback items lost"
