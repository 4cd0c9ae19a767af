"""Sessions, users, tags and metadata: set around a request (trace_attributes) or from inside it
(update_current_trace), carried by every span of the request (the real openai client's
instrumented span included), read back per trace by the training frame, kept whole by the
worker's holdout split, and exported to Langfuse under the names Langfuse reads."""

from __future__ import annotations

import json

import pytest
from fake_llm_server import FakeLLMServer


def _bot(capture):
    @capture.observe(model="gpt-4o-mini", operation="chat")
    def llm(q):
        return f"answer to {q}"

    @capture.observe
    def handle(q, user=None):
        if user:
            capture.update_current_trace(user_id=user)
        return llm(q), capture.current_trace_id()

    return handle


def test_sessions_and_users_reach_the_training_frame(capture, sqlite_url):
    from autometrics.collectors.store import TraceStore
    from autometrics.evaluators.continuous.refit import newest_holdout

    capture.configure(store_url=sqlite_url, langfuse=False)
    handle = _bot(capture)
    tids = {}
    with capture.trace_attributes(session_id="conv-1", user_id="ana", tags=["beta"], metadata={"plan": "pro"}):
        tids["a1"] = handle("first question")[1]
        with capture.trace_attributes(tags=["mobile"]):
            tids["a2"] = handle("follow-up")[1]
    with capture.trace_attributes(session_id="conv-2"):
        tids["b1"] = handle("other question", user="bo")[1]
    tids["none"] = handle("no session")[1]  # nothing leaks out of the blocks
    for tid in tids.values():
        capture.feedback(tid, "thumbs", True)
    assert capture.flush(10)
    f = TraceStore(sqlite_url).training_frame("thumbs").set_index("id")
    row = {k: f.loc[t] for k, t in tids.items()}
    assert (row["a1"]["session_id"], row["a1"]["user_id"]) == ("conv-1", "ana")
    assert json.loads(row["a1"]["tags"]) == ["beta"] and json.loads(row["a2"]["tags"]) == ["beta", "mobile"]
    assert json.loads(row["a1"]["metadata"]) == {"plan": "pro"}
    assert (row["b1"]["session_id"], row["b1"]["user_id"]) == ("conv-2", "bo")
    assert row["none"][["session_id", "user_id", "tags", "metadata"]].isna().all()
    assert row["a1"]["conversation"] == row["a2"]["conversation"] == "session:conv-1"
    assert row["none"]["conversation"] == "input:no session"
    # every span of a session's trace carries it (the inner LLM call too)
    spans = TraceStore(sqlite_url).spans_frame()
    assert set(spans[spans["trace_id"] == tids["a1"]]["session_id"]) == {"conv-1"}
    # the worker's newest-feedback holdout keeps a conversation on one side
    frame = f.reset_index()
    train, hold = newest_holdout(frame, 0.3)
    conv = frame["conversation"]
    assert not set(conv.iloc[train]) & set(conv.iloc[hold])


def test_bad_values_are_named(capture, sqlite_url):
    from autometrics.metricbank.errors import UserError

    capture.configure(store_url=sqlite_url, langfuse=False)
    with pytest.raises(UserError, match="tags must be a list"):
        with capture.trace_attributes(tags="beta"):
            pass
    with pytest.raises(UserError, match="metadata must be a dict"):
        capture.update_current_trace(metadata=["x"])


def test_client_spans_and_langfuse_export_carry_the_session(capture, langfuse_server, sqlite_url, monkeypatch):
    pytest.importorskip("opentelemetry.instrumentation.genai.openai")
    import openai
    from autometrics.capture import instrumentation
    from autometrics.collectors.store import TraceStore
    from waiting import wait_until

    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    capture.configure(store_url=sqlite_url, project="lf", langfuse="auto")
    instrumentation.instrument("openai")
    try:
        with FakeLLMServer() as llm:
            client = openai.OpenAI(base_url=llm.url, api_key="sk-test", max_retries=0)

            @capture.observe
            def handle(q):
                client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": q}])
                return capture.current_trace_id()

            with capture.trace_attributes(session_id="conv-9", user_id="cy", tags=["vip"]):
                tid = handle("hello")
    finally:
        instrumentation.uninstrument()
    assert capture.flush(15)
    spans = TraceStore(sqlite_url).spans_frame()
    mine = spans[spans["trace_id"] == tid]
    assert len(mine) == 2 and set(mine["session_id"]) == {"conv-9"} and set(mine["user_id"]) == {"cy"}
    assert wait_until(lambda: len(langfuse_server.spans) >= 2, 10), langfuse_server.errors
    for s in langfuse_server.spans:  # the names Langfuse maps to the trace's sessionId / userId / tags
        a = s["attributes"]
        assert a["langfuse.session.id"] == "conv-9" and a["langfuse.user.id"] == "cy" and list(a["langfuse.trace.tags"]) == ["vip"]
        assert a["session.id"] == "conv-9" and a["user.id"] == "cy"  # and the ones Phoenix reads
