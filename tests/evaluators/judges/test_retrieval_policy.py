"""The retrieval policy: cheap CPU metrics are always scored whatever the query; expensive
candidates are chosen by their measured agreement on a few screening rows, not by card text."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from autometrics.evaluators.retrieval import (
    CHEAP,
    LLM,
    MODEL,
    cost_class,
    plan_retrieval,
    policy_scores,
    screen_signal,
    screening_rows,
)
from autometrics.metricbank import default_metrics, get_metric

QUERIES = [
    "Simplify a complex English sentence while keeping its meaning",
    "zzz qqq",  # nothing in any card
    "semantic similarity of contextual token embeddings, BERTScore, YiSi, ParaScore",  # the expensive cards' own words
    "",
]


def _rows(n=120, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.normal(size=n)
    groups = np.repeat(np.arange(n // 3), 3).astype(str)
    outputs = [f"output number {i}" for i in range(n)]
    return y, groups, outputs


def _expensive_known(y, seed=0):
    """Values of three model-based metrics on every labelled row (as the LLM-free floor would hold
    them): YiSi-2 agrees with the labels, BERTScore and ParaScoreFree are noise."""
    rng = np.random.default_rng(seed + 1)
    X = pd.DataFrame({"YiSi-2": y + rng.normal(scale=0.5, size=len(y)),
                      "BERTScore.f1": rng.normal(size=len(y)), "ParaScoreFree": rng.normal(size=len(y))})
    meta = {"YiSi-2": {"metric": {"name": "YiSi-2"}}, "BERTScore.f1": {"metric": {"name": "BERTScore"}},
            "ParaScoreFree": {"metric": {"name": "ParaScoreFree"}}}
    return X, meta


def test_cost_classes():
    assert cost_class(get_metric("BLEU")) == CHEAP
    assert cost_class(get_metric("SARI")) == CHEAP
    assert cost_class(get_metric("BERTScore")) == MODEL  # constructing does not load (or need) the weights
    assert cost_class(get_metric("Perplexity")) == MODEL

    class Judge:
        generated = True

    class Declared:
        generated = True
        cost = CHEAP

    assert cost_class(Judge()) == LLM
    assert cost_class(Declared()) == CHEAP


@pytest.mark.parametrize("query", QUERIES)
def test_every_cheap_metric_is_kept_whatever_the_query(query):
    pytest.importorskip("bm25s", reason="card relevance uses bm25s (the `llm` extra)")
    y, groups, outputs = _rows()
    cheap = default_metrics(with_reference=True, with_input=True)
    assert cheap and all(cost_class(m) == CHEAP for m in cheap)
    expensive = [get_metric("BERTScore"), get_metric("YiSi-2"), get_metric("ParaScoreFree")]
    train = np.arange(90)
    plan = plan_retrieval(query, "score", cheap + expensive, outputs, outputs, None, y, train, groups, k=1,
                          known=_expensive_known(y), dense=False)
    names = {m.name for m in cheap}
    assert set(plan.always) == names and names <= set(plan.keep)
    # the expensive one that agrees with the labels wins, whichever card the query matches
    assert plan.chosen == ["YiSi-2"] and plan.keep == plan.always + ["YiSi-2"]
    fates = {c.name: c for c in plan.candidates}
    assert all(fates[n].fate == "always" for n in names)
    assert fates["BERTScore"].fate == "not in the top 1" and fates["ParaScoreFree"].fate == "not in the top 1"
    assert abs(fates["YiSi-2"].screen_tau) > abs(fates["BERTScore"].screen_tau)
    # only training rows were read, and the screening rows came from them
    assert set(plan.screen_positions) <= set(train.tolist()) and len(plan.screen_positions) <= 30
    d = plan.to_dict()
    assert d["chosen"] == ["YiSi-2"] and len(d["candidates"]) == len(cheap) + 3


def test_no_expensive_candidate_keeps_the_cheap_ones_and_scores_nothing():
    y, groups, outputs = _rows(30)
    cheap = [get_metric("OutputLength"), get_metric("FKGL")]
    plan = plan_retrieval("anything", "score", cheap, outputs, None, None, y, np.arange(20), groups)
    assert plan.keep == ["OutputLength", "FKGL"] and plan.chosen == [] and plan.screen_positions == []


def test_expensive_candidate_without_weights_fails_on_the_screening_rows():
    pytest.importorskip("bm25s", reason="card relevance uses bm25s (the `llm` extra)")
    from autometrics.metricbank import MetricUnavailable

    bleurt = get_metric("BLEURT", model="/nonexistent/bleurt-weights")
    with pytest.raises(MetricUnavailable):
        bleurt.check_available()
    y, groups, outputs = _rows(60)
    refs = [[o + " ref"] for o in outputs]
    plan = plan_retrieval("translate", "score", [get_metric("BLEU"), bleurt], outputs, None, refs, y, np.arange(45),
                          groups, dense=False)
    fate = {c.name: c for c in plan.candidates}["BLEURT"]
    assert plan.keep == ["BLEU"] and fate.fate == "failed on the screening rows" and "unavailable" in fate.note


def test_screening_rows_are_the_label_extremes_of_the_training_rows():
    y = np.arange(100, dtype=float)
    train = np.arange(0, 100, 2)  # even rows only
    rows = screening_rows(y, train, None, n=10, seed=3)
    assert rows.tolist() == [0, 2, 4, 6, 8, 90, 92, 94, 96, 98]
    # with groups: one row per group, all from the training rows, lowest and highest labels among them
    groups = (np.arange(100) // 4).astype(str)
    rows = screening_rows(y, train, groups, n=8, seed=0)
    assert len(rows) == 8 and set(rows) <= set(train.tolist()) and len(set(groups[rows])) == 8
    assert max(y[rows][:4]) < min(y[rows][4:])
    # fewer groups than asked: one row per group
    assert len(screening_rows(y, train, groups, n=100)) == 25
    # unlabelled rows are never picked
    y2 = y.copy()
    y2[:50] = np.nan
    assert not np.isnan(y2[screening_rows(y2, np.arange(100), None, n=10)]).any()


def test_screen_signal_keeps_the_best_feature_and_blend_is_a_tiebreak():
    y = np.array([1.0, 2, 3, 4, 5, 6])
    X = pd.DataFrame({"ROUGE.rouge1": [1, 2, 3, 4, 6, 5], "ROUGE.rouge2": [6, 5, 4, 3, 2, 1.0], "Const": [1.0] * 6})
    meta = {"ROUGE.rouge1": {"metric": {"name": "ROUGE"}}, "ROUGE.rouge2": {"metric": {"name": "ROUGE"}},
            "Const": {"metric": {"name": "Const"}}}
    sig = screen_signal(X, meta, y)
    assert sig["ROUGE"]["feature"] == "ROUGE.rouge2" and sig["ROUGE"]["tau"] == pytest.approx(-1.0)
    assert sig["Const"]["tau"] is None  # undefined, not 0
    s = policy_scores(sig, {"ROUGE": 0.0, "Const": 1.0}, weight=0.02)
    assert s["ROUGE"] == pytest.approx(1.0) and s["Const"] == pytest.approx(0.02)
