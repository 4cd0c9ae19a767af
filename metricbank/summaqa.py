"""SummaQA (Scialom et al., 2019): question answering over the source's entities, answered from the
summary (F1 and confidence).  Loads a Hugging Face QA folder offline (``model=`` or
``$AUTOMETRICS_MODELS_DIR``); entities by spaCy's NER (``ner="spacy"``, the default, as in the
paper) or by an offline heuristic of capitalised spans (``ner="capitalized"``).
"""

from __future__ import annotations

import importlib.util
import re
from collections import Counter
from pathlib import Path
from typing import ClassVar

import numpy as np

from . import _text
from ._models import (
    ModelMetric,
    Resources,
    batched,
    inference_mode,
    load_hf,
    load_tokenizer,
    measured,
)
from .base import MetricUnavailable
from .errors import UserError
from .install import install_hint
from .registry import register

__all__ = ["SummaQA", "capitalized_entities", "token_f1"]


# ------------------------------------------------------------------------------ SummaQA
_CAP_ENTITY = re.compile(r"\b(?:[A-Z][\w'-]*(?:\s+(?:of|the|de|van|von)?\s*[A-Z][\w'-]*)*|\d[\d,.]*)\b")


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def capitalized_entities(sentence: str) -> list[str]:
    """A dependency-free stand-in for NER: runs of capitalised words and numbers, skipping a
    single capitalised word at the start of the sentence."""
    ents = []
    for m in _CAP_ENTITY.finditer(sentence):
        if m.start() == len(sentence) - len(sentence.lstrip()) and " " not in m.group(0) and not m.group(0)[0].isdigit():
            continue
        ents.append(m.group(0))
    return ents


def token_f1(pred: str, gold: str) -> float:
    """SQuAD token F1 (lowercased, punctuation and articles removed)."""

    def norm(s):
        s = re.sub(r"[^\w\s]", " ", s.lower())
        return [w for w in s.split() if w not in {"a", "an", "the"}]

    p, g = norm(pred), norm(gold)
    common = sum((Counter(p) & Counter(g)).values())
    if not p or not g or not common:
        return float(p == g)
    prec, rec = common / len(p), common / len(g)
    return 2 * prec * rec / (prec + rec)


@register
class SummaQA(ModelMetric):
    """SummaQA (Scialom et al., 2019): named entities of the source are masked to make cloze
    questions; a SQuAD QA model answers them from the output.  ``prob``: mean confidence of
    the answers; ``f1``: mean token F1 with the masked entities."""

    name = "SummaQA"
    needs_input = True
    submetrics = ("f1", "prob")
    description = "SummaQA: answer source-derived cloze questions (masked entities) from the output with a BERT QA model; F1 and confidence."
    default_model = "bert-large-uncased-whole-word-masking-finetuned-squad"
    resources = Resources("335M", 1.3, 3.0, True, measured("reference_free/SummaQA.py", gpu_mb=1283.38))
    default_batch_size = 16
    MASK: ClassVar[str] = "[MASK]"
    MAX_ANSWER_TOKENS: ClassVar[int] = 30
    signature_keys = {"model": "model", "ner": "ner"}

    def __init__(self, *, model: str | None = None, ner: str = "spacy", spacy_model: str = "en_core_web_sm", **kw):
        if ner not in ("spacy", "capitalized"):
            raise UserError("ner must be 'spacy' (the paper's NER) or 'capitalized' (offline heuristic)")
        super().__init__(model=model, ner=ner, **kw)
        self.spacy_model = spacy_model

    def check_available(self) -> None:
        super().check_available()
        if self.params["ner"] == "spacy":
            for mod, how in (("spacy", install_hint("spacy")), (self.spacy_model, f"run `python -m spacy download {self.spacy_model}` (or its wheel from the spaCy models release page)")):
                if importlib.util.find_spec(mod) is None:
                    raise MetricUnavailable(
                        f"{self.name}: entity masking needs {mod}, not installed; {how}, or use ner='capitalized' (a heuristic, not the paper's NER)"
                    )

    def _load(self, path: Path, device: str):
        ner = None
        if self.params["ner"] == "spacy":
            import spacy

            ner = spacy.load(self.spacy_model, disable=["parser", "lemmatizer"])
        return load_tokenizer(path), load_hf("AutoModelForQuestionAnswering", path, device), ner

    def questions(self, source: str, ner) -> list[tuple[str, str]]:
        qs = []
        for sent in _text.split_sentences(source):
            ents = [e.text for e in ner(sent).ents] if ner is not None else capitalized_entities(sent)
            for ent in ents:
                qs.append((self._window(sent.replace(ent, self.MASK, 1)), ent))
        return qs

    #: words kept on each side of the mask, so that a run-on source "sentence" cannot fill
    #: the QA model's window (which would leave no room for the output)
    QUESTION_CONTEXT_WORDS: ClassVar[int] = 40

    def _window(self, question: str) -> str:
        words = question.split()
        if len(words) <= 2 * self.QUESTION_CONTEXT_WORDS + 1:
            return question
        at = next((k for k, w in enumerate(words) if self.MASK in w), 0)
        lo = max(0, at - self.QUESTION_CONTEXT_WORDS)
        return " ".join(words[lo : at + self.QUESTION_CONTEXT_WORDS + 1])

    def answer(self, questions: list[str], contexts: list[str]) -> tuple[list[str], np.ndarray]:
        tok, model, _ = self.model()
        answers, probs = [], []
        for _, idx in batched(list(range(len(questions))), self.batch_size):
            enc = tok(
                [questions[i] for i in idx],
                [contexts[i] for i in idx],
                truncation="only_second",
                max_length=384,
                padding=True,
                return_tensors="pt",
            )
            seq_ids = [enc.sequence_ids(k) for k in range(len(idx))]
            enc_t = {k: v.to(model.device) for k, v in enc.items()}
            with inference_mode():
                out = model(**enc_t)
            start, end = out.start_logits.float().cpu().numpy(), out.end_logits.float().cpu().numpy()
            for k in range(len(idx)):
                ctx = np.array([s == 1 for s in seq_ids[k]])
                if not ctx.any():
                    answers.append("")
                    probs.append(0.0)
                    continue
                pos = np.flatnonzero(ctx)
                ps, pe = _softmax(start[k][pos]), _softmax(end[k][pos])
                n = len(pos)
                band = np.triu(np.ones((n, n), dtype=bool)) & ~np.triu(np.ones((n, n), dtype=bool), k=self.MAX_ANSWER_TOKENS)
                joint = np.where(band, ps[:, None] * pe[None, :], -1.0)
                i, j = divmod(int(joint.argmax()), n)
                answers.append(tok.decode(enc["input_ids"][k][pos[i] : pos[j] + 1], skip_special_tokens=True).strip())
                probs.append(float(joint[i, j]))
        return answers, np.array(probs)

    def _compute(self, outputs, inputs, references):
        _, _, ner = self.model()
        qs_by_source: dict[str, list[tuple[str, str]]] = {}
        rows = []
        for o, s in zip(outputs, inputs, strict=True):
            if s not in qs_by_source:
                qs_by_source[s] = self.questions(s, ner)
            rows.append([(q, a, o) for q, a in qs_by_source[s]])
        flat = [x for r in rows for x in r]
        answers, probs = self.answer([q for q, _, _ in flat], [o if o.strip() else "." for _, _, o in flat])
        res = {"f1": np.zeros(len(outputs)), "prob": np.zeros(len(outputs))}
        k = 0
        for i, r in enumerate(rows):
            if r:  # no entity in the source: no question, score 0
                f1 = [token_f1(answers[k + j], r[j][1]) for j in range(len(r))]
                res["f1"][i] = float(np.mean(f1))
                res["prob"][i] = float(np.mean(probs[k : k + len(r)]))
            k += len(r)
        return res
