"""@observe -> real OpenTelemetry spans with GenAI attributes -> the trace store; feedback."""

from __future__ import annotations

import asyncio
import json
import re

import pytest


def _spans(store_or_url):
    from autometrics.collectors.store import TraceStore

    s = store_or_url if not isinstance(store_or_url, str) else TraceStore(store_or_url)
    return s.spans_frame()


def test_sync_call_becomes_span_with_genai_attributes(capture, sqlite_url):
    capture.configure(store_url=sqlite_url, project="bot", task="answer questions", langfuse=False)

    @capture.observe(model="gpt-4o-mini", operation="chat")
    def llm(prompt: str) -> dict:
        return {"model": "gpt-4o-mini-2024", "choices": [{"message": {"role": "assistant", "content": "Paris"}}],
                "usage": {"prompt_tokens": 11, "completion_tokens": 2}}

    assert llm("Capital of France?")["choices"][0]["message"]["content"] == "Paris"
    assert capture.flush(10)
    sp = _spans(sqlite_url)
    assert len(sp) == 1
    row = sp.iloc[0]
    assert row["name"] == "chat gpt-4o-mini" and row["kind"] == "CLIENT" and row["project"] == "bot"
    attrs = json.loads(row["attributes"])
    assert attrs["gen_ai.request.model"] == "gpt-4o-mini"
    assert attrs["gen_ai.response.model"] == "gpt-4o-mini-2024"
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.usage.input_tokens"] == 11 and attrs["gen_ai.usage.output_tokens"] == 2
    msgs = json.loads(attrs["gen_ai.input.messages"])
    assert msgs == [{"role": "user", "parts": [{"type": "text", "content": "Capital of France?"}]}]
    out = json.loads(attrs["gen_ai.output.messages"])
    assert out[0]["role"] == "assistant" and out[0]["parts"][0]["content"] == "Paris"
    assert (row["input"], row["output"], row["model"], row["input_tokens"], row["output_tokens"]) == ("Capital of France?", "Paris", "gpt-4o-mini", 11, 2)
    assert json.loads(row["resource"])["autometrics.task"] == "answer questions"


def test_nesting_trace_id_and_update_current_span(capture, sqlite_url):
    capture.configure(store_url=sqlite_url, langfuse=False)
    seen = {}

    @capture.observe(model="m1")
    def inner(x):
        capture.update_current_span(input_tokens=3, output_tokens=4)
        seen["inner"] = capture.current_trace_id()
        return x + 1

    @capture.observe
    def outer(x, y=2):
        seen["outer"] = capture.current_trace_id()
        return inner(x) * y

    assert capture.current_trace_id() is None
    assert outer(1, y=3) == 6
    assert re.fullmatch(r"[0-9a-f]{32}", seen["outer"]) and seen["inner"] == seen["outer"]
    capture.flush()
    sp = _spans(sqlite_url).set_index("name")
    assert sp.loc["chat m1", "parent_span_id"] == sp.loc["outer", "span_id"]
    assert pd_isna(sp.loc["outer", "parent_span_id"])
    assert sp.loc["outer", "input"] == '{"x": 1, "y": 3}'
    assert sp.loc["chat m1", "input_tokens"] == 3


def pd_isna(v) -> bool:
    import pandas as pd

    return bool(pd.isna(v))


def test_async_generators_and_errors(capture, sqlite_url):
    capture.configure(store_url=sqlite_url, langfuse=False)

    @capture.observe
    async def aanswer(q):
        await asyncio.sleep(0)
        return q.upper()

    @capture.observe
    def stream(n):
        for i in range(n):
            yield f"tok{i} "
        return "done"

    @capture.observe
    async def astream(n):
        for i in range(n):
            await asyncio.sleep(0)
            yield f"a{i}"

    @capture.observe
    def fails():
        raise ValueError("bad input")

    @capture.observe
    def partial(n):
        yield from range(n)

    async def consume():
        return await aanswer("x"), [t async for t in astream(3)]

    assert asyncio.run(consume()) == ("X", ["a0", "a1", "a2"])
    assert list(stream(3)) == ["tok0 ", "tok1 ", "tok2 "]
    with pytest.raises(ValueError, match="bad input"):
        fails()
    g = partial(10)
    assert next(g) == 0 and next(g) == 1
    g.close()  # consumer stops early
    capture.flush()
    sp = _spans(sqlite_url).set_index("name")
    assert sp.loc["aanswer", "output"] == "X"
    assert sp.loc["stream", "output"] == "tok0 tok1 tok2 "  # captured when the stream completed
    assert json.loads(sp.loc["stream", "attributes"])["gen_ai.request.stream"] is True
    assert sp.loc["astream", "output"] == "a0a1a2"
    assert sp.loc["fails", "status"] == "ERROR" and sp.loc["fails", "error_type"] == "ValueError"
    assert "bad input" in sp.loc["fails", "error_message"]
    stack = sp.loc["fails", "error_stack"]  # the exception event's stack trace, where it was raised
    assert stack.startswith("Traceback") and "def fails" not in stack and "in fails" in stack and "ValueError: bad input" in stack
    assert sp.loc["partial", "output"] == "[0, 1]" and sp.loc["partial", "status"] != "ERROR"


def test_redaction_and_capture_off(capture, sqlite_url):
    capture.configure(store_url=sqlite_url, langfuse=False)

    def mask(v):
        return re.sub(r"\S+@\S+", "<email>", v if isinstance(v, str) else json.dumps(v))

    @capture.observe(redact=mask)
    def support(msg):
        return f"we will mail {msg.split()[-1]}"

    @capture.observe(capture_input=False, capture_output=False)
    def secret(pw):
        return pw[::-1]

    @capture.observe(redact=lambda v: 1 / 0)
    def broken_redactor(x):
        return "sensitive output"

    assert support("contact me at ann@example.com") == "we will mail ann@example.com"
    assert secret("hunter2") == "2retnuh"
    assert broken_redactor("sensitive input") == "sensitive output"
    capture.flush()
    sp = _spans(sqlite_url).set_index("name")
    assert sp.loc["support", "input"] == "contact me at <email>" and sp.loc["support", "output"] == "we will mail <email>"
    assert "hunter2" not in sp.loc["secret"].to_json() and "2retnuh" not in sp.loc["secret"].to_json()
    assert "sensitive" not in sp.loc["broken_redactor"].to_json()  # a failing redactor records nothing


def test_capture_content_off_globally(capture, sqlite_url):
    capture.configure(store_url=sqlite_url, langfuse=False, capture_content=False)

    @capture.observe(model="m")
    def f(x):
        return "private " + x

    assert f("data") == "private data"
    capture.flush()
    row = _spans(sqlite_url).iloc[0]
    assert pd_isna(row["input"]) and pd_isna(row["output"]) and row["model"] == "m"


def test_works_alongside_application_tracer_provider(capture, sqlite_url):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    app_exporter = InMemorySpanExporter()
    app_provider = TracerProvider()
    app_provider.add_span_processor(SimpleSpanProcessor(app_exporter))
    app_tracer = app_provider.get_tracer("app")
    capture.configure(store_url=sqlite_url, langfuse=False)

    @capture.observe
    def step(x):
        return x * 2

    with app_tracer.start_as_current_span("http-request") as root:
        assert step(21) == 42
        app_trace = format(root.get_span_context().trace_id, "032x")
        app_span = format(root.get_span_context().span_id, "016x")
    capture.flush()
    sp = _spans(sqlite_url)
    assert len(sp) == 1 and sp.iloc[0]["trace_id"] == app_trace and sp.iloc[0]["parent_span_id"] == app_span
    assert [s.name for s in app_exporter.get_finished_spans()] == ["http-request"]  # app's pipeline untouched


def test_sampling_zero_records_nothing_but_calls_run(capture, sqlite_url):
    capture.configure(store_url=sqlite_url, langfuse=False, sample_rate=0.0)

    @capture.observe
    def f(x):
        return x

    assert [f(i) for i in range(50)] == list(range(50))
    capture.flush()
    assert capture.stats().get("span_queued", 0) == 0
    with pytest.raises(ValueError):
        capture.configure(store_url=sqlite_url, sample_rate=1.5)


def test_configure_from_environment(capture, sqlite_url, monkeypatch):
    monkeypatch.setenv("AUTOMETRICS_STORE_URL", sqlite_url)
    monkeypatch.setenv("AUTOMETRICS_PROJECT", "envproj")
    monkeypatch.setenv("AUTOMETRICS_TASK", "summarise")
    monkeypatch.setenv("AUTOMETRICS_SAMPLE_RATE", "1")
    cfg = capture.configure()
    assert (cfg.store_url, cfg.project, cfg.task, cfg.langfuse) == (sqlite_url, "envproj", "summarise", "auto")

    @capture.observe
    def f(x):
        return x

    f("a")
    capture.flush()
    assert _spans(sqlite_url).iloc[0]["project"] == "envproj"


def test_feedback_kinds_latest_wins_and_training_frame(capture, sqlite_url):
    from autometrics.collectors.store import TraceStore
    from autometrics.evaluators.data import load_dataset

    capture.configure(store_url=sqlite_url, langfuse=False)

    @capture.observe(model="gpt-test")
    def answer(q):
        return {"q": q, "trace": capture.current_trace_id()}

    ids = [answer(f"question {i}")["trace"] for i in range(12)]
    for i, t in enumerate(ids):
        assert capture.feedback(t, "thumbs", "down") is not None
        assert capture.feedback(t, "thumbs", i % 2 == 0, comment="changed my mind")  # latest wins
        assert capture.feedback(t, "stars", (i % 5) + 1, kind="likert")
        capture.feedback(t, "copied", 1, kind="behavioural")
        capture.feedback(t, "copied", 1, kind="behavioral")
    capture.feedback(ids[0], "fix", "The better answer", kind="correction")
    capture.feedback(ids[1], "topic", "billing")  # categorical
    # rejected, never raised: bad trace id, bad thumbs value, unknown kind
    assert capture.feedback("xyz", "thumbs", True) is None
    assert capture.feedback(ids[0], "thumbs", "maybe", kind="thumbs") is None
    assert capture.feedback(ids[0], "thumbs", 1, kind="weird") is None
    assert capture.stats()["feedback_invalid"] == 3
    capture.flush()

    store = TraceStore(sqlite_url)
    assert store.count("feedback") == 12 * 5 + 2
    df = store.training_frame(["thumbs", "stars", "copied"], aggregate={"copied": "sum"})
    assert list(df.columns[:3]) == ["id", "input", "output"] and "references" in df.columns
    assert len(df) == 12 and df["id"].tolist() == ids
    assert df["thumbs"].tolist() == [1.0 if i % 2 == 0 else 0.0 for i in range(12)]
    assert df["copied"].tolist() == [2.0] * 12
    assert df["model"].unique().tolist() == ["gpt-test"]
    assert json.loads(df.loc[0, "references"]) == ["The better answer"]
    assert store.training_frame("topic")["topic"].tolist() == ["billing"]
    assert store.training_frame("thumbs", aggregate="mean")["thumbs"].tolist() == [0.5 if i % 2 == 0 else 0.0 for i in range(12)]
    # the frame is the input of a fit
    ds = load_dataset(df, ["thumbs", "stars"])
    assert ds.labels["thumbs"].kind == "binary" and ds.labels["stars"].n_labelled == 12
    # SDK-level helper with the configured aggregation
    assert capture.training_frame("thumbs")["thumbs"].tolist() == df["thumbs"].tolist()


def test_feedback_for_current_trace_and_idempotent_id(capture, sqlite_url):
    from autometrics.collectors.store import TraceStore

    capture.configure(store_url=sqlite_url, langfuse=False)

    @capture.observe
    def f():
        capture.feedback(None, "auto_check", 0.7)  # None: the current trace
        return capture.current_trace_id()

    t = f()
    capture.feedback(t, "thumbs", True, id="client-retry-1")
    capture.feedback(t, "thumbs", True, id="client-retry-1")  # a retry: stored once
    capture.flush()
    fb = TraceStore(sqlite_url).feedback_frame(trace_id=t)
    assert sorted(fb["name"]) == ["auto_check", "thumbs"]


def test_captured_traces_and_feedback_fit_an_evaluator(capture, sqlite_url):
    """The point of capture: what @observe + feedback() stored is the input of a fit."""
    import autometrics

    capture.configure(store_url=sqlite_url, langfuse=False)

    @capture.observe
    def simplify(sentence: str) -> str:
        words = sentence.split()
        return sentence if len(sentence) % 2 else " ".join(words[: max(1, len(words) // 3)])

    for i in range(40):
        out = simplify(f"the committee number {i} postponed the decision about the new bridge {'again ' * (i % 3)}")
        capture.feedback(capture.current_trace_id() or _last_trace(sqlite_url), "thumbs", len(out.split()) > 6)
    df = capture.training_frame("thumbs")
    assert len(df) == 40 and df["thumbs"].nunique() == 2
    result = autometrics.fit_evaluator(df, target="thumbs", n_boot=50, progress=False)
    assert result.evaluator.statistics["test"]["n"] >= 10


def _last_trace(url):
    import autometrics.capture as cap
    from autometrics.collectors.store import TraceStore

    cap.flush()
    sp = TraceStore(url).spans_frame()
    return sp.iloc[-1]["trace_id"]
