"""autometrics.instrument(): the real ``openai`` client, ``litellm`` and a DSPy program calling a
loopback OpenAI-compatible server (tests/fake_llm_server.py) under ``@observe``; their GenAI
client spans (made by the ecosystem's own instrumentations) land in the real SQLite trace store,
nested under the observed call.  And configure(tracer_provider=app_provider): one tree in the
app's exporter and the store.  (The same with the real embedded llama.cpp server:
test_instrument_e2e.py.)"""

from __future__ import annotations

import asyncio
import json
import time

import pandas as pd
import pytest
from fake_llm_server import FakeLLMServer
from waiting import stored_spans

SYSTEM = "You are terse. Answer in one line."


@pytest.fixture
def llm():
    with FakeLLMServer() as srv:
        yield srv


@pytest.fixture
def inst(capture, monkeypatch):
    """autometrics.capture.instrumentation, undone after the test (instrumentation is process-wide)."""
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    from autometrics.capture import instrumentation as mod

    yield mod
    mod.uninstrument()


def _need(*modules):
    for m in modules:
        pytest.importorskip(m, reason=f"needs {m} (the `observe`/`llm` extras)")


def _attrs(row) -> dict:
    return json.loads(row["attributes"])


def _child_of(df, parent_row):
    return df[df["parent_span_id"] == parent_row["span_id"]]


def _messages(row, key="gen_ai.input.messages"):
    return json.loads(_attrs(row)[key])


def test_openai_calls_and_streams_nest_under_the_observed_call(capture, inst, llm, sqlite_url):
    _need("openai", "opentelemetry.instrumentation.genai.openai")
    import openai

    capture.configure(store_url=sqlite_url, langfuse=False, spool=False)
    assert inst.instrument("openai") == ["openai"]
    client = openai.OpenAI(base_url=llm.url, api_key="k")

    @capture.observe
    def answer(question):
        r = client.chat.completions.create(model="m-chat", temperature=0.25, max_tokens=40, seed=7,
                                           messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}])
        s = client.chat.completions.create(model="m-stream", stream=True, stream_options={"include_usage": True},
                                           messages=[{"role": "user", "content": question + " again"}])
        streamed = "".join(c.choices[0].delta.content or "" for c in s if c.choices)
        return r.choices[0].message.content, streamed

    text, streamed = answer("What is OTel?")
    df = stored_spans(sqlite_url, 3, capture)
    assert len(df) == 3
    root = df[df["scope"] == "autometrics"].iloc[0]
    chat = df[df["name"] == "chat m-chat"].iloc[0]
    stream = df[df["name"] == "chat m-stream"].iloc[0]
    for row in (chat, stream):  # nested under the observed call, same trace, kind CLIENT
        assert row["parent_span_id"] == root["span_id"] and row["trace_id"] == root["trace_id"]
        assert row["kind"] == "CLIENT" and row["scope"] == "opentelemetry.instrumentation.genai.openai"
    a = _attrs(chat)
    assert _messages(chat)[0] == {"role": "system", "parts": [{"type": "text", "content": SYSTEM}], "name": None}
    assert chat["input"] == f"{SYSTEM}\nWhat is OTel?"  # the system prompt is part of what was sent
    assert chat["output"] == text and chat["model"] == "m-chat"
    assert (a["gen_ai.request.temperature"], a["gen_ai.request.max_tokens"], a["gen_ai.request.seed"]) == (0.25, 40, 7)
    assert a["gen_ai.provider.name"] == "openai" and a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.response.id"] == "x" and list(a["gen_ai.response.finish_reasons"]) == ["stop"]
    assert chat["input_tokens"] == llm.reply(llm.requests[0], "ok")["usage"]["prompt_tokens"] and chat["output_tokens"] > 0
    sa = _attrs(stream)
    assert stream["output"] == streamed and sa["gen_ai.request.stream"] is True  # the streamed text, joined
    assert list(sa["gen_ai.response.finish_reasons"]) == ["stop"] and stream["output_tokens"] > 0


def test_litellm_sync_stream_and_async_calls_nest_and_leave_the_caller_span_alone(capture, inst, llm, sqlite_url):
    _need("litellm")
    import litellm

    capture.configure(store_url=sqlite_url, langfuse=False, spool=False)
    inst.instrument("litellm")
    kw = {"api_base": llm.url, "api_key": "k"}
    user_metadata = {"team": "a"}

    @capture.observe
    def answer(question):
        r = litellm.completion(model="openai/m-lite", temperature=0.5, metadata=user_metadata,
                               messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}], **kw)
        s = litellm.completion(model="openai/m-lite-stream", stream=True, messages=[{"role": "user", "content": question}], **kw)
        return r.choices[0].message.content + "|" + "".join(c.choices[0].delta.content or "" for c in s)

    @capture.observe
    async def answer_async(question):
        r = await litellm.acompletion(model="openai/m-lite-async", messages=[{"role": "user", "content": question}], **kw)
        await asyncio.sleep(0.5)  # LiteLLM logs async calls from a task on this loop
        return r.choices[0].message.content

    out = answer("Why?")
    asyncio.run(answer_async("How?"))
    df = stored_spans(sqlite_url, 5, capture)
    assert len(df) == 5, df[["name", "scope"]]
    assert user_metadata == {"team": "a"}  # the caller's metadata dict is not changed
    roots = {r["input"]: r for _, r in df[df["scope"] == "autometrics"].iterrows()}
    sync_children = _child_of(df, roots["Why?"])
    assert sorted(sync_children["name"]) == ["chat m-lite", "chat m-lite-stream"]
    assert set(sync_children["kind"]) == {"CLIENT"} and set(sync_children["trace_id"]) == {roots["Why?"]["trace_id"]}
    chat = sync_children[sync_children["name"] == "chat m-lite"].iloc[0]
    assert chat["input"] == f"{SYSTEM}\nWhy?" and chat["model"] == "m-lite" and chat["input_tokens"] > 0
    assert _attrs(chat)["gen_ai.request.temperature"] == 0.5 and _attrs(chat)["gen_ai.response.id"] == "x"
    stream = sync_children[sync_children["name"] == "chat m-lite-stream"].iloc[0]
    assert stream["output"] == out.split("|")[1] and _attrs(stream)["gen_ai.request.stream"] is True
    assert list(_child_of(df, roots["How?"])["name"]) == ["chat m-lite-async"]
    # LiteLLM writes onto the current span when it has no explicit parent: ours keeps its own values
    assert roots["Why?"]["output"] == out and "gen_ai.provider.name" not in _attrs(roots["Why?"])


def test_dspy_module_and_lm_spans_without_a_duplicate_litellm_span(capture, inst, llm, sqlite_url):
    _need("dspy", "litellm", "opentelemetry.instrumentation.genai.dspy")
    import dspy

    capture.configure(store_url=sqlite_url, langfuse=False, spool=False)
    inst.instrument("dspy", "litellm")
    qa = dspy.Predict("question -> answer")

    @capture.observe
    def answer(question, engine):  # DSPy's own HTTP engine, and its LiteLLM engine (an instrumented client too)
        lm = dspy.LM("openai/m-dspy", api_base=llm.url, api_key="k", cache=False, temperature=0.0, max_tokens=64,
                     engine=engine)
        with dspy.context(lm=lm):
            return qa(question=question).answer

    outs = {engine: answer(f"What is DSPy ({engine})?", engine) for engine in ("auto", "litellm")}
    df = stored_spans(sqlite_url, 6, capture)
    time.sleep(1.0)  # a LiteLLM span would be recorded from its logging thread by now
    df = stored_spans(sqlite_url, 6, capture)
    assert len(df) == 6, df[["name", "scope"]]  # per call: observed call, module, LM call; no second LiteLLM span
    for engine, out in outs.items():
        root = df[(df["scope"] == "autometrics") & (df["input"].str.contains(engine, regex=False))].iloc[0]
        module = _child_of(df, root).iloc[0]
        assert module["name"] == "invoke_workflow Predict" and module["kind"] == "INTERNAL"
        assert module["input"] == f"What is DSPy ({engine})?" and module["output"] == out  # the Prediction's field
        call = _child_of(df, module).iloc[0]
        assert call["name"] == "chat m-dspy" and call["kind"] == "CLIENT" and call["model"] == "m-dspy"
        assert call["scope"] == "opentelemetry.instrumentation.genai.dspy"
        assert _messages(call)[0]["role"] == "system" and "question" in _messages(call)[0]["parts"][0]["content"]
        assert f"What is DSPy ({engine})?" in call["input"] and out in call["output"] and call["input_tokens"] > 0
        assert list(_attrs(call)["gen_ai.response.finish_reasons"]) == ["stop"]


def test_streams_returned_by_the_observed_call_end_both_spans_with_the_text(capture, inst, sqlite_url):
    _need("openai", "litellm", "opentelemetry.instrumentation.genai.openai")
    import litellm
    import openai

    capture.configure(store_url=sqlite_url, langfuse=False, spool=False)
    assert inst.instrument("openai", "litellm") == ["openai", "litellm"]
    with FakeLLMServer(stream_delay=0.01) as srv:
        client = openai.OpenAI(base_url=srv.url, api_key="k")

        @capture.observe
        def via_openai(question):  # returns the stream: consumed by the caller, after the call returned
            return client.chat.completions.create(model="m-o", stream=True, messages=[{"role": "user", "content": question}])

        @capture.observe
        def via_litellm(question):
            return litellm.completion(model="openai/m-l", api_base=srv.url, api_key="k", stream=True,
                                      messages=[{"role": "user", "content": question}])

        texts = {fn.__name__: "".join(c.choices[0].delta.content or "" for c in fn(fn.__name__) if c.choices)
                 for fn in (via_openai, via_litellm)}
    df = stored_spans(sqlite_url, 4, capture)
    for name, model in (("via_openai", "m-o"), ("via_litellm", "m-l")):
        root = df[(df["scope"] == "autometrics") & (df["input"] == name)]
        assert len(root) == 1, df[["name", "output"]]
        child = _child_of(df, root.iloc[0])
        assert root.iloc[0]["output"] == texts[name] and texts[name]
        assert list(child["name"]) == [f"chat {model}"] and child.iloc[0]["output"] == texts[name]
        assert child.iloc[0]["end_time_ns"] <= root.iloc[0]["end_time_ns"] + 50_000_000  # both end with the stream


def test_capture_content_off_drops_messages_whatever_the_order(capture, inst, llm, sqlite_url):
    _need("openai", "opentelemetry.instrumentation.genai.openai")
    import openai

    inst.instrument("openai")  # before configure(): the instrumentation was built to record content
    capture.configure(store_url=sqlite_url, langfuse=False, spool=False, capture_content=False)
    client = openai.OpenAI(base_url=llm.url, api_key="k")
    client.chat.completions.create(model="m", messages=[{"role": "system", "content": "secret system"},
                                                        {"role": "user", "content": "my card 4111"}])
    df = stored_spans(sqlite_url, 1, capture)
    row = df.iloc[0]
    assert row["name"] == "chat m" and row["input_tokens"] > 0
    assert row["input"] is None and row["output"] is None
    assert "4111" not in row["attributes"] and "secret" not in row["attributes"]


def test_instrument_follows_a_later_configure_and_uninstrument_stops(capture, inst, llm, tmp_path):
    _need("openai", "opentelemetry.instrumentation.genai.openai")
    import openai

    first, second = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    capture.configure(store_url=first, langfuse=False, spool=False, project="one")
    inst.instrument("openai")
    client = openai.OpenAI(base_url=llm.url, api_key="k")
    client.chat.completions.create(model="m1", messages=[{"role": "user", "content": "a"}])
    capture.configure(store_url=second, langfuse=False, spool=False, project="two")
    client.chat.completions.create(model="m2", messages=[{"role": "user", "content": "b"}])
    assert list(stored_spans(first, 1, capture)["name"]) == ["chat m1"]
    df = stored_spans(second, 1, capture)
    assert list(df["name"]) == ["chat m2"] and list(df["project"]) == ["two"]
    assert inst.uninstrument("openai") == ["openai"] and inst.instrumented() == []
    client.chat.completions.create(model="m3", messages=[{"role": "user", "content": "c"}])
    capture.flush()
    assert list(stored_spans(second, 1, capture)["name"]) == ["chat m2"]


def test_client_errors_propagate_unchanged_and_are_recorded(capture, inst, sqlite_url):
    _need("openai", "opentelemetry.instrumentation.genai.openai")
    import openai

    capture.configure(store_url=sqlite_url, langfuse=False, spool=False)
    inst.instrument("openai")
    with FakeLLMServer(default="500") as srv:
        client = openai.OpenAI(base_url=srv.url, api_key="k", max_retries=0)
        with pytest.raises(openai.InternalServerError):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    row = stored_spans(sqlite_url, 1, capture).iloc[0]
    assert row["status"] == "ERROR" and row["error_type"] and row["kind"] == "CLIENT"


def test_disabled_capture_leaves_client_calls_working(capture, inst, llm):
    _need("openai", "opentelemetry.instrumentation.genai.openai")
    import openai

    capture.configure(enabled=False)
    inst.instrument("openai")
    r = openai.OpenAI(base_url=llm.url, api_key="k").chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert r.choices[0].message.content and capture.stats() == {}


def test_bad_names_say_what_to_do_and_no_names_means_every_installed_client(inst):
    with pytest.raises(ValueError, match=r"unknown client 'anthropic'; choose from 'openai', 'litellm', 'dspy'"):
        inst.instrument("anthropic")
    installed = [c for c in inst.CLIENTS if inst._missing(c) is None]
    assert inst.instrument() == installed and inst.instrumented() == installed
    assert inst.instrument() == installed  # again: re-applied, not doubled
    if "litellm" in installed:
        import litellm

        assert sum(type(c).__name__ == "AutometricsLiteLLMTelemetry" for c in litellm.callbacks) == 1
    assert inst.uninstrument() == installed and inst.instrumented() == []


# --------------------------------------------------------------------------- the app's provider


def _app_provider(service="my-api"):
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def test_app_tracer_provider_gives_one_tree_in_the_app_exporter_and_the_store(capture, inst, llm, sqlite_url):
    _need("openai", "opentelemetry.instrumentation.genai.openai")
    import openai

    provider, exporter = _app_provider()
    app = provider.get_tracer("my-app")
    capture.configure(store_url=sqlite_url, langfuse=False, spool=False, project="bot", task="answer",
                      tracer_provider=provider)
    inst.instrument("openai")
    client = openai.OpenAI(base_url=llm.url, api_key="k")

    @capture.observe
    def answer(question):
        with app.start_as_current_span("retrieve"):  # the app's span inside the observed call
            pass
        return client.chat.completions.create(model="m", messages=[{"role": "user", "content": question}]).choices[0].message.content

    with app.start_as_current_span("GET /ask") as http:
        with app.start_as_current_span("auth"):  # ends before any capture span starts
            pass
        answer("hi")
    with app.start_as_current_span("GET /health"):  # a trace without capture spans
        pass
    df = stored_spans(sqlite_url, 4, capture)
    exported = {s.name for s in exporter.get_finished_spans()}
    assert len(exported) == 6 and {"GET /ask", "auth", "retrieve", "chat m", "GET /health"} <= exported  # ours too
    trace_id = format(http.get_span_context().trace_id, "032x")
    assert set(df["trace_id"]) == {trace_id} and len(df) == 4  # neither "auth" nor the health check
    observed = df[df["scope"] == "autometrics"].iloc[0]
    assert set(df["name"]) == {"GET /ask", "retrieve", "chat m", observed["name"]}
    assert set(_child_of(df, observed)["name"]) == {"retrieve", "chat m"}
    ids = set(df["span_id"])
    assert all(p in ids for p in df["parent_span_id"].dropna())  # no orphan in the store
    assert set(df["project"]) == {"bot"} and all(json.loads(r)["autometrics.task"] == "answer" for r in df["resource"])
    for s in exporter.get_finished_spans():  # the app's spans are exported as they were
        assert s.resource.attributes["service.name"] == "my-api" and "autometrics.project" not in s.resource.attributes
    # shutdown() leaves the app's provider running; a new configure() re-binds the one forwarder
    capture.shutdown()
    with app.start_as_current_span("after-shutdown"):
        pass
    assert exporter.get_finished_spans()[-1].name == "after-shutdown"
    capture.configure(store_url=sqlite_url, langfuse=False, spool=False, project="bot", tracer_provider=provider)
    capture.configure(store_url=sqlite_url, langfuse=False, spool=False, project="bot", tracer_provider=provider)
    from autometrics.capture.provider import StoreForwarder

    assert sum(isinstance(p, StoreForwarder) for p in provider._active_span_processor._span_processors) == 1
    answer("again")
    assert len(stored_spans(sqlite_url, 7, capture)) == 7  # observed call + its app span + client span


def test_app_tracer_provider_must_be_an_sdk_provider(capture, sqlite_url):
    from opentelemetry import trace

    with pytest.raises(ValueError, match="tracer_provider must be an OpenTelemetry SDK TracerProvider"):
        capture.configure(store_url=sqlite_url, langfuse=False, spool=False, tracer_provider=trace.NoOpTracerProvider())


def test_observe_with_model_around_an_instrumented_client_is_one_llm_call(capture, inst, llm, sqlite_url):
    """The README's pattern, ``@observe(model=...)`` around a client call, with the client
    instrumented: one LLM-call span per call (the client's, with the model called and its usage);
    the observed function's span wraps it.  Without instrumentation the observed span is the call."""
    _need("openai", "opentelemetry.instrumentation.genai.openai")
    import openai

    capture.configure(store_url=sqlite_url, langfuse=False, spool=False)
    client = openai.OpenAI(base_url=llm.url, api_key="sk-test", max_retries=0)

    @capture.observe(model="my-label")
    def answer(q):
        return client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": q}]).choices[0].message.content

    @capture.observe
    def handle(q):
        return answer(q), capture.current_trace_id()

    _, plain = handle("uninstrumented")
    inst.instrument("openai")
    _, wrapped = handle("instrumented")
    df = stored_spans(sqlite_url, 5, capture)
    calls = df[df["operation"] == "chat"]
    assert calls.groupby("trace_id").size().to_dict() == {plain: 1, wrapped: 1}
    assert calls.set_index("trace_id").loc[plain, "name"] == "chat my-label"  # no client span: the observed one is the call
    client_span = calls.set_index("trace_id").loc[wrapped]
    assert client_span["model"] == "gpt-4o-mini" and client_span["input_tokens"] > 0
    outer = df[(df["trace_id"] == wrapped) & df["name"].str.endswith("answer")]
    assert len(outer) == 1, df[df["trace_id"] == wrapped]["name"].tolist()
    assert pd.isna(outer.iloc[0]["model"]) and _attrs(outer.iloc[0])["autometrics.wraps_llm_call"] is True
    assert client_span["parent_span_id"] == outer.iloc[0]["span_id"]
    frame = capture.training_frame("thumbs", include_unlabelled=True).set_index("id")
    assert frame.loc[wrapped, "model"] == "gpt-4o-mini"


def test_observe_with_model_around_litellm_is_one_llm_call(capture, inst, llm, sqlite_url):
    """The same with LiteLLM, whose instrumentation makes its span only after the call returned
    (in a callback): the observed function still only wraps the call, and the model is LiteLLM's."""
    _need("litellm")
    import litellm

    capture.configure(store_url=sqlite_url, langfuse=False, spool=False)
    inst.instrument("litellm")

    @capture.observe(model="my-label")
    def answer(q):
        return litellm.completion(model="openai/m-lite", api_base=llm.url, api_key="k",
                                  messages=[{"role": "user", "content": q}]).choices[0].message.content

    @capture.observe
    def handle(q):
        return answer(q), capture.current_trace_id()

    _, tid = handle("through litellm")
    df = stored_spans(sqlite_url, 3, capture)
    calls = df[(df["trace_id"] == tid) & (df["operation"] == "chat")]
    assert len(calls) == 1 and calls.iloc[0]["model"] == "m-lite", df[["name", "model", "operation"]].to_dict("records")
    outer = df[(df["trace_id"] == tid) & df["name"].str.endswith("answer")]
    assert len(outer) == 1 and pd.isna(outer.iloc[0]["model"]) and _attrs(outer.iloc[0])["autometrics.wraps_llm_call"] is True
    assert calls.iloc[0]["parent_span_id"] == outer.iloc[0]["span_id"]
