"""Trained-evaluator metrics built on classifiers and boolean-QA models: Toxicity, Sentiment,
FactCC, BLEURT, UniEval (summarisation, dialogue, factual consistency), SummaQA, LENS and
LENS-SALSA.

Each loads a Hugging Face folder offline (``model=`` or ``$AUTOMETRICS_MODELS_DIR``) except
LENS/LENS-SALSA, which go through the ``lens-metric`` package with a local checkpoint.
"""

from __future__ import annotations

import importlib.util
import json
import os
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
    search_locations,
)
from .base import MetricUnavailable
from .registry import register

__all__ = [
    "Toxicity",
    "Sentiment",
    "FactCC",
    "BLEURT",
    "UniEvalSum",
    "UniEvalDialogue",
    "UniEvalFact",
    "SummaQA",
    "LENS",
    "LENS_SALSA",
    "label_index",
]

_LENS_GPU = (
    "our estimate from the parameter count and default batch size (the published gpu_mem is 0 MB: "
    "that measurement ran the model on CPU)"
)


def label_index(config, wanted: tuple[str, ...], fallback: int | None = None) -> int:
    """Index of the first label of ``wanted`` (case-insensitive) in ``config.id2label``."""
    names = {str(v).lower(): int(k) for k, v in (config.id2label or {}).items()}
    for w in wanted:
        if w.lower() in names:
            return names[w.lower()]
    if fallback is not None and fallback < config.num_labels:
        return fallback
    raise MetricUnavailable(f"model labels {sorted(names)} contain none of {wanted}")


class _SeqClassifier(ModelMetric):
    """Softmax over a sequence-classification head, one text or text pair per row."""

    default_batch_size = 16
    MAX_LENGTH: ClassVar[int] = 512

    def _load(self, path: Path, device: str):
        return load_tokenizer(path), load_hf("AutoModelForSequenceClassification", path, device)

    def probs(self, texts: list[str], pairs: list[str] | None = None, truncation="longest_first") -> tuple[np.ndarray, object]:
        import torch

        tokenizer, model = self.model()
        out = []
        items = list(range(len(texts)))
        for _, idx in batched(items, self.batch_size):
            a = [texts[i] for i in idx]
            b = None if pairs is None else [pairs[i] for i in idx]
            enc = tokenizer(a, b, padding=True, truncation=truncation, max_length=self.MAX_LENGTH, return_tensors="pt")
            enc = {k: v.to(model.device) for k, v in enc.items()}
            with inference_mode():
                logits = model(**enc).logits.float()
            out.append(torch.softmax(logits, dim=-1).cpu().numpy() if logits.shape[-1] > 1 else logits.cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, 1)), model.config


@register
class Toxicity(_SeqClassifier):
    """Probability that the output is hateful/toxic under the RoBERTa hate-speech classifier of
    Vidgen et al. (2021) (the model behind HF ``evaluate``'s toxicity measurement)."""

    name = "Toxicity"
    higher_is_better = False
    description = "P(hate) from facebook/roberta-hate-speech-dynabench-r4-target (HF evaluate's toxicity model)."
    default_model = "facebook/roberta-hate-speech-dynabench-r4-target"
    resources = Resources(
        "125M", 0.5, 1.5, False,
        "our estimate: GPU memory as measured for Sentiment, a classifier of the same RoBERTa-base size "
        "(gpu_mem = 485 MB in SALT-NLP/autometrics `autometrics/metrics/reference_free/Sentiment.py`); RAM for "
        "a CPU-only run from the parameter count and default batch size",
    )
    POSITIVE: ClassVar[tuple[str, ...]] = ("hate", "toxic", "toxicity")

    def __init__(self, *, model: str | None = None, **kw):
        super().__init__(model=model, **kw)

    def _compute(self, outputs, inputs, references):
        p, cfg = self.probs(outputs)
        return p[:, label_index(cfg, self.POSITIVE, fallback=1)]


_MENTION = re.compile(r"(?<!\S)@\S+")
_URL = re.compile(r"(?<!\S)http\S*")


@register
class Sentiment(_SeqClassifier):
    """P(positive) - P(negative) under cardiffnlp's Twitter RoBERTa sentiment model."""

    name = "Sentiment"
    higher_is_better = True
    description = "P(positive) - P(negative) from cardiffnlp/twitter-roberta-base-sentiment-latest, in [-1, 1]."
    default_model = "cardiffnlp/twitter-roberta-base-sentiment-latest"
    resources = Resources("125M", 0.5, 1.5, False, measured("reference_free/Sentiment.py", gpu_mb=484.86))

    def __init__(self, *, model: str | None = None, **kw):
        super().__init__(model=model, **kw)

    @staticmethod
    def preprocess(text: str) -> str:
        """The model card's normalisation: user mentions -> @user, links -> http."""
        return _URL.sub("http", _MENTION.sub("@user", text))

    def _compute(self, outputs, inputs, references):
        p, cfg = self.probs([self.preprocess(o) for o in outputs])
        pos = label_index(cfg, ("positive", "pos"), fallback=p.shape[1] - 1)
        neg = label_index(cfg, ("negative", "neg"), fallback=0)
        return p[:, pos] - p[:, neg]


@register
class FactCC(_SeqClassifier):
    """FactCC (Kryściński et al., 2020): P(CORRECT) that the output is consistent with the
    input document, from a BERT classifier over (document, claim) pairs."""

    name = "FactCC"
    needs_input = True
    description = "FactCC: P(consistent) of the output given the source document (BERT NLI-style classifier)."
    default_model = "manueldeprada/FactCC"
    resources = Resources("110M", 0.4, 1.5, False, measured("reference_free/FactCC.py", gpu_mb=426.86))

    def __init__(self, *, model: str | None = None, **kw):
        super().__init__(model=model, **kw)

    def _compute(self, outputs, inputs, references):
        # truncate the document, never the claim (FactCC's recipe)
        p, cfg = self.probs(inputs, outputs, truncation="only_first")
        return p[:, label_index(cfg, ("CORRECT", "consistent", "entailment"), fallback=0)]


@register
class BLEURT(_SeqClassifier):
    """BLEURT-20 (Sellam et al., 2020; Pu et al., 2021): a fine-tuned RemBERT regressor on
    (reference, candidate) pairs; max over references."""

    name = "BLEURT"
    needs_reference = True
    description = "BLEURT-20: learned regression score of (reference, output) pairs (~0 = unrelated, ~1 = equivalent)."
    default_model = "lucadiliello/BLEURT-20"
    resources = Resources("579M", 2.2, 5.0, False, measured("reference_based/BLEURT.py", gpu_mb=2205.54))
    default_batch_size = 16

    def __init__(self, *, model: str | None = None, **kw):
        super().__init__(model=model, **kw)

    def _is_bleurt_pytorch(self, path: Path) -> bool:
        try:
            return json.loads((path / "config.json").read_text()).get("model_type") == "bleurt"
        except (OSError, ValueError):
            return False

    def check_available(self) -> None:
        super().check_available()
        if self._is_bleurt_pytorch(self.model_path()) and importlib.util.find_spec("bleurt_pytorch") is None:
            raise MetricUnavailable(
                f"{self.name}: {self.model_path()} is a BLEURT checkpoint (model_type 'bleurt'), which needs the "
                "`bleurt_pytorch` package: `pip install git+https://github.com/lucadiliello/bleurt-pytorch.git`"
            )

    def _load(self, path: Path, device: str):
        if self._is_bleurt_pytorch(path):
            from bleurt_pytorch import BleurtForSequenceClassification, BleurtTokenizer

            tok = BleurtTokenizer.from_pretrained(str(path), local_files_only=True)
            model = BleurtForSequenceClassification.from_pretrained(str(path), local_files_only=True).eval().to(device)
            return tok, model
        return super()._load(path, device)

    def _compute(self, outputs, inputs, references):
        flat = [(i, o, r) for i, (o, refs) in enumerate(zip(outputs, references, strict=True)) for r in refs]
        raw, _ = self.probs([r for _, _, r in flat], [o for _, o, _ in flat])
        scores = raw[:, 0]
        best = np.full(len(outputs), -np.inf)
        for k, (i, _, _) in enumerate(flat):
            best[i] = max(best[i], scores[k])
        return best


# ------------------------------------------------------------------------------ UniEval
class _UniEval(ModelMetric):
    """UniEval (Zhong et al., 2022): a T5 evaluator answering Yes/No questions; each dimension's
    score is P(Yes) / (P(Yes) + P(No)) at the first decoder step."""

    default_batch_size = 8
    MAX_LENGTH: ClassVar[int] = 1024
    #: dimensions scored sentence by sentence (averaged, or summed for engagingness)
    SENTENCE_LEVEL: ClassVar[dict[str, str]] = {}

    def _load(self, path: Path, device: str):
        tok = load_tokenizer(path)
        model = load_hf("AutoModelForSeq2SeqLM", path, device)
        yes = tok("Yes", add_special_tokens=False)["input_ids"]
        no = tok("No", add_special_tokens=False)["input_ids"]
        if not yes or not no:  # pragma: no cover - every T5 vocabulary has them
            raise MetricUnavailable(f"{self.name}: tokenizer in {path} cannot encode 'Yes'/'No'")
        return tok, model, yes[0], no[0]

    def boolean_scores(self, prompts: list[str]) -> np.ndarray:
        import torch

        tok, model, yes, no = self.model()
        start = model.config.decoder_start_token_id
        start = tok.pad_token_id if start is None else start
        out = np.zeros(len(prompts))
        order = np.argsort([len(p) for p in prompts])
        for _, idx in batched(list(order), self.batch_size):
            enc = tok([prompts[i] for i in idx], padding=True, truncation=True, max_length=self.MAX_LENGTH, return_tensors="pt")
            enc = {k: v.to(model.device) for k, v in enc.items()}
            dec = torch.full((len(idx), 1), start, dtype=torch.long, device=model.device)
            with inference_mode():
                logits = model(**enc, decoder_input_ids=dec).logits[:, 0].float()
                p = torch.softmax(logits, dim=-1)
                s = (p[:, yes] / (p[:, yes] + p[:, no])).cpu().numpy()
            out[list(idx)] = s
        return out

    def _prompt(self, dim: str, output: str, src: str, ref: str) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def _score_dims(self, dims: tuple[str, ...], outputs, inputs, refs_first) -> dict[str, np.ndarray]:
        prompts, owners = [], []
        for dim in dims:
            for i, (o, s, r) in enumerate(zip(outputs, inputs, refs_first, strict=True)):
                units = (_text.split_sentences(o) or [o]) if dim in self.SENTENCE_LEVEL else [o]
                for u in units:
                    prompts.append(self._prompt(dim, u, s, r))
                    owners.append((dim, i))
        scores = self.boolean_scores(prompts)
        acc: dict[tuple[str, int], list[float]] = {}
        for key, v in zip(owners, scores, strict=True):
            acc.setdefault(key, []).append(float(v))
        res = {}
        for dim in dims:
            how = self.SENTENCE_LEVEL.get(dim, "mean")
            res[dim] = np.array([(np.sum if how == "sum" else np.mean)(acc[(dim, i)]) for i in range(len(outputs))])
        return res


@register
class UniEvalSum(_UniEval):
    """UniEval for summarisation: coherence, consistency, fluency, relevance and their mean."""

    name = "UniEval-Sum"
    needs_input = True
    needs_reference = True
    submetrics = ("coherence", "consistency", "fluency", "relevance", "overall")
    description = "UniEval-sum (T5 boolean QA): coherence, consistency, fluency, relevance in [0, 1], and their mean."
    default_model = "MingZhong/unieval-sum"
    resources = Resources("780M", 3.1, 5.0, False, measured("reference_based/UniEvalSum.py", gpu_mb=3140.61))
    SENTENCE_LEVEL = {"consistency": "mean", "fluency": "mean"}
    DIMS: ClassVar[tuple[str, ...]] = ("coherence", "consistency", "fluency", "relevance")

    def __init__(self, *, model: str | None = None, **kw):
        super().__init__(model=model, **kw)

    def _prompt(self, dim, output, src, ref):
        return {
            "coherence": f"question: Is this a coherent summary to the document? </s> summary: {output} </s> document: {src}",
            "consistency": f"question: Is this claim consistent with the document? </s> claim: {output} </s> document: {src}",
            "fluency": f"question: Is this a fluent paragraph? </s> paragraph: {output}",
            "relevance": f"question: Is this summary relevant to the reference? </s> summary: {output} </s> reference: {ref}",
        }[dim]

    def _compute(self, outputs, inputs, references):
        # relevance against each reference, best kept; the other dimensions ignore references
        res = self._score_dims(self.DIMS[:3], outputs, inputs, [""] * len(outputs))
        flat = [(i, r) for i, refs in enumerate(references) for r in refs]
        rel = self._score_dims(("relevance",), [outputs[i] for i, _ in flat], [inputs[i] for i, _ in flat], [r for _, r in flat])
        best = np.full(len(outputs), -np.inf)
        for k, (i, _) in enumerate(flat):
            best[i] = max(best[i], rel["relevance"][k])
        res["relevance"] = best
        res["overall"] = np.mean([res[d] for d in self.DIMS], axis=0)
        return res


@register
class UniEvalDialogue(_UniEval):
    """UniEval for dialogue responses: naturalness, coherence, engagingness, groundedness,
    understandability and their mean.  The dialogue history is the input; the knowledge
    "fact" UniEval conditions engagingness/groundedness on is the reference."""

    name = "UniEval-Dialogue"
    needs_input = True
    needs_reference = True
    submetrics = ("naturalness", "coherence", "engagingness", "groundedness", "understandability", "overall")
    description = "UniEval-dialog (T5 boolean QA): naturalness, coherence, engagingness, groundedness, understandability, mean."
    default_model = "MingZhong/unieval-dialog"
    resources = Resources("780M", 3.1, 5.0, False, measured("reference_based/UniEvalDialogue.py", gpu_mb=3140.61))
    SENTENCE_LEVEL = {"engagingness": "sum"}
    DIMS: ClassVar[tuple[str, ...]] = ("naturalness", "coherence", "engagingness", "groundedness", "understandability")

    def __init__(self, *, model: str | None = None, **kw):
        super().__init__(model=model, **kw)

    def _prompt(self, dim, output, src, fact):
        return {
            "naturalness": f"question: Is this a natural response in the dialogue? </s> response: {output}",
            "coherence": f"question: Is this a coherent response given the dialogue history? </s> response: {output} </s> dialogue history: {src}",
            "engagingness": "question: Is this an engaging and informative response according to the dialogue history and fact? "
            f"</s> response: {output} </s> dialogue history: {src} </s> fact: {fact}",
            "groundedness": f"question: Is this response consistent with knowledge in the fact? </s> response: {output} </s> fact: {fact}",
            "understandability": f"question: Is this an understandable response in the dialogue? </s> response: {output}",
        }[dim]

    def _compute(self, outputs, inputs, references):
        facts = ["\n".join(refs) for refs in references]
        res = self._score_dims(self.DIMS, outputs, inputs, facts)
        res["overall"] = np.mean([res[d] for d in self.DIMS], axis=0)
        return res


@register
class UniEvalFact(_UniEval):
    """UniEval-fact: sentence-level consistency of the output with the input document."""

    name = "UniEval-Fact"
    needs_input = True
    description = "UniEval-fact (T5 boolean QA): mean P(consistent) of the output's sentences given the source."
    default_model = "MingZhong/unieval-fact"
    resources = Resources("780M", 3.1, 5.0, False, measured("reference_free/UniEvalFact.py", gpu_mb=3140.61))
    SENTENCE_LEVEL = {"consistency": "mean"}

    def __init__(self, *, model: str | None = None, **kw):
        super().__init__(model=model, **kw)

    def _prompt(self, dim, output, src, ref):
        return f"question: Is this claim consistent with the document? </s> claim: {output} </s> document: {src}"

    def _compute(self, outputs, inputs, references):
        return self._score_dims(("consistency",), outputs, inputs, [""] * len(outputs))["consistency"]


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
            raise ValueError("ner must be 'spacy' (the paper's NER) or 'capitalized' (offline heuristic)")
        super().__init__(model=model, ner=ner, **kw)
        self.spacy_model = spacy_model

    def check_available(self) -> None:
        super().check_available()
        if self.params["ner"] == "spacy":
            for mod, how in (("spacy", "`pip install spacy`"), (self.spacy_model, f"`python -m spacy download {self.spacy_model}` (or its wheel from the spaCy models release page)")):
                if importlib.util.find_spec(mod) is None:
                    raise MetricUnavailable(
                        f"{self.name}: entity masking needs {mod}, not installed; run {how}, or use ner='capitalized' (a heuristic, not the paper's NER)"
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


# ------------------------------------------------------------------------------ LENS
class _LensBase(ModelMetric):
    """LENS models are COMET-style checkpoints scored through the ``lens-metric`` package."""

    requires = ("torch", "lens")
    default_batch_size = 16

    def model_path(self) -> Path:
        for loc in search_locations(self.model_name):
            if loc.name == "snapshots" and loc.is_dir():
                cands = sorted(loc.glob("*/checkpoints/*.ckpt"))
            elif loc.is_file() and loc.suffix == ".ckpt":
                cands = [loc]
            elif loc.is_dir():
                cands = sorted(loc.glob("checkpoints/*.ckpt")) or sorted(loc.glob("*.ckpt"))
            else:
                cands = []
            if cands:
                return cands[-1]
        from ._models import locate_model

        return locate_model(self.name, self.model_name, file="checkpoints/model.ckpt", how=(
            f"on a machine with Hugging Face access run `huggingface-cli download {self.model_name} --local-dir X` "
            f"and copy X (with its checkpoints/*.ckpt) to ${'AUTOMETRICS_MODELS_DIR'}/{self.model_name}; LENS also loads "
            "its roberta-large encoder by name, which must be in the local Hugging Face cache"
        ))

    def _devices(self, device: str):
        if device.startswith("cuda"):
            return [int(device.split(":")[1]) if ":" in device else 0]
        return None


@register
class LENS(_LensBase):
    """LENS (Maddela et al., 2023): a learned simplification metric (RoBERTa-large, trained on
    human ratings) scoring (complex input, simplified output, references); rescaled 0-100."""

    name = "LENS"
    needs_input = True
    needs_reference = True
    description = "LENS: learned text-simplification metric on (input, output, references), rescaled to about 0-100."
    default_model = "davidheineman/lens"
    resources = Resources("355M", 3.0, 3.3, False, measured("reference_based/LENS.py", cpu_mb=3330.29, rest=_LENS_GPU))

    def __init__(self, *, model: str | None = None, rescale: bool = True, **kw):
        super().__init__(model=model, rescale=bool(rescale), **kw)

    def _load(self, path: Path, device: str):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import lens

        return lens.LENS(str(path), rescale=self.params["rescale"])

    def _compute(self, outputs, inputs, references):
        from ._models import pick_device

        scorer = self.model()
        scores = scorer.score(inputs, outputs, references, batch_size=self.batch_size, devices=self._devices(pick_device(self.device)))
        return np.asarray(scores, dtype=float)


@register
class LENS_SALSA(_LensBase):
    """LENS-SALSA (Heineman et al., 2023): reference-free simplification quality from a model
    trained on SALSA edit annotations; scores (complex input, simplified output)."""

    name = "LENS_SALSA"
    needs_input = True
    description = "LENS-SALSA: reference-free learned simplification quality of (input, output), about 0-100."
    default_model = "davidheineman/lens-salsa"
    resources = Resources("355M", 3.0, 2.8, False, measured("reference_free/LENS_SALSA.py", cpu_mb=2909.67, rest=_LENS_GPU))

    def __init__(self, *, model: str | None = None, **kw):
        super().__init__(model=model, **kw)

    def _load(self, path: Path, device: str):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import lens

        return lens.LENS_SALSA(str(path))

    def _compute(self, outputs, inputs, references):
        from ._models import pick_device

        scorer = self.model()
        res = scorer.score(inputs, outputs, batch_size=self.batch_size, devices=self._devices(pick_device(self.device)))
        scores = res[0] if isinstance(res, tuple) else res  # (scores, word-level edit tags)
        return np.asarray(scores, dtype=float)
