"""SARI and FKGL: documented example values, hand computations and a transcription of the
reference formulas.

No installable package computes this SARI offline (``easse`` is not on PyPI, HuggingFace
``evaluate`` downloads its metric scripts, torchmetrics has no SARI, and tensor2tensor's
variant uses binary n-gram counts and needs TensorFlow), so the optimized implementation is
checked against a direct Counter-arithmetic transcription of the reference script's formulas.
"""

from __future__ import annotations

import math
import random
from collections import Counter

import numpy as np
import pytest
from autometrics.metricbank import get_metric, load_card, missing_card_sections
from autometrics.metricbank.simplification import FKGL, _SyllableDict, count_syllables, sari_sentence

# The example shipped with the SARI authors' script and used in HuggingFace evaluate's docs.
SOURCE = "About 95 species are currently accepted."
REFERENCES = [
    "About 95 species are currently known.",
    "About 95 species are now accepted.",
    "95 species are now accepted.",
]


def sari(output, source=SOURCE, refs=REFERENCES, **params) -> float:
    return float(get_metric("SARI", **params).score([output], inputs=[source], references=[refs])[0])


# ------------------------------------------------------------------ SARI
def test_documented_example_value():
    # HuggingFace evaluate documents {'sari': 26.953601953601954} for this prediction.
    assert sari("About 95 you now get in.") == pytest.approx(26.953601953601954, abs=1e-4)


def test_better_simplification_scores_higher():
    bad = sari("About 95 you now get in.")
    good = sari("About 95 species are now agreed.")
    assert good > bad


def test_hand_computed_unigram_case():
    # source a b c; candidate a c e; references [a b e], [a f]; k = 2 references.
    # S={a,b,c}, C={a,c,e}, R (summed) = {a:2, b:1, e:1, f:1}
    # keep: a -> kept 2, good min(2,2)=2 -> 1; c -> kept 2, good 0 -> 0; P = 1/2
    #       recall: good 2 / (min(2,2) + min(2,1)) = 2/3;  F1 = 2*.5*(2/3)/(.5+2/3) = 4/7
    # delete: b deleted 2 copies, refs keep 1 -> good 1 -> precision 1/2
    # add: {e}; e in refs -> P = 1; refs add {e, f} -> R = 1/2; F1 = 2/3
    expected = 100 * (4 / 7 + 1 / 2 + 2 / 3) / 3
    got = get_metric("SARI", max_order=1, tokenize="none").score(["a c e"], ["a b c"], [["a b e", "a f"]])[0]
    assert got == pytest.approx(expected, abs=1e-4)
    assert expected == pytest.approx(57.9365, abs=1e-4)


def test_identity_edit_scores_100():
    # nothing to change and nothing changed: every 0/0 counts as 1
    assert sari("the cat sat .", "the cat sat .", ["the cat sat ."]) == pytest.approx(100.0)


def test_components_are_returned_by_helper():
    total, keep, delete, add = sari_sentence(list("abc"), list("ace"), [list("abe"), list("af")], max_order=1)
    assert (keep, delete, add) == pytest.approx((100 * 4 / 7, 50.0, 100 * 2 / 3))
    assert total == pytest.approx((keep + delete + add) / 3)


# A literal transcription of the reference script's SARIngram with Counter arithmetic.
def _naive_order(s, c, refs, k):
    R = Counter(g for r in refs for g in r)
    Sr = Counter({g: v * k for g, v in Counter(s).items()})
    Cr = Counter({g: v * k for g, v in Counter(c).items()})
    keep, kall = Sr & Cr, Sr & R
    kgood = keep & R
    kp = sum(kgood[g] / keep[g] for g in kgood) / len(keep) if keep else 1
    kr = sum(kgood.values()) / sum(kall.values()) if kall else 1
    dl = Sr - Cr
    dgood = dl - R
    dp = sum(dgood[g] / dl[g] for g in dgood) / len(dl) if dl else 1
    added, rset, sset = set(Counter(c)) - set(s), set(R), set(s)
    ap = len(added & rset) / len(added) if added else 1
    ar = len(added & rset) / len(rset - sset) if rset - sset else 1

    def f1(p, r):
        return 2 * p * r / (p + r) if p + r > 0 else 0

    return f1(kp, kr), dp, f1(ap, ar)


def _naive_sari(src, cand, refs, max_order=4):
    def grams(t, n):
        return [tuple(t[i : i + n]) for i in range(len(t) - n + 1)]

    parts = [
        _naive_order(grams(src, n), grams(cand, n), [grams(r, n) for r in refs], len(refs))
        for n in range(1, max_order + 1)
    ]
    return 100 * sum(sum(p) for p in parts) / (3 * max_order)


def test_matches_transcription_of_reference_formulas():
    rng = random.Random(7)
    vocab = list("abcdef")
    for _ in range(400):
        src = [rng.choice(vocab) for _ in range(rng.randint(0, 10))]
        cand = [rng.choice(vocab) for _ in range(rng.randint(0, 10))]
        refs = [[rng.choice(vocab) for _ in range(rng.randint(0, 10))] for _ in range(rng.randint(1, 4))]
        assert sari_sentence(src, cand, refs)[0] == pytest.approx(_naive_sari(src, cand, refs), abs=1e-9)


def test_multi_reference_and_batch_caching():
    m = get_metric("SARI")
    outs = ["About 95 you now get in.", "About 95 species are now agreed.", "About 95 species are now accepted."]
    batch = m.score(outs, [SOURCE] * 3, [REFERENCES] * 3)
    single = [sari(o) for o in outs]
    np.testing.assert_allclose(batch, single)
    # a reference that the output matches exactly lifts the score
    assert sari("About 95 species are now agreed.", refs=REFERENCES + ["About 95 species are now agreed."]) > single[1]


def test_empty_output_and_missing_reference():
    m = get_metric("SARI")
    scores = m.score(["", "About 95 species are now accepted."], [SOURCE, SOURCE], [REFERENCES, []])
    assert np.isfinite(scores[0]) and 0 <= scores[0] < 30
    assert np.isnan(scores[1])
    with pytest.raises(ValueError):
        m.score(["x"], references=[["y"]])  # SARI needs the source


def test_sari_signature_and_params():
    assert get_metric("SARI").signature() == "SARI|lc:yes|n:4|tok:13a|v:1"
    assert sari("ABOUT 95 SPECIES ARE NOW ACCEPTED.") > sari("ABOUT 95 SPECIES ARE NOW ACCEPTED.", lowercase=False)
    with pytest.raises(ValueError):
        get_metric("SARI", tokenize="spacy")


# ------------------------------------------------------------------ FKGL
@pytest.mark.parametrize(
    "word, syllables",
    [
        ("cat", 1),
        ("simplification", 5),
        ("the", 1),
        ("beautiful", 3),
        ("don't", 1),
        ("well-known", 2),
        ("fire", 2),
        ("table", 2),
    ],
)
def test_syllables_from_cmu_dictionary(word, syllables):
    assert count_syllables(word) == syllables


@pytest.mark.parametrize(
    "word, syllables",
    # not in the CMU dictionary: vowel groups, silent final e, at least one
    [("zorblate", 2), ("flimbo", 2), ("xkcd", 1), ("000", 1), ("grumbleflox", 3)],
)
def test_syllable_fallback_for_unknown_words(word, syllables):
    assert word not in _SyllableDict.counts()
    assert count_syllables(word) == syllables


def test_fkgl_hand_values():
    # 6 words, 1 sentence, 6 syllables: 0.39*6 + 11.8*1 - 15.59
    assert FKGL.grade("The cat sat on the mat.") == pytest.approx(-1.45, abs=1e-4)
    # 2 sentences, 8 words; syllables the(1) cat(1) sat(1) simplification(5) is(1) very(2) beautiful(3) indeed(2) = 16
    text = "The cat sat. Simplification is very beautiful indeed."
    assert FKGL.grade(text) == pytest.approx(0.39 * 8 / 2 + 11.8 * 16 / 8 - 15.59, abs=1e-4)


def test_fkgl_direction_and_empty_output():
    m = get_metric("FKGL")
    easy, hard, empty, punct = m.score(
        [
            "The cat sat. The dog ran.",
            "Notwithstanding considerable institutional opposition, administrators implemented comprehensive reorganisation.",
            "",
            "...",
        ]
    )
    assert easy < hard
    assert empty == pytest.approx(0.39 + 11.8 - 15.59) and punct == empty  # the formula's floor
    assert math.isfinite(empty)
    assert m.signature() == "FKGL|v:1" and not m.higher_is_better


@pytest.mark.parametrize("name", ["SARI", "FKGL"])
def test_cards_complete(name):
    assert missing_card_sections(load_card(name)) == []
