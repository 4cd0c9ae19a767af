"""Distinct-n and Self-BLEU: hand-computed values and NLTK's sentence BLEU as the reference."""

from __future__ import annotations

import numpy as np
import pytest
from autometrics.metricbank import get_metric, load_card, missing_card_sections
from autometrics.metricbank._text import split_sentences, tokenize
from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

SMOOTH = SmoothingFunction().method1
W3 = (1 / 3, 1 / 3, 1 / 3)


def _bleu(hyp: str, refs: list[str], weights=W3) -> float:
    return sentence_bleu([tokenize(r) for r in refs], tokenize(hyp), weights, smoothing_function=SMOOTH)


@pytest.mark.parametrize("name", ["DistinctNGrams", "SelfBLEU"])
def test_card(name):
    assert missing_card_sections(load_card(name)) == []


def test_distinct_hand_computed():
    m = get_metric("DistinctNGrams")
    assert m.feature_names() == [f"DistinctNGrams.distinct{n}" for n in (1, 2, 3, 4)]
    assert m.signature() == "DistinctNGrams|v:1"
    res = m.score_all(["The cat the cat", "", "hi", "a b c d e"])
    # "the cat the cat": 2/4 unigrams, 2/3 bigrams, 2/2 trigrams, 1/1 4-grams are distinct
    np.testing.assert_allclose(res["DistinctNGrams.distinct1"], [0.5, 0.0, 1.0, 1.0])
    np.testing.assert_allclose(res["DistinctNGrams.distinct2"], [2 / 3, 0.0, 0.0, 1.0])
    np.testing.assert_allclose(res["DistinctNGrams.distinct3"], [1.0, 0.0, 0.0, 1.0])
    np.testing.assert_allclose(res["DistinctNGrams.distinct4"], [1.0, 0.0, 0.0, 1.0])


def test_selfbleu_within_matches_nltk_per_sentence_average():
    text = "The cat sat on the mat. The cat sat on the rug. A dog barked loudly at night."
    sents = split_sentences(text)
    assert len(sents) == 3
    expected = np.mean([_bleu(s, sents[:i] + sents[i + 1 :]) for i, s in enumerate(sents)])
    m = get_metric("SelfBLEU")
    assert m.signature() == "SelfBLEU|gram:3|scope:within|v:1"
    assert m.higher_is_better is False and not m.batch_dependent
    got = m.score([text, "One sentence only.", ""])
    np.testing.assert_allclose(got, [expected, 1.0, 1.0], atol=1e-9)
    # a repetitive output scores higher than a varied one
    rep = "I like it. I like it. I like it."
    var = "I like it. Rain fell on Tuesday. Markets closed higher."
    s = m.score([rep, var])
    assert s[0] > 0.9 > s[1]


def test_cached_sentence_bleu_equals_nltk_on_random_texts():
    import random

    from autometrics.metricbank.diversity import _SentenceBleu

    rng = random.Random(5)
    vocab = "a b c d the of".split()
    for gram in (1, 2, 3, 4):
        bleu = _SentenceBleu(gram)
        weights = (1 / gram,) * gram
        for _ in range(150):
            hyp = [rng.choice(vocab) for _ in range(rng.randint(0, 8))]  # includes texts shorter than gram
            refs = [[rng.choice(vocab) for _ in range(rng.randint(1, 10))] for _ in range(rng.randint(1, 4))]
            expected = sentence_bleu(refs, hyp, weights, smoothing_function=SMOOTH) if hyp else 0.0
            got = bleu(bleu.counts(hyp), [bleu.counts(r) for r in refs])
            assert got == pytest.approx(expected, abs=1e-9), (hyp, refs)


def test_selfbleu_gram_parameter():
    text = "The cat sat on the mat. The cat sat on the rug."
    s1, s2 = split_sentences(text)
    got = get_metric("SelfBLEU", gram=2).score([text])
    np.testing.assert_allclose(got, [(_bleu(s1, [s2], (0.5, 0.5)) + _bleu(s2, [s1], (0.5, 0.5))) / 2], atol=1e-9)


def test_selfbleu_across_uses_outputs_for_the_same_input():
    outs = [
        "the cat sat on the mat",
        "a cat sat on a mat",
        "the dog ran in the park",
        "completely unrelated words here",
    ]
    ins = ["doc1", "doc1", "doc1", "doc2"]
    m = get_metric("SelfBLEU", scope="across", max_others=50)
    assert m.signature() == "SelfBLEU|gram:3|max_others:50|scope:across|seed:0|v:1"
    assert m.batch_dependent
    got = m.score(outs, inputs=ins)
    for i in range(3):
        others = [outs[j] for j in range(3) if j != i]
        assert got[i] == pytest.approx(_bleu(outs[i], others), abs=1e-9)
    # no peer with the same input: compared with (up to max_others) sampled other outputs -- here all of them
    assert got[3] == pytest.approx(_bleu(outs[3], outs[:3]), abs=1e-9)
    np.testing.assert_array_equal(got, m.score(outs, inputs=ins))  # seeded: deterministic


def test_selfbleu_across_sampling_is_seeded_and_bounded():
    outs = [f"sentence number {i} about topic {i % 3}" for i in range(30)]
    a = get_metric("SelfBLEU", scope="across", max_others=5, seed=1).score(outs)
    b = get_metric("SelfBLEU", scope="across", max_others=5, seed=1).score(outs)
    np.testing.assert_array_equal(a, b)
    assert np.isfinite(a).all() and ((0 <= a) & (a <= 1)).all()


def test_empty_outputs_are_finite():
    for m in (get_metric("DistinctNGrams"), get_metric("SelfBLEU"), get_metric("SelfBLEU", scope="across")):
        for values in m.score_all(["", "", "x y z."], inputs=["a", "a", "b"]).values():
            assert np.isfinite(values).all()


def test_bad_parameters():
    with pytest.raises(ValueError):
        get_metric("SelfBLEU", scope="corpus")
    with pytest.raises(ValueError):
        get_metric("SelfBLEU", gram=0)
