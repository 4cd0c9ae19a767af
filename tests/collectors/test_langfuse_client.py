"""The one Langfuse client (autometrics.collectors.langfuse_client): its score delivery rule on the
in-memory path that feedback scores take, against the loopback Langfuse-compatible test server
(tests/langfuse_server.py; it checks every score body against Langfuse's API spec and the SDK's
own model, and can fail with a status or go down).  The same rule on the store-backed path of
evaluator scores is tested next to it in tests/evaluators/continuous/test_langfuse_push.py."""

from __future__ import annotations

import http.client
import json
import logging
import uuid

import pytest
from waiting import wait_until

pytest.importorskip("langfuse")

FAST = dict(first_delay=0.05, max_delay=0.1)  # the rule's waits, shortened for tests


def _row(name="thumbs", value=True, kind=None, trace_id=None):
    from autometrics.collectors.feedback import make_feedback_row

    return make_feedback_row(trace_id or uuid.uuid4().hex, name, value, None, kind, None, "test", None, None)


def _client(**kw):
    from autometrics.collectors.langfuse_client import LangfuseClient, RetryRule

    retry = RetryRule(max_attempts=kw.pop("max_attempts", 3), first_delay=kw.pop("first_delay", FAST["first_delay"]),
                      max_delay=kw.pop("max_delay", FAST["max_delay"]))
    return LangfuseClient(retry=retry, timeout=2, **kw)


def test_feedback_score_retried_then_delivered_once(langfuse_server):
    c = _client(max_attempts=5)
    langfuse_server.fail_with(503)
    c.score(_row())
    assert wait_until(lambda: c.stats().get("langfuse_scores_retried", 0) >= 2, 10), c.stats()
    langfuse_server.recover()
    assert c.flush(10), c.stats()
    st = c.stats()
    assert st["langfuse_scores_sent"] == 1 and st.get("langfuse_scores_lost", 0) == 0, st
    assert st["langfuse_score_attempts"] == st["langfuse_scores_retried"] + 1, st
    assert [s["dataType"] for s in langfuse_server.scores] == ["BOOLEAN"] and langfuse_server.scores[0]["value"] == 1.0
    assert max(langfuse_server.score_id_counts().values()) == 1
    assert not langfuse_server.errors, langfuse_server.errors
    c.shutdown(2)


@pytest.mark.parametrize("failure", ["503", "down", "401"])
def test_feedback_score_given_up_after_max_attempts_is_counted_lost(langfuse_server, failure, caplog):
    caplog.set_level(logging.WARNING, logger="autometrics.langfuse")
    if failure == "401":  # wrong keys: refused, and retried like any failure (the keys may be fixed meanwhile)
        c = _client(max_attempts=3, secret_key="sk-wrong")
    else:
        c = _client(max_attempts=3)
        langfuse_server.fail_with(503) if failure == "503" else langfuse_server.go_down()
    c.score(_row())
    assert wait_until(lambda: c.stats().get("langfuse_scores_lost", 0) == 1, 15), c.stats()
    st = c.stats()
    assert (st["langfuse_score_attempts"], st["langfuse_scores_retried"], st.get("langfuse_scores_sent", 0)) == (3, 2, 0), st
    assert c.pending() == 0 and langfuse_server.scores == []
    assert "lost after their last attempt" in caplog.text
    assert "sk-wrong" not in caplog.text and langfuse_server.secret_key not in caplog.text
    c.shutdown(2)


def test_rejected_score_is_counted_and_not_retried(langfuse_server):
    c = _client()
    bad = c.score_body(id=str(uuid.uuid4()), traceId=uuid.uuid4().hex, name="thumbs", value=0.5, dataType="BOOLEAN")
    c.enqueue([bad, c.score_body(id=str(uuid.uuid4()), traceId=uuid.uuid4().hex, name="stars", value=4.0, dataType="NUMERIC")])
    assert not c.flush(10)  # a score was rejected meanwhile: flush says so
    st = c.stats()
    assert (st["langfuse_score_attempts"], st["langfuse_scores_sent"], st["langfuse_scores_rejected"]) == (2, 1, 1), st
    assert st.get("langfuse_scores_retried", 0) == 0 and [s["name"] for s in langfuse_server.scores] == ["stars"]
    c.shutdown(2)


def test_full_queue_and_oversized_scores_are_counted_lost(langfuse_server):
    c = _client(max_pending=2, first_delay=30, max_delay=30)  # the two queued wait for their second attempt
    langfuse_server.go_down()
    assert c.enqueue([c.score_body(id=str(i), traceId=uuid.uuid4().hex, name="n", value=1.0) for i in range(3)]) == 2
    assert c.enqueue([c.score_body(id="big", traceId=uuid.uuid4().hex, name="n", value=1.0, comment="x" * 1_000_000)]) == 0
    st = c.stats()
    assert st["langfuse_scores_queued"] == 2 and st["langfuse_scores_lost"] == 2, st
    c.shutdown(2)


def test_shutdown_gives_one_last_attempt_then_counts_the_rest_lost(langfuse_server):
    from autometrics.collectors.langfuse_client import LangfuseClient, RetryRule

    c = LangfuseClient(retry=RetryRule(max_attempts=10, first_delay=30, max_delay=30), timeout=2, batch_size=2)
    langfuse_server.fail_with(503)
    c.enqueue([c.score_body(id=str(uuid.uuid4()), traceId=uuid.uuid4().hex, name="n", value=1.0) for _ in range(5)])
    assert wait_until(lambda: c.stats().get("langfuse_scores_retried", 0) == 2, 10), c.stats()  # first batch failed, waits 30 s
    c.shutdown(3)
    st = c.stats()
    # the last attempt of the first batch fails (Langfuse is down): the three never tried go with it
    assert st["langfuse_scores_lost"] == 5 and c.pending() == 0, st
    assert st["langfuse_score_attempts"] == 4, st
    assert c.enqueue([c.score_body(id="late", traceId=uuid.uuid4().hex, name="n", value=1.0)]) == 0  # closed: counted lost
    assert c.stats()["langfuse_scores_lost"] == 6


def test_settings_never_show_the_secret(monkeypatch):
    from autometrics.collectors.langfuse_client import langfuse_settings

    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", "pk-visible")
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-hidden")
    monkeypatch.delenv("LANGFUSE_BASE_URL", raising=False)
    monkeypatch.setenv("LANGFUSE_HOST", "http://lf.example/")
    s = langfuse_settings()
    assert (s.public_key, s.base_url) == ("pk-visible", "http://lf.example") and "sk-hidden" not in repr(s)
    monkeypatch.delenv("LANGFUSE_SECRET_KEY")
    with pytest.raises(RuntimeError, match="LANGFUSE_SECRET_KEY"):
        langfuse_settings()


def test_collector_feedback_scores_follow_the_same_rule(langfuse_server, tmp_path):
    """The collector's forwarder delivers feedback through the same client: a 503 is a counted
    retry (in /health), then the score arrives once."""
    from autometrics.collectors.langfuse_client import LangfuseClient
    from autometrics.collectors.server import CollectorServer
    from otlp_client import post as _post

    srv = CollectorServer(f"sqlite:///{tmp_path / 'c.db'}", port=0, api_keys=["k"], langfuse="on").start()
    try:
        assert isinstance(srv.langfuse.client, LangfuseClient)
        from otlp_client import otlp_request

        hdr = {"Authorization": "Bearer k", "Content-Type": "application/x-protobuf"}
        assert _post(srv.url, "/v1/traces", otlp_request(2).SerializeToString(), hdr)[0] == 200
        langfuse_server.fail_with(503)
        body = json.dumps({"trace_id": "01" * 8 + "00" * 8, "name": "thumbs", "value": True}).encode()
        assert _post(srv.url, "/v1/feedback", body, {"Authorization": "Bearer k"})[0] == 200

        def health():
            c = http.client.HTTPConnection(*srv.httpd.server_address[:2], timeout=5)
            c.request("GET", "/health")
            return json.loads(c.getresponse().read())

        assert wait_until(lambda: health()["langfuse"].get("langfuse_scores_retried", 0) >= 1, 10), health()
        langfuse_server.recover()
        assert srv.langfuse.flush(10)
        h = health()
        assert h["langfuse"]["langfuse_scores_sent"] == 1 and h["counters"]["langfuse_scores_sent"] == 1, h
        assert len(langfuse_server.scores) == 1 and not langfuse_server.errors
        assert langfuse_server.secret_key not in json.dumps(h)
    finally:
        srv.stop()
