"""Cheap reference-free signals: length, compression, copying from the input, abstractiveness.

They say nothing about quality on their own, but human ratings often depend on them (longer
summaries look more informative, copied text looks more faithful), so the regression can use
them as covariates or to explain away length/copy effects of the other metrics.
All counts use :func:`autometrics.metricbank._text.words` (lowercased word tokens, no
punctuation).
"""

from __future__ import annotations

from collections import Counter
from functools import cache

import numpy as np

from ._text import ngrams, words
from .base import Metric
from .errors import UserError
from .registry import register

__all__ = ["OutputLength", "LengthRatio", "InputSimilarity", "NovelNGramRatio"]


@register
class OutputLength(Metric):
    """Number of words in the output."""

    name = "OutputLength"
    version = "1"
    higher_is_better = True
    description = "Number of words in the output (length covariate; direction is task-dependent)"

    def __init__(self):
        super().__init__()

    def _compute(self, outputs, inputs, references):
        return np.array([len(words(o)) for o in outputs], dtype=float)


@register
class LengthRatio(Metric):
    """Output words / input words (the compression ratio of a summary or simplification)."""

    name = "LengthRatio"
    version = "1"
    higher_is_better = True
    needs_input = True
    description = "Output words divided by input words (compression ratio; an empty input counts as one word)"

    def __init__(self):
        super().__init__()

    def _compute(self, outputs, inputs, references):
        @cache
        def n_in(text: str) -> int:
            return len(words(text))

        return np.array([len(words(o)) / max(1, n_in(i)) for o, i in zip(outputs, inputs, strict=True)], dtype=float)


def _f1(a: Counter, b: Counter) -> float:
    """Clipped bag-of-words F1 (SQuAD-style token F1); 0 when either side is empty."""
    if not a or not b:
        return 0.0
    common = sum((a & b).values())
    if not common:
        return 0.0
    p = common / sum(a.values())
    r = common / sum(b.values())
    return 2 * p * r / (p + r)


@register
class InputSimilarity(Metric):
    """Lexical similarity of output and input, as unigram (word) token F1.

    Token F1 rather than chrF: it is symmetric in output and input (chrF's recall weighting
    would mostly measure how short the output is next to a long source) and ~10x faster.
    """

    name = "InputSimilarity"
    version = "1"
    higher_is_better = True
    needs_input = True
    description = "Unigram token F1 between output and input words: lexical overlap with / reuse of the source"

    METHOD = "token_f1"
    signature_keys = {"method": "method"}

    def __init__(self, *, method: str = METHOD):
        if method != "token_f1":
            raise UserError("InputSimilarity supports method='token_f1' (clipped unigram F1 over words)")
        super().__init__(method=method)

    def _compute(self, outputs, inputs, references):
        @cache
        def bag(text: str) -> Counter:
            return Counter(words(text))

        return np.array([_f1(Counter(words(o)), bag(i)) for o, i in zip(outputs, inputs, strict=True)], dtype=float)


@register
class NovelNGramRatio(Metric):
    """Share of the output's n-grams (with repeats) that never occur in the input."""

    name = "NovelNGramRatio"
    version = "1"
    higher_is_better = False
    needs_input = True
    description = (
        "Share of output n-grams (default bigrams) absent from the input: abstractiveness / unsupported content"
    )

    N = 2
    signature_keys = {"n": "n"}

    def __init__(self, *, n: int = N):
        if n < 1:
            raise UserError("n must be >= 1")
        super().__init__(n=n)
        self.n = n

    def _compute(self, outputs, inputs, references):
        n = self.n

        @cache
        def source_ngrams(text: str) -> frozenset:
            return frozenset(ngrams(words(text), n))

        scores = np.empty(len(outputs))
        for k, (o, i) in enumerate(zip(outputs, inputs, strict=True)):
            grams = ngrams(words(o), n)
            if not grams:
                scores[k] = 0.0  # nothing generated, nothing novel
                continue
            src = source_ngrams(i)
            scores[k] = sum(1 for g in grams if g not in src) / len(grams)
        return scores
