"""Langfuse export with the real langfuse 5.x SDK against the loopback Langfuse-compatible test
server (tests/langfuse_server.py, shared with the continuous-evaluation tests; it decodes the
OTLP spans and checks score bodies against Langfuse's API spec and the SDK's own model; no
Langfuse server can run here)."""

from __future__ import annotations

import http.client
import json

import langfuse
from waiting import wait_until


def _wait(pred, timeout=10.0):
    return wait_until(pred, timeout)


def test_sdk_exports_spans_and_scores_without_touching_app_tracing(capture, langfuse_server, sqlite_url):
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    assert langfuse.__version__.split(".")[0] >= "5"
    app_exporter = InMemorySpanExporter()
    app_provider = TracerProvider()
    app_provider.add_span_processor(SimpleSpanProcessor(app_exporter))
    app_tracer = app_provider.get_tracer("app")
    processors_before = list(app_provider._active_span_processor._span_processors)
    global_before = trace.get_tracer_provider()

    capture.configure(store_url=sqlite_url, project="lf", langfuse="auto")
    assert capture._runtime.langfuse is not None

    @capture.observe(model="gpt-4o-mini", operation="chat")
    def llm(q):
        capture.update_current_span(input_tokens=5, output_tokens=7)
        return "answer:" + q

    @capture.observe
    def handle(q):
        return llm(q), capture.current_trace_id()

    with app_tracer.start_as_current_span("app-request"):
        out, tid = handle("hi")
    assert out == "answer:hi"
    capture.feedback(tid, "user_feedback", True, comment="thumbs up")
    capture.feedback(tid, "stars", 4, kind="likert")
    capture.feedback(tid, "label", "good", kind="categorical")
    capture.feedback(tid, "fix", "a better answer", kind="correction")
    assert capture.flush(15)
    assert _wait(lambda: len(langfuse_server.spans) >= 2 and len(langfuse_server.scores) >= 4), (langfuse_server.errors, capture.stats())
    assert not langfuse_server.errors, langfuse_server.errors

    spans = {s["name"]: s for s in langfuse_server.spans}
    assert set(spans) == {"chat gpt-4o-mini", "handle"}  # ours only: the app's span is not sent to Langfuse
    chat = spans["chat gpt-4o-mini"]
    assert chat["trace_id"] == tid and chat["parent_span_id"] == spans["handle"]["span_id"]
    a = chat["attributes"]
    assert a["gen_ai.request.model"] == "gpt-4o-mini" and a["gen_ai.usage.input_tokens"] == 5
    assert json.loads(a["gen_ai.input.messages"])[0]["parts"][0]["content"] == "hi"
    assert chat["scope"] == "autometrics" and chat["resource"]["service.name"] == "lf"

    by_name = {s["name"]: s for s in langfuse_server.scores}
    assert by_name["user_feedback"]["dataType"] == "BOOLEAN" and by_name["user_feedback"]["value"] == 1.0
    assert by_name["user_feedback"]["traceId"] == tid and by_name["user_feedback"]["comment"] == "thumbs up"
    assert (by_name["stars"]["dataType"], by_name["stars"]["value"]) == ("NUMERIC", 4.0)
    assert (by_name["label"]["dataType"], by_name["label"]["value"]) == ("CATEGORICAL", "good")
    assert by_name["fix"]["dataType"] == "CORRECTION"

    # the application's tracing is unaffected: same global provider, no processor added, its
    # exporter saw only its own span
    assert trace.get_tracer_provider() is global_before
    assert list(app_provider._active_span_processor._span_processors) == processors_before
    assert [s.name for s in app_exporter.get_finished_spans()] == ["app-request"]
    # and the local store has everything too
    from autometrics.collectors.store import TraceStore

    assert TraceStore(sqlite_url).count("spans") == 2


def test_langfuse_off_and_missing_keys(capture, sqlite_url, monkeypatch):
    capture.configure(store_url=sqlite_url, langfuse="on")  # no LANGFUSE_* keys: warned, off
    assert capture._runtime.langfuse is None
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", "pk")
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk")
    capture.configure(store_url=sqlite_url, langfuse="off")
    assert capture._runtime.langfuse is None


def test_collector_forwards_otlp_and_feedback_to_langfuse(langfuse_server, tmp_path):
    from autometrics.collectors.server import CollectorServer
    from otlp_client import otlp_request as _otlp_request
    from otlp_client import post as _post

    srv = CollectorServer(f"sqlite:///{tmp_path / 'c.db'}", port=0, api_keys=["k"], langfuse="auto").start()
    try:
        assert srv.langfuse is not None
        hdr = {"Authorization": "Bearer k"}
        code, _, _ = _post(srv.url, "/v1/traces", _otlp_request(5).SerializeToString(), {**hdr, "Content-Type": "application/x-protobuf"})
        assert code == 200
        tid = "01" * 8 + "00" * 7 + "00"
        code, _, _ = _post(srv.url, "/v1/feedback", json.dumps({"trace_id": tid, "name": "thumbs", "value": False}).encode(), hdr)
        assert code == 200
        assert srv.langfuse.flush(10)
        assert _wait(lambda: len(langfuse_server.spans) == 5 and len(langfuse_server.scores) == 1), langfuse_server.errors
        assert not langfuse_server.errors
        assert langfuse_server.scores[0]["dataType"] == "BOOLEAN" and langfuse_server.scores[0]["value"] == 0.0
        assert {s["attributes"]["gen_ai.request.model"] for s in langfuse_server.spans} == {"gpt-4o"}
        c = http.client.HTTPConnection(*srv.httpd.server_address[:2], timeout=5)
        c.request("GET", "/health")
        h = json.loads(c.getresponse().read())
        assert h["langfuse"]["otlp_requests_forwarded"] == 1
        assert langfuse_server.secret_key not in json.dumps(h)
    finally:
        srv.stop()


def test_head_sampling_keeps_orphaned_feedback_out_of_langfuse(capture, langfuse_server, sqlite_url):
    """Sampling at 0.3 with feedback on every trace: the feedback of traces the sampler dropped is
    stored and counted as orphaned, and Langfuse gets scores only for traces it got spans of."""
    from autometrics.collectors.store import TraceStore

    capture.configure(store_url=sqlite_url, project="lf", langfuse="auto", sample_rate=0.3)

    @capture.observe(model="gpt-4o-mini", operation="chat")
    def llm(q):
        return "answer:" + q

    @capture.observe
    def handle(q):
        return llm(q), capture.current_trace_id()

    tids = [handle(f"question {i}")[1] for i in range(80)]
    for tid in tids:
        assert capture.feedback(tid, "thumbs", True) is not None  # stored either way
    assert capture.flush(15)
    store = TraceStore(sqlite_url)
    recorded = set(store.spans_frame()["trace_id"])
    assert 0 < len(recorded) < 80, len(recorded)
    assert _wait(lambda: len(langfuse_server.scores) >= len(recorded)), (langfuse_server.errors, capture.stats())
    assert capture.flush(5)
    scored = {s["traceId"] for s in langfuse_server.scores}
    assert scored == recorded  # no score of a trace Langfuse has no span of
    assert {s["trace_id"] for s in langfuse_server.spans} == recorded
    orphans = 80 - len(recorded)
    assert capture.stats()["feedback_orphaned"] == orphans
    assert len(store.feedback_frame()) == 80  # nothing collected is lost
    assert store.orphaned_feedback() == orphans == store.orphaned_feedback("thumbs")
    assert not langfuse_server.errors, langfuse_server.errors


def test_collector_scores_feedback_only_for_stored_traces(langfuse_server, tmp_path):
    """Over HTTP: feedback whose trace arrives a moment later is sent once the spans are stored;
    feedback for a trace that never arrives (sampled out by the app) is stored, counted as
    orphaned in /health and never sent to Langfuse."""
    from autometrics.collectors.server import CollectorServer
    from autometrics.collectors.store import TraceStore
    from otlp_client import otlp_request as _otlp_request
    from otlp_client import post as _post

    srv = CollectorServer(f"sqlite:///{tmp_path / 'c.db'}", port=0, api_keys=["k"], langfuse="auto").start()
    try:
        srv.langfuse.orphan_grace = 1.5
        hdr = {"Authorization": "Bearer k"}
        late, missing = "01" * 8 + "00" * 8, "ab" * 16
        for tid in (late, missing):  # feedback first, as a fast thumbs-up can be
            body = json.dumps({"trace_id": tid, "name": "thumbs", "value": True}).encode()
            assert _post(srv.url, "/v1/feedback", body, hdr)[0] == 200
        code, _, _ = _post(srv.url, "/v1/traces", _otlp_request(3).SerializeToString(), {**hdr, "Content-Type": "application/x-protobuf"})
        assert code == 200

        def health():
            c = http.client.HTTPConnection(*srv.httpd.server_address[:2], timeout=5)
            c.request("GET", "/health")
            return json.loads(c.getresponse().read())

        assert _wait(lambda: health()["langfuse"]["feedback_orphaned"] == 1, 10), health()
        assert srv.langfuse.flush(10)
        assert [s["traceId"] for s in langfuse_server.scores] == [late]
        assert health()["langfuse"]["feedback_waiting_for_trace"] == 0
        store = TraceStore(f"sqlite:///{tmp_path / 'c.db'}")
        assert len(store.feedback_frame()) == 2 and store.orphaned_feedback() == 1
        assert not langfuse_server.errors
    finally:
        srv.stop()


def test_our_spans_reach_langfuse_next_to_the_apps_own_langfuse_client(capture, langfuse_server, sqlite_url):
    """The app made its own Langfuse client first (the SDK keeps one state per public key, with
    the app's tracer provider): our spans still reach Langfuse, and stats() counts as exported
    only what Langfuse acknowledged."""
    app_client = langfuse.Langfuse()  # LANGFUSE_* from the fixture: the app's own setup
    capture.configure(store_url=sqlite_url, project="lf", langfuse="auto")

    @capture.observe(model="gpt-4o-mini")
    def llm(q):
        return "answer:" + q

    for i in range(3):
        llm(f"q{i}")
    assert capture.flush(15)
    assert _wait(lambda: len([s for s in langfuse_server.spans if s["scope"] == "autometrics"]) == 3), (
        langfuse_server.errors, capture.stats())
    assert capture.stats().get("langfuse_spans_exported") == 3
    assert not langfuse_server.errors
    app_client.shutdown()
