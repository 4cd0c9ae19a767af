"""Reference-free lexical diversity: Distinct-n and Self-BLEU.

Both are per-example scores here (the regression needs one number per row), which is a
design choice for metrics that are usually reported per corpus; the Metric Cards say how.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from . import _text
from .base import Metric
from .errors import UserError
from .registry import register

__all__ = ["DistinctNGrams", "SelfBLEU"]


@register
class DistinctNGrams(Metric):
    """Distinct-n (Li et al., 2016) of each output: unique n-grams / total n-grams, n = 1..4.

    Tokens are lowercased words and punctuation marks.  An output with no n-gram of an order
    (empty, or shorter than n tokens) scores 0 for that order, as in the AutoMetrics
    implementation: it shows no diversity, and a finite value keeps the row usable.
    """

    name = "DistinctNGrams"
    description = "Distinct-1..4: share of unique n-grams among the output's n-grams (repetition detector)."
    submetrics: ClassVar[tuple[str, ...]] = ("distinct1", "distinct2", "distinct3", "distinct4")

    def _compute(self, outputs, inputs, references) -> dict[str, np.ndarray]:
        result = {name: np.zeros(len(outputs), dtype=float) for name in self.submetrics}
        for i, text in enumerate(outputs):
            tokens = _text.tokenize(text)
            for n, name in enumerate(self.submetrics, start=1):
                grams = _text.ngrams(tokens, n)
                if grams:
                    result[name][i] = len(set(grams)) / len(grams)
        return result


class _SentenceBleu:
    """NLTK's ``sentence_bleu`` with uniform weights over 1..``gram``-grams and smoothing
    method 1 (a zero match count becomes 0.1), on n-gram counts computed once per text.

    Self-BLEU scores every text against many others, so NLTK's re-counting of every
    reference on every call dominates; the numbers are NLTK's (tested to 1e-9).
    """

    EPSILON: ClassVar[float] = 0.1

    def __init__(self, gram: int):
        self.gram = gram

    def counts(self, tokens: list[str]) -> tuple[list[Counter], int]:
        return [Counter(_text.ngrams(tokens, n)) for n in range(1, self.gram + 1)], len(tokens)

    def __call__(self, hyp: tuple[list[Counter], int], refs: Sequence[tuple[list[Counter], int]]) -> float:
        hyp_orders, hyp_len = hyp
        if hyp_len == 0 or not refs:
            return 0.0
        log_sum = []
        for k, counts in enumerate(hyp_orders):
            ref_orders = [r[0][k] for r in refs]
            matched = sum(min(c, max(r.get(g, 0) for r in ref_orders)) for g, c in counts.items())
            total = max(1, sum(counts.values()))
            if k == 0 and matched == 0:
                return 0.0
            log_sum.append(math.log((matched if matched else self.EPSILON) / total) / self.gram)
        ref_len = min((r[1] for r in refs), key=lambda n: (abs(n - hyp_len), n))
        penalty = 1.0 if hyp_len > ref_len else math.exp(1 - ref_len / hyp_len)
        return penalty * math.exp(math.fsum(log_sum))


@register
class SelfBLEU(Metric):
    """Self-BLEU (Zhu et al., 2018, Texygen) as a per-example score; lower = more diverse.

    Self-BLEU is defined on a set of texts: each text is scored with BLEU against the
    others and the scores are averaged.  Two per-example readings are offered:

    * ``scope="within"`` (default, the AutoMetrics definition): the set is the output's own
      sentences.  Each sentence is scored against the other sentences of the same output and
      the mean is returned, so the score measures how much an output repeats itself.  An
      output with at most one sentence (including the empty output) scores 1.0, as in
      AutoMetrics.  Batch-independent: a row scores the same whatever else is scored with it.
    * ``scope="across"``: the output is scored against the other outputs in the batch with
      the same input (the other systems' answers to the same prompt); when there are none,
      against up to ``max_others`` other outputs drawn from the batch with a seeded RNG.  It
      measures how generic an output is relative to its peers, and it depends on the batch.

    BLEU is NLTK's sentence BLEU over 1..``gram``-grams (uniform weights) with smoothing
    method 1, on 0..1, over lowercased word/punctuation tokens (computed by
    :class:`_SentenceBleu` on cached counts, equal to NLTK).
    """

    name = "SelfBLEU"
    higher_is_better = False
    description = "Self-BLEU: BLEU of each sentence of the output against its other sentences (repetitiveness; lower = more diverse)."
    DEFAULT_GRAM: ClassVar[int] = 3
    DEFAULT_SCOPE: ClassVar[str] = "within"
    DEFAULT_MAX_OTHERS: ClassVar[int] = 50
    DEFAULT_SEED: ClassVar[int] = 0
    #: sentences per output considered in "within" mode (AutoMetrics' sample_size)
    MAX_SENTENCES: ClassVar[int] = 500
    SCOPES: ClassVar[tuple[str, ...]] = ("within", "across")

    def __init__(
        self,
        *,
        gram: int = DEFAULT_GRAM,
        scope: str = DEFAULT_SCOPE,
        max_others: int = DEFAULT_MAX_OTHERS,
        seed: int = DEFAULT_SEED,
    ):
        if gram < 1:
            raise UserError(f"SelfBLEU gram must be >= 1, got {gram}")
        if scope not in self.SCOPES:
            raise UserError(f"SelfBLEU scope must be one of {self.SCOPES}, got {scope!r}")
        params: dict = {"gram": gram, "scope": scope}
        if scope == "across":  # only then do these change the number
            if max_others < 1:
                raise UserError(f"SelfBLEU max_others must be >= 1, got {max_others}")
            params.update(max_others=max_others, seed=seed)
        super().__init__(**params)
        self.batch_dependent = scope == "across"

    def _compute(self, outputs, inputs, references) -> np.ndarray:
        bleu = _SentenceBleu(int(self.params["gram"]))
        if self.params["scope"] == "within":
            return np.array([self._within(o, bleu) for o in outputs], dtype=float)
        return self._across(outputs, inputs, bleu)

    def _within(self, text: str, bleu: _SentenceBleu) -> float:
        sentences = [bleu.counts(_text.tokenize(s)) for s in _text.split_sentences(text)[: self.MAX_SENTENCES]]
        if len(sentences) <= 1:
            return 1.0
        scores = [bleu(hyp, sentences[:i] + sentences[i + 1 :]) for i, hyp in enumerate(sentences)]
        return sum(scores) / len(scores)

    def _across(self, outputs: list[str], inputs: list[str], bleu: _SentenceBleu) -> np.ndarray:
        tokens = [_text.tokenize(o) for o in outputs]
        counts = [bleu.counts(t) for t in tokens]
        groups: dict[str, list[int]] = {}
        for i, src in enumerate(inputs):
            if src.strip():
                groups.setdefault(src, []).append(i)
        rng = np.random.default_rng(int(self.params["seed"]))
        k = int(self.params["max_others"])
        n = len(outputs)
        scores = np.zeros(n, dtype=float)
        for i in range(n):
            peers = [j for j in groups.get(inputs[i], ()) if j != i and tokens[j]]
            if not peers and n > 1:
                draw = rng.choice(n - 1, size=min(k, n - 1), replace=False)
                peers = [int(j) + (j >= i) for j in draw if tokens[int(j) + (j >= i)]]
            scores[i] = bleu(counts[i], [counts[j] for j in peers])
        return scores
