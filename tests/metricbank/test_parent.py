"""PseudoPARENT: hand-computed toy cases and a direct transcription of PARENT's formulas."""

from __future__ import annotations

import math
import random
from collections import Counter

import numpy as np
import pytest
from autometrics.metricbank import get_metric, load_card, missing_card_sections

S = 1e-5  # default smoothing
INPUT = "the cat sat on the mat"


def parent(output, refs, inp=INPUT, **params) -> float:
    return float(get_metric("PseudoPARENT", **params).score([output], [inp], [refs])[0])


def test_hand_computed_unigram_case():
    # table = {the, cat, sat, on, mat} (5 one-token records); output "the cat sat"; ref "a cat sat"
    # w(the)=w(cat)=w(sat)=1, w(a)=S/(1+S)
    # precision: every output unigram is entailed by the table -> 1
    # reference recall: (w(cat)+w(sat)) / (w(a)+w(cat)+w(sat)) = 2 / (2 + S/(1+S))
    # table recall: 3 of 5 records mentioned = 0.6;  recall = R_ref^0.5 * 0.6^0.5
    r_ref = 2 / (2 + S / (1 + S))
    rec = math.sqrt(r_ref * 0.6)
    expected = 2 * rec / (1 + rec + 1e-8)
    assert parent("the cat sat", ["a cat sat"], max_order=1) == pytest.approx(expected, abs=1e-9)
    assert expected == pytest.approx(0.8730, abs=1e-4)


def test_hand_computed_bigram_case():
    # bigrams: output (the cat),(cat sat) both fully in the table -> precision 1
    # ref bigrams (a cat) w=(1+S)/(2+S), (cat sat) w=1; only (cat sat) is produced
    r1 = 2 / (2 + S / (1 + S))
    r2 = 1 / (1 + (1 + S) / (2 + S))
    rec = math.sqrt(math.sqrt(r1 * r2) * 0.6)
    expected = 2 * rec / (1 + rec + 1e-8)
    assert parent("the cat sat", ["a cat sat"], max_order=2) == pytest.approx(expected, abs=1e-9)


def test_unsupported_words_lower_precision():
    # "dog" is neither in the reference nor in the input: its n-grams get (almost) no credit
    assert parent("the dog sat", ["the cat sat"]) < parent("the cat sat", ["the cat sat"])
    # a word from the input that the reference lacks still counts in precision
    assert parent("the cat sat on the mat", ["the cat sat"]) > parent("the cat sat on the dog", ["the cat sat"])


# Direct transcription of PARENT (Dhingra et al., 2019; released implementation), with the
# pseudo-table: one record per distinct input token, word-overlap entailment.
def _naive_parent(pred, refs, table_tokens, lam=0.5, s=1e-5, N=4):
    table = set(table_tokens)

    def counts(t, n):
        return Counter(tuple(t[i : i + n]) for i in range(len(t) - n + 1))

    def w(g):
        return (sum(tok in table for tok in g) + s) / (len(g) + s)

    table_rec = (sum(tok in pred for tok in table) / len(table) or s) if table else 1.0
    best = 0.0
    for ref in refs:
        precs, recs = [], []
        for n in range(1, N + 1):
            pc, rc = counts(pred, n), counts(ref, n)
            num = den = 0.0
            for g, c in pc.items():
                p_in_ref = min(1.0, rc.get(g, 0) / c)
                num += c * (p_in_ref + (1 - p_in_ref) * w(g))
                den += c
            precs.append(num / den if den else 0.0)
            num = den = 0.0
            for g, c in rc.items():
                num += c * w(g) * min(1.0, pc.get(g, 0) / c)
                den += c * w(g)
            recs.append(num / den if den else 1.0)
        for n in range(1, N):
            precs[n] = precs[n] or s
            recs[n] = recs[n] or s
        prec = 0.0 if any(p == 0 for p in precs) else math.exp(sum(math.log(p) for p in precs) / N)
        ref_rec = s if any(r == 0 for r in recs) else math.exp(sum(math.log(r) for r in recs) / N)
        rec = math.exp((1 - lam) * math.log(ref_rec) + lam * math.log(table_rec))
        best = max(best, 2 * prec * rec / (prec + rec + 1e-8))
    return best


def test_matches_transcription_of_parent_formulas():
    rng = random.Random(3)
    vocab = "a b c d e f g".split()
    m = get_metric("PseudoPARENT")
    outs, inps, refss, expected = [], [], [], []
    for _ in range(300):
        inp = [rng.choice(vocab) for _ in range(rng.randint(0, 12))]
        out = [rng.choice(vocab) for _ in range(rng.randint(0, 10))]
        refs = [[rng.choice(vocab) for _ in range(rng.randint(1, 10))] for _ in range(rng.randint(1, 3))]
        outs.append(" ".join(out))
        inps.append(" ".join(inp))
        refss.append([" ".join(r) for r in refs])
        expected.append(_naive_parent(out, refs, inp))
    np.testing.assert_allclose(m.score(outs, inps, refss), expected, rtol=1e-9, atol=1e-12)


def test_multi_reference_takes_best_f():
    refs = ["a dog barked", "the cat sat"]
    assert parent("the cat sat", refs) == pytest.approx(max(parent("the cat sat", [r]) for r in refs))


def test_edge_cases():
    m = get_metric("PseudoPARENT")
    s = m.score(["", "the cat sat", "x"], ["the cat", "", "y"], [["the cat"], ["the cat sat"], []])
    assert s[0] == 0.0  # empty output
    assert np.isfinite(s[1]) and 0 < s[1] <= 1  # empty input: table recall is vacuous (1)
    assert np.isnan(s[2])  # no reference
    with pytest.raises(ValueError):
        m.score(["x"], references=[["y"]])  # needs the input
    assert m.signature() == "PseudoPARENT|lambda:0.5|n:4|smooth:1e-05|v:1"
    assert parent("The CAT sat.", ["the cat sat ."]) == pytest.approx(parent("the cat sat .", ["the cat sat ."]))


def test_lambda_weight_moves_weight_to_the_input():
    # the output copies the input but not the reference: more table weight -> higher score
    low = parent("on the mat", ["a cat sat"], lambda_weight=0.1)
    high = parent("on the mat", ["a cat sat"], lambda_weight=0.9)
    assert high > low
    with pytest.raises(ValueError):
        get_metric("PseudoPARENT", lambda_weight=1.5)


def test_card_complete():
    assert missing_card_sections(load_card("PseudoPARENT")) == []
