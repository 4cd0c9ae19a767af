"""CIDEr-D (Vedantam et al., 2015): consensus of TF-IDF n-gram vectors with the references.

Our own implementation, checked against hand-computed values and, when it is installed,
against ``pycocoevalcap``.  IDF comes from the references of the scored batch, as in COCO.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import ClassVar

import numpy as np

from . import _text
from .base import Metric
from .errors import UserError
from .ngram import NgramCache, count_ngrams
from .registry import register

__all__ = ["CIDEr"]


# --------------------------------------------------------------------------- CIDEr-D
class _TfIdf:
    """TF-IDF n-gram vectors (orders 1..n) with per-order norms, COCO-style."""

    __slots__ = ("vec", "norms", "length")

    def __init__(self, counts: Counter, length: int, idf: Callable[[tuple], float], n: int):
        self.vec = {g: tf * idf(g) for g, tf in counts.items()}
        sq = [0.0] * n
        for g, v in self.vec.items():
            sq[len(g) - 1] += v * v
        self.norms = [math.sqrt(s) for s in sq]
        self.length = length


@register
class CIDEr(Metric):
    """CIDEr-D (Vedantam et al., 2015), our implementation of the COCO-caption scorer.

    Per n-gram order 1..4: cosine similarity of TF-IDF vectors, with the output's weights
    clipped at the reference's, times a Gaussian length penalty exp(-(l_out - l_ref)^2 /
    (2 sigma^2)); averaged over orders and references, times 10.  Document frequencies come
    from the references of the batch being scored (each example's reference set counts as
    one document, as COCO counts images), so a score depends on the batch: score a whole
    dataset at once.  For a batch of one example every IDF is 0 and so is every score.
    Tokens are lowercased words with punctuation dropped (COCO applies the PTB tokenizer and
    removes punctuation).
    """

    name = "CIDEr"
    needs_reference = True
    batch_dependent = True  # document frequencies come from the batch's references
    description = "CIDEr-D: TF-IDF (batch doc-freq) n-gram cosine (1-4) with clipping and a length penalty, x10."
    DEFAULT_N: ClassVar[int] = 4
    DEFAULT_SIGMA: ClassVar[float] = 6.0

    def __init__(self, *, n: int = DEFAULT_N, sigma: float = DEFAULT_SIGMA):
        if n < 1 or sigma <= 0:
            raise UserError(f"CIDEr needs n >= 1 and sigma > 0, got n={n}, sigma={sigma}")
        super().__init__(n=n, sigma=float(sigma))

    def _compute(self, outputs, inputs, references) -> np.ndarray:
        n = int(self.params["n"])
        sigma = float(self.params["sigma"])

        def ngram_stats(text: str) -> tuple[Counter, int]:
            toks = _text.words(text)
            return count_ngrams(toks, 1, n), len(toks)

        counts = NgramCache(ngram_stats)

        # document frequency: number of examples whose reference set contains the n-gram
        ref_sets = Counter(tuple(refs) for refs in references)
        df: Counter = Counter()
        for refs, multiplicity in ref_sets.items():
            grams = set()
            for r in refs:
                grams.update(counts[r][0])
            for g in grams:
                df[g] += multiplicity
        log_docs = math.log(len(references))

        def idf(g: tuple) -> float:
            return log_docs - math.log(max(1.0, df.get(g, 0)))

        vectors = NgramCache(lambda text: _TfIdf(*counts[text], idf, n))
        two_sigma_sq = 2.0 * sigma * sigma
        scores = np.empty(len(outputs), dtype=float)
        for i, (o, refs) in enumerate(zip(outputs, references, strict=True)):
            hyp = vectors[o]
            total = 0.0
            for r in refs:
                ref = vectors[r]
                sims = [0.0] * n
                hv, rv = hyp.vec, ref.vec
                for g in hv.keys() & rv.keys():
                    r_w = rv[g]
                    sims[len(g) - 1] += min(hv[g], r_w) * r_w
                penalty = math.exp(-((hyp.length - ref.length) ** 2) / two_sigma_sq)
                for k in range(n):
                    if hyp.norms[k] != 0 and ref.norms[k] != 0:
                        sims[k] /= hyp.norms[k] * ref.norms[k]
                total += sum(sims) / n * penalty
            scores[i] = 10.0 * total / len(refs)
        return scores
