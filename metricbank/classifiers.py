"""Trained-evaluator metrics built on sequence classifiers and boolean-QA models: Toxicity,
Sentiment, FactCC, BLEURT, UniEval (summarisation, dialogue, factual consistency).  SummaQA:
:mod:`.summaqa`; LENS and LENS-SALSA: :mod:`.lens`.

Each loads a Hugging Face folder offline (``model=`` or ``$AUTOMETRICS_MODELS_DIR``).
"""

from __future__ import annotations

import importlib.util
import json
import re
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
from .install import install_hint
from .registry import register

__all__ = [
    "Toxicity",
    "Sentiment",
    "FactCC",
    "BLEURT",
    "UniEvalSum",
    "UniEvalDialogue",
    "UniEvalFact",
    "label_index",
]


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
                f"`bleurt_pytorch` package: {install_hint('git+https://github.com/lucadiliello/bleurt-pytorch.git')}"
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
