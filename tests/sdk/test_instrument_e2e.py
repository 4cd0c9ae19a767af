"""autometrics.instrument() end to end with real parts: the official ``openai`` client,
``litellm.completion`` and a ``dspy.Predict`` module calling the real embedded llama.cpp server
(Qwen2.5-Coder-0.5B, ``llama_cpp.server`` started by the project), the spans made by the
ecosystem's own instrumentations, written to the real SQLite trace store under ``@observe``.

Marked ``slow`` (the server starts in ~10-30 s on 2 cores); CI runs it.  Skipped, with the reason,
when llama-cpp-python (the ``llm`` extra) or the 0.5B model (``autometrics llm install --model
0.5b``) is absent."""

from __future__ import annotations

import asyncio
import json

import pytest
from waiting import stored_spans

pytestmark = pytest.mark.slow
SYSTEM = "You are a terse assistant. Answer with one short sentence."
QUESTION = "What colour is the sky on a clear day?"


@pytest.fixture
def inst(capture, monkeypatch, sqlite_url):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    from autometrics.capture import instrumentation as mod

    capture.configure(store_url=sqlite_url, langfuse=False, spool=False, project="e2e")
    yield mod
    mod.uninstrument()


def _attrs(row) -> dict:
    return json.loads(row["attributes"])


def _check_client_span(row, root, *, usage, finish, text, model="local"):
    """The GenAI client span of one real call, nested under the observed call."""
    a = _attrs(row)
    assert row["kind"] == "CLIENT" and row["name"] == f"chat {model}" and row["model"] == model
    assert row["parent_span_id"] == root["span_id"] and row["trace_id"] == root["trace_id"]
    sent = json.loads(a["gen_ai.input.messages"])
    assert sent[0]["role"] == "system" and sent[0]["parts"][0]["content"] == SYSTEM  # the system prompt, as sent
    assert sent[-1]["role"] == "user" and QUESTION in sent[-1]["parts"][0]["content"]
    assert row["input"].startswith(SYSTEM)
    if usage is not None:
        assert (row["input_tokens"], row["output_tokens"]) == (usage.prompt_tokens, usage.completion_tokens)
    else:  # llama_cpp.server sends no usage in streams (it ignores stream_options): none is recorded
        assert row["input_tokens"] != row["input_tokens"] or row["input_tokens"] is None
    reasons = a["gen_ai.response.finish_reasons"]
    assert list(json.loads(reasons) if isinstance(reasons, str) else reasons) == [finish]
    assert row["output"] == text and text.strip()
    assert a["gen_ai.response.id"] and a["gen_ai.provider.name"] == "openai"


def test_openai_client_against_the_real_local_llm(local_server, capture, inst, sqlite_url):
    openai = pytest.importorskip("openai")
    inst.instrument("openai")
    client = openai.OpenAI(base_url=local_server.api_base, api_key="local")
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    seen = {}

    @capture.observe
    def answer(q):
        r = client.chat.completions.create(model="local", messages=messages, max_tokens=24, temperature=0.0, seed=1)
        seen["r"] = r
        s = client.chat.completions.create(model="local", messages=messages, max_tokens=24, temperature=0.0, stream=True,
                                           stream_options={"include_usage": True})
        chunks = list(s)
        seen["stream"] = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        seen["stream_finish"] = next(c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason)
        seen["stream_usage"] = next((c.usage for c in chunks if c.usage), None)
        return r.choices[0].message.content

    out = answer(QUESTION)
    df = stored_spans(sqlite_url, 3, capture, timeout=20)
    root = df[df["scope"] == "autometrics"].iloc[0]
    calls = df[df["scope"] == "opentelemetry.instrumentation.genai.openai"].sort_values("start_time_ns")
    assert len(calls) == 2
    r = seen["r"]
    _check_client_span(calls.iloc[0], root, usage=r.usage, finish=r.choices[0].finish_reason, text=out)
    a = _attrs(calls.iloc[0])
    assert (a["gen_ai.request.max_tokens"], a["gen_ai.request.temperature"], a["gen_ai.request.seed"]) == (24, 0.0, 1)
    assert a["gen_ai.response.id"] == r.id
    _check_client_span(calls.iloc[1], root, usage=seen["stream_usage"], finish=seen["stream_finish"], text=seen["stream"])
    assert _attrs(calls.iloc[1])["gen_ai.request.stream"] is True


def test_litellm_against_the_real_local_llm(local_server, capture, inst, sqlite_url):
    litellm = pytest.importorskip("litellm")
    inst.instrument("litellm")
    # temperature 0.1: LiteLLM's OpenTelemetry callback leaves out a temperature of 0
    kw = {"model": "openai/local", "api_base": local_server.api_base, "api_key": "local", "max_tokens": 24,
          "temperature": 0.1, "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]}
    seen = {}

    @capture.observe
    def answer(q):
        r = litellm.completion(**kw)
        seen["r"] = r
        chunks = list(litellm.completion(**kw, stream=True, stream_options={"include_usage": True}))
        seen["stream"] = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        seen["stream_finish"] = next(c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason)
        seen["stream_usage"] = next((c.usage for c in chunks if getattr(c, "usage", None)), None)
        return r.choices[0].message.content

    @capture.observe
    async def answer_async(q):
        r = await litellm.acompletion(**kw)
        await asyncio.sleep(0.5)  # LiteLLM logs async calls from a task on this loop
        seen["async"] = r
        return r.choices[0].message.content

    out = answer(QUESTION)
    out_async = asyncio.run(answer_async(QUESTION))
    df = stored_spans(sqlite_url, 5, capture, timeout=20)
    roots = df[df["scope"] == "autometrics"].sort_values("start_time_ns")
    calls = df[df["scope"] == "litellm"].sort_values("start_time_ns")
    assert len(roots) == 2 and len(calls) == 3
    r = seen["r"]
    _check_client_span(calls.iloc[0], roots.iloc[0], usage=r.usage, finish=r.choices[0].finish_reason, text=out)
    assert _attrs(calls.iloc[0])["gen_ai.response.id"] == r.id and _attrs(calls.iloc[0])["gen_ai.request.temperature"] == 0.1
    _check_client_span(calls.iloc[1], roots.iloc[0], usage=seen["stream_usage"], finish=seen["stream_finish"],
                       text=seen["stream"])
    ra = seen["async"]
    _check_client_span(calls.iloc[2], roots.iloc[1], usage=ra.usage, finish=ra.choices[0].finish_reason, text=out_async)


def test_dspy_predict_against_the_real_local_llm(local_server, capture, inst, sqlite_url):
    dspy = pytest.importorskip("dspy")
    inst.instrument("dspy", "litellm")
    lm = dspy.LM("openai/local", api_base=local_server.api_base, api_key="local", cache=False, temperature=0.0,
                 max_tokens=48)
    qa = dspy.Predict("question -> answer")
    seen = {}

    @capture.observe
    def answer(q):
        with dspy.context(lm=lm):
            try:
                seen["answer"] = qa(question=q).answer
            except Exception as exc:  # a 0.5B model may miss DSPy's output format: the spans still say so
                seen["error"] = exc
            seen["history"] = lm.history[-1]
        return seen.get("answer")

    answer(QUESTION)
    print(f"\nDSPy with the 0.5B model: answer {seen.get('answer')!r}, error {seen.get('error')!r}")
    df = stored_spans(sqlite_url, 3, capture, timeout=20, settle=1.0)
    root = df[df["scope"] == "autometrics"].iloc[0]
    module = df[df["parent_span_id"] == root["span_id"]].iloc[0]
    assert module["name"] == "invoke_workflow Predict" and module["input"] == QUESTION
    calls = df[df["parent_span_id"] == module["span_id"]]
    assert len(calls) >= 1 and set(calls["scope"]) == {"opentelemetry.instrumentation.genai.dspy"}  # no LiteLLM duplicate
    assert len(df) == 2 + len(calls)
    call = calls.sort_values("start_time_ns").iloc[0]
    a = _attrs(call)
    assert call["kind"] == "CLIENT" and call["model"] == "local" and call["input_tokens"] > 0 and call["output_tokens"] > 0
    sent = json.loads(a["gen_ai.input.messages"])
    assert sent[0]["role"] == "system" and "`question`" in sent[0]["parts"][0]["content"]  # DSPy's system prompt
    assert QUESTION in sent[-1]["parts"][0]["content"]
    assert list(a["gen_ai.response.finish_reasons"])[0] in ("stop", "length")
    if "answer" in seen:
        assert module["output"] == seen["answer"] and seen["answer"] in call["output"]
    else:
        assert module["status"] == "ERROR"
