"""METEOR against nltk.translate.meteor_score, with an offline WordNet folder."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
from autometrics.metricbank import MetricUnavailable, get_metric, load_card, missing_card_sections
from autometrics.metricbank import meteor as meteor_mod
from autometrics.metricbank._text import tokenize
from nltk.translate.meteor_score import meteor_score

WORDNET_DIR = meteor_mod.find_wordnet_dir()
needs_wordnet = pytest.mark.skipif(
    WORDNET_DIR is None, reason="no WordNet 3.0 folder (apt-get install wordnet-base or set AUTOMETRICS_WORDNET_DIR)"
)

PAIRS = [
    (
        "It is a guide to action which ensures that the military always obeys the commands of the party",
        ["It is a guide to action that ensures that the military will forever heed Party commands"],
    ),
    ("he is sick today", ["he is ill today"]),  # ill/sick: WordNet synonyms
    ("The cats were running home.", ["A cat runs home.", "the cats ran to their home"]),
    ("Nothing in common", ["totally unrelated words"]),
]


class _Empty:
    @staticmethod
    def synsets(word):
        return []


def nltk_meteor(output: str, refs: list[str], wordnet) -> float:
    return meteor_score([tokenize(r) for r in refs], tokenize(output), wordnet=wordnet)


@pytest.fixture(scope="module")
def wordnet():
    return meteor_mod.load_wordnet(str(WORDNET_DIR))


def test_exact_and_stem_only_matches_nltk():
    m = get_metric("METEOR", synonyms="none")
    scores = m.score([o for o, _ in PAIRS], references=[r for _, r in PAIRS])
    expected = [nltk_meteor(o, r, _Empty()) for o, r in PAIRS]
    np.testing.assert_allclose(scores, expected, atol=1e-9)
    assert m.signature() == "METEOR|alpha:0.9|beta:3.0|gamma:0.5|syn:none|v:1"


@needs_wordnet
def test_wordnet_matches_nltk(wordnet):
    m = get_metric("METEOR")
    assert m.params["synonyms"] == "wordnet"
    scores = m.score([o for o, _ in PAIRS], references=[r for _, r in PAIRS])
    expected = [nltk_meteor(o, r, wordnet) for o, r in PAIRS]
    np.testing.assert_allclose(scores, expected, atol=1e-9)
    assert scores[0] == pytest.approx(0.6944, abs=1e-4)  # NLTK's documented example


@needs_wordnet
def test_synonym_match_changes_score():
    out, refs = "he is sick today", ["he is ill today"]
    with_syn = get_metric("METEOR", synonyms="wordnet").score([out], references=[refs])[0]
    without = get_metric("METEOR", synonyms="none").score([out], references=[refs])[0]
    # 4/4 matched in one chunk: F=1, penalty 0.5*(1/4)^3 -> 0.9921875; without ill/sick: 3 of 4 in 2 chunks
    assert with_syn == pytest.approx(0.9921875, abs=1e-6)
    assert without == pytest.approx(0.6388889, abs=1e-6)


@needs_wordnet
def test_wordnet_reader_on_plain_folder(wordnet):
    assert wordnet.get_version() == "3.0"
    # lexicographer names come from the built-in lexnames table when the folder lacks it
    assert wordnet.synset("dog.n.01").lexname() == "noun.animal"
    assert wordnet.synset("run.v.01").lexname() == "verb.motion"
    assert "ill" in {n for s in wordnet.synsets("sick") for n in s.lemma_names()}


@needs_wordnet
def test_meteor_on_summeval_like_rows_matches_nltk(wordnet):
    outputs = [
        "paul merson was brought on with only seven minutes remaining in his team 's 0-0 draw with burnley .",
        "Andros Townsend scored. He was recalled for the England squad.",
    ]
    refs = [
        [
            "Merson criticised Townsend again after the midfielder came off the bench late in the game.",
            "Paul Merson teased Andros Townsend.",
        ],
        ["Townsend scored for England and was called up to the squad."],
    ]
    scores = get_metric("METEOR").score(outputs, references=refs)
    np.testing.assert_allclose(
        scores, [nltk_meteor(o, r, wordnet) for o, r in zip(outputs, refs, strict=True)], atol=1e-9
    )


def test_multi_reference_is_max_and_empty_output_is_zero():
    m = get_metric("METEOR", synonyms="none")
    refs = ["a cat runs home", "the cats ran to their home"]
    both = m.score(["the cats were running home"], references=[refs])[0]
    singles = [m.score(["the cats were running home"], references=[[r]])[0] for r in refs]
    assert both == pytest.approx(max(singles))
    s = m.score(["", "x"], references=[["a reference"], None])
    assert s[0] == 0.0 and math.isnan(s[1])


def test_auto_detection_without_wordnet(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv(meteor_mod.WORDNET_ENV, str(tmp_path))  # a folder without WordNet files
    from autometrics.metricbank import notices

    monkeypatch.setattr(notices, "_logged_once", set())  # as in a fresh process
    with caplog.at_level(logging.WARNING, logger=meteor_mod.__name__):
        m1 = get_metric("METEOR")
        m2 = get_metric("METEOR")
    assert m1.params["synonyms"] == m2.params["synonyms"] == "none"
    assert "syn:none" in m1.signature()
    assert sum("no WordNet found" in r.message for r in caplog.records) == 1
    assert m1.score(["he is sick today"], references=[["he is ill today"]])[0] == pytest.approx(0.6388889, abs=1e-6)
    # asking for synonyms explicitly, without WordNet, is an error that says how to fix it
    with pytest.raises(MetricUnavailable, match="wordnet-base"):
        get_metric("METEOR", synonyms="wordnet").check_available()
    with pytest.raises(ValueError):
        get_metric("METEOR", synonyms="thesaurus")


def test_card_complete():
    card = load_card("METEOR")
    assert card.startswith("# Metric Card for METEOR")
    assert missing_card_sections(card) == []
