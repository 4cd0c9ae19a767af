"""ROUGE and UpdateROUGE against Google's rouge-score package and hand values."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
from autometrics.metricbank import get_metric, load_card, missing_card_sections
from autometrics.metricbank.rouge import _RougeBatch, additions
from rouge_score import rouge_scorer

SUMMEVAL = Path("/work/shared/datasets/summeval.csv")

TRICKY = [
    ("the cat sat", ["the cat sat on the mat"]),
    ("the the the the", ["the cat the dog the", "the"]),
    ("Running runners ran; RUNS run!", ["a runner runs", "running"]),
    ("", ["something here"]),
    ("!!! ...", ["words words", "..."]),
    ("Police arrested 3 men on Tuesday, officials said.", ["Three men were arrested by police.", "Officials: 3 held"]),
]


def _rouge_score_multi(outputs, references, use_stemmer=True):
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=use_stemmer)
    rows = [scorer.score_multi(refs, out) for out, refs in zip(outputs, references, strict=True)]
    return {k: np.array([r[k].fmeasure for r in rows]) for k in ("rouge1", "rouge2", "rougeL")}


@pytest.mark.parametrize("use_stemmer", [True, False])
def test_rouge_matches_rouge_score_on_tricky_texts(use_stemmer):
    outputs = [o for o, _ in TRICKY]
    refs = [r for _, r in TRICKY]
    ours = get_metric("ROUGE", use_stemmer=use_stemmer).score_all(outputs, references=refs)
    theirs = _rouge_score_multi(outputs, refs, use_stemmer)
    for k in theirs:
        np.testing.assert_allclose(ours[f"ROUGE.{k}"], theirs[k], atol=1e-9, err_msg=k)


@pytest.mark.skipif(not SUMMEVAL.exists(), reason="summeval benchmark file not present")
def test_rouge_matches_rouge_score_on_summeval_rows():
    import pandas as pd

    df = pd.read_csv(SUMMEVAL).iloc[::53].head(25)
    outputs = list(df.output)
    refs = [json.loads(r) for r in df.references]
    ours = get_metric("ROUGE").score_all(outputs, references=refs)
    theirs = _rouge_score_multi(outputs, refs)
    for k in theirs:
        np.testing.assert_allclose(ours[f"ROUGE.{k}"], theirs[k], atol=1e-9, err_msg=k)


def test_rouge_hand_value_and_signature():
    m = get_metric("ROUGE")
    s = m.score_all(["the cat sat"], references=[["the cat sat on the mat"]])
    # R1: P=3/3, R=3/6 -> F=2/3; R2: P=2/2, R=2/5 -> F=4/7; L: LCS=3 -> 2/3
    assert s["ROUGE.rouge1"][0] == pytest.approx(2 / 3)
    assert s["ROUGE.rouge2"][0] == pytest.approx(4 / 7)
    assert s["ROUGE.rougeL"][0] == pytest.approx(2 / 3)
    assert m.signature() == "ROUGE|stem:yes|v:1"
    assert m.feature_names() == ["ROUGE.rouge1", "ROUGE.rouge2", "ROUGE.rougeL"]


def test_rouge_empty_output_and_missing_reference():
    s = get_metric("ROUGE").score_all(["", "a b"], references=[["a b"], None])
    for k, v in s.items():
        assert v[0] == 0.0, k
        assert math.isnan(v[1]), k


def test_rouge_needs_no_nltk_data(monkeypatch):
    """rouge-score's tokenizer is a regex + Porter stemmer: no Punkt, no corpus lookups."""
    import nltk.data

    def refuse(*args, **kwargs):
        raise AssertionError("NLTK data was requested")

    monkeypatch.setattr(nltk.data, "find", refuse)
    monkeypatch.setattr(nltk.data, "load", refuse)
    s = get_metric("ROUGE").score_all(["Cats are running."], references=[["A cat runs."]])
    assert s["ROUGE.rouge1"][0] > 0
    u = get_metric("UpdateROUGE").score_all(["Old. New cats run."], inputs=["Old."], references=[["Old. Cats run."]])
    assert u["UpdateROUGE.rouge1"][0] > 0


# ------------------------------------------------------------------ summary-level LCS


def test_lsum_matches_rouge_score_on_random_texts():
    """Random multi-line texts over a tiny vocabulary: many equal-length LCS choices, so the
    union-LCS backtracking must tie-break exactly like rouge-score."""
    rng = random.Random(7)
    vocab = ["a", "b", "c", "d", "cat", "dog"]
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeLsum"])
    batch = _RougeBatch(use_stemmer=False, with_sentences=True)

    def text():
        return "\n".join(
            " ".join(rng.choice(vocab) for _ in range(rng.randint(0, 9))) for _ in range(rng.randint(1, 4))
        )

    for _ in range(300):
        pred_text, ref_text = text(), text()
        expected = scorer.score(target=ref_text, prediction=pred_text)
        pred, ref = batch.analyse(pred_text), batch.analyse(ref_text)
        assert batch.lsum_f1(pred, ref) == pytest.approx(expected["rougeLsum"].fmeasure, abs=1e-12)
        assert batch.ngram_f1(pred, ref, 1) == pytest.approx(expected["rouge1"].fmeasure, abs=1e-12)
        assert batch.ngram_f1(pred, ref, 2) == pytest.approx(expected["rouge2"].fmeasure, abs=1e-12)


# ------------------------------------------------------------------------ UpdateROUGE

SOURCE = "The sky is blue. Grass is green. Water is wet."


def test_additions_drop_sentences_found_in_input():
    out = "The sky is blue. Cats purr loudly. Grass   is GREEN!"
    assert additions(SOURCE, out) == ["Cats purr loudly."]
    # word boundaries: "he said" is not inside "the said" once normalised
    assert additions("Then the said thing.", "He said.") == ["He said."]
    # tokenised source spacing ("team 's") vs natural spacing ("team's")
    assert additions("It was the team 's day . Fans cheered .", "It was the team's day.") == []


def test_update_rouge_hand_values():
    m = get_metric("UpdateROUGE")
    s = m.score_all(
        ["The sky is blue. Cats purr loudly."],
        inputs=[SOURCE],
        references=[["The sky is blue. Cats purr."]],
    )
    # added: "Cats purr loudly." vs "Cats purr." -> R1 P=2/3 R=1 F=0.8; R2 P=1/2 R=1 F=2/3; Lsum = 0.8
    assert s["UpdateROUGE.rouge1"][0] == pytest.approx(0.8)
    assert s["UpdateROUGE.rouge2"][0] == pytest.approx(2 / 3)
    assert s["UpdateROUGE.rougeLsum"][0] == pytest.approx(0.8)
    assert m.signature() == "UpdateROUGE|stem:no|v:1"


def test_update_rouge_matches_rouge_score_on_additions():
    outputs = ["The sky is blue. Dogs bark at night. Cats purr.", "Water is wet. The cat purrs and the dog barks."]
    refs = [["Dogs bark loudly at night. The cats purr.", "Grass is green. Birds sing."], ["The dog barks at the cat."]]
    inputs = [SOURCE, SOURCE]
    ours = get_metric("UpdateROUGE").score_all(outputs, inputs=inputs, references=refs)
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeLsum"])
    for i, (src, out, rs) in enumerate(zip(inputs, outputs, refs, strict=True)):
        pred = "\n".join(additions(src, out))
        per_ref = [scorer.score(target="\n".join(additions(src, r)), prediction=pred) for r in rs]
        for k in ("rouge1", "rouge2", "rougeLsum"):
            assert ours[f"UpdateROUGE.{k}"][i] == pytest.approx(max(p[k].fmeasure for p in per_ref), abs=1e-12)


def test_update_rouge_edge_cases():
    m = get_metric("UpdateROUGE")
    rows = m.score_all(
        ["The sky is blue.", "The sky is blue. Cats purr.", "The sky is blue.", ""],
        inputs=[SOURCE] * 4,
        references=[["Grass is green."], ["Water is wet."], ["Dogs bark."], ["Dogs bark."]],
    )
    for k, v in rows.items():
        assert v[0] == 1.0, k  # neither adds anything: agreement
        assert v[1] == 0.0, k  # only the output adds
        assert v[2] == 0.0, k  # only the reference adds
        assert v[3] == 0.0, k  # empty output, reference adds


def test_update_rouge_needs_input_and_nan_without_reference():
    m = get_metric("UpdateROUGE")
    assert m.needs_input and m.needs_reference
    with pytest.raises(ValueError):
        m.score_all(["x"], references=[["y"]])
    s = m.score_all(["A new fact."], inputs=[SOURCE], references=[[]])
    assert all(math.isnan(v[0]) for v in s.values())


@pytest.mark.parametrize("name", ["ROUGE", "UpdateROUGE"])
def test_card_complete(name):
    card = load_card(name)
    assert card.startswith(f"# Metric Card for {name}")
    assert missing_card_sections(card) == []
