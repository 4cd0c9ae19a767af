"""benchmarks/retrieval_quality.py: the ranking measures on a hand-computed case, the random
peer against brute-force enumeration, and the script's main() on a tiny subset."""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "tests" / "benchmarks" / "retrieval_quality.py"


@pytest.fixture(scope="module")
def rq():
    spec = importlib.util.spec_from_file_location("retrieval_quality_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GAINS = {"a": 0.1, "b": 0.4, "c": 0.0, "d": 0.2}
RANKED = ["a", "b", "c", "d"]


def test_relevant_set_is_top_by_gain_and_ignores_zero(rq):
    assert rq.relevant_set(GAINS, 2) == {"b", "d"}
    assert rq.relevant_set(GAINS, 10) == {"a", "b", "d"}  # c has gain 0: never relevant
    assert rq.relevant_set({"x": 0.3, "w": 0.3, "y": 0.1}, 1) == {"w"}  # tie broken by name


def test_recall_and_ndcg_hand_computed(rq):
    q = rq.ranking_quality(RANKED, GAINS, {"b", "d"}, ks=(1, 2, 4))
    # relevant = {b, d}: top-1 {a} holds none, top-2 {a, b} holds b, top-4 holds both
    assert q["recall@1"] == 0.0
    assert q["recall@2"] == 0.5
    assert q["recall@4"] == 1.0
    # NDCG@1: DCG = 0.1/log2(2) = 0.1, IDCG = 0.4  ->  0.25
    assert q["ndcg@1"] == pytest.approx(0.25)
    # NDCG@2: DCG = 0.1 + 0.4/log2(3) = 0.1 + 0.25237 = 0.35237
    #         IDCG = 0.4 + 0.2/log2(3) = 0.4 + 0.12619 = 0.52619   ->  0.66967
    assert q["ndcg@2"] == pytest.approx(0.66967, abs=1e-5)
    # NDCG@4: DCG = 0.35237 + 0/2 + 0.2/log2(5) = 0.35237 + 0.08614 = 0.43851
    #         IDCG = 0.52619 + 0.1/2 + 0 = 0.57619   ->  0.76105
    assert q["ndcg@4"] == pytest.approx(0.76105, abs=1e-5)
    # the ideal order scores 1
    assert rq.ranking_quality(["b", "d", "a", "c"], GAINS, {"b", "d"}, ks=(2, 4))["ndcg@4"] == pytest.approx(1.0)


def test_recall_is_not_reported_when_every_candidate_is_relevant(rq):
    gains = {"a": 0.3, "b": 0.2, "c": 0.1}
    q = rq.ranking_quality(["c", "b", "a"], gains, rq.relevant_set(gains, 10), ks=(2,))
    assert q["recall@2"] is None and 0 < q["ndcg@2"] < 1
    assert rq.expected_random(gains, {"a", "b", "c"}, ks=(2,))["recall@2"] is None


def test_expected_random_matches_enumeration_of_all_orderings(rq):
    relevant = {"b", "d"}
    ks = (1, 2, 3, 4, 6)
    perms = [rq.ranking_quality(list(p), GAINS, relevant, ks=ks) for p in itertools.permutations(RANKED)]
    expected = rq.expected_random(GAINS, relevant, ks=ks)
    for key, value in expected.items():
        brute = sum(p[key] for p in perms) / len(perms)
        assert value == pytest.approx(brute), key
    assert expected["recall@2"] == pytest.approx(0.5) and expected["recall@6"] == 1.0
    shuffled = rq.shuffled_random(GAINS, relevant, 400, seed=0, ks=(2,))
    assert shuffled["mean"]["ndcg@2"] == pytest.approx(expected["ndcg@2"], abs=0.05)
    assert shuffled["p95"]["ndcg@2"] >= shuffled["mean"]["ndcg@2"]


def test_main_runs_on_a_tiny_subset(rq, datasets_dir, tmp_path):
    pytest.importorskip("bm25s")
    out = tmp_path / "rq.json"
    result = rq.main(["--shared", str(datasets_dir), "--datasets", "simpeval", "--max-rows", "30",
                      "--metrics", "BLEU", "FKGL", "OutputLength", "SARI", "--modes", "bm25",
                      "--top-relevant", "2", "--shuffles", "5", "--out", str(out)])
    saved = json.loads(out.read_text(encoding="utf-8"))
    assert saved["settings"]["llm_rerank"].startswith("skipped")
    assert "top-2" in saved["settings"]["relevance"]
    (row,) = result["rows"]
    assert row["dataset"] == "simpeval" and row["target"] == "score" and row["n_candidates"] == 4
    assert sorted(row["rankings"]["bm25"]) == ["BLEU", "FKGL", "OutputLength", "SARI"]
    q = row["quality"]["bm25"]
    assert set(q) == {f"{m}@{k}" for m in ("recall", "ndcg") for k in (5, 10, 20)}
    assert q["recall@5"] == 1.0 and 0 <= q["ndcg@5"] <= 1  # 4 candidates: top-5 holds them all
    assert not math.isnan(row["random_expected"]["ndcg@5"])
    assert saved["summary"]["bm25"]["mean"]["ndcg@10"] == pytest.approx(q["ndcg@10"])
