"""Golden values for the surface string metrics (hand-computed and rapidfuzz/nltk)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from autometrics.metricbank import get_metric, load_card, missing_card_sections

NAMES = ["JaccardDistance", "HammingDistance", "LevenshteinDistance", "LevenshteinRatio", "Jaro", "JaroWinkler"]


def one(name: str, output: str, refs, **params) -> float:
    return float(get_metric(name, **params).score([output], references=[refs])[0])


@pytest.mark.parametrize(
    "name, output, ref, expected",
    [
        # classic textbook pairs
        ("Jaro", "MARTHA", "MARHTA", 0.944444),
        ("JaroWinkler", "MARTHA", "MARHTA", 0.961111),
        ("Jaro", "DWAYNE", "DUANE", 0.822222),
        ("JaroWinkler", "DWAYNE", "DUANE", 0.84),
        ("LevenshteinDistance", "kitten", "sitting", 3.0),
        # indel: LCS("kitten","sitting")=4 -> 6+7-2*4=5 edits -> 1-5/13
        ("LevenshteinRatio", "kitten", "sitting", 1 - 5 / 13),
        # {the,cat,sat,on,mat} vs {the,dog,sat,on,a,log}: 3 shared of 8 -> 1-3/8
        ("JaccardDistance", "The cat sat on the mat.", "the dog sat on a log", 0.625),
        # [the,cat,sat] vs [the,dog,sat,on,mat]: positions 2,4,5 differ -> 3/5
        ("HammingDistance", "The cat sat", "the dog sat on mat", 0.6),
        ("HammingDistance", "a b c", "a b c", 0.0),
        ("LevenshteinRatio", "same", "same", 1.0),
    ],
)
def test_hand_values(name, output, ref, expected):
    assert one(name, output, [ref]) == pytest.approx(expected, abs=1e-4)


def test_against_reference_libraries():
    from autometrics.metricbank._text import words
    from nltk.metrics.distance import jaccard_distance
    from rapidfuzz import fuzz
    from rapidfuzz.distance import Jaro, JaroWinkler, Levenshtein

    pairs = [
        ("The quick brown fox jumps over the lazy dog.", "A quick brown dog jumps over the lazy fox!"),
        ("Paul Merson restarted his row with Andros Townsend.", "Merson and Townsend row again."),
    ]
    for out, ref in pairs:
        assert one("Jaro", out, [ref]) == pytest.approx(Jaro.similarity(out, ref), abs=1e-9)
        assert one("JaroWinkler", out, [ref]) == pytest.approx(JaroWinkler.similarity(out, ref), abs=1e-9)
        assert one("LevenshteinDistance", out, [ref]) == Levenshtein.distance(out, ref)
        # python-Levenshtein's ratio == rapidfuzz fuzz.ratio / 100
        assert one("LevenshteinRatio", out, [ref]) == pytest.approx(fuzz.ratio(out, ref) / 100, abs=1e-9)
        assert one("JaccardDistance", out, [ref]) == pytest.approx(
            jaccard_distance(set(words(out)), set(words(ref))), abs=1e-9
        )


def test_multi_reference_takes_best_pair():
    refs = ["completely different words", "MARHTA", "MARTH"]
    assert one("Jaro", "MARTHA", refs) == pytest.approx(max(one("Jaro", "MARTHA", [r]) for r in refs))
    assert one("LevenshteinDistance", "MARTHA", refs) == 1.0  # MARTH: one deletion
    assert one("JaccardDistance", "a b c", ["x y", "a b c d"]) == pytest.approx(0.25)
    assert one("HammingDistance", "a b c", ["x y", "a b x"]) == pytest.approx(1 / 3)


def test_jaro_winkler_prefix_weight_in_signature():
    m = get_metric("JaroWinkler", prefix_weight=0.2)
    assert m.signature() == "JaroWinkler|prefix_weight:0.2|v:1"
    assert m.score(["MARTHA"], references=[["MARHTA"]])[0] > one("JaroWinkler", "MARTHA", ["MARHTA"])
    with pytest.raises(ValueError):
        get_metric("JaroWinkler", prefix_weight=0.5)


def test_empty_output_and_missing_reference():
    expected = {
        "JaccardDistance": 1.0,
        "HammingDistance": 1.0,
        "LevenshteinDistance": 3.0,
        "LevenshteinRatio": 0.0,
        "Jaro": 0.0,
        "JaroWinkler": 0.0,
    }
    for name in NAMES:
        scores = get_metric(name).score(["", "abc"], references=[["abc"], []])
        assert scores[0] == pytest.approx(expected[name]), name
        assert math.isnan(scores[1]), name


def test_directions():
    for name in NAMES:
        m = get_metric(name)
        assert m.needs_reference and not m.needs_input
        assert m.higher_is_better == (name not in {"JaccardDistance", "HammingDistance", "LevenshteinDistance"})


def test_batch_uses_each_row_own_references():
    m = get_metric("LevenshteinDistance")
    out = m.score(["abc", "xyz"], references=[["abd"], ["xyz", "q"]])
    np.testing.assert_allclose(out, [1.0, 0.0])


@pytest.mark.parametrize("name", NAMES)
def test_card_complete(name):
    card = load_card(name)
    assert card.startswith(f"# Metric Card for {name}")
    assert missing_card_sections(card) == []
