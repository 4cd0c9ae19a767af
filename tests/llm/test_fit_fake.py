"""The whole method (generate -> retrieve -> score -> regress -> report) against the fake
OpenAI-compatible server: fast, deterministic, with injected faults."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from autometrics.evaluators.autometrics import AutoMetricsOptions, fit_autometrics
from autometrics.evaluators.fit import Evaluator
from autometrics.evaluators.generate import QUICK_COUNTS, GeneratorCounts
from autometrics.evaluators.report import write_reports


def _data(n=40, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        k = int(rng.integers(1, 6))
        out = " ".join(["word"] * k)
        rows.append({"id": f"r{i}", "input": f"question {i}", "output": out, "score": k + rng.normal(0, 0.3)})
    return pd.DataFrame(rows)


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOMETRICS_LLM_CACHE", str(tmp_path / "cache.sqlite"))
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    return tmp_path


def _judge(text):
    return max(1, min(5, len(text.split())))


def test_full_fit_with_faults_generated_only(fake, env):
    # faults sprinkled over the first requests: the fit completes, failures are counted
    plan = ["429", "ok", "500", "ok", "timeout"] + ["ok"] * 30 + ["garbage", "truncated"]
    with fake(plan=plan, judge=_judge, timeout_sleep=1.5) as srv:
        opts = AutoMetricsOptions(llm=f"openai/fake@{srv.url}", counts=QUICK_COUNTS, timeout=1.0, max_retries=3,
                                  concurrency=2, rationales=2, compare_multi=True)
        res = fit_autometrics(_data(), "score", task="Answer briefly", options=opts, n_boot=100)
        a = res.evaluator.artifact
        assert a["method"]["name"] == "autometrics-full" and a["method"]["bank_used"] is False
        kinds = {g["kind"] for g in a["generated"]}
        assert {"single", "rubric", "example"} <= kinds
        assert all(f["generated"] for f in a["features"])
        assert a["statistics"]["test"]["tau"] > 0.5
        u = a["llm"]["usage"]
        assert u["total"]["retries"] >= 3 and u["total"]["parse_failures"] >= 1
        assert "score:single" in u and "generate:axes" in u
        rub = next(g for g in a["generated"] if g["kind"] == "rubric")
        assert set(rub["spec"]["rubric"]) == {"1", "2", "3", "4", "5"}
        sel = [g for g in a["generated"] if g["selected"]]
        assert sel and any(r["rationale"] for g in sel for r in g["rationales"])
        assert a["llm"]["multi_vs_single"]["criteria"]
        assert "api_key" not in json.dumps(a["llm"]) or a["llm"]["judge"]["api_key_env"] is None

        paths = write_reports(res, env / "out")
        md = paths["markdown"].read_text()
        assert "Generated judges" in md and "Rubric" in md and "LLM calls" in md
        assert "Generated judges" in paths["html"].read_text()

        # a loaded evaluator scores new data from the stored specs, without regenerating
        ev = Evaluator.load(paths["evaluator"])
        n_before = len(srv.requests)
        scored = ev.score_texts(["word word", "word word word word"], inputs=["q", "q2"])
        assert scored["autometrics_score"].iloc[1] > scored["autometrics_score"].iloc[0]
        assert len(srv.requests) > n_before
        assert not any("[[ ##" in json.dumps(r["messages"]) for r in srv.requests[n_before:])  # no generator prompt


def test_retrieval_with_bank_and_dry_run(fake, env):
    with fake(judge=_judge) as srv:
        counts = GeneratorCounts(n_single=1, n_rubric=0, n_example=0, n_optimized=0)
        opts = AutoMetricsOptions(llm=f"openai/fake@{srv.url}", counts=counts, use_bank="always", retrieve_k=6, rerank=True,
                                  dense=False)
        plan = fit_autometrics(_data(), "score", options=opts, dry_run=True)
        assert plan["score"]["calls"] == 40 and plan["total"]["calls"] > 40 and not srv.requests
        res = fit_autometrics(_data(), "score", task="Answer briefly", options=opts, n_boot=50)
        a = res.evaluator.artifact
        assert a["method"]["bank_used"] and a["retrieval"]["reranked"]
        assert len(a["retrieval"]["names"]) == 6
        assert a["llm"]["usage"]["retrieve:rerank"]["requests"] >= 6
