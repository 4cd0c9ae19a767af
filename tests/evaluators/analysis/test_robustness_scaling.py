"""Issue #7: robustness (sensitivity / stability under perturbations, AutoMetrics §3.2) and
data scaling (held-out τ vs number of training labels, §4.6), their report sections and CLI flags."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from autometrics.evaluators.analysis.perturb import PERTURBATIONS, PerturbationCache, Perturber, perturbation_sentences
from autometrics.evaluators.analysis.robustness import as_scorer, run_robustness, sensitivity, stability
from autometrics.evaluators.analysis.scaling import run_scaling, scaling_sizes, taus_with_bootstrap
from autometrics.evaluators.fit import Evaluator, fit_evaluator
from autometrics.evaluators.llm.client import LLMClient, LLMConfig
from autometrics.evaluators.report import attach_analyses, write_reports
from autometrics.evaluators.stats import kendall_tau
from fake_llm_server import FakeLLMServer  # tests/fake_llm_server.py

CHEAP = ["BLEU", "chrF++", "SARI", "FKGL", "LengthRatio", "OutputLength", "InputSimilarity", "LevenshteinRatio", "ROUGE", "CIDEr"]
TEXTS = [
    "The cat sat on the mat. It was warm there. Then it slept for an hour.",
    "Prices rose by ten percent last year. Analysts expect a slowdown.",
    "A single sentence without any second part",
    "Paris is the capital of France. It has many museums. The Louvre is the largest. Millions visit it each year.",
]


def length_scorer(outputs, inputs, references):
    return [float(len(o.split())) for o in outputs]


# ------------------------------------------------------------------ rule-based perturbations


def test_rule_perturbations_are_seeded_deterministic_and_cached(tmp_path):
    kinds = ["reorder_sentences", "truncate", "drop_sentences", "shuffle_words"]
    a = Perturber(cache=tmp_path / "p.sqlite", seed=3)
    first = {k: a.perturb(TEXTS, k) for k in kinds}
    assert a.cache_hits == 0
    # what each rule does
    for t, p in zip(TEXTS, first["truncate"], strict=True):
        words = t.split()
        assert p.status == "ok" and p.text.split() == words[: math.ceil(len(words) / 2)]
    for t, p in zip(TEXTS, first["reorder_sentences"], strict=True):
        if len(perturbation_sentences(t)) < 2:
            assert p.status == "not_applicable" and p.text is None
        else:
            assert p.text != t and sorted(perturbation_sentences(p.text)) == sorted(perturbation_sentences(t))
    for t, p in zip(TEXTS, first["shuffle_words"], strict=True):
        assert p.text != t and sorted(p.text.split()) == sorted(t.split())
    for t, p in zip(TEXTS, first["drop_sentences"], strict=True):
        sents = perturbation_sentences(t)
        if len(sents) < 2:
            assert p.status == "not_applicable"
        else:
            kept = perturbation_sentences(p.text)
            assert 1 <= len(kept) < len(sents) and set(kept) <= set(sents)

    # same seed, no cache: the same perturbations; order of the batch does not matter
    b = Perturber(cache="off", seed=3)
    for k in kinds:
        again = b.perturb(list(reversed(TEXTS)), k)[::-1]
        assert [p.text for p in again] == [p.text for p in first[k]]
    # another seed gives other shuffles
    c = Perturber(cache="off", seed=4)
    assert [p.text for p in c.perturb(TEXTS, "shuffle_words")] != [p.text for p in first["shuffle_words"]]

    # a second run on the same cache file reads every perturbation from it
    d = Perturber(cache=tmp_path / "p.sqlite", seed=3)
    for k in kinds:
        assert [(p.text, p.status) for p in d.perturb(TEXTS, k)] == [(p.text, p.status) for p in first[k]]
    assert d.cache_hits == len(kinds) * len(TEXTS)
    assert len(PerturbationCache(tmp_path / "p.sqlite")) == len(kinds) * len(TEXTS)


def test_synonyms_use_offline_wordnet_or_say_why_not(tmp_path, monkeypatch):
    from autometrics.metricbank.meteor import find_wordnet_dir

    if find_wordnet_dir() is None:
        p = Perturber(cache="off")
        assert "wordnet-base" in p.unavailable_reason("synonyms")
        rob = run_robustness(pd.DataFrame({"output": TEXTS}), {"len": length_scorer}, kinds=["synonyms", "truncate"],
                             cache="off")
        assert any("synonyms: skipped" in n and "wordnet-base" in n for n in rob.notes)
        return
    p = Perturber(cache="off", seed=0)
    out = p.perturb(["The team scored in the final minute of the match.", "xyzzy"], "synonyms")
    assert out[0].status == "ok" and out[0].text != "The team scored in the final minute of the match."
    assert len(out[0].text.split()) == 10  # word-for-word replacement
    assert out[1].status == "not_applicable"
    # a missing WordNet is a clear skip note, never a crash
    monkeypatch.setenv("AUTOMETRICS_WORDNET_DIR", str(tmp_path / "none"))
    assert "wordnet-base" in Perturber(cache="off").unavailable_reason("synonyms")


# ---------------------------------------------------------------------- LLM perturbations


def _client(srv, **over):
    cfg = LLMConfig.parse(f"openai/fake@{srv.url}", **{"backoff": 0.01, "timeout": 2.0, "max_retries": 0, "concurrency": 1, **over})
    return LLMClient(cfg, cache=False)  # no LLM reply cache: only the perturbation cache can save calls


def test_llm_perturbations_are_cached_and_failures_are_missing(tmp_path):
    outputs = [f"Output number {i} says something. It has two sentences." for i in range(4)]
    cache = tmp_path / "perturb.sqlite"
    with FakeLLMServer(plan=["truncated"]) as srv:  # the first reply is cut off: unusable
        p1 = Perturber(_client(srv), cache=cache)
        para = p1.perturb(outputs, "paraphrase")
        worse = p1.perturb(outputs, "llm_errors")
        assert len(srv.requests) == 8 and p1.llm_requests == 8
        assert para[0].status == "failed" and para[0].text is None
        assert all(x.status == "ok" and x.text for x in para[1:] + worse)
        assert "Text:\n" + outputs[1] in srv.requests[1]["messages"][-1]["content"]

        # second run, same perturbation cache: only the failed one is asked again
        p2 = Perturber(_client(srv), cache=cache)
        assert p2.perturb(outputs, "paraphrase")[0].status == "ok"
        p2.perturb(outputs, "llm_errors")
        assert len(srv.requests) == 9 and p2.cache_hits == 7

        # third run: no LLM request at all, and the robustness run reads the same perturbations
        rob = run_robustness(pd.DataFrame({"output": outputs}), {"len": length_scorer},
                             perturber=Perturber(_client(srv), cache=cache), kinds=["paraphrase", "llm_errors"])
        assert len(srv.requests) == 9
        assert rob.settings["cache_hits"] == 8 and rob.settings["llm_requests"] == 0

        # with the LLM failing for good, the pairs are missing (excluded, counted), never 0
        with FakeLLMServer(default="500") as bad:
            rob = run_robustness(pd.DataFrame({"output": outputs}), {"len": length_scorer}, cache="off",
                                 perturber=Perturber(_client(bad), cache="off"), kinds=["llm_omit", "truncate"])
        row = rob.table.set_index("kind").loc["llm_omit"]
        assert row["n"] == 0 and row["excluded"] == 4 and math.isnan(row["value"])
        assert rob.perturbations["llm_omit"]["counts"] == {"failed": 4}
        assert any("llm_omit" in n and "failed" in n for n in rob.notes)
        assert rob.table.set_index("kind").loc["truncate", "value"] == 1.0


# ------------------------------------------------------------------------------ formulas


def test_sensitivity_and_stability_formulas():
    orig = np.array([0.0, 10.0, 20.0, np.nan])
    # lower / tie / higher / missing: one detection out of three usable pairs
    s = sensitivity(orig, [-1.0, 10.0, 25.0, 3.0])
    assert s["n"] == 3 and s["value"] == pytest.approx(1 / 3)
    assert 0 < s["ci_low"] < 1 / 3 < s["ci_high"] < 1
    # normalised by the originals' min/max (0..20): |Δ| = .25, 0, .5 -> stability .75
    st = stability(orig, [5.0, 10.0, 10.0, 1.0], n_boot=200)
    assert st["n"] == 3 and st["value"] == pytest.approx(0.75)
    assert st["mean_delta"] == pytest.approx((0.25 + 0 - 0.5) / 3)
    # normalised scores are clipped to [0, 1]: a score far outside the range is a full-range change at most
    assert stability([0.0, 10.0], [0.0, -1000.0], n_boot=0)["value"] == pytest.approx(0.5)
    # explicit bounds (the originals of the whole sample) are used as given
    assert stability([5.0], [6.0], bounds=(0.0, 10.0), n_boot=0)["value"] == pytest.approx(0.9)
    # constant originals: no scale, stability undefined (NaN), not 1 and not 0
    assert math.isnan(stability([3.0, 3.0], [3.0, 4.0], n_boot=0)["value"])


def test_length_scorer_detects_truncation_and_is_stable_under_reordering(tmp_path):
    df = pd.DataFrame({"id": [f"r{i}" for i in range(len(TEXTS))], "input": ["x"] * len(TEXTS), "output": TEXTS})
    shorter_is_better = lambda o, i, r: [-len(x.split()) for x in o]  # noqa: E731
    rob = run_robustness(df, {"length": length_scorer, "brevity": shorter_is_better}, cache=tmp_path / "c.sqlite",
                         kinds=["reorder_sentences", "truncate", "drop_sentences", "shuffle_words"])
    t = rob.table.set_index(["scorer", "kind"])
    assert t.loc[("length", "truncate"), "value"] == 1.0 and t.loc[("length", "truncate"), "n"] == 4
    assert t.loc[("length", "drop_sentences"), "value"] == 1.0 and t.loc[("length", "drop_sentences"), "excluded"] == 1
    assert t.loc[("length", "shuffle_words"), "value"] == 0.0  # same length: a tie is not a detection
    assert t.loc[("length", "reorder_sentences"), "value"] == 1.0
    assert t.loc[("brevity", "truncate"), "value"] == 0.0
    s = rob.summary.set_index("scorer")
    assert s.loc["length", "sensitivity"] == pytest.approx(7 / 11)  # 4 + 3 detected of 4 + 3 + 4 pairs
    assert s.loc["length", "stability"] == 1.0 and s.loc["length", "n_stability"] == 3
    assert t.loc[("length", "truncate"), "mean_delta"] < 0


def test_evaluator_metric_and_baseline_scorers(tmp_path):
    from autometrics.evaluators.benchmark.baselines import BestMetricBaseline, MetricFeatures
    from autometrics.metricbank import get_metric

    rng = np.random.default_rng(0)
    outs = [" ".join(["word"] * int(k)) + "." for k in rng.integers(2, 30, 40)]
    df = pd.DataFrame({"id": [f"r{i}" for i in range(40)], "input": [f"q{i}" for i in range(40)], "output": outs,
                       "score": [len(o.split()) + rng.normal(0, 1) for o in outs]})
    res = fit_evaluator(df, "score", metrics=["OutputLength", "FKGL"], n_boot=0)
    from autometrics.evaluators.data import load_dataset

    ds = load_dataset(df, "score")
    base = BestMetricBaseline(MetricFeatures(metrics=["OutputLength"])).fit(ds, ds.y("score"))
    fn, info = as_scorer(get_metric("OutputLength"))
    assert info["kind"] == "metric" and list(fn(["a b c", "a"], None, None)) == [3.0, 1.0]
    rob = run_robustness(df, {"evaluator": res, "metric": get_metric("OutputLength"), "baseline": base}, n=12,
                         cache=tmp_path / "c.sqlite", kinds=["truncate", "shuffle_words"])
    s = rob.summary.set_index("scorer")
    assert set(s.index) == {"evaluator", "metric", "baseline"}
    for name in s.index:  # all three rate longer outputs higher here: truncation is caught
        assert rob.table.set_index(["scorer", "kind"]).loc[(name, "truncate"), "value"] == 1.0
    assert rob.settings["n_rows"] == 12


# ------------------------------------------------------------------------------- scaling


def test_bootstrap_taus_equal_scipy():
    rng = np.random.default_rng(1)
    y = rng.integers(1, 6, 50).astype(float)  # ties on purpose
    preds = np.vstack([y + rng.normal(0, 1, 50), rng.normal(0, 1, 50)])
    preds[1, 3] = np.nan
    tau, boot = taus_with_bootstrap(preds, y, n_boot=20, seed=3)
    assert tau[0] == pytest.approx(kendall_tau(preds[0], y)[0], abs=1e-12)
    assert tau[1] == pytest.approx(kendall_tau(preds[1], y)[0], abs=1e-12)
    idx = np.random.default_rng(3).integers(0, 50, (20, 50))[4]  # the 5th resample, drawn the same way
    assert boot[0, 4] == pytest.approx(kendall_tau(preds[0][idx], y[idx])[0], abs=1e-12)
    assert scaling_sizes(138, (5, 10, 20, 40)) == [5, 10, 20, 40, 138]
    assert scaling_sizes(160) == [5, 10, 20, 40, 80, 160]


def test_scaling_curve_on_simpeval(datasets_dir):
    df = pd.read_csv(datasets_dir / "simpeval.csv").head(200)
    sc = run_scaling(df, "score", sizes=(5, 10, 20, 40), seeds=2, metrics=CHEAP, n_boot=300)
    pool = sc.settings["n_pool"]
    assert sc.settings["sizes"] == [5, 10, 20, 40, pool] and pool > 100
    assert len(sc.table) == 4 * 2 + 1 and sc.table["error"].isna().all()
    assert set(sc.table["n_test"]) == {sc.settings["n_test"]}
    summ = sc.summary.set_index("n_train")
    assert list(summ["fits"]) == [2, 2, 2, 2, 1] and summ["tau_mean"].notna().all()
    assert (summ["ci_low"] <= summ["tau_mean"]).all() and (summ["tau_mean"] <= summ["ci_high"]).all()
    # monotone-ish: more labels help on the whole, and the curve rises with n
    means = summ["tau_mean"].to_numpy()
    assert means[-1] > means[0] and means[3] > means[0]
    assert pd.Series(means).corr(pd.Series(np.arange(len(means))), method="spearman") > 0
    # the whole-pool point is exactly the package's own fit on the same split
    plain = fit_evaluator(df, "score", metrics=CHEAP, n_boot=0, test_size=0.3)  # the split scaling uses
    assert summ.loc[pool, "tau_mean"] == pytest.approx(plain.evaluator.statistics["test"]["tau"], abs=1e-12)
    g = sc.gains["bank"]
    assert (g["from"], g["to"]) == (40, pool) and g["ci_low"] <= g["gain"] <= g["ci_high"]
    assert "Δτ" in sc.reading[0] and "95% CI" in sc.reading[0]


def test_scaling_llm_arms_with_fake_server(tmp_path, monkeypatch):
    from autometrics.evaluators.judges.options import GeneratorCounts, LLMOptions

    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    rng = np.random.default_rng(0)
    k = rng.integers(1, 6, 40)
    df = pd.DataFrame({"id": [f"r{i}" for i in range(40)], "input": [f"question {i}" for i in range(40)],
                       "output": [" ".join(["word"] * int(x)) for x in k], "score": k + rng.normal(0, 0.3, 40)})
    with FakeLLMServer(judge=lambda t: max(1, min(5, len(t.split())))) as srv:
        opts = LLMOptions(llm=f"openai/fake@{srv.url}", counts=GeneratorCounts(1, 0, 0, 0),
                                  dense=False, rationales=0, cache=str(tmp_path / "llm.sqlite"), retrieve_k=5)
        sc = run_scaling(df, "score", sizes=(10,), seeds=1, metrics=["OutputLength", "BLEU"], llm_options=opts, n_boot=100)
    assert set(sc.table["arm"]) == {"bank", "generated", "generated+bank"}
    assert sc.table["error"].isna().all(), sc.notes
    gen = sc.summary[sc.summary["arm"] == "generated"]
    assert (gen["tau_mean"] > 0.5).all()  # the fake judge counts words, as the labels do
    assert len(sc.reading) >= 3


# -------------------------------------------------------------------------------- report


def test_report_sections_render_markdown_and_self_contained_html(tmp_path, datasets_dir):
    df = pd.read_csv(datasets_dir / "simpeval.csv").head(120)
    df.loc[0, "output"] = "<script>alert(1)</script> A short output. With two sentences."
    res = fit_evaluator(df, "score", metrics=["OutputLength", "SARI", "BLEU"], n_boot=0)
    assert "scaling" not in res.evaluator.artifact and "robustness" not in res.evaluator.artifact
    plain_md = write_reports(res, tmp_path / "plain")["markdown"].read_text()
    assert "Robustness" not in plain_md and "Data scaling" not in plain_md

    sc = run_scaling(df, "score", sizes=(5, 10, 20), seeds=2, metrics=["OutputLength", "SARI", "BLEU"], n_boot=100)
    rob = run_robustness(df, {"evaluator": res.evaluator, "len": length_scorer}, n=100, cache=tmp_path / "p.sqlite",
                         ids=list(res.test["id"]) + [df["id"].iloc[0]], kinds=["truncate", "reorder_sentences"])
    attach_analyses(res, scaling=sc, robustness=rob)
    paths = write_reports(res, tmp_path / "out")
    md = paths["markdown"].read_text()
    assert "## Data scaling" in md and "## Robustness" in md and "**Reading.**" in md
    assert "| evaluator |" in md and "`truncate`" in md
    html = paths["html"].read_text()
    assert '<svg role="img" aria-label="data scaling curve' in html and "<polyline" in html
    assert "id='robustness'" in html and "<table>" in html
    # self-contained: nothing is loaded from elsewhere, and example texts (data) are escaped
    assert not any(x in html for x in ("<script", "src=", "<link", "@import", "url("))
    assert "&lt;script&gt;" in html
    # the analyses travel in evaluator.json, which still loads and scores
    ev = Evaluator.load(paths["evaluator"])
    assert ev.artifact["scaling"]["settings"]["sizes"][-1] == sc.settings["n_pool"]
    assert len(ev.score_texts(["a b c"], inputs=["a b c d"], references=[["a b"]])) == 1


def test_cli_fit_scaling_and_robustness_flags(tmp_path, datasets_dir, monkeypatch, capsys):
    from autometrics._cli.main import main

    monkeypatch.setenv("AUTOMETRICS_PERTURBATION_CACHE", str(tmp_path / "perturb.sqlite"))
    data = tmp_path / "d.csv"
    pd.read_csv(datasets_dir / "simpeval.csv").head(150).to_csv(data, index=False)
    out = tmp_path / "run"
    rc = main(["fit", str(data), "--target", "score", "--metrics", "OutputLength,SARI,BLEU,FKGL", "--n-boot", "50",
               "--no-progress", "--scaling", "--scaling-seeds", "2", "--robustness", "--robustness-n", "15",
               "--out", str(out)])
    assert rc == 0
    stdout = capsys.readouterr().out
    assert "[score] scaling: " in stdout and "robustness of evaluator: sensitivity" in stdout
    a = json.loads((out / "evaluator.json").read_text())
    assert a["scaling"]["settings"]["seeds"] == 2 and a["robustness"]["settings"]["n_rows"] == 15
    assert a["robustness"]["settings"]["from_ids"] and a["robustness"]["settings"]["cache"] == str(tmp_path / "perturb.sqlite")
    assert "## Data scaling" in (out / "report.md").read_text()
    assert set(PERTURBATIONS) >= set(a["robustness"]["perturbations"])
