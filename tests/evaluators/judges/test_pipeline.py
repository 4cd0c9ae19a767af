"""The whole method (generate -> retrieve -> score -> regress -> report) against the fake
OpenAI-compatible server: fast, deterministic, with injected faults."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from autometrics.evaluators.fit import Evaluator, fit_evaluator
from autometrics.evaluators.judges.generate import QUICK_COUNTS, GeneratorCounts
from autometrics.evaluators.judges.options import LLMOptions
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
        opts = LLMOptions(llm=f"openai/fake@{srv.url}", counts=QUICK_COUNTS, timeout=1.0, max_retries=3,
                                  concurrency=2, rationales=2, compare_multi=True, use_bank="never")
        res = fit_evaluator(_data(), "score", task="Answer briefly", llm_options=opts, n_boot=100)
        a = res.evaluator.artifact
        assert a["method"]["name"] == "autometrics-full" and a["method"]["bank_used"] is False
        kinds = {g["kind"] for g in a["generated"]}
        assert {"single", "rubric", "example"} <= kinds
        assert all(f["generated"] for f in a["features"])
        assert a["statistics"]["test"]["tau"] > 0.5, a["statistics"]["test"]
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
    """With MetricBank in, every cheap metric is scored (retrieval cannot drop them), no LLM call
    goes to retrieval, and the generated judge is screened against all of them."""
    with fake(judge=_judge) as srv:
        counts = GeneratorCounts(n_single=1, n_rubric=0, n_example=0, n_optimized=0)
        opts = LLMOptions(llm=f"openai/fake@{srv.url}", counts=counts, use_bank="always", retrieve_k=6, dense=False,
                          exemplar=False)
        plan = fit_evaluator(_data(), "score", llm_options=opts, dry_run=True)
        assert plan["score"]["calls"] == 40 and plan["total"]["calls"] > 40 and not srv.requests
        assert "retrieve:rerank" not in plan and plan["generate:code"]["calls"] == 0
        res = fit_evaluator(_data(), "score", task="Answer briefly", llm_options=opts, n_boot=50)
        a = res.evaluator.artifact
        ret = a["retrieval"]
        assert a["method"]["bank_used"] and ret["policy"].startswith("cheap metrics always")
        assert ret["always"] and all(c["fate"] == "always" for c in ret["candidates"])
        assert a["llm"]["screening"]["base"]["features"]
        assert not any(k.startswith("retrieve") for k in a["llm"]["usage"])
        assert [c["feature"] for c in a["llm"]["candidates"]] == [g["feature"] for g in a["generated"]]


def test_cli_fit_with_judges_cross_fits_and_honours_metrics(fake, env, capsys):
    """`fit --llm` at default flags: no held-out split (every label counts, validity cross-fitted),
    and --metrics limits the bank next to the judges as it does without --llm."""
    from autometrics._cli.main import main

    data = env / "data.csv"
    _data(n=60).to_csv(data, index=False)
    with fake(judge=_judge) as srv:
        assert main(["fit", str(data), "--target", "score", "--llm", f"openai/fake@{srv.url}", "--quick", "--n-boot", "50",
                     "--metrics", "LengthRatio,FKGL", "--use-bank", "always", "--no-progress", "--out", str(env / "run")]) == 0
    out = capsys.readouterr().out
    a = json.loads((env / "run" / "evaluator.json").read_text())
    assert a["validity"]["method"] == "cross-fit" and a["method"]["fitted_on"] == "every labelled row"
    assert a["dataset"]["n_train"] == 60 and a["dataset"]["n_test"] == 0
    assert a["llm"]["screening"]["base"]["features"] and all(
        f.split(".")[0] in ("LengthRatio", "FKGL") for f in a["llm"]["screening"]["base"]["features"])
    assert "held-out" not in out and "cross-fitted Kendall tau" in out


def _fingerprint(artifact: dict) -> dict:
    return {
        "judges": [(g["feature"], g["spec"]["criterion"], g["spec"].get("rubric"), g["spec"].get("demonstrations"))
                   for g in artifact["generated"]],
        "features": [(f["feature"], round(f["weight"], 9)) for f in artifact["features"]],
        "test_tau": artifact["statistics"]["test"]["tau"],
    }


def test_thirty_percent_faults_give_the_same_evaluator_as_a_clean_run(fake, tmp_path, monkeypatch):
    """Issue #3: with 30 % of requests failing (429, 500, timeouts, malformed bodies), retries
    (and the cache) make the fit produce exactly the evaluator of a fault-free run."""
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    counts = GeneratorCounts(n_single=2, n_rubric=1, n_example=1, n_optimized=0, example_sets=2, example_eval_rows=6)
    results = {}
    for name, rate in (("clean", 0.0), ("faulty", 0.3)):
        with fake(judge=_judge, fault_rate=rate, seed=7, timeout_sleep=0.6) as srv:
            opts = LLMOptions(llm=f"openai/fake@{srv.url}", counts=counts, timeout=0.4, max_retries=8,
                                      backoff=0.02, concurrency=2, rationales=1, cache=str(tmp_path / f"{name}.sqlite"))
            res = fit_evaluator(_data(30), "score", task="Answer briefly", llm_options=opts, n_boot=50)
            results[name] = (res.evaluator.artifact, srv.modes)
    clean, faulty = results["clean"][0], results["faulty"][0]
    modes = results["faulty"][1]
    assert sum(m != "ok" for m in modes) / len(modes) > 0.2  # the faults really happened
    assert {"429", "500", "timeout", "malformed"} <= set(modes)
    assert faulty["llm"]["usage"]["total"]["retries"] >= sum(m != "ok" for m in modes)
    assert faulty["llm"]["usage"]["total"]["failures"] == 0
    assert _fingerprint(faulty) == _fingerprint(clean)


def test_judge_prompts_share_the_case_prefix():
    """Judges without demonstrations put the case (task, input, output) first, so a prefix cache
    serves all criteria of one example; the judge-specific parts come after it.  A judge with
    demonstrations puts its (long, row-independent) block first and the case after it."""
    from autometrics.evaluators.judges.metric import JudgeSpec, judge_messages

    specs = [JudgeSpec(kind="single", criterion="Fluency", description="fluent", task="T"),
             JudgeSpec(kind="rubric", criterion="Clarity", task="T", rubric={str(i): f"level {i}" for i in range(1, 6)}),
             JudgeSpec(kind="example", criterion="Overall", task="T",
                       demonstrations=[{"input": "x" * 900, "output": "y", "score": 3}]),
             JudgeSpec(kind="optimized", criterion="Overall", task="T", instructions="Be harsh.")]
    msgs = [judge_messages(s, "the output text", "the input text") for s in specs]
    case = "Task: T\n\nInput:\nthe input text\n\nOutput:\nthe output text\n\n"
    for s, m in zip(specs, msgs, strict=True):
        assert m[0] == msgs[0][0]  # one system message for all
        if s.demonstrations:
            assert m[1]["content"].startswith("Task: T\n\nFor calibration")
            assert "Now judge this case (not the examples above):\n\nInput:\nthe input text\n\nOutput:\nthe output text\n\n" in m[1]["content"]
        else:
            assert m[1]["content"].startswith(case)
    demo = msgs[2][1]["content"]
    assert "x" * 300 in demo and "x" * 301 not in demo  # demonstrations are clipped


def test_prompt_optimized_judge_runs_dspy_miprov2(fake, env):
    """The prompt-optimized judge: DSPy MIPROv2 (instruction proposals + labelled demos) on a
    small budget; the result is frozen into a JudgeSpec and scored like the other judges."""
    pytest.importorskip('dspy', reason='needs the `llm` extra (dspy)')
    pytest.importorskip('optuna', reason='DSPy MIPROv2 needs optuna (the `llm` extra)')
    counts = GeneratorCounts(n_single=1, n_rubric=0, n_example=0, n_optimized=1, optimized_trials=2,
                             optimized_candidates=2, optimized_rows=10)
    with fake(judge=_judge) as srv:
        opts = LLMOptions(llm=f"openai/fake@{srv.url}", counts=counts, rationales=1, backoff=0.01, screen=False)
        res = fit_evaluator(_data(30), "score", task="Answer briefly", llm_options=opts, n_boot=50)
        a = res.evaluator.artifact
        notes = a["llm"].get("notes") or []
        opt = [g for g in a["generated"] if g["kind"] == "optimized"]
        assert opt, f"no optimized judge; notes: {notes}"
        spec = opt[0]["spec"]
        assert spec["origin"]["optimizer"] == "dspy.MIPROv2"
        assert spec["instructions"] and isinstance(spec["demonstrations"], list)
        # proposals (dataset/program summaries, instruction candidates) and trial evaluations ran
        assert a["llm"]["usage"]["generate:optimize"]["requests"] >= 2 * counts.optimized_trials
        assert a["llm"]["usage"]["score:optimized"]["requests"] >= 30
        # the frozen judge is scored from its spec: its prompt carries the optimized instructions
        prompts = [r["messages"][-1]["content"] for r in srv.requests if r.get("max_tokens") == 1]
        assert any(spec["instructions"].strip() in p for p in prompts)
