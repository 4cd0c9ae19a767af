"""Every registered metric honours the MetricBank contract and has a complete Metric Card."""

from __future__ import annotations

import re

import numpy as np
import pytest
from autometrics.metricbank import (
    CARD_SECTIONS,
    MetricUnavailable,
    get_metric,
    list_metrics,
    load_card,
    metric_class,
    missing_card_sections,
)

CPU_BANK = [
    "JaccardDistance", "HammingDistance", "LevenshteinDistance", "LevenshteinRatio", "Jaro", "JaroWinkler",
    "BLEU", "NIST", "ROUGE", "METEOR", "TER", "iBLEU", "chrF++", "CIDEr", "GLEU", "SARI", "CharCut",
    "PseudoPARENT", "UpdateROUGE", "FKGL", "DistinctNGrams", "SelfBLEU",
    "OutputLength", "LengthRatio", "InputSimilarity", "NovelNGramRatio",
]

OUTPUTS = ["The cat sat on the mat.", "", "A completely different sentence about dogs running in the park!"]
INPUTS = ["The cat was sitting on the mat in the house.", "Some input text that was given.", "Dogs run in parks. They like it."]
REFS = [["The cat sat on the mat."], ["A reference text."], ["Dogs were running in the park.", "The dogs ran in a park."]]


def test_the_whole_cpu_bank_is_registered():
    names = set(list_metrics())
    assert not set(CPU_BANK) - names, f"missing: {sorted(set(CPU_BANK) - names)}"


@pytest.mark.parametrize("name", list_metrics())
def test_card_is_complete(name):
    card = load_card(name)
    assert card.lstrip().startswith("# "), "a card starts with its title"
    assert missing_card_sections(card) == [], f"incomplete sections in {name}'s card"
    order = [card.index(f"## {s}") for s in CARD_SECTIONS]
    assert order == sorted(order), "sections in the paper's order"


def _runnable(name):
    """The metric with default arguments, or a skip when it cannot run here (model weights or
    an optional package missing) -- after checking that it says so clearly."""
    m = get_metric(name)  # construction never needs the weights
    try:
        m.check_available()
    except MetricUnavailable as exc:
        assert name in str(exc) and len(str(exc)) > 40, "the message names the metric and how to fix it"
        pytest.skip(f"unavailable here: {str(exc)[:120]}")
    return m


@pytest.mark.parametrize("name", list_metrics())
def test_metric_contract(name):
    cls = metric_class(name)
    m = _runnable(name)
    assert cls.description, "one-line description for `bank list`"
    sig = m.signature()
    assert sig.startswith(name + "|") and re.search(r"\|v:\w+$", sig)
    assert len(m.feature_names()) == len(m.feature_signatures()) == len(m.feature_higher_is_better())
    res = m.score_all(OUTPUTS, inputs=INPUTS, references=REFS)
    assert list(res) == m.feature_names()
    for values in res.values():
        assert values.shape == (3,)
        assert np.isfinite(values).all(), f"{name} gave {values} (empty outputs must score, not NaN)"
    # deterministic
    again = m.score_all(OUTPUTS, inputs=INPUTS, references=REFS)
    for k in res:
        np.testing.assert_array_equal(res[k], again[k])
    if cls.needs_reference:
        holes = m.score_all(OUTPUTS, inputs=INPUTS, references=[REFS[0], [], REFS[2]])
        for values in holes.values():
            assert np.isnan(values[1]) and np.isfinite(values[[0, 2]]).all()


@pytest.mark.parametrize("name", [n for n in list_metrics() if not metric_class(n).batch_dependent])
def test_batch_equals_one_by_one(name):
    m = _runnable(name)
    batch = m.score_all(OUTPUTS, inputs=INPUTS, references=REFS)
    for i in range(len(OUTPUTS)):
        single = m.score_all([OUTPUTS[i]], inputs=[INPUTS[i]], references=[REFS[i]])
        for k in batch:
            np.testing.assert_allclose(single[k], batch[k][i : i + 1], rtol=1e-9, atol=1e-9)


def _card_answer(card: str, question: str) -> bool | None:
    """The card's yes/no answer under ``### <question>`` (its first word), None when the card
    answers in words that are neither (e.g. "learns the sign")."""
    m = re.search(rf"^###\s*{re.escape(question)}\s*\n+\s*(\S+)", card, flags=re.M | re.I)
    if m is None:
        return None
    word = m.group(1).strip("*.,:;()").lower()
    return {"yes": True, "no": False}.get(word)


@pytest.mark.parametrize("name", list_metrics())
def test_card_facts_agree_with_the_metric(name):
    """A card's stated direction and needs are the metric's own attributes (a card that says
    "higher is better" for a distance would mislead every reader of the report)."""
    card = load_card(name)
    cls = metric_class(name)
    facts = {"Higher is Better?": ("higher_is_better", cls.higher_is_better),
             "Reference-Based?": ("needs_reference", cls.needs_reference),
             "Input-Required?": ("needs_input", cls.needs_input)}
    checked = 0
    for question, (attr, value) in facts.items():
        said = _card_answer(card, question)
        if said is None:
            continue
        checked += 1
        assert said == bool(value), f"{name}'s card answers {question!r} with {said}, but {cls.__name__}.{attr} is {value}"
    assert checked >= 2, f"{name}'s card states fewer than two of direction / references / input as yes or no"


def test_card_answer_parser_reads_yes_no_and_refuses_prose():
    card = "### Higher is Better?\nNo (a distance).\n\n### Reference-Based?\n**Yes**, one or more.\n\n### Input-Required?\nlearns it\n"
    assert _card_answer(card, "Higher is Better?") is False
    assert _card_answer(card, "Reference-Based?") is True
    assert _card_answer(card, "Input-Required?") is None
    assert _card_answer(card, "Missing?") is None
