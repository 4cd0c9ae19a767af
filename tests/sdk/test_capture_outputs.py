"""What the evaluator learns from: the input / output an @observe call records, read back from
a real SQLite trace store.

Selectors (``@observe(input=..., output=...)``) and ``set_input`` / ``set_output``; returned
streams (real ``openai`` sync / async streams and a real ``litellm.completion(stream=True)``
against the OpenAI-compatible test server, generators) whose span ends with the stream and whose
output is the streamed text; ``dspy.Prediction`` fields; finish reasons only when known; LLM-call
spans named and kinded as the GenAI conventions say.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fake_llm_server import FakeLLMServer  # noqa: E402

ANSWER = "The output is concise and keeps the meaning."  # the test server's reply to "explain ..."


def _spans(url: str):
    """Our spans (scope ``autometrics``), by name; client-instrumentation spans are left out."""
    from autometrics.capture import SCOPE
    from autometrics.collectors.store import TraceStore

    sp = TraceStore(url).spans_frame()
    return sp[sp["scope"] == SCOPE].set_index("name")


def _attrs(row) -> dict:
    return json.loads(row["attributes"])


def _out_msgs(row) -> list:
    return json.loads(_attrs(row)["gen_ai.output.messages"])


@pytest.fixture
def llm_server():
    with FakeLLMServer(stream_delay=0.02) as srv:
        yield srv


# ---------------------------------------------------------------- naming the input and output


def test_readme_pattern_output_selector_gives_the_answer_not_the_response(capture, sqlite_url):
    from autometrics.collectors.store import TraceStore

    capture.configure(store_url=sqlite_url, langfuse=False)

    @capture.observe(model="gpt-4o-mini")
    def answer(question: str) -> str:
        return f"Answer to {question}"

    @capture.observe(input=lambda args: args["request"]["question"], output="answer")
    def handle(request: dict):
        return {"answer": answer(request["question"]), "trace_id": capture.current_trace_id()}

    @capture.observe
    def handle_unnamed(request: dict):
        return {"answer": answer(request["question"]), "trace_id": capture.current_trace_id()}

    r1 = handle({"question": "Why?", "user": "u1"})
    r2 = handle_unnamed({"question": "How?"})
    assert r1["answer"] == "Answer to Why?"  # the app got its dict back
    capture.feedback(r1["trace_id"], "thumbs", True)
    capture.feedback(r2["trace_id"], "thumbs", False)
    assert capture.flush(10)

    df = TraceStore(sqlite_url).training_frame("thumbs").set_index("id")
    assert (df.loc[r1["trace_id"], "input"], df.loc[r1["trace_id"], "output"]) == ("Why?", "Answer to Why?")
    assert df.loc[r1["trace_id"], "name"] == "handle"
    # without a selector the whole response is the output (trace id included): what the issue measured
    assert json.loads(df.loc[r2["trace_id"], "output"]) == {"answer": "Answer to How?", "trace_id": r2["trace_id"]}
    # online scoring reads the same columns
    texts = TraceStore(sqlite_url).trace_texts([r1["trace_id"]]).set_index("trace_id")
    assert texts.loc[r1["trace_id"], "output"] == "Answer to Why?"


def test_string_selectors_and_methods(capture, sqlite_url):
    capture.configure(store_url=sqlite_url, langfuse=False)

    class Bot:
        @capture.observe(input="question", output="text")
        def reply(self, question: str, context: str = "none"):
            return type("Reply", (), {"text": question.upper(), "debug": "internal"})()

    @capture.observe(input=lambda args: f"{args['question']} / {args['context']}")  # defaults filled in, no self
    def ask(question: str, context: str = "none"):
        return question

    assert Bot().reply("hello", context="ctx").text == "HELLO"
    ask("hi")
    capture.flush()
    sp = _spans(sqlite_url)
    assert (sp.loc["Bot.reply", "input"], sp.loc["Bot.reply", "output"]) == ("hello", "HELLO")
    assert sp.loc["ask", "input"] == "hi / none"


def test_set_input_and_set_output_override(capture, sqlite_url, caplog):
    capture.configure(store_url=sqlite_url, langfuse=False)

    @capture.observe(capture_input=False, capture_output=False, redact=lambda v: v.replace("secret", "<x>"))
    def handle(request):
        assert capture.set_input(request["q"]) is True
        inner(request["q"])
        capture.set_output("first")
        capture.set_output("final secret answer")  # the last call wins
        return {"raw": "not this"}

    @capture.observe
    def inner(q):
        capture.set_output("inner's own output")  # the innermost observed call
        return "ignored"

    @capture.observe(output="answer")
    def failing(q):
        capture.set_output("partial answer")
        raise RuntimeError("boom")

    handle({"q": "the secret question", "pii": "x"})
    with pytest.raises(RuntimeError, match="boom"):
        failing("q")
    with caplog.at_level(logging.WARNING, logger="autometrics"):
        assert capture.set_output("nowhere") is False  # outside any observed call: logged, not raised
    assert "outside an @observe'd call" in caplog.text
    capture.flush()
    sp = _spans(sqlite_url)
    assert (sp.loc["handle", "input"], sp.loc["handle", "output"]) == ("the <x> question", "final <x> answer")
    assert sp.loc["inner", "output"] == "inner's own output"
    assert sp.loc["failing", "status"] == "ERROR" and sp.loc["failing", "output"] == "partial answer"


def test_content_off_globally_wins_over_named_input_and_output(capture, sqlite_url):
    capture.configure(store_url=sqlite_url, langfuse=False, capture_content=False)

    @capture.observe(input="q", output="answer")
    def f(q):
        capture.set_input("private question")
        capture.set_output("private answer")
        return {"answer": "private"}

    assert f("secret") == {"answer": "private"}
    capture.flush()
    row = _spans(sqlite_url).loc["f"]
    assert row["input"] is None and row["output"] is None and "private" not in row["attributes"]


def test_selector_failures_record_nothing_and_bad_arguments_are_named(capture, sqlite_url):
    capture.configure(store_url=sqlite_url, langfuse=False)

    @capture.observe(output="answer", input=lambda args: args["missing"])
    def f(q):
        return {"text": "no answer key"}

    assert f("q") == {"text": "no answer key"}  # the app is unaffected
    capture.flush()
    row = _spans(sqlite_url).loc["f"]
    assert row["input"] is None and row["output"] is None  # never the wrong value
    assert "KeyError" in _attrs(row)["autometrics.capture.error"]
    assert capture.stats()["internal_errors"] == 2

    with pytest.raises(ValueError, match=r"no parameter 'qestion' \(parameters: question\)"):
        capture.observe(input="qestion")(lambda question: question)
    with pytest.raises(TypeError, match="must be a name"):
        capture.observe(output=3)(lambda q: q)
    with pytest.raises(ValueError, match="output= and capture_output=False"):
        capture.observe(output="a", capture_output=False)(lambda q: q)
    capture.observe(input="anything")(lambda **kw: kw)  # **kwargs accepts any name


# ---------------------------------------------------------------- returned streams


def _consume(stream, pause: float = 0.0) -> str:
    out = []
    for c in stream:
        if c.choices:
            out.append(c.choices[0].delta.content or "")
        time.sleep(pause)
    return "".join(out)


def test_returned_openai_stream_ends_with_the_stream(capture, sqlite_url, llm_server):
    openai = pytest.importorskip("openai")
    capture.configure(store_url=sqlite_url, langfuse=False)
    client = openai.OpenAI(base_url=llm_server.url, api_key="test", max_retries=0)

    @capture.observe(model="fake", provider="openai")
    def ask(q: str):
        return client.chat.completions.create(model="fake", messages=[{"role": "user", "content": q}], stream=True,
                                              stream_options={"include_usage": True})

    direct = _consume(client.chat.completions.create(model="fake", messages=[{"role": "user", "content": "explain"}],
                                                     stream=True))
    stream = ask("explain it")
    t_returned = time.time_ns()
    assert isinstance(stream, openai.Stream) and stream.response.status_code == 200  # attributes forwarded
    with stream as s:
        text = _consume(s, pause=0.01)
    t_done = time.time_ns()
    assert text == direct == ANSWER  # the app sees the same stream

    with ask("explain again") as s2:  # closed early, inside a with block
        first = next(iter(s2))
        assert first.choices[0].delta.role == "assistant"
        next(s2)
    capture.flush()
    sp = _spans(sqlite_url)
    assert len(sp) == 2 and set(sp["kind"]) == {"CLIENT"} and set(sp.index) == {"chat fake"}
    done, early = sp.iloc[0], sp.iloc[1]
    a = _attrs(done)
    assert done["output"] == ANSWER and done["input"] == "explain it"
    assert done["end_time_ns"] > t_returned + 150e6 and done["end_time_ns"] <= t_done  # ~10 chunks x 20 ms later
    assert done["status"] != "ERROR" and a["gen_ai.response.finish_reasons"] == ["stop"]
    assert _out_msgs(done)[0]["finish_reason"] == "stop"
    assert done["input_tokens"] > 0 and done["output_tokens"] > 0  # from the final usage chunk
    assert a["gen_ai.provider.name"] == "openai" and a["gen_ai.request.stream"] is True
    assert a["gen_ai.response.time_to_first_chunk"] > 0
    ea = _attrs(early)
    assert early["status"] != "ERROR" and ea["autometrics.stream.closed_early"] is True
    assert ea["gen_ai.response.finish_reasons"] == ["cancelled"] and early["output"] == "The "


def test_stream_passed_on_by_an_outer_observed_call(capture, sqlite_url, llm_server):
    """The app's handler returns the stream its LLM helper returned: the handler's span (the
    trace's root, what the evaluator sees) also ends with the stream and records its text."""
    openai = pytest.importorskip("openai")
    import pandas as pd
    from autometrics.collectors.store import TraceStore

    capture.configure(store_url=sqlite_url, langfuse=False)
    client = openai.OpenAI(base_url=llm_server.url, api_key="test", max_retries=0)

    @capture.observe(model="fake")
    def generate(q: str):
        return client.chat.completions.create(model="fake", messages=[{"role": "user", "content": q}], stream=True,
                                              stream_options={"include_usage": True})

    @capture.observe
    def handle(q: str):
        return generate(q)

    s = handle("explain")
    t_returned = time.time_ns()
    assert isinstance(s, openai.Stream) and _consume(s) == ANSWER
    capture.flush()
    sp = _spans(sqlite_url)
    assert sp.loc["handle", "output"] == sp.loc["chat fake", "output"] == ANSWER
    assert sp.loc["handle", "end_time_ns"] >= sp.loc["chat fake", "end_time_ns"] > t_returned
    # the tokens are the LLM call's, counted once in the trace
    assert sp.loc["chat fake", "output_tokens"] > 0 and pd.isna(sp.loc["handle", "output_tokens"])
    df = TraceStore(sqlite_url).training_frame("thumbs", include_unlabelled=True)
    assert (df.loc[0, "name"], df.loc[0, "input"], df.loc[0, "output"]) == ("handle", "explain", ANSWER)
    assert df.loc[0, "output_tokens"] == sp.loc["chat fake", "output_tokens"]


def test_returned_async_openai_stream(capture, sqlite_url, llm_server):
    openai = pytest.importorskip("openai")
    capture.configure(store_url=sqlite_url, langfuse=False)
    client = openai.AsyncOpenAI(base_url=llm_server.url, api_key="test", max_retries=0)

    @capture.observe(model="fake")
    async def ask(q: str):
        return await client.chat.completions.create(model="fake", messages=[{"role": "user", "content": q}], stream=True)

    async def run():
        s = await ask("explain")
        assert isinstance(s, openai.AsyncStream)
        text = ""
        async with s:
            async for c in s:
                text += c.choices[0].delta.content or ""
        s2 = await ask("explain twice")
        await s2.__anext__()
        await s2.close()  # openai's AsyncStream.close is a coroutine: so is the proxy's
        return text

    assert asyncio.run(run()) == ANSWER
    capture.flush()
    sp = _spans(sqlite_url)
    assert sp["output"].tolist() == [ANSWER, ""]
    assert [_attrs(r)["gen_ai.response.finish_reasons"] for _, r in sp.iterrows()] == [["stop"], ["cancelled"]]


def test_returned_litellm_stream(capture, sqlite_url, llm_server, monkeypatch):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    litellm = pytest.importorskip("litellm", reason="needs the `llm` extra (litellm)")
    capture.configure(store_url=sqlite_url, langfuse=False)

    @capture.observe(input="q")
    def ask(q: str, **kw):
        return litellm.completion(model="openai/fake", api_base=llm_server.url, api_key="test",
                                  messages=[{"role": "user", "content": q}], stream=True, **kw)

    direct = litellm.completion(model="openai/fake", api_base=llm_server.url, api_key="test",
                                messages=[{"role": "user", "content": "explain"}], stream=True)
    s = ask("explain this", stream_options={"include_usage": True})
    assert isinstance(s, litellm.CustomStreamWrapper) and s.model == "fake"  # isinstance and attributes as the original
    assert _consume(s) == _consume(direct) == ANSWER
    capture.flush()
    row = _spans(sqlite_url).loc["ask"]
    a = _attrs(row)
    assert row["kind"] == "INTERNAL" and row["output"] == ANSWER and row["input"] == "explain this"
    assert a["gen_ai.response.finish_reasons"] == ["stop"] and row["output_tokens"] > 0


def test_returned_generators_and_generator_functions(capture, sqlite_url):
    import pandas as pd

    capture.configure(store_url=sqlite_url, langfuse=False)

    def words():
        for w in ("a ", "b ", "c"):
            time.sleep(0.02)
            yield w

    async def awords():
        for w in ("x", "y"):
            await asyncio.sleep(0)
            yield w

    @capture.observe
    def returns_gen(q):
        return words()

    @capture.observe
    async def returns_agen(q):
        return awords()

    @capture.observe
    def never_read(q):
        return words()

    @capture.observe
    def chunks_gen(q):  # a generator function passing on chat-completion chunks (dict shape)
        yield {"choices": [{"delta": {"content": "Hel"}, "finish_reason": None}]}
        yield {"choices": [{"delta": {"content": "lo"}, "finish_reason": "length"}], "model": "m-1",
               "usage": {"prompt_tokens": 5, "completion_tokens": 2}}

    @capture.observe
    def passes_on(q):  # returns an observed generator: its span ends with it; the tokens stay the inner call's
        return chunks_gen(q)

    @capture.observe
    def breaks(q):
        yield "ok "
        raise ValueError("stream broke")

    g = returns_gen("q")
    t_returned = time.time_ns()
    assert list(g) == ["a ", "b ", "c"]

    async def drain():
        return [x async for x in await returns_agen("q")]

    assert asyncio.run(drain()) == ["x", "y"]
    dropped = never_read("q")
    del dropped
    gc.collect()
    assert [c["choices"][0]["delta"]["content"] for c in chunks_gen("q")] == ["Hel", "lo"]
    assert "".join(c["choices"][0]["delta"]["content"] for c in passes_on("q")) == "Hello"
    with pytest.raises(ValueError, match="stream broke"):
        list(breaks("q"))
    capture.flush()
    sp = _spans(sqlite_url)
    assert sp.loc["returns_gen", "output"] == "a b c" and sp.loc["returns_gen", "end_time_ns"] > t_returned + 40e6
    assert "gen_ai.response.finish_reasons" not in _attrs(sp.loc["returns_gen"])  # plain text: none known
    assert "finish_reason" not in _out_msgs(sp.loc["returns_gen"])[0]
    assert sp.loc["returns_agen", "output"] == "xy"
    assert _attrs(sp.loc["never_read"])["autometrics.stream.closed_early"] is True  # dropped unread: ended anyway
    cg = sp.loc[["chunks_gen"]]  # called directly, and inside passes_on
    assert cg["output"].tolist() == ["Hello"] * 2 and cg["model"].tolist() == ["m-1"] * 2
    assert cg["output_tokens"].tolist() == [2, 2]
    assert [_attrs(r)["gen_ai.response.finish_reasons"] for _, r in cg.iterrows()] == [["length"]] * 2
    assert sp.loc["passes_on", "output"] == "Hello" and pd.isna(sp.loc["passes_on", "output_tokens"])  # not counted twice
    assert sp.loc["breaks", "status"] == "ERROR" and sp.loc["breaks", "error_type"] == "ValueError"


# ---------------------------------------------------------------- dspy, finish reasons, span names


def test_dspy_prediction_maps_to_its_fields(capture, sqlite_url, llm_server, monkeypatch):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    dspy = pytest.importorskip("dspy", reason="needs the `llm` extra (dspy)")
    capture.configure(store_url=sqlite_url, langfuse=False)
    lm = dspy.LM("openai/fake", api_base=llm_server.url, api_key="test", cache=False)
    qa, cot = dspy.Predict("question -> answer"), dspy.ChainOfThought("question -> answer")

    @capture.observe
    def predict(question):
        return qa(question=question)

    @capture.observe
    def reason(question):
        return cot(question=question)

    @capture.observe(output="answer")
    def reason_answer(question):
        return cot(question=question)

    with dspy.context(lm=lm, track_usage=True):
        p = predict("What is 2+2?")
        r = reason("Why?")
        reason_answer("Why?")
    capture.flush()
    sp = _spans(sqlite_url)
    assert sp.loc["predict", "output"] == p.answer and "Prediction(" not in sp.loc["predict", "output"]
    assert sp.loc["predict", "input_tokens"] > 0 and sp.loc["predict", "model"] == "openai/fake"
    assert json.loads(sp.loc["reason", "output"]) == {"reasoning": r.reasoning, "answer": r.answer}
    assert sp.loc["reason_answer", "output"] == r.answer


def test_finish_reason_only_when_known(capture, sqlite_url):
    capture.configure(store_url=sqlite_url, langfuse=False)

    @capture.observe
    def plain(q):
        return "just text"

    @capture.observe(model="m")
    def cut(q):
        return {"id": "resp-1", "model": "m-2", "usage": {"prompt_tokens": 3, "completion_tokens": 1},
                "choices": [{"message": {"role": "assistant", "content": "Th"}, "finish_reason": "length"}]}

    plain("q")
    cut("q")
    capture.flush()
    sp = _spans(sqlite_url)
    assert "finish_reason" not in _out_msgs(sp.loc["plain"])[0]
    assert "gen_ai.response.finish_reasons" not in _attrs(sp.loc["plain"])
    a = _attrs(sp.loc["chat m"])
    assert a["gen_ai.response.finish_reasons"] == ["length"] and a["gen_ai.response.id"] == "resp-1"
    assert _out_msgs(sp.loc["chat m"])[0]["finish_reason"] == "length" and sp.loc["chat m", "output"] == "Th"


def test_llm_call_spans_are_client_spans_named_after_operation_and_model(capture, sqlite_url):
    from autometrics.collectors.store import TraceStore

    capture.configure(store_url=sqlite_url, langfuse=False)

    @capture.observe(model="anthropic/claude-3-5-haiku")
    def llm(q):
        return "a"

    @capture.observe(operation="embeddings")
    def embed(q):
        capture.update_current_span(model="text-embedding-3-small")  # known only inside the call
        return [0.1]

    @capture.observe(operation="execute_tool")
    def lookup(q):
        return "tool result"

    @capture.observe(name="custom.name", model="m")
    def named(q):
        return "n"

    @capture.observe
    def pipeline(q):
        capture.feedback(None, "thumbs", True)
        return llm(q) + lookup(q) + named(q) + str(embed(q))

    pipeline("q")
    capture.flush()
    sp = _spans(sqlite_url)
    row = sp.loc["chat anthropic/claude-3-5-haiku"]
    a = _attrs(row)
    assert row["kind"] == "CLIENT" and row["operation"] == "chat" and a["gen_ai.provider.name"] == "anthropic"
    assert a["code.function.name"].endswith("llm")
    assert sp.loc["embeddings text-embedding-3-small", "kind"] == "CLIENT"
    assert sp.loc["execute_tool lookup", "kind"] == "INTERNAL"
    assert sp.loc["custom.name", "kind"] == "CLIENT"
    assert sp.loc["pipeline", "kind"] == "INTERNAL" and "gen_ai.provider.name" not in _attrs(sp.loc["pipeline"])
    # the training frame's root is still the outermost span, by position in the tree, not by name
    df = TraceStore(sqlite_url).training_frame("thumbs")
    assert df["name"].tolist() == ["pipeline"] and df["input"].tolist() == ["q"]


def test_store_output_text_of_a_tool_call_answer():
    """An LLM client span whose answer is a tool call gets that call as its output text, not ''."""
    from autometrics.collectors.convert import messages_text

    out = [{"role": "assistant", "finish_reason": "tool_call",
            "parts": [{"type": "tool_call", "id": "c1", "name": "get_weather", "arguments": {"city": "Paris"}}]}]
    assert json.loads(messages_text(json.dumps(out))) == {"tool_call": "get_weather", "arguments": {"city": "Paris"}}
