"""Every registered metric honours the MetricBank contract and has a complete Metric Card."""

from __future__ import annotations

import re
import sys

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
from autometrics.metricbank.registry import card_path

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


#: The facts every Metric Card states under a ``### <question>`` heading, and the metric class
#: attribute each must agree with.
CARD_FACTS = {
    "Higher is better?": "higher_is_better",
    "Reference-based?": "needs_reference",
    "Input-required?": "needs_input",
}
_ATTR_STATED = re.compile(r"`(\w+)\s*=\s*(True|False)`")


def _card_section(card: str, question: str) -> str | None:
    """The text under ``### <question>`` (case-insensitive) up to the next heading, or None."""
    m = re.search(rf"^###\s*{re.escape(question)}\s*$(.*?)(?=^#|\Z)", card, flags=re.M | re.S | re.I)
    return m.group(1).strip() if m else None


def card_answer(card: str, question: str) -> bool | None:
    """The card's yes/no answer to ``question``: the first word of its section ("Yes." / "No (a
    distance)" / "**Yes**, ..."), or, for cards that answer "Registered as `higher_is_better =
    True` only to orient the feature ...", the attribute value stated in the first sentence.
    None when the heading is missing or the answer is neither."""
    text = _card_section(card, question)
    if not text:
        return None
    first = text.split(maxsplit=1)[0].strip("*_.,:;()").lower()
    if first in ("yes", "no"):
        return first == "yes"
    m = _ATTR_STATED.search(re.split(r"(?<=\.)\s", text, maxsplit=1)[0])
    return None if m is None else m.group(2) == "True"


def card_fact_problems(name: str) -> list[str]:
    """Every disagreement between ``name``'s card and its metric, one readable line each."""
    card, cls = load_card(name), metric_class(name)
    where = f"card {card_path(cls.name).name} ({name})"
    expected = {
        "higher_is_better": get_metric(name).feature_higher_is_better(),  # one per sub-score
        "needs_reference": [cls.needs_reference],
        "needs_input": [cls.needs_input],
    }
    problems = []
    for question, attr in CARD_FACTS.items():
        said = card_answer(card, question)
        if said is None:
            problems.append(f"{where}: field {question!r} is missing or not answered yes/no")
            continue
        if any(v != said for v in expected[attr]):
            subs = ""
            if attr == "higher_is_better" and len(expected[attr]) > 1:  # sub-scores of mixed direction
                names = get_metric(name).feature_names()
                subs = f" for sub-scores {[f for f, v in zip(names, expected[attr], strict=True) if v != said]}"
            answer = "Yes" if said else "No"
            problems.append(f"{where}: field {question!r} says {answer}, but {cls.__name__}.{attr} is {not said}{subs}")
        # an attribute value the card quotes (e.g. "registered with `higher_is_better = False`") must be the real one
        for quoted, value in _ATTR_STATED.findall(_card_section(card, question) or ""):
            if hasattr(cls, quoted) and isinstance(getattr(cls, quoted), bool) and getattr(cls, quoted) != (value == "True"):
                problems.append(f"{where}: field {question!r} quotes `{quoted} = {value}`, but {cls.__name__}.{quoted} is {getattr(cls, quoted)}")
    return problems


@pytest.mark.parametrize("name", list_metrics())
def test_card_facts_agree_with_the_metric(name):
    """A card's stated direction and needs are the metric's own attributes (a card that says
    "higher is better" for a distance would mislead every reader of the report)."""
    problems = card_fact_problems(name)
    assert not problems, "\n".join(problems)


def test_card_answer_parser():
    card = (
        "### Higher is better?\nNo (a distance).\n\n### Reference-Based?\n**Yes**, one or more.\n\n"
        "### Input-required?\nlearns it\n\n### Range\nYes.\n"
    )
    assert card_answer(card, "Higher is Better?") is False
    assert card_answer(card, "Reference-based?") is True
    assert card_answer(card, "Input-Required?") is None  # prose, not an answer
    assert card_answer(card, "Missing?") is None
    assert card_answer("### Input-required?\n\n### Range\nYes.\n", "Input-required?") is None  # empty section
    registered = "### Higher is better?\nRegistered as `higher_is_better = True` only to orient it. See `x = False`.\n"
    assert card_answer(registered, "Higher is better?") is True
    assert card_answer(registered.replace("True", "False", 1), "Higher is better?") is False


def test_card_fact_check_names_the_card_and_the_field(monkeypatch):
    import autometrics.metricbank.registry as registry

    real = registry.load_card
    wrong_way = real("BLEU").replace("### Higher is Better?\nYes.", "### Higher is Better?\nNo (an error rate).")
    assert wrong_way != real("BLEU")
    monkeypatch.setattr(sys.modules[__name__], "load_card", lambda name: wrong_way if name == "BLEU" else real(name))
    (problem,) = card_fact_problems("BLEU")
    assert "BLEU.md" in problem and "'Higher is better?'" in problem and "higher_is_better" in problem
    no_input = real("iBLEU").replace("### Input-Required?\nYes", "### Input-Required?\nNo")
    monkeypatch.setattr(sys.modules[__name__], "load_card", lambda name: no_input)
    (problem,) = card_fact_problems("iBLEU")
    assert "iBLEU.md" in problem and "needs_input" in problem


def test_card_direction_is_checked_per_sub_score(monkeypatch):
    rouge = metric_class("ROUGE")
    sub = rouge.submetrics[1]
    monkeypatch.setattr(rouge, "submetric_higher_is_better", {sub: False})
    (problem,) = card_fact_problems("ROUGE")
    assert "ROUGE.md" in problem and "'Higher is better?'" in problem and f"ROUGE.{sub}" in problem
