"""fastText document classifiers used for pre-training data filtering: educational value
(Low/Mid/High), NSFW and toxicity (Dolma's Jigsaw bigram classifiers).

A model is one ``.bin`` file: pass ``model=`` a file or a folder holding it, or put it in
``$AUTOMETRICS_MODELS_DIR``.  CPU only, microseconds per text.

fastText's Python ``predict`` breaks under NumPy 2 (``np.array(..., copy=False)``), so we call
the underlying binding (``model.f.predict``), which returns (probability, label) pairs.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import ClassVar

import numpy as np

from ._models import ModelMetric, Resources, measured
from .base import MetricUnavailable
from .registry import register

__all__ = ["FastTextEducationalValue", "FastTextNSFW", "FastTextToxicity", "fasttext_probabilities"]

_NEWLINES = re.compile(r"\s*\n\s*")


def fasttext_probabilities(model, text: str) -> dict[str, float]:
    """Every label's probability for one text (labels without the ``__label__`` prefix)."""
    clean = _NEWLINES.sub(" ", text).strip()
    pairs = model.f.predict(clean + "\n", -1, 0.0, "strict")
    return {label.removeprefix("__label__"): float(p) for p, label in pairs}


class _FastTextMetric(ModelMetric):
    requires = ("fasttext",)
    resources = Resources(
        "fastText", 0.0, 1.0, False,
        "our estimate: no GPU (fastText runs on CPU only); RAM about the size of the model file plus the Python "
        "process (no measurement for this model was found in the reference implementation)",
    )
    default_batch_size = 1024

    def _load(self, path: Path, device: str):
        import fasttext

        model = fasttext.load_model(str(path))
        labels = {lab.removeprefix("__label__") for lab in model.get_labels()}
        missing = set(self.LABELS) - labels
        if missing:
            raise MetricUnavailable(f"{self.name}: {path} has labels {sorted(labels)}, expected {sorted(self.LABELS)}")
        return model

    LABELS: ClassVar[tuple[str, ...]] = ()

    def _probabilities(self, outputs: list[str]) -> list[dict[str, float]]:
        model = self.model()
        return [fasttext_probabilities(model, o) for o in outputs]


@register
class FastTextEducationalValue(_FastTextMetric):
    """Expected educational value, 0 x P(Low) + 1 x P(Mid) + 2 x P(High)."""

    name = "FastTextEducationalValue"
    description = "fastText textbook-quality classifier: expected educational value in [0, 2] (Low=0, Mid=1, High=2)."
    default_model = "kenhktsui/llm-data-textbook-quality-fasttext-classifer-v2"
    model_file = "model.bin"
    LABELS = ("Low", "Mid", "High")
    VALUES: ClassVar[dict[str, float]] = {"Low": 0.0, "Mid": 1.0, "High": 2.0}

    def __init__(self, *, model: str | None = None, **kw):
        super().__init__(model=model, **kw)

    def _compute(self, outputs, inputs, references):
        return np.array([sum(self.VALUES.get(k, 0.0) * p for k, p in d.items()) for d in self._probabilities(outputs)])


_DOLMA = "https://dolma-artifacts.org/fasttext_models/jigsaw_fasttext_bigrams_20230515/"


@register
class FastTextNSFW(_FastTextMetric):
    """P(nsfw) from Dolma's Jigsaw "obscene" bigram fastText classifier."""

    name = "FastTextNSFW"
    higher_is_better = False
    description = "Dolma Jigsaw fastText NSFW classifier: P(nsfw) in [0, 1]."
    default_model = "jigsaw_fasttext_bigrams_nsfw_final.bin"
    model_file = "jigsaw_fasttext_bigrams_nsfw_final.bin"
    how_to_get = f"download {_DOLMA}jigsaw_fasttext_bigrams_nsfw_final.bin on a machine with internet access and copy it to $AUTOMETRICS_MODELS_DIR/"
    LABELS = ("nsfw", "non-nsfw")
    resources = Resources("fastText", 0.0, 1.7, False, measured("reference_free/FastTextNSFW.py", gpu_mb=0.0, cpu_mb=1709.96))

    def __init__(self, *, model: str | None = None, **kw):
        super().__init__(model=model, **kw)

    def _compute(self, outputs, inputs, references):
        return np.array([d.get("nsfw", 0.0) for d in self._probabilities(outputs)])


@register
class FastTextToxicity(_FastTextMetric):
    """P(toxic) from Dolma's Jigsaw hate-speech bigram fastText classifier."""

    name = "FastTextToxicity"
    higher_is_better = False
    description = "Dolma Jigsaw fastText hate-speech classifier: P(toxic) in [0, 1]."
    default_model = "jigsaw_fasttext_bigrams_hatespeech_final.bin"
    model_file = "jigsaw_fasttext_bigrams_hatespeech_final.bin"
    how_to_get = f"download {_DOLMA}jigsaw_fasttext_bigrams_hatespeech_final.bin on a machine with internet access and copy it to $AUTOMETRICS_MODELS_DIR/"
    LABELS = ("toxic", "non-toxic")
    resources = Resources(
        "fastText", 0.0, 1.7, False,
        "our estimate: no GPU (fastText runs on CPU only); RAM as measured for FastTextNSFW, a classifier from the "
        "same Dolma Jigsaw bigram release (cpu_mem = 1710 MB in SALT-NLP/autometrics "
        "`autometrics/metrics/reference_free/FastTextNSFW.py`)",
    )

    def __init__(self, *, model: str | None = None, **kw):
        super().__init__(model=model, **kw)

    def _compute(self, outputs, inputs, references):
        return np.array([d.get("toxic", 0.0) for d in self._probabilities(outputs)])
