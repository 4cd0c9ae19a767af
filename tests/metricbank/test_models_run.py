"""Every model metric's real loading and scoring code, run on offline stand-ins: the MiniLM
encoder from PyPI for the embedding family, tiny random transformers saved by the test,
fastText models trained by the test, and a scripted `lens` module.  Where the published
formula can be recomputed directly from the model, it is."""

from __future__ import annotations

import importlib.machinery
import sys
import types

import numpy as np
import pytest
from autometrics.metricbank import get_metric

OUT = ["The cat sat on the mat.", "", "A completely different sentence about dogs running in the park!"]
INP = ["The cat was sitting on the mat in the house.", "Some input text that was given.", "Dogs run in parks. They like it."]
REFS = [["The cat sat on the mat."], ["A reference text."], ["Dogs were running in the park.", "The dogs ran in a park."]]

CLASSIFIER_LABELS = {
    "Toxicity": ["nothate", "hate"],
    "Sentiment": ["negative", "neutral", "positive"],
    "FactCC": ["CORRECT", "INCORRECT"],
}


def _model_for(name, standin, minilm=None):
    kinds = {
        "Perplexity": "gpt2", "MAUVE": "gpt2", "BARTScore": "bart", "InfoLM": "bert_mlm",
        "GRMRewardModel": "llama_reward", "INFORMRewardModel": "inform_reward", "LDLRewardModel": "ldl_reward",
        "MathProcessRewardModel": "qwen_prm", "BLEURT": "bert_regressor", "UniEval-Sum": "t5",
        "UniEval-Dialogue": "t5", "UniEval-Fact": "t5", "SummaQA": "bert_qa",
    }
    if name in CLASSIFIER_LABELS:
        return str(standin("classifier", tuple(CLASSIFIER_LABELS[name])))
    if name.startswith("FastText"):
        return str(standin("fasttext", {"FastTextEducationalValue": "edu", "FastTextNSFW": "nsfw", "FastTextToxicity": "toxic"}[name]))
    if name in kinds:
        return str(standin(kinds[name]))
    return str(minilm)


EMBEDDING = ["BERTScore", "MoverScore", "YiSi", "YiSi-2", "ParaScore", "ParaScoreFree"]
TINY = [
    "Perplexity", "MAUVE", "BARTScore", "InfoLM", "GRMRewardModel", "INFORMRewardModel", "LDLRewardModel",
    "MathProcessRewardModel", "Toxicity", "Sentiment", "FactCC", "BLEURT", "UniEval-Sum", "UniEval-Dialogue",
    "UniEval-Fact", "SummaQA", "FastTextEducationalValue", "FastTextNSFW", "FastTextToxicity",
]


def _get(name, path):
    kw = {"ner": "capitalized"} if name == "SummaQA" else {}
    return get_metric(name, model=path, **kw)


@pytest.mark.parametrize("name", EMBEDDING + TINY)
def test_contract_on_standin(name, standin, request):
    minilm = request.getfixturevalue("minilm") if name in EMBEDDING else None
    m = _get(name, _model_for(name, standin, minilm))
    m.check_available()
    res = m.score_all(OUT, inputs=INP, references=REFS)
    assert list(res) == m.feature_names()
    for v in res.values():
        assert v.shape == (3,) and np.isfinite(v).all(), (name, v)
    # batch size and batch composition do not change a row's score (padding is masked)
    m.batch_size = 1
    again = m.score_all(OUT, inputs=INP, references=REFS)
    for k in res:
        np.testing.assert_allclose(again[k], res[k], rtol=1e-4, atol=1e-5)
    if not m.batch_dependent:
        single = m.score_all(OUT[2:], inputs=INP[2:], references=REFS[2:])
        for k in res:
            np.testing.assert_allclose(single[k], res[k][2:], rtol=1e-4, atol=1e-5)
    if m.needs_reference:
        holes = m.score_all(OUT, inputs=INP, references=[REFS[0], [], REFS[2]])
        first = next(iter(holes.values()))
        assert np.isnan(first[1]) and np.isfinite(first[[0, 2]]).all()


# ------------------------------------------------------------------ embedding family on MiniLM
def test_bertscore_identity_and_manual_greedy_matching(minilm):
    import torch
    from transformers import AutoModel, AutoTokenizer

    m = get_metric("BERTScore", model=str(minilm))
    assert m.params["layer"] == -1  # a non-default model uses its last layer unless told
    res = m.score_all(["the cat sat on the mat"], references=[["the cat sat on the mat"]])
    assert res["BERTScore.f1"][0] == pytest.approx(1.0, abs=1e-5)
    # recompute P/R/F directly from the encoder's last layer
    tok = AutoTokenizer.from_pretrained(str(minilm))
    enc = AutoModel.from_pretrained(str(minilm)).eval()

    def emb(t):
        x = tok(t, return_tensors="pt")
        with torch.no_grad():
            h = enc(**x).last_hidden_state[0, 1:-1]
        return torch.nn.functional.normalize(h, dim=-1).numpy()

    c, r = emb("a dog ran in the park"), emb("the dogs were running in a park")
    sim = c @ r.T
    p, rec = sim.max(1).mean(), sim.max(0).mean()
    res = m.score_all(["a dog ran in the park"], references=[["the dogs were running in a park"]])
    assert res["BERTScore.precision"][0] == pytest.approx(p, abs=1e-5)
    assert res["BERTScore.recall"][0] == pytest.approx(rec, abs=1e-5)
    assert res["BERTScore.f1"][0] == pytest.approx(2 * p * rec / (p + rec), abs=1e-5)


def test_bertscore_idf_is_batch_dependent(minilm):
    m = get_metric("BERTScore", model=str(minilm), idf=True)
    assert m.batch_dependent and "idf:yes" in m.signature()
    assert np.isfinite(m.score(OUT, references=REFS)).all()


def test_embedding_metrics_rank_paraphrase_above_unrelated(minilm):
    out = ["the cat sat on the mat", "stock markets fell sharply on monday"]
    refs = [["a cat was sitting on the mat"]] * 2
    # (idf off: with one shared reference every idf would be log(3/3) = 0)
    for name in ("BERTScore", "MoverScore", "YiSi"):
        s = get_metric(name, model=str(minilm), idf=False).score(out, references=refs)
        assert s[0] > s[1], name
    s = get_metric("YiSi-2", model=str(minilm), idf=False).score(out, inputs=["a cat was sitting on the mat"] * 2)
    assert s[0] > s[1]


def test_parascore_copy_penalty(minilm):
    m = get_metric("ParaScoreFree", model=str(minilm))
    src = "the cat sat on the mat"
    copy, para = m.score([src, "a cat was sitting on a mat"], inputs=[src, src])
    # a verbatim copy has similarity 1 but diversity -1: 1 - 0.05
    assert copy == pytest.approx(1 - 0.05, abs=1e-5)
    assert para > 0


# ------------------------------------------------------------------ LM metrics, checked by hand
def test_perplexity_equals_exp_of_hf_loss(standin):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = standin("gpt2")
    m = get_metric("Perplexity", model=str(path))
    texts = ["the cat sat on the mat", "dogs run in the park today and the cat sat", ""]
    got = m.score(texts)
    tok = AutoTokenizer.from_pretrained(str(path))
    lm = AutoModelForCausalLM.from_pretrained(str(path)).eval()
    for text, value in zip(texts, got, strict=True):
        ids = [tok.bos_token_id] + (tok(text, add_special_tokens=False)["input_ids"] or [tok.eos_token_id])
        x = torch.tensor([ids])
        with torch.no_grad():
            loss = lm(input_ids=x, labels=x).loss.item()  # mean NLL of tokens 2..n
        assert value == pytest.approx(np.exp(loss), rel=1e-4)


def test_bartscore_equals_minus_hf_loss(standin):
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    path = standin("bart")
    m = get_metric("BARTScore", model=str(path))
    res = m.score_all(["the cat sat"], references=[["a cat was sitting on the mat"]])
    tok = AutoTokenizer.from_pretrained(str(path))
    lm = AutoModelForSeq2SeqLM.from_pretrained(str(path)).eval()

    def ll(src, tgt):
        s, t = tok(src, return_tensors="pt"), tok(tgt, return_tensors="pt")
        with torch.no_grad():
            return -lm(input_ids=s["input_ids"], attention_mask=s["attention_mask"], labels=t["input_ids"]).loss.item()

    p, r = ll("a cat was sitting on the mat", "the cat sat"), ll("the cat sat", "a cat was sitting on the mat")
    assert res["BARTScore.precision"][0] == pytest.approx(p, rel=1e-4)
    assert res["BARTScore.recall"][0] == pytest.approx(r, rel=1e-4)
    assert res["BARTScore.f"][0] == pytest.approx((p + r) / 2, rel=1e-4)


def _chat_ids(tok, inp, out):
    text = tok.apply_chat_template([{"role": "user", "content": inp}, {"role": "assistant", "content": out}], tokenize=False)
    import torch

    return torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])


def test_grm_score_is_the_classification_head_output(standin):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    path = standin("llama_reward")
    got = get_metric("GRMRewardModel", model=str(path)).score(OUT, inputs=INP)
    tok = AutoTokenizer.from_pretrained(str(path))
    rm = AutoModelForSequenceClassification.from_pretrained(str(path)).eval()
    for i in range(3):
        with torch.no_grad():
            want = rm(input_ids=_chat_ids(tok, INP[i], OUT[i])).logits[0, 0].item()
        assert got[i] == pytest.approx(want, rel=1e-4, abs=1e-5)
    assert len(set(np.round(got, 6))) == 3


def test_inform_and_ldl_heads_by_hand(standin):
    import torch
    from autometrics.metricbank.lm import _inform_class, _ldl_class
    from transformers import AutoTokenizer

    path = standin("inform_reward")
    got = get_metric("INFORMRewardModel", model=str(path)).score(OUT, inputs=INP)
    tok = AutoTokenizer.from_pretrained(str(path))
    rm = _inform_class().from_pretrained(str(path)).eval()
    with torch.no_grad():
        h = rm.model(input_ids=_chat_ids(tok, INP[0], OUT[0])).last_hidden_state[:, -1]
        assert got[0] == pytest.approx(rm.score(h)[0, 0].item(), rel=1e-4, abs=1e-5)

    path = standin("ldl_reward")
    got = get_metric("LDLRewardModel", model=str(path)).score(OUT, inputs=INP)
    rm = _ldl_class().from_pretrained(str(path)).eval()
    rm.regression_layer.load_state_dict(torch.load(path / "regression_layer.pt"))
    rm.gating_layer.load_state_dict(torch.load(path / "gating_layer.pt"))
    with torch.no_grad():
        h = rm.model(input_ids=_chat_ids(tok, INP[2], OUT[2])).last_hidden_state[:, -1]
        dists = torch.softmax(rm.regression_layer.network(h).view(1, -1, 10), -1)
        w = rm.gating_layer.network(h)
        want = ((w.unsqueeze(1) @ dists).squeeze() * torch.linspace(0, 1, 10)).sum().item()
    assert got[2] == pytest.approx(want, rel=1e-4, abs=1e-5)


def test_ldl_needs_its_head_files(standin, tmp_path):
    import shutil

    from autometrics.metricbank import MetricUnavailable

    copy = tmp_path / "ldl"
    shutil.copytree(standin("ldl_reward"), copy)
    (copy / "gating_layer.pt").unlink()
    with pytest.raises(MetricUnavailable, match="gating_layer.pt"):
        get_metric("LDLRewardModel", model=str(copy)).check_available()


def test_math_prm_step_probabilities(standin):
    import torch
    from autometrics.metricbank.lm import split_steps
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    path = standin("qwen_prm")
    out = "First add two and two.\n\nThen the total is four.\n\nSo the answer is four."
    assert split_steps(out) == ["First add two and two.", "Then the total is four.", "So the answer is four."]
    m = get_metric("MathProcessRewardModel", model=str(path))
    res = m.score_all([out], inputs=["what is two plus two"])
    tok = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForTokenClassification.from_pretrained(str(path)).eval()
    conv = [{"role": "system", "content": m.SYSTEM}, {"role": "user", "content": "what is two plus two"},
            {"role": "assistant", "content": "<extra_0>".join(split_steps(out)) + "<extra_0>"}]
    ids = torch.tensor([tok(tok.apply_chat_template(conv, tokenize=False), add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        probs = torch.softmax(model(input_ids=ids).logits[0], -1)[:, 1]
    steps = probs[ids[0] == tok.convert_tokens_to_ids("<extra_0>")].numpy()
    assert len(steps) == 3
    assert res["MathProcessRewardModel.min"][0] == pytest.approx(steps.min(), rel=1e-4)
    assert res["MathProcessRewardModel.max"][0] == pytest.approx(steps.max(), rel=1e-4)
    assert res["MathProcessRewardModel.mean"][0] == pytest.approx(steps.mean(), rel=1e-4)


def test_mauve_is_one_for_identical_samples(standin):
    m = get_metric("MAUVE", model=str(standin("gpt2")))
    texts = [f"the cat number {w} sat on the mat" for w in "one two three four five six seven eight nine ten".split()] * 3
    s = m.score(texts, references=[[t] for t in texts])
    assert s == pytest.approx(np.ones(len(texts)), abs=1e-6)


def test_infolm_zero_for_identical_texts(standin):
    m = get_metric("InfoLM", model=str(standin("bert_mlm")))
    s = m.score(["the cat sat on the mat", "dogs run"], references=[["the cat sat on the mat"], ["the cat sat on the mat"]])
    assert s[0] == pytest.approx(0.0, abs=1e-6) and s[1] > 0


# ------------------------------------------------------------------ classifiers
def test_classifier_scores_are_the_softmax_of_the_named_label(standin):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    path = standin("classifier", tuple(CLASSIFIER_LABELS["Sentiment"]))
    got = get_metric("Sentiment", model=str(path)).score(["I love it @bob http://x.y", "bad"])
    tok = AutoTokenizer.from_pretrained(str(path))
    clf = AutoModelForSequenceClassification.from_pretrained(str(path)).eval()
    with torch.no_grad():
        p = torch.softmax(clf(**tok(["I love it @user http", "bad"], return_tensors="pt", padding=True)).logits, -1)
    np.testing.assert_allclose(got, (p[:, 2] - p[:, 0]).numpy(), rtol=1e-4, atol=1e-6)

    path = standin("classifier", tuple(CLASSIFIER_LABELS["FactCC"]))
    got = get_metric("FactCC", model=str(path)).score(["the cat sat"], inputs=["a long document about a cat"])
    clf = AutoModelForSequenceClassification.from_pretrained(str(path)).eval()
    with torch.no_grad():
        p = torch.softmax(clf(**tok("a long document about a cat", "the cat sat", return_tensors="pt")).logits, -1)
    assert got[0] == pytest.approx(p[0, 0].item(), rel=1e-4)  # CORRECT is label 0 here


def test_unieval_is_yes_over_yes_plus_no(standin):
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    path = standin("t5")
    got = get_metric("UniEval-Fact", model=str(path)).score(["The cat sat. The dog ran."], inputs=["a document"])
    tok = AutoTokenizer.from_pretrained(str(path))
    t5 = AutoModelForSeq2SeqLM.from_pretrained(str(path)).eval()
    yes, no = tok("Yes", add_special_tokens=False)["input_ids"][0], tok("No", add_special_tokens=False)["input_ids"][0]
    vals = []
    for claim in ("The cat sat.", "The dog ran."):
        prompt = f"question: Is this claim consistent with the document? </s> claim: {claim} </s> document: a document"
        with torch.no_grad():
            logits = t5(**tok(prompt, return_tensors="pt"), decoder_input_ids=torch.tensor([[t5.config.decoder_start_token_id]])).logits[0, 0]
        p = torch.softmax(logits, -1)
        vals.append((p[yes] / (p[yes] + p[no])).item())
    assert got[0] == pytest.approx(np.mean(vals), rel=1e-4)


def test_summaqa_masks_entities_and_answers_from_the_output(standin):
    from autometrics.metricbank.summaqa import capitalized_entities, token_f1

    assert capitalized_entities("The talks in Paris with Angela Merkel lasted 3 hours.") == ["Paris", "Angela Merkel", "3"]
    assert token_f1("the Angela Merkel", "Angela Merkel") == 1.0
    m = get_metric("SummaQA", model=str(standin("bert_qa")), ner="capitalized")
    src = "The talks in Paris with Angela Merkel lasted 3 hours. Officials from Berlin attended."
    assert [a for _, a in m.questions(src, None)] == ["Paris", "Angela Merkel", "3", "Berlin"]
    res = m.score_all(["Merkel met officials in Paris for 3 hours.", ""], inputs=[src, src])
    # a run-on source sentence longer than the QA window still leaves room for the output
    long_src = " ".join(["word"] * 600) + " in Paris " + " ".join(["word"] * 600) + "."
    q = m.questions(long_src, None)
    assert len(q) == 1 and len(q[0][0].split()) <= 81
    assert np.isfinite(m.score(["Paris"], inputs=[long_src])).all()
    for v in res.values():
        assert np.isfinite(v).all() and (v >= 0).all() and (v <= 1).all()


def test_summaqa_default_needs_spacy_model():
    from autometrics.metricbank import MetricUnavailable

    m = get_metric("SummaQA")
    with pytest.raises(MetricUnavailable):
        m.check_available()


def test_fasttext_scores_follow_the_trained_labels(standin):
    import fasttext
    from autometrics.metricbank.fasttext_metrics import fasttext_probabilities

    tox = get_metric("FastTextToxicity", model=str(standin("fasttext", "toxic")))
    bad, good = tox.score(["you are a stupid idiot", "thank you for the lovely park"])
    assert bad > 0.5 > good
    path = standin("fasttext", "edu")
    edu = get_metric("FastTextEducationalValue", model=str(path))
    text = "photosynthesis converts light energy\ninto chemical energy"
    probs = fasttext_probabilities(fasttext.load_model(str(path)), text)
    assert sum(probs.values()) == pytest.approx(1.0, abs=1e-3)
    assert edu.score([text])[0] == pytest.approx(probs["Mid"] + 2 * probs["High"], abs=1e-6)
    # a folder holding the .bin works too
    assert np.isfinite(get_metric("FastTextEducationalValue", model=str(path.parent)).score(["x"])).all()


def test_fasttext_wrong_labels_are_reported(standin):
    from autometrics.metricbank import MetricUnavailable

    m = get_metric("FastTextNSFW", model=str(standin("fasttext", "toxic")))
    with pytest.raises(MetricUnavailable, match="expected"):
        m.score(["x"])


# ------------------------------------------------------------------ LENS through a scripted `lens`
@pytest.fixture
def fake_lens(monkeypatch):
    calls = {}
    mod = types.ModuleType("lens")
    mod.__spec__ = importlib.machinery.ModuleSpec("lens", None)

    class LENS:
        def __init__(self, path, rescale=True):
            calls["LENS"] = (path, rescale)

        def score(self, complex, simple, references, batch_size=16, devices=None):
            calls["LENS.score"] = (complex, simple, references, batch_size, devices)
            return [float(len(s)) for s in simple]

    class LENS_SALSA:
        def __init__(self, path):
            calls["LENS_SALSA"] = path

        def score(self, complex, simple, batch_size=16, devices=None):
            return [float(len(c) - len(s)) for c, s in zip(complex, simple, strict=True)], [[] for _ in simple]

    mod.LENS, mod.LENS_SALSA = LENS, LENS_SALSA
    monkeypatch.setitem(sys.modules, "lens", mod)
    return calls


def test_lens_loading_path(fake_lens, tmp_path):
    pytest.importorskip('torch', reason='needs the `models` extra (torch)')
    ckpt = tmp_path / "lens" / "checkpoints" / "epoch=5-step=6102.ckpt"
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"x")
    m = get_metric("LENS", model=str(tmp_path / "lens"))
    m.check_available()
    s = m.score(["short", "longer one"], inputs=["c1", "c2"], references=[["r"], ["r2", "r3"]])
    assert list(s) == [5.0, 10.0]
    assert fake_lens["LENS"] == (str(ckpt), True)
    assert fake_lens["LENS.score"][2] == [["r"], ["r2", "r3"]]
    salsa = get_metric("LENS_SALSA", model=str(ckpt))
    assert list(salsa.score(["ab"], inputs=["abcd"])) == [2.0]
    m.release()
    salsa.release()
