"""Benchmark harness, baselines and the DSPy reward (issue #7, first part).

Bounded: a 120-row simpeval sample with 2 seeds for the LLM-free methods, small synthetic data
against the fake OpenAI-compatible server for the LLM methods."""

from __future__ import annotations

import argparse
import inspect
import json
import math

import numpy as np
import pandas as pd
import pytest
from autometrics.evaluators.analysis.reward import RewardInputError
from autometrics.evaluators.benchmark.baselines import (
    AutoMetricsBaseline,
    BestMetricBaseline,
    DnAEvalBaseline,
    LLMJudgeBaseline,
    MetaMetricsBaseline,
    MetricFeatures,
    parse_aspects,
    xgboost_version,
)
from autometrics.evaluators.benchmark.harness import comparison_markdown, run_benchmark, t_interval
from autometrics.evaluators.data import load_dataset
from autometrics.evaluators.fit import fit_evaluator
from autometrics.evaluators.sampling import sample_rows
from autometrics.evaluators.stats import kendall_tau
from fake_llm_server import FakeLLMServer  # tests/fake_llm_server.py

FAST_METRICS = ["SARI", "FKGL", "LengthRatio", "BLEU", "InputSimilarity", "chrF++", "TER"]


# ------------------------------------------------------------------------ harness, no LLM


def test_harness_no_llm_methods_on_simpeval_subset(datasets_dir, tmp_path):
    path = datasets_dir / "simpeval.csv"
    metric_methods = ["best_metric", "metametrics", "autometrics"]
    feats = MetricFeatures()  # the default CPU bank; kept to check the AutoMetrics row below without rescoring
    res = run_benchmark(path, "score", seeds=2, max_rows=120, methods=metric_methods + ["llm_judge", "dna_eval"],
                        features=feats)
    d = res.to_dict()
    json.loads(json.dumps(d))  # JSON-safe
    assert [m["method"] for m in d["methods"]] == ["best_metric", "metametrics", "autometrics", "llm_judge", "dna_eval"]
    assert d["dataset"]["n_rows"] == 120 and d["settings"]["seeds"] == [0, 1]
    assert d["dataset"]["criterion"].startswith("1-100 Likert")  # from datasets.json beside the CSV
    for m in d["methods"][:3]:
        assert m["status"] == "ok", m
        assert len(m["per_seed"]) == 2 and m["tau"]["k"] == 2
        taus = [s["tau"] for s in m["per_seed"]]
        assert all(math.isfinite(t) and -1 <= t <= 1 for t in taus)
        assert m["tau"]["mean"] == pytest.approx(np.mean(taus))
        assert m["tau"]["ci_low"] < m["tau"]["mean"] < m["tau"]["ci_high"]
        assert m["missing_predictions"] == 0 and m["llm"]["calls"] == 0
        assert all(s["n_train"] + s["n_test"] == 120 for s in m["per_seed"])
        assert m["wall_seconds"] >= d["shared"]["metric_scoring_seconds"]  # shared scoring is part of their cost
    for s in range(2):  # same splits for every method
        assert len({m["per_seed"][s]["n_test"] for m in d["methods"][:3]}) == 1
    assert {m["method"]: m["status"] for m in d["methods"][3:]} == {"llm_judge": "skipped", "dna_eval": "skipped"}
    assert ("XGBoost" in res.method("metametrics")["title"]) == (xgboost_version() is not None)
    assert res.method("best_metric")["per_seed"][0]["details"]["feature"] in d["shared"]["metric_features"]

    # the AutoMetrics row is fit_evaluator's own held-out tau on the same split
    lab = sample_rows(load_dataset(path, "score").labelled("score"), "score", 120, 0)
    own = fit_evaluator(None, "score", dataset=lab, features=feats.frame(lab), seed=1, n_boot=0, test_size=0.3)
    assert res.method("autometrics")["per_seed"][1]["tau"] == pytest.approx(own.evaluator.statistics["test"]["tau"], abs=1e-12)

    table = res.table()
    assert "held-out Kendall τ" in table and "skipped" in table and "Student-t" in table
    paths = res.save(tmp_path / "out")
    md = paths["markdown"].read_text()
    assert md.count("\n| ") >= 6 and "Best existing metric" in md and "What each method chose" in md
    assert json.loads(paths["json"].read_text())["methods"][0]["method"] == "best_metric"

    # reproducible: seed 1 alone, from scratch, gives the same taus
    again = run_benchmark(path, "score", seeds=[1], max_rows=120, methods=metric_methods)
    for key in metric_methods:
        assert again.method(key)["per_seed"][0]["tau"] == res.method(key)["per_seed"][1]["tau"], key

    cmp = comparison_markdown([res, again])
    assert cmp.count("\n") == 1 + 5 and "simpeval / score" in cmp


def test_harness_finetuned_minilm_head(datasets_dir):
    pytest.importorskip('torch', reason='needs the `models` extra (torch)')
    pytest.importorskip('transformers', reason='needs the `models` extra (transformers)')
    from autometrics.evaluators.benchmark.baselines import FinetunedBaseline

    path = datasets_dir / "simpeval.csv"
    res = run_benchmark(path, "score", seeds=2, max_rows=50, methods=["finetuned"])
    m = res.method("finetuned")
    assert m["status"] == "ok", m
    assert m["title"] == "Frozen all-MiniLM-L6-v2 + ridge head"
    taus = [s["tau"] for s in m["per_seed"]]
    assert all(math.isfinite(t) for t in taus) and m["missing_predictions"] == 0
    det = m["per_seed"][0]["details"]
    assert det["n_features"] == 4 * 384 and det["frozen_encoder"]  # [u, v, |u-v|, u*v] of MiniLM vectors
    again = run_benchmark(path, "score", seeds=[1], max_rows=50, methods=["finetuned"])
    assert again.method("finetuned")["per_seed"][0]["tau"] == taus[1]
    # the MLP head on the same (cached) embeddings
    lab = sample_rows(load_dataset(path, "score").labelled("score"), "score", 50, 0)
    tr, te = lab.split_positions(0.3, 0)
    mlp = FinetunedBaseline(head="mlp").fit(lab.subset(tr), lab.y("score")[tr])
    pred = mlp.predict(lab.subset(te))
    assert np.isfinite(pred).all() and pred.std() > 0


def _frame(n=60, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        k = int(rng.integers(1, 9))
        rows.append({"id": f"r{i}", "input": f"question {i % 20}", "output": " ".join(f"w{j}" for j in range(k)),
                     "reference": " ".join(f"w{j}" for j in range(8)), "score": k + rng.normal(0, 0.5)})
    return pd.DataFrame(rows)


def test_best_metric_is_sign_aware_and_gbm_backends(tmp_path):
    lab = load_dataset(_frame(), "score")
    y = lab.y("score")
    tr, te = lab.split_positions(0.3, 0)
    feats = MetricFeatures(["OutputLength", "FKGL", "JaccardDistance"])
    best = BestMetricBaseline(feats).fit(lab.subset(tr), y[tr])
    assert best.details()["feature"] in {"OutputLength", "JaccardDistance"}
    pred = best.predict(lab.subset(te))
    assert kendall_tau(pred, y[te])[0] > 0.5  # a distance (negative tau) is flipped, not ignored
    jac = BestMetricBaseline(MetricFeatures(["JaccardDistance", "FKGL"])).fit(lab.subset(tr), y[tr])
    assert jac.details()["sign"] == -1.0 and jac.details()["tau_train"] < 0

    sk = MetaMetricsBaseline(feats, backend="sklearn").fit(lab.subset(tr), y[tr])
    assert "HistGradientBoostingRegressor" in sk.title and np.isfinite(sk.predict(lab.subset(te))).all()
    if xgboost_version() is None:
        with pytest.raises(ImportError, match="pip install xgboost"):
            MetaMetricsBaseline(feats, backend="xgboost")
    else:
        xg = MetaMetricsBaseline(feats, backend="xgboost").fit(lab.subset(tr), y[tr])
        p1 = xg.predict(lab.subset(te))
        p2 = MetaMetricsBaseline(feats, backend="xgboost").fit(lab.subset(tr), y[tr]).predict(lab.subset(te))
        assert np.array_equal(p1, p2) and "XGBoost" in xg.title

    # standalone (no split context): fit_evaluator holds out part of train itself
    am = AutoMetricsBaseline(feats).fit(lab.subset(tr), y[tr])
    assert np.isfinite(am.predict(lab.subset(te))).all()


def test_finetuned_ridge_penalty_matches_grouped_cv_brute_force():
    from autometrics.evaluators.benchmark.baselines import FinetunedBaseline
    from sklearn.linear_model import Ridge
    from sklearn.model_selection import GroupKFold

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 200))
    y = X[:, 0] + rng.normal(size=60)
    groups = np.repeat(np.arange(15), 4)
    err = [sum(float(((Ridge(alpha=a).fit(X[tr], y[tr]).predict(X[va]) - y[va]) ** 2).sum())
               for tr, va in GroupKFold(5).split(X, y, groups)) for a in FinetunedBaseline.ALPHAS]
    assert FinetunedBaseline._grouped_alpha(X, y, groups) == FinetunedBaseline.ALPHAS[int(np.argmin(err))]


# ------------------------------------------------------------------------------ LLM methods


def test_parse_aspects_json_lines_and_garbage():
    a = parse_aspects('{"aspects": [{"name": "Fluency", "description": "reads well", "weight": 3},'
                      ' {"name": "Meaning", "description": "keeps it", "weight": 1}]}')
    assert [x["name"] for x in a] == ["Fluency", "Meaning"] and [x["weight"] for x in a] == [0.75, 0.25]
    b = parse_aspects("1. Simplicity (40%): easier words\n2. Meaning (60%): same meaning\nthanks!")
    assert [(x["name"], round(x["weight"], 2)) for x in b] == [("Simplicity", 0.4), ("Meaning", 0.6)]
    c = parse_aspects("Conciseness: short\nFluency: natural")
    assert [x["weight"] for x in c] == [0.5, 0.5]
    assert parse_aspects("I cannot rate that.") == [] and parse_aspects(None) == []


def _client_kw(tmp_path):
    return {"cache": str(tmp_path / "cache.sqlite"), "concurrency": 1, "timeout": 1.0, "max_retries": 1}


def test_llm_judge_and_dna_unparsed_replies_are_nan_not_zero(tmp_path):
    lab = load_dataset(_frame(10), "score")
    y = lab.y("score")
    # request order with concurrency 1: one reply per row, in row order
    plan = ["garbage", "ok", "badjson", "ok", "truncated"] + ["ok"] * 5
    with FakeLLMServer(plan=plan) as srv:
        judge = LLMJudgeBaseline(f"openai/fake@{srv.url}", **_client_kw(tmp_path)).fit(lab, y)
        pred = judge.predict(lab)
        assert np.isnan(pred[[0, 2, 4]]).all() and np.isfinite(pred[[1, 3, 5, 6, 7, 8, 9]]).all()
        assert (pred[np.isfinite(pred)] >= 1).all()  # a 1-5 judge: never 0
        u = judge.usage()
        assert u["parse_failures"] == 3 and u["requests"] == 10  # garbage, bad JSON and a truncated reply
        assert judge.details()["rubric"] and judge.details()["instructions_source"] == "generic rubric"
        assert "Overall quality" in json.dumps(srv.requests[0]["messages"])

    # DnA: the proposal, then aspect 1 for every row, then aspect 2 for every row
    n = len(lab)
    plan = ["ok"] + ["garbage", "garbage"] + ["ok"] * (n - 2) + ["garbage", "ok"] + ["ok"] * (n - 2)
    with FakeLLMServer(plan=plan) as srv:
        dna = DnAEvalBaseline(f"openai/fake@{srv.url}", task="Answer", criterion="1-5 rating", **_client_kw(tmp_path / "d"))
        dna.fit(lab, y, context=None)
        assert [a["name"] for a in dna.aspects_] == ["Conciseness", "Fluency"]  # the fake server's "Name: desc" reply
        S = dna.aspect_scores(lab)
        pred = dna.predict(lab)
        assert np.isnan(S[0]).all() and np.isnan(pred[0])  # no aspect readable -> NaN
        assert np.isnan(S[1, 0]) and pred[1] == pytest.approx(S[1, 1])  # the other aspect, weights renormalised
        ok = np.isfinite(S).all(axis=1)
        assert np.allclose(pred[ok], S[ok] @ np.array([0.5, 0.5]))
        assert "Decompose" in json.dumps(srv.requests[0]["messages"])


def test_harness_llm_methods_through_fake_server(tmp_path, monkeypatch):
    from autometrics.evaluators.judges.generate import QUICK_COUNTS

    monkeypatch.setenv("AUTOMETRICS_LLM_CACHE", str(tmp_path / "default-cache.sqlite"))
    df = _frame(40)
    with FakeLLMServer(judge=lambda text: max(1, min(5, len(text.split()) - 2))) as srv:
        res = run_benchmark(df, "score", seeds=2, methods=["autometrics", "llm_judge", "dna_eval"], llm=f"openai/fake@{srv.url}",
                            task="Answer briefly", llm_cache=str(tmp_path / "cache.sqlite"), llm_concurrency=2,
                            llm_timeout=2.0, counts=QUICK_COUNTS, use_bank="never")
        n_requests = len(srv.requests)
    for key in ("autometrics", "llm_judge", "dna_eval"):
        m = res.method(key)
        assert m["status"] == "ok", m
        assert all(math.isfinite(s["tau"]) for s in m["per_seed"]), m
        assert m["llm"]["requests"] > 0 and m["llm"]["prompt_tokens"] > 0 and m["llm"]["completion_tokens"] > 0
        assert m["wall_seconds"] > 0
    assert res.method("llm_judge")["tau"]["mean"] > 0.5  # the fake judge tracks output length, like the labels
    assert res.method("autometrics")["title"].startswith("AutoMetrics (LLM judges")
    assert res.method("dna_eval")["per_seed"][0]["details"]["aspects"]
    total_calls = sum(res.method(k)["llm"]["calls"] for k in ("autometrics", "llm_judge", "dna_eval"))
    assert total_calls == n_requests  # every request the server saw is accounted to one method
    # zero-shot judge: rows already judged in seed 0 are cache hits in seed 1
    assert res.method("llm_judge")["per_seed"][1]["llm"]["cache_hits"] > 0
    assert "LLM calls" in res.table()


# ------------------------------------------------------------------------------------- CLI


def test_cli_benchmark_command(tmp_path, capsys, datasets_dir):
    from autometrics._cli.benchmark import add_parser, cmd_benchmark

    parser = argparse.ArgumentParser(prog="autometrics")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["benchmark", str(datasets_dir / "simpeval.csv"), "--target", "score", "--seeds", "2",
                              "--max-rows", "80", "--methods", "best_metric,autometrics,llm_judge",
                              "--metrics", ",".join(FAST_METRICS), "--out", str(tmp_path / "b")])
    assert cmd_benchmark(args) == 0
    out = capsys.readouterr().out
    assert "llm_judge: skipped" in out and "AutoMetrics (no LLM" in out and "wrote" in out
    data = json.loads((tmp_path / "b" / "benchmark.json").read_text())
    assert data["settings"]["metrics"] == FAST_METRICS and 60 <= data["dataset"]["n_rows"] <= 80  # whole input groups
    bad = parser.parse_args(["benchmark", "x.csv", "--target", "score", "--methods", "best_metric,gpt_judge"])
    with pytest.raises(ValueError, match="gpt_judge"):
        cmd_benchmark(bad)


def test_t_interval():
    m, h, k = t_interval([0.2, 0.4, None, float("nan")])
    assert k == 2 and m == pytest.approx(0.3) and h == pytest.approx(12.7062 * 0.1414214 / math.sqrt(2), rel=1e-4)
    assert math.isnan(t_interval([0.5])[1])


# ---------------------------------------------------------------------------------- reward


@pytest.fixture(scope="module")
def simpeval_evaluator(datasets_dir):
    lab = sample_rows(load_dataset(datasets_dir / "simpeval.csv", "score").labelled("score"), "score", 120, 0)
    # the 70 % split's evaluator selects TER, so the reward needs references (what these tests check)
    res = fit_evaluator(None, "score", dataset=lab, metrics=FAST_METRICS, n_boot=0, test_size=0.3)
    return res.evaluator, lab


def test_evaluator_as_dspy_metric_gepa_style(simpeval_evaluator):
    pytest.importorskip('dspy', reason='needs the `llm` extra (dspy)')
    import dspy

    ev, lab = simpeval_evaluator
    metric = ev.as_dspy_metric(input_field="source", output_field="simplification", reference_field="refs")
    inspect.signature(metric).bind(None, None, None, None, None)  # what dspy.GEPA checks
    rows = lab.frame.iloc[:6]
    expected = ev.score_texts(rows["output"].tolist(), rows["input"].tolist(), rows["references"].tolist())
    lo, hi = ev.artifact["label"]["min"], ev.artifact["label"]["max"]
    scores = []
    for k, r in enumerate(rows.itertuples()):
        ex = dspy.Example(source=r.input, refs=list(r.references), score=0.0).with_inputs("source")
        pred = dspy.Prediction(simplification=r.output)
        # GEPA's per-predictor feedback call: (gold, pred, trace, pred_name, pred_trace), positionally
        o = metric(ex, pred, [], "simplify", [(None, {"source": r.input}, pred)])
        assert hasattr(o, "feedback") and isinstance(o["feedback"], str)
        want = float(np.clip((expected["autometrics_score"].iloc[k] - lo) / (hi - lo), 0, 1))
        assert o["score"] == pytest.approx(want, abs=1e-9) and 0.0 <= o["score"] <= 1.0
        assert "Metrics that moved the score most" in o["feedback"]
        scores.append(float(o))
        # Evaluate / MIPROv2 style: two positional arguments; the Prediction works as a number
        o2 = metric(ex, pred)
        assert float(o2) == o["score"] and (o2 >= 0.0) and (o2 + 0.0) == o["score"]
    assert len(set(np.round(scores, 9))) > 1
    # the feedback names contributing metrics with their values
    fb = metric(dspy.Example(source=rows["input"].iloc[0], refs=rows["references"].iloc[0]),
                dspy.Prediction(simplification=rows["output"].iloc[0]))["feedback"]
    named = [f["feature"] for f in ev.features if f"- {f['feature']} = " in fb]
    assert len(named) == min(3, len(ev.features))
    for name in named:
        assert f"{name} = {expected[name].iloc[0]:.4g}" in fb

    # unnormalised: the evaluator's own scale
    raw = ev.as_dspy_metric(input_field="source", output_field="simplification", reference_field="refs", normalize=False)
    o = raw(dspy.Example(source=rows["input"].iloc[1], refs=rows["references"].iloc[1]),
            dspy.Prediction(simplification=rows["output"].iloc[1]))
    assert o.score == pytest.approx(expected["autometrics_score"].iloc[1])


def test_dspy_metric_drives_a_real_gepa_run(simpeval_evaluator):
    """dspy.GEPA end to end with a DummyLM student and a recording instruction proposer: our
    scores drive the search and our feedback reaches GEPA's reflective dataset."""
    pytest.importorskip('dspy', reason='needs the `llm` extra (dspy)')
    import dspy
    from dspy.utils.dummies import DummyLM

    ev, lab = simpeval_evaluator
    metric = ev.as_dspy_metric(input_field="source", output_field="simplification", reference_field="refs")
    rows = lab.frame.drop_duplicates("input").iloc[:6]
    exs = [dspy.Example(source=r.input, refs=list(r.references)).with_inputs("source") for r in rows.itertuples()]
    lm = DummyLM({r.input[-60:]: {"simplification": r.output} for r in rows.itertuples()})
    seen = []

    def proposer(candidate, reflective_dataset, components_to_update):
        seen.append(reflective_dataset)
        return {k: candidate[k] + " Use short, common words." for k in components_to_update}

    with dspy.context(lm=lm):
        gepa = dspy.GEPA(metric=metric, max_metric_calls=20, instruction_proposer=proposer, reflection_minibatch_size=2,
                         num_threads=1, use_merge=False, track_stats=True)
        out = gepa.compile(dspy.Predict("source -> simplification"), trainset=exs[:4], valset=exs[4:])
    assert seen, "GEPA never asked for a reflection"
    records = [r for ds in seen for recs in ds.values() for r in recs]
    assert records and all("Predicted human score" in r["Feedback"] for r in records)
    assert any("Metrics that moved the score most" in r["Feedback"] for r in records)
    best = max(out.detailed_results.val_aggregate_scores)
    direct = np.mean([metric(e, dspy.Prediction(simplification=r.output)).score
                      for e, r in zip(exs[4:], rows.iloc[4:].itertuples(), strict=True)])
    assert best == pytest.approx(direct)


def test_dspy_metric_missing_fields_give_clear_errors(simpeval_evaluator):
    pytest.importorskip('dspy', reason='needs the `llm` extra (dspy)')
    import dspy

    ev, lab = simpeval_evaluator
    metric = ev.as_dspy_metric(input_field="source", output_field="simplification", reference_field="refs")
    ex = dspy.Example(source=lab.inputs[0], refs=lab.references[0])
    with pytest.raises(RewardInputError, match=r"no field 'simplification'.*its fields: answer.*output_field="):
        metric(ex, dspy.Prediction(answer="a shorter sentence"))
    with pytest.raises(RewardInputError, match=r"no reference in field 'refs'"):
        metric(dspy.Example(source=lab.inputs[0]), dspy.Prediction(simplification="x"))
    assert issubclass(RewardInputError, ValueError)
    # defaults follow the training columns (input, output, references); plain dicts work too
    d = ev.as_dspy_metric()
    o = d({"input": lab.inputs[0], "references": lab.references[0]}, {"output": lab.outputs[0]})
    assert 0.0 <= o.score <= 1.0


def test_dspy_metric_feedback_carries_llm_judge_rationales(tmp_path, monkeypatch):
    pytest.importorskip('dspy', reason='needs the `llm` extra (dspy)')
    import dspy
    from autometrics.evaluators.judges.metric import JudgeSpec, LLMJudgeMetric, unbind_clients
    from autometrics.evaluators.llm.client import LLMConfig
    from autometrics.metricbank import get_metric

    monkeypatch.setenv("AUTOMETRICS_LLM_CACHE", str(tmp_path / "cache.sqlite"))
    df = _frame(30)
    with FakeLLMServer(judge=lambda t: max(1, min(5, len(t.split()) - 2))) as srv:
        cfg = LLMConfig.parse(f"openai/fake@{srv.url}", timeout=2.0, max_retries=1, concurrency=2)
        judge = LLMJudgeMetric.from_spec(JudgeSpec(kind="single", criterion="Brevity", description="short answers"), cfg)
        try:
            # PLS keeps both (under NNLS the judge, a near-duplicate of FKGL here, is collapsed into it)
            ev = fit_evaluator(df, "score", metrics=[judge, get_metric("FKGL")], n_boot=0, regression="pls").evaluator
            metric = ev.as_dspy_metric()
            o = metric(dspy.Example(input="question 1"), dspy.Prediction(output="word word word"))
        finally:
            unbind_clients()
    assert "Judges:" in o.feedback and "Brevity" in o.feedback
    assert "The output is concise and keeps the meaning." in o.feedback  # the fake judge's rationale
    assert any("explain" in json.dumps(r["messages"]).lower() for r in srv.requests)


def test_reward_watch_flags_a_reward_climb_into_extrapolation(simpeval_evaluator):
    """RewardWatch: outputs like the training data give no alert; an 'optimizer' that learns to
    pad outputs (a metric far outside its training range, rising reward or not) is flagged."""
    pytest.importorskip('dspy', reason='needs the `llm` extra (dspy)')
    import dspy
    from autometrics.evaluators.analysis.reward import RewardWatch

    ev, lab = simpeval_evaluator
    rows = lab.frame.iloc[:40]
    ref_scores = ev.score_texts(rows["output"].tolist(), rows["input"].tolist(), rows["references"].tolist())["autometrics_score"]
    metric = ev.as_dspy_metric(input_field="source", output_field="simplification", reference_field="refs")

    calm = RewardWatch(metric, ref_scores, window=10)
    for r in rows.iloc[:20].itertuples():
        calm(dspy.Example(source=r.input, refs=list(r.references)), dspy.Prediction(simplification=r.output))
    rep = calm.report()
    assert rep["calls"] == 20 and len(rep["windows"]) == 2
    assert all(w["out_of_range_share"] <= 0.2 for w in rep["windows"])
    assert not any("reward rose" in a for a in rep["alerts"])

    # an optimizer that learns to cut outputs to four words: this evaluator (low input similarity and
    # length ratio score well) rewards it, far outside the outputs it was fitted on
    hacked = RewardWatch(metric, ref_scores, window=10)
    for k, r in enumerate(rows.iloc[:20].itertuples()):
        out = r.output if k < 10 else " ".join(r.output.split()[:4])
        hacked(dspy.Example(source=r.input, refs=list(r.references)), dspy.Prediction(simplification=out))
    rep = hacked.report()
    first, last = rep["windows"]
    assert last["mean_reward"] > first["mean_reward"] and last["out_of_range_share"] > 0.5 and last["metrics_out_of_range"]
    assert rep["verdict"].startswith("reward rose")
    assert rep["held_out_validity"]["tau"] == ev.statistics["test"]["tau"]


def test_harness_on_every_shared_dataset(datasets_dir):
    """Issue #7: the harness runs on every shared dataset target with the LLM-free methods
    (bounded here: 60 rows, 2 seeds, a few fast metrics)."""
    meta = json.loads((datasets_dir / "datasets.json").read_text())
    ran = 0
    for name, info in meta.items():
        target = next(iter(info["labels"]))
        res = run_benchmark(datasets_dir / info.get("file", f"{name}.csv"), target, seeds=2, max_rows=60,
                            methods=["best_metric", "autometrics"], metrics=["OutputLength", "InputSimilarity", "FKGL",
                                                                             "NovelNGramRatio", "LengthRatio"])
        for m in res.to_dict()["methods"]:
            assert m["status"] == "ok", (name, m)
            assert all(math.isfinite(s["tau"]) for s in m["per_seed"]), (name, m["method"])
        ran += 1
    assert ran == len(meta) >= 6
