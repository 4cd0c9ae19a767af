"""Reference-free signals: hand-computed values and edge cases."""

from __future__ import annotations

import numpy as np
import pytest
from autometrics.metricbank import get_metric, load_card, missing_card_sections

NAMES = ["OutputLength", "LengthRatio", "InputSimilarity", "NovelNGramRatio"]


def one(name, output, inp="", **params) -> float:
    m = get_metric(name, **params)
    return float(m.score([output], inputs=[inp] if m.needs_input else None)[0])


def test_output_length_counts_words_not_punctuation():
    assert one("OutputLength", "Don't stop, the well-known cat sat!") == 6
    assert one("OutputLength", "") == 0
    assert one("OutputLength", "... !!") == 0


def test_length_ratio():
    assert one("LengthRatio", "the cat sat", "the cat sat on the mat") == pytest.approx(0.5)
    assert one("LengthRatio", "the cat sat", "") == 3.0  # an empty input counts as one word
    assert one("LengthRatio", "", "the cat") == 0.0


def test_input_similarity_is_token_f1():
    # output {the, cat, sat}, input {the x2, cat, sat, on, mat}: overlap 3; P=3/3, R=3/6 -> F1=2/3
    assert one("InputSimilarity", "The cat sat.", "the cat sat on the mat") == pytest.approx(2 / 3)
    # clipped counts: "the the the" vs "the cat": overlap 1; P=1/3, R=1/2 -> 0.4
    assert one("InputSimilarity", "the the the", "the cat") == pytest.approx(0.4)
    assert one("InputSimilarity", "", "the cat") == 0.0
    assert one("InputSimilarity", "dogs bark", "") == 0.0
    assert get_metric("InputSimilarity").signature() == "InputSimilarity|method:token_f1|v:1"


def test_novel_ngram_ratio():
    # output bigrams: (the cat) (cat sat) (sat down); input has the first two -> 1/3 novel
    assert one("NovelNGramRatio", "the cat sat down", "the cat sat on the mat") == pytest.approx(1 / 3)
    assert one("NovelNGramRatio", "the cat sat down", "the cat sat on the mat", n=1) == pytest.approx(1 / 4)
    # repeats count: (the cat) x2 copied, (cat the) novel -> 1/3
    assert one("NovelNGramRatio", "the cat the cat", "the cat") == pytest.approx(1 / 3)
    assert one("NovelNGramRatio", "", "the cat") == 0.0  # nothing generated, nothing novel
    assert one("NovelNGramRatio", "word", "the cat") == 0.0  # no bigram at all
    assert get_metric("NovelNGramRatio").signature() == "NovelNGramRatio|n:2|v:1"
    with pytest.raises(ValueError):
        get_metric("NovelNGramRatio", n=0)


def test_batch_and_input_requirement():
    outs = ["the cat sat", "", "a dog"]
    inps = ["the cat sat on the mat", "x y", ""]
    for name in NAMES:
        m = get_metric(name)
        assert not m.needs_reference
        batch = m.score(outs, inputs=inps)
        assert np.isfinite(batch).all()
        single = [m.score([o], inputs=[i])[0] for o, i in zip(outs, inps, strict=True)]
        np.testing.assert_allclose(batch, single)
        if m.needs_input:
            with pytest.raises(ValueError):
                m.score(outs)


@pytest.mark.parametrize("name", NAMES)
def test_cards_complete(name):
    assert missing_card_sections(load_card(name)) == []
