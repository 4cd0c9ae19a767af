"""LLM client against a fault-injecting OpenAI-compatible server: retries, missing values, cache."""

from __future__ import annotations

import math
import os

import pytest
from autometrics.evaluators.judges.metric import JudgeSpec, LLMJudgeMetric, read_score
from autometrics.evaluators.llm.client import LLMCache, LLMClient, LLMConfig

MSG = [{"role": "user", "content": "hello"}]


def test_parse_model_strings(monkeypatch):
    c = LLMConfig.parse("openai/my-model@http://127.0.0.1:9/v1")
    assert (c.model, c.api_base, c.provider) == ("openai/my-model", "http://127.0.0.1:9/v1", "openai")
    assert LLMConfig.parse("local:0.5b").is_local and LLMConfig.parse("local:0.5b").concurrency == 1
    assert LLMConfig.parse("anthropic/claude-x").uses_openai_http() is False
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value")
    cfg = LLMConfig.parse("openai/gpt-4o-mini")
    assert cfg.api_key() == "sk-secret-value"
    assert "sk-secret" not in repr(cfg.public()) and "sk-secret" not in repr(cfg)


@pytest.mark.parametrize("fault", ["429", "500", "timeout", "malformed"])
def test_transient_faults_are_retried(fake, client_for, fault):
    with fake(plan=[fault, fault]) as srv:
        client = client_for(srv)
        r = client.chat(MSG, stage="t", max_tokens=5)
        assert r.ok and r.text
        u = client.usage.to_dict()["t"]
        assert u["calls"] == 3 and u["retries"] == 2 and u["failures"] == 0


def test_persistent_failure_is_missing_value_not_zero(fake, client_for):
    spec = JudgeSpec(kind="single", criterion="Fluency", description="natural English")
    with fake(default="500") as srv:
        client = client_for(srv, max_retries=1)
        m = LLMJudgeMetric.from_spec(spec, client.config)
        m.client = client
        s = m.score(["a b c", "d e"], inputs=["x", "y"])
        assert all(math.isnan(v) for v in s)
        u = client.usage.to_dict()["score:single"]
        assert u["failures"] == 2 and u["calls"] == 4


def test_unparseable_and_truncated_replies_are_missing_and_counted(fake, client_for):
    spec = JudgeSpec(kind="single", criterion="Fluency", description="natural English")
    with fake(plan=["garbage", "truncated", "badjson", "ok"]) as srv:
        client = client_for(srv, concurrency=1)
        m = LLMJudgeMetric.from_spec(spec, client.config)
        m.client = client
        s = m.score(["one", "one two", "one two three", "one two three four"], inputs=[""] * 4)
        assert math.isnan(s[0]) and math.isnan(s[1]) and math.isnan(s[2])
        assert 4.0 < s[3] < 5.0  # expected value of the fake's digit distribution around 5
        assert client.usage.to_dict()["score:single"]["parse_failures"] == 3


def test_cache_resumes_without_new_calls(fake, tmp_path):
    spec = JudgeSpec(kind="rubric", criterion="Conciseness", rubric={str(i): f"level {i}" for i in range(1, 6)})
    outs = [" ".join("w" * (k + 1) for _ in range(k + 1)) for k in range(6)]
    with fake(plan=["ok", "ok", "ok", "500", "500", "500", "500"]) as srv:
        cfg = LLMConfig.parse(f"openai/fake@{srv.url}", backoff=0.01, max_retries=3, concurrency=1)
        first = LLMClient(cfg, cache=LLMCache(tmp_path / "c.sqlite"))
        m = LLMJudgeMetric.from_spec(spec, cfg)
        m.client = first
        s1 = m.score(outs)
        assert math.isnan(s1[3]) and not math.isnan(s1[0])  # "interrupted": row 3 failed
        n_before = len(srv.requests)
        second = LLMClient(cfg, cache=LLMCache(tmp_path / "c.sqlite"))
        m.client = second
        s2 = m.score(outs)
        u = second.usage.to_dict()["score:rubric"]
        assert u["cache_hits"] == 5 and u["calls"] == 1  # only the failed row is asked again
        assert len(srv.requests) == n_before + 1
        assert not any(math.isnan(v) for v in s2)
        assert s2[0] == s1[0]
    # no secrets in the cache file
    os.environ["OPENAI_API_KEY"] = "sk-should-not-leak"
    try:
        assert b"sk-should-not-leak" not in (tmp_path / "c.sqlite").read_bytes()
    finally:
        del os.environ["OPENAI_API_KEY"]


def test_concurrency_is_bounded(fake, client_for):
    import threading

    active, peak, lock = [0], [0], threading.Lock()
    with fake(delay=0.05) as srv:
        client = client_for(srv, concurrency=3)
        orig = client._call_http

        def wrapped(*a, **k):
            with lock:
                active[0] += 1
                peak[0] = max(peak[0], active[0])
            try:
                return orig(*a, **k)
            finally:
                with lock:
                    active[0] -= 1

        client._call_http = wrapped
        rs = client.chat_many([{"messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 3} for i in range(12)], stage="c")
        assert all(r.ok for r in rs) and peak[0] <= 3 and peak[0] >= 2


def test_read_score_logprobs_json_digit():
    from autometrics.evaluators.llm.client import LLMResponse

    r = LLMResponse(text="4", top_logprobs=[{"4": math.log(0.5), "5": math.log(0.5), "x": -9}])
    s, dist = read_score(r)
    assert s == pytest.approx(4.5) and dist == {"4": 0.5, "5": 0.5}
    assert read_score(LLMResponse(text='{"score": 3}'))[0] == 3
    assert read_score(LLMResponse(text=" 2. "))[0] == 2
    assert math.isnan(read_score(LLMResponse(text="7"))[0])  # out of scale
    assert math.isnan(read_score(LLMResponse(text='{"score": 9}'))[0])
    assert math.isnan(read_score(LLMResponse(text="It is a 4"))[0])
    assert math.isnan(read_score(LLMResponse(error="boom"))[0])
    # logprobs mass mostly off-scale -> falls back to the text
    assert read_score(LLMResponse(text="3", top_logprobs=[{"The": -0.01, "3": -6}]))[0] == 3


def _closed_port() -> int:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now: connections are refused
    return port


def test_refused_connection_fails_fast_and_is_not_retried(tmp_path):
    import time

    from autometrics.evaluators.llm.client import LLMUnreachable

    client = LLMClient(LLMConfig.parse(f"openai/x@http://127.0.0.1:{_closed_port()}/v1", backoff=1.0, max_retries=8), cache=False)
    t0 = time.monotonic()
    with pytest.raises(LLMUnreachable, match="connection refused"):
        client.check_reachable()
    rs = [client.chat(MSG, stage="t", max_tokens=5) for _ in range(20)]
    assert time.monotonic() - t0 < 5  # 8 retries with backoff 1 s would take minutes
    assert all(not r.ok and "unreachable" in r.error for r in rs)
    assert client.usage.to_dict()["t"]["calls"] == 0  # later calls never touch the network


def test_refused_mid_run_marks_the_client_unreachable():
    client = LLMClient(LLMConfig.parse(f"openai/x@http://127.0.0.1:{_closed_port()}/v1", max_retries=8), cache=False)
    r = client.chat(MSG, stage="t", max_tokens=5)
    assert not r.ok and "connection refused" in r.error and client.unreachable
    u = client.usage.to_dict()["t"]
    assert u["calls"] == 1 and u["retries"] == 0


def test_retries_stop_at_the_deadline(fake, client_for):
    import time

    with fake(default="500") as srv:
        client = client_for(srv, max_retries=50, backoff=0.4, deadline=1.5)
        t0 = time.monotonic()
        r = client.chat(MSG, stage="t", max_tokens=5)
        assert not r.ok and "deadline" in r.error
        assert time.monotonic() - t0 < 3


def test_fit_with_endpoint_down_exits_2_quickly_and_writes_nothing(tmp_path, capsys):
    import time

    from autometrics._cli.main import main

    out = tmp_path / "out"
    t0 = time.monotonic()
    code = main(["fit", "demo:simpeval", "--target", "score", "--llm", f"openai/x@http://127.0.0.1:{_closed_port()}/v1",
                 "--quick", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and time.monotonic() - t0 < 30
    assert "error: cannot reach the LLM endpoint" in err and "connection refused" in err and "Traceback" not in err
    assert not out.exists() or not any(out.rglob("*.json"))


def test_a_custom_endpoint_never_gets_the_providers_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-secret")
    monkeypatch.delenv("AUTOMETRICS_LLM_API_KEY", raising=False)
    assert LLMConfig.parse("openai/x@http://other-host:8000/v1").api_key() is None
    assert LLMConfig.parse("openai/gpt-4o-mini").api_key() == "sk-openai-secret"
    monkeypatch.setenv("AUTOMETRICS_LLM_API_KEY", "k-for-that-host")
    assert LLMConfig.parse("openai/x@http://other-host:8000/v1").api_key() == "k-for-that-host"
    assert LLMConfig.parse("openai/x@http://h/v1", api_key_env="MY_KEY").api_key() is None
