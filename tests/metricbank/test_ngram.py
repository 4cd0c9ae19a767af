"""Golden values for the n-gram metrics: sacrebleu (BLEU, iBLEU, chrF++, TER), NLTK (NIST,
GLEU) and hand-computed / pycocoevalcap values (CIDEr)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from autometrics.metricbank import get_metric, load_card, missing_card_sections, ter
from autometrics.metricbank import ngram as ng
from autometrics.metricbank._text import tokenize, words
from nltk.translate.gleu_score import sentence_gleu
from nltk.translate.nist_score import sentence_nist
from sacrebleu.metrics import BLEU as SacreBLEU
from sacrebleu.metrics import CHRF as SacreCHRF
from sacrebleu.metrics import TER as SacreTER
from sacrebleu.metrics.lib_ter import translation_edit_rate

OUTS = [
    "The cat sat on the mat near the door.",
    "A dog ran quickly across the big green park and barked at the birds.",
    "It rained.",
    "Officials said the bridge will reopen on Monday after repairs to the steel frame.",
    "the the the the the",
]
REFS = [
    ["The cat was sitting on the mat by the door.", "A cat sat on a mat near a door."],
    ["The dog raced across the park, barking at birds.", "A big dog ran across the green park.", "Dogs bark."],
    ["It was raining all day."],
    ["The bridge reopens Monday once the steel frame is repaired, officials said."],
    ["The cat sat on the mat."],
]
SRCS = [
    "The cat sat on the mat near the door of the house.",
    "Yesterday a dog ran across the park.",
    "Weather: rain.",
    "Officials said on Friday that the bridge will reopen on Monday after repairs.",
    "Repeat the word the.",
]


def _close(actual, expected, tol=1e-4):
    np.testing.assert_allclose(np.asarray(actual, dtype=float), np.asarray(expected, dtype=float), atol=tol, rtol=0)


def test_signatures_carry_the_parameters():
    assert get_metric("BLEU").signature() == "BLEU|smooth:exp|tok:13a|v:1"
    assert get_metric("iBLEU").signature() == "iBLEU|alpha:0.9|smooth:exp|tok:13a|v:1"
    assert get_metric("NIST").signature() == "NIST|n:5|v:1"
    assert get_metric("GLEU").signature() == "GLEU|max_len:4|min_len:1|v:1"
    assert get_metric("chrF++").signature() == "chrF++|beta:2|nc:6|nw:2|v:1"
    assert get_metric("TER").signature() == "TER|case:no|nopunct:no|norm:no|v:1"
    assert get_metric("CIDEr").signature() == "CIDEr|n:4|sigma:6.0|v:1"
    assert get_metric("BLEU", tokenize="intl").signature() != get_metric("BLEU").signature()
    assert get_metric("TER").higher_is_better is False


@pytest.mark.parametrize("name", ["BLEU", "NIST", "GLEU", "iBLEU", "chrF++", "TER", "CIDEr"])
def test_card(name):
    assert missing_card_sections(load_card(name)) == []


# ------------------------------------------------------------------ sacrebleu metrics
def test_bleu_matches_sacrebleu_sentence_score_multi_reference():
    ref = SacreBLEU(effective_order=True)
    expected = [ref.sentence_score(o, r).score for o, r in zip(OUTS, REFS, strict=True)]
    _close(get_metric("BLEU").score(OUTS, references=REFS), expected)
    # multi-reference is joint (clipping by max count over refs), not max over single refs
    joint = ref.sentence_score(OUTS[1], REFS[1]).score
    assert joint >= max(ref.sentence_score(OUTS[1], [r]).score for r in REFS[1])


def test_bleu_golden_value():
    # 'the cat' vs 'the cat sat on the mat': p1 = p2 = 1 (effective order 2), BP = exp(1 - 6/2)
    _close(get_metric("BLEU").score(["the cat"], references=[["the cat sat on the mat"]]), [100 * math.exp(-2)])


def test_sacrebleu_fallback_path_gives_the_same_numbers():
    metric = SacreBLEU(effective_order=True)
    fast = ng._SacreSentenceScorer(metric)
    slow = ng._SacreSentenceScorer(metric)
    slow.fast = False
    assert fast.fast
    _close(
        [fast(o, r) for o, r in zip(OUTS, REFS, strict=True)],
        [slow(o, r) for o, r in zip(OUTS, REFS, strict=True)],
        tol=1e-9,
    )


def test_ibleu_is_alpha_weighted_difference():
    b = SacreBLEU(effective_order=True)
    expected = [
        0.9 * b.sentence_score(o, r).score - 0.1 * b.sentence_score(o, [s]).score
        for o, r, s in zip(OUTS, REFS, SRCS, strict=True)
    ]
    _close(get_metric("iBLEU").score(OUTS, inputs=SRCS, references=REFS), expected)
    a5 = get_metric("iBLEU", alpha=0.5).score(OUTS[:1], inputs=SRCS[:1], references=REFS[:1])
    _close(a5, [0.5 * b.sentence_score(OUTS[0], REFS[0]).score - 0.5 * b.sentence_score(OUTS[0], [SRCS[0]]).score])
    # copying the source is penalised
    copy = get_metric("iBLEU").score([SRCS[0]], inputs=[SRCS[0]], references=REFS[:1])
    assert copy[0] < 0.9 * b.sentence_score(SRCS[0], REFS[0]).score
    with pytest.raises(ValueError, match="inputs"):
        get_metric("iBLEU").score(OUTS, references=REFS)


def test_chrfpp_matches_sacrebleu():
    ref = SacreCHRF(word_order=2)
    expected = [ref.sentence_score(o, r).score for o, r in zip(OUTS, REFS, strict=True)]
    _close(get_metric("chrF++").score(OUTS, references=REFS), expected)
    scorer = ng._FastChrF(ref)
    scorer.fast = False
    _close([scorer(o, r) for o, r in zip(OUTS, REFS, strict=True)], expected)


def test_ter_matches_sacrebleu():
    ref = SacreTER()
    expected = [ref.sentence_score(o, r).score for o, r in zip(OUTS, REFS, strict=True)]
    m = get_metric("TER")
    _close(m.score(OUTS, references=REFS), expected)
    _close(get_metric("TER", case_sensitive=True).score(["The Cat"], references=[["the cat"]]), [100.0])


def test_ter_without_numba_uses_sacrebleu(monkeypatch):
    monkeypatch.setattr(ter, "_KERNEL", [None])
    ref = SacreTER()
    _close(
        get_metric("TER").score(OUTS, references=REFS),
        [ref.sentence_score(o, r).score for o, r in zip(OUTS, REFS, strict=True)],
    )


def test_ter_kernel_equals_sacrebleu_search_on_random_sequences():
    kernel = ter._ter_kernel()
    if kernel is None:
        pytest.skip("numba is not installed")
    rng = random.Random(7)
    for trial in range(200):
        vocab = rng.randint(2, 6)  # few word types -> many matching blocks -> many shifts
        nh, nr = rng.randint(0, 18), rng.randint(1, 18)
        if trial == 0:  # long enough for the +-25 band of the edit distance to bite
            vocab, nh, nr = 40, 55, 52
        h = [str(rng.randint(0, vocab)) for _ in range(nh)]
        r = [str(rng.randint(0, vocab)) for _ in range(nr)]
        codes: dict[str, int] = {}
        hc = np.array([codes.setdefault(w, len(codes)) for w in h], dtype=np.int64)
        rc = np.array([codes.setdefault(w, len(codes)) for w in r], dtype=np.int64)
        got = kernel(hc, rc, ter._TER_MAX_SHIFT_SIZE, ter._TER_MAX_SHIFT_DIST, ter._TER_BEAM_WIDTH, ter._TER_MAX_CANDIDATES)
        assert got == translation_edit_rate(h, r)[0], (h, r)


def test_ter_golden_value_with_a_shift():
    # one block shift ("on the mat" to the end) turns the output into the reference: 1 edit / 6 words
    _close(get_metric("TER").score(["on the mat the cat sat"], references=[["the cat sat on the mat"]]), [100 / 6])


# ------------------------------------------------------------------ NLTK-defined metrics
def _random_corpus(seed: int, n: int = 60):
    rng = random.Random(seed)
    vocab = "a b c d e f g h the of and".split()
    rows = []
    for _ in range(n):
        hyp = " ".join(rng.choice(vocab) for _ in range(rng.randint(5, 25)))
        refs = [" ".join(rng.choice(vocab) for _ in range(rng.randint(3, 25))) for _ in range(rng.randint(1, 4))]
        rows.append((hyp, refs))
    return rows


def test_nist_matches_nltk():
    rows = _random_corpus(1) + list(zip(OUTS, REFS, strict=True))
    rows = [(o, r) for o, r in rows if len(tokenize(o)) >= 5]
    got = get_metric("NIST").score([o for o, _ in rows], references=[r for _, r in rows])
    expected = [sentence_nist([tokenize(x) for x in r], tokenize(o), 5) for o, r in rows]
    _close(got, expected)
    got3 = get_metric("NIST", n=3).score([o for o, _ in rows], references=[r for _, r in rows])
    _close(got3, [sentence_nist([tokenize(x) for x in r], tokenize(o), 3) for o, r in rows])


def test_nist_short_and_empty_outputs():
    # NLTK divides by zero below n tokens; we drop the orders the output has no n-grams for,
    # which equals NLTK with n = len(output)
    out, refs = "It rained .", ["It was raining all day ."]
    _close(get_metric("NIST").score([out], references=[refs]), [sentence_nist([tokenize(refs[0])], tokenize(out), 3)])
    _close(get_metric("NIST").score([""], references=[refs]), [0.0])


def test_gleu_matches_nltk():
    rows = _random_corpus(2) + list(zip(OUTS, REFS, strict=True))
    got = get_metric("GLEU").score([o for o, _ in rows], references=[r for _, r in rows])
    _close(got, [sentence_gleu([tokenize(x) for x in r], tokenize(o), 1, 4) for o, r in rows])
    got2 = get_metric("GLEU", min_len=2, max_len=3).score(OUTS, references=REFS)
    _close(got2, [sentence_gleu([tokenize(x) for x in r], tokenize(o), 2, 3) for o, r in zip(OUTS, REFS, strict=True)])
    _close(get_metric("GLEU").score([""], references=[["a b"]]), [0.0])


# ------------------------------------------------------------------ CIDEr-D
def test_cider_hand_computed_toy_corpus():
    # two examples -> log N = ln 2; df: a=1, c=2, d=1 (b never in a reference)
    outs, refs = ["a b b", "c"], [["a c"], ["c d"]]
    # example 1, unigrams: out (a: ln2, b: 2 ln2), ref (a: ln2, c: 0) -> cos = 1/sqrt(5);
    # length 3 vs 2 -> penalty exp(-1/72).  Example 2: c has idf 0 -> score 0.
    one = 10 / math.sqrt(5) * math.exp(-1 / 72)
    _close(get_metric("CIDEr", n=1).score(outs, references=refs), [one, 0.0])
    # bigrams of example 1 share nothing with the reference: mean over orders halves it
    _close(get_metric("CIDEr", n=2).score(outs, references=refs), [one / 2, 0.0])


def test_cider_single_example_batch_is_zero_and_flagged_batch_dependent():
    m = get_metric("CIDEr")
    assert m.batch_dependent
    _close(m.score(["the cat"], references=[["the cat"]]), [0.0])


def test_cider_matches_pycocoevalcap():
    cider = pytest.importorskip("pycocoevalcap.cider.cider")
    rows = _random_corpus(3, 40) + list(zip(OUTS, REFS, strict=True))
    outs = [o for o, _ in rows]
    refs = [r for _, r in rows]
    gts = {i: [" ".join(words(x)) for x in r] for i, r in enumerate(refs)}
    res = {i: [" ".join(words(o))] for i, o in enumerate(outs)}
    _, expected = cider.Cider().compute_score(gts, res)
    _close(get_metric("CIDEr").score(outs, references=refs), expected)


# ------------------------------------------------------------------ shared behaviour
@pytest.mark.parametrize("name", ["BLEU", "NIST", "GLEU", "iBLEU", "chrF++", "TER", "CIDEr"])
def test_empty_output_and_missing_references(name):
    m = get_metric(name)
    got = m.score(["", OUTS[0], OUTS[1]], inputs=["", SRCS[0], SRCS[1]], references=[REFS[0], [], REFS[1]])
    assert np.isfinite(got[[0, 2]]).all() and np.isnan(got[1])


def test_reference_order_and_repeats_do_not_change_scores():
    # the per-batch caches are keyed by reference text: shuffled duplicates must agree
    outs = OUTS + OUTS
    refs = REFS + [list(reversed(r)) for r in REFS]
    for name in ["BLEU", "NIST", "GLEU", "chrF++", "TER"]:
        s = get_metric(name).score(outs, references=refs)
        _close(s[: len(OUTS)], s[len(OUTS) :], tol=1e-9)
