"""End-to-end with the real embedded local LLM: Qwen2.5-Coder-0.5B (GGUF from PyPI) served by
llama_cpp.server over the OpenAI-compatible API, started and stopped by the project itself.

Marked ``slow``: deselected by a plain ``pytest -q``, run by CI (``.ci/run`` runs the README's
``pytest -q -m "not llm"`` and installs the model with ``autometrics llm install --model 0.5b``); bounded to a few minutes on 2 cores by a small
SimpEval subset and a small judge budget.  Skipped, with the reason, when llama-cpp-python or
the model is not installed.  The 0.5B model is a plumbing model (OFFLINE.md: it separates good
from bad answers weakly), so these tests check the method runs for real and produces a usable
evaluator, not its τ."""

from __future__ import annotations

import json
import time

import pandas as pd
import pytest

pytestmark = pytest.mark.slow




@pytest.fixture(scope="module")
def subset(datasets_dir):
    return pd.read_csv(datasets_dir / "simpeval.csv").sample(16, random_state=0).reset_index(drop=True)


def test_server_health_and_logprobs(local_server):
    assert local_server.healthy()
    import httpx

    r = httpx.post(f"{local_server.api_base}/chat/completions", timeout=120, json={
        "model": "local", "max_tokens": 1, "logprobs": True, "top_logprobs": 5, "temperature": 0,
        "messages": [{"role": "user", "content": "Rate 1 to 5 how polite 'thank you' is. One digit."}]})
    assert r.status_code == 200 and r.json()["choices"][0]["logprobs"]["content"][0]["top_logprobs"]


def test_structured_output_on_the_real_endpoint(local_server, subset, tmp_path):
    """Judges without logprobs ask for JSON with a schema (llama_cpp.server: a grammar), so even
    the 0.5B model's replies parse."""
    from autometrics.evaluators.judges.metric import JudgeSpec, LLMJudgeMetric
    from autometrics.evaluators.llm.client import LLMCache, LLMClient, LLMConfig

    cfg = LLMConfig.parse("local:0.5b", timeout=120)
    m = LLMJudgeMetric.from_spec(JudgeSpec(kind="single", criterion="Fluency", description="grammatical, natural English"),
                                 cfg, mode="json")
    m.client = LLMClient(cfg, cache=LLMCache(tmp_path / "c.sqlite"))
    scores = m.score(subset["output"].tolist()[:4], inputs=subset["input"].tolist()[:4])
    replies = [d["reply"] for d in m.last_details]
    assert all(1 <= s <= 5 for s in scores), replies
    assert all(isinstance(json.loads(r)["score"], int) for r in replies)


@pytest.mark.llm  # the paper's method end to end on the real 0.5B model: ~4 min on 2 cores, opt-in (`.ci/test python -m pytest -m llm`)
def test_e2e_fit_real_local_llm(local_server, subset, tmp_path):
    from autometrics.evaluators.fit import Evaluator, fit_evaluator
    from autometrics.evaluators.judges.options import GeneratorCounts, LLMOptions
    from autometrics.evaluators.report import write_reports

    # one judge of each kind that needs no optimizer: bounded for CI (the 0.5B model runs ~40 requests a minute here)
    counts = GeneratorCounts(n_single=1, n_rubric=1, n_example=1, n_optimized=0, example_sets=1, example_eval_rows=4)
    # every judge on every row and no LLM-free floor: this test checks the paper's method runs end to end
    opts = LLMOptions(llm="local:0.5b", counts=counts, rationales=1, timeout=300, cache=str(tmp_path / "cache.sqlite"),
                      screen=False, use_bank="never")
    t0 = time.perf_counter()
    res = fit_evaluator(subset, "score", task="Simplify a complex English sentence while keeping its meaning",
                          llm_options=opts, n_boot=200, top_n=3)
    seconds = time.perf_counter() - t0
    a = res.evaluator.artifact
    usage = a["llm"]["usage"]
    print(f"\ne2e: {seconds:.0f} s, test tau {a['statistics']['test']['tau']}, judges "
          + ", ".join(f"{g['feature']} tau_train={g.get('tau_train')}" for g in a["generated"]))
    print("usage:", {k: (v["requests"], v["prompt_tokens"], v["completion_tokens"], v["parse_failures"], v["seconds"])
                     for k, v in usage.items()})
    print("prefix cache:", a["llm"]["scoring_prefix_cache"])
    assert {g["kind"] for g in a["generated"]} >= {"rubric", "example"}
    assert a["features"] and all(f["generated"] for f in a["features"])
    n_judges = len(a["generated"])
    assert sum(v["requests"] for k, v in usage.items() if k.startswith("score:")) >= n_judges * len(subset)
    # probability-weighted scores: parse failures must be rare with logprobs
    assert usage["total"]["parse_failures"] <= 0.1 * usage["total"]["requests"]
    # example first, criterion last: the server's prefix cache serves most judge prompt tokens
    pc = a["llm"]["scoring_prefix_cache"]
    assert pc and pc["prompt_tokens_evaluated"] < pc["prompt_tokens_sent"]
    paths = write_reports(res, tmp_path / "out")
    assert "Generated judges" in paths["markdown"].read_text()
    # the loaded evaluator scores new rows (cache hits allowed) without regenerating
    ev = Evaluator.load(paths["evaluator"])
    scored = ev.score_texts(subset["output"].tolist()[:3], inputs=subset["input"].tolist()[:3])
    assert scored["autometrics_score"].notna().all()


def test_benchmark_harness_llm_judge_with_the_real_local_llm(local_server, datasets_dir):
    """Issue #7: the harness with an LLM method on the embedded model, on a small subset (the
    0.5B judge's τ is not the point; the method must run and count its calls)."""
    import math

    from autometrics.evaluators.benchmark.harness import run_benchmark

    res = run_benchmark(datasets_dir / "simpeval.csv", "score", seeds=1, max_rows=12, methods=["llm_judge"],
                        llm="local:0.5b")
    m = res.to_dict()["methods"][0]
    assert m["status"] == "ok", m
    assert m["llm"]["requests"] >= 1 and m["missing_predictions"] < m["per_seed"][0]["n_test"]
    # probability-weighted judge scores vary, so the held-out tau is defined (a constant judge fails here)
    tau = m["per_seed"][0]["tau"]
    assert tau is not None and math.isfinite(tau) and -1.0 <= tau <= 1.0, m
