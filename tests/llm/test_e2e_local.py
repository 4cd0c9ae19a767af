"""End-to-end fit with the real embedded local LLM (Qwen2.5-Coder-0.5B via llama_cpp.server) on
a small SimpEval subset.  Bounded: a few minutes on 2 cores.  Skipped, with the reason, when
llama-cpp-python or the model is not installed."""

from __future__ import annotations

import time

import pandas as pd
import pytest
from autometrics.evaluators import local_llm

pytestmark = pytest.mark.llm


@pytest.fixture(scope="module")
def local_server():
    if not local_llm.llama_cpp_available():
        pytest.skip('llama-cpp-python[server] is not installed (pip install ".[llm]")')
    if local_llm.model_path("0.5b") is None:
        pytest.skip("the 0.5B model is not installed (autometrics llm install --model 0.5b)")
    with local_llm.LocalLLMServer("0.5b", n_ctx=4096) as srv:
        yield srv


def test_server_health_and_shutdown(local_server):
    assert local_server.healthy()
    import httpx

    r = httpx.post(f"{local_server.api_base}/chat/completions", timeout=60, json={
        "model": "local", "max_tokens": 1, "logprobs": True, "top_logprobs": 5, "temperature": 0,
        "messages": [{"role": "user", "content": "Rate 1 to 5 how polite 'thank you' is. One digit."}]})
    assert r.status_code == 200 and r.json()["choices"][0]["logprobs"]["content"][0]["top_logprobs"]


def test_e2e_fit_real_local_llm(local_server, datasets_dir, tmp_path, monkeypatch):
    from autometrics.evaluators.autometrics import AutoMetricsOptions, fit_autometrics
    from autometrics.evaluators.fit import Evaluator
    from autometrics.evaluators.generate import GeneratorCounts
    from autometrics.evaluators.report import write_reports

    monkeypatch.setenv("AUTOMETRICS_LLM_CACHE", str(tmp_path / "cache.sqlite"))
    df = pd.read_csv(datasets_dir / "simpeval.csv").sample(20, random_state=0).reset_index(drop=True)
    counts = GeneratorCounts(n_single=2, n_rubric=1, n_example=1, n_optimized=0, example_sets=1, example_eval_rows=4)
    opts = AutoMetricsOptions(llm=f"openai/local@{local_server.api_base}", counts=counts, rationales=1, timeout=120,
                               concurrency=1)
    t0 = time.perf_counter()
    res = fit_autometrics(df, "score", task="Simplify a complex English sentence while keeping its meaning",
                          options=opts, n_boot=200, top_n=3)
    seconds = time.perf_counter() - t0
    a = res.evaluator.artifact
    usage = a["llm"]["usage"]
    print(f"\ne2e: {seconds:.0f} s, test tau {a['statistics']['test']['tau']}, judges "
          + ", ".join(f"{g['feature']} tau_train={g.get('tau_train')}" for g in a["generated"]))
    print("usage:", {k: (v["requests"], v["calls"], v["parse_failures"], v["seconds"]) for k, v in usage.items()})
    assert len(a["generated"]) >= 2
    assert a["features"] and all(f["generated"] for f in a["features"])
    assert usage["score:single"]["requests"] >= 20
    # probability-weighted scores: parse failures must be rare with logprobs
    assert usage["total"]["parse_failures"] <= 0.1 * usage["total"]["requests"]
    paths = write_reports(res, tmp_path / "out")
    assert "Generated judges" in paths["markdown"].read_text()
    # the loaded evaluator scores new rows (cache hits allowed) without regenerating
    ev = Evaluator.load(paths["evaluator"])
    scored = ev.score_texts(df["output"].tolist()[:3], inputs=df["input"].tolist()[:3])
    assert scored["autometrics_score"].notna().all()
