"""Surface string similarities between an output and its references.

Character-level scores (Levenshtein, Jaro, Jaro-Winkler) come from ``rapidfuzz``, which is
C++ and fast enough to run on every row of a benchmark without any caching.  Token-level
scores (Jaccard, Hamming) use the offline word tokenizer in :mod:`._text`.

All of these are pairwise, so several references are combined by taking the best pair:
the minimum for distances, the maximum for similarities.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np

from . import _text
from .base import Metric, MetricUnavailable
from .errors import UserError
from .install import install_hint
from .registry import register

__all__ = [
    "JaccardDistance",
    "HammingDistance",
    "LevenshteinDistance",
    "LevenshteinRatio",
    "Jaro",
    "JaroWinkler",
]


def _rapidfuzz_distance():
    """Import ``rapidfuzz.distance`` lazily so the registry imports without it."""
    try:
        from rapidfuzz import distance
    except ImportError as exc:  # pragma: no cover - rapidfuzz is a core dependency
        raise MetricUnavailable(f"rapidfuzz is not installed; {install_hint('rapidfuzz>=3.0')}") from exc
    return distance


class _PairwiseMetric(Metric):
    """A metric defined on one (output, reference) pair; multi-reference = best pair.

    Subclasses implement :meth:`_prepare` (text -> whatever the pair function consumes;
    cached per batch because summarisation references repeat across systems) and
    :meth:`_pair`.
    """

    needs_reference: ClassVar[bool] = True
    #: how several references combine: ``min`` for distances, ``max`` for similarities
    _best: ClassVar[Callable] = max

    def _prepare(self, text: str):
        return text

    def _pair(self, output, reference) -> float:
        raise NotImplementedError

    def _compute(self, outputs: list[str], inputs: list[str], references: list[list[str]]) -> np.ndarray:
        cache: dict[str, object] = {}

        def prep(text: str):
            if text not in cache:
                cache[text] = self._prepare(text)
            return cache[text]

        scores = np.empty(len(outputs), dtype=float)
        for i, (out, refs) in enumerate(zip(outputs, references, strict=True)):
            o = prep(out)
            scores[i] = self._best(self._pair(o, prep(r)) for r in refs)
        return scores


@register
class JaccardDistance(_PairwiseMetric):
    """1 - |A ∩ B| / |A ∪ B| over the sets of lowercased word tokens (punctuation dropped)."""

    name = "JaccardDistance"
    higher_is_better = False
    description = "1 - Jaccard overlap of the lowercased word sets of output and reference (min over references)."
    _best = min

    def __init__(self):
        super().__init__()

    def _prepare(self, text: str) -> frozenset[str]:
        return frozenset(_text.words(text))

    def _pair(self, output: frozenset[str], reference: frozenset[str]) -> float:
        union = len(output | reference)
        if union == 0:  # two texts without any word are identical as word sets
            return 0.0
        return 1.0 - len(output & reference) / union


@register
class HammingDistance(_PairwiseMetric):
    """Position-wise token mismatch rate.

    Both texts become lowercased word-token sequences; the shorter one is padded so every
    position beyond its end counts as a mismatch; the mismatch count is divided by the
    longer length (``rapidfuzz`` ``Hamming.normalized_distance`` with ``pad=True``).  Two
    empty sequences have distance 0.  Range [0, 1].
    """

    name = "HammingDistance"
    higher_is_better = False
    description = (
        "Share of token positions where output and reference differ, shorter side padded (min over references)."
    )
    _best = min

    def __init__(self):
        super().__init__()
        self._hamming = _rapidfuzz_distance().Hamming

    def _prepare(self, text: str) -> list[str]:
        return _text.words(text)

    def _pair(self, output: list[str], reference: list[str]) -> float:
        if not output and not reference:
            return 0.0
        return float(self._hamming.normalized_distance(output, reference, pad=True))


@register
class LevenshteinDistance(_PairwiseMetric):
    """Number of character insertions, deletions and substitutions (unit costs, case-sensitive)."""

    name = "LevenshteinDistance"
    higher_is_better = False
    description = "Character edit distance from the output to the closest reference (raw count, min over references)."
    _best = min

    def __init__(self):
        super().__init__()
        self._lev = _rapidfuzz_distance().Levenshtein

    def _pair(self, output: str, reference: str) -> float:
        return float(self._lev.distance(output, reference))


@register
class LevenshteinRatio(_PairwiseMetric):
    """``1 - indel(a, b) / (|a| + |b|)``: python-Levenshtein's ``ratio``, i.e. rapidfuzz
    ``Indel.normalized_similarity`` (equal to ``fuzz.ratio / 100``).  Two empty strings: 1."""

    name = "LevenshteinRatio"
    description = "Normalised character similarity 1 - indel/(|out|+|ref|) (Levenshtein ratio, max over references)."
    _best = max

    def __init__(self):
        super().__init__()
        self._indel = _rapidfuzz_distance().Indel

    def _pair(self, output: str, reference: str) -> float:
        return float(self._indel.normalized_similarity(output, reference))


@register
class Jaro(_PairwiseMetric):
    """Jaro similarity of the raw character strings (rapidfuzz)."""

    name = "Jaro"
    description = "Jaro character similarity (matches within a window, transpositions; max over references)."
    _best = max

    def __init__(self):
        super().__init__()
        self._jaro = _rapidfuzz_distance().Jaro

    def _pair(self, output: str, reference: str) -> float:
        return float(self._jaro.similarity(output, reference))


@register
class JaroWinkler(_PairwiseMetric):
    """Jaro similarity boosted by the common prefix (up to 4 characters) of the raw strings."""

    name = "JaroWinkler"
    description = "Jaro-Winkler character similarity, rewarding a shared prefix (max over references)."
    _best = max
    DEFAULT_PREFIX_WEIGHT: ClassVar[float] = 0.1

    def __init__(self, *, prefix_weight: float = DEFAULT_PREFIX_WEIGHT):
        if not 0.0 <= prefix_weight <= 0.25:
            raise UserError("prefix_weight must lie in [0, 0.25] so the score stays within [0, 1]")
        super().__init__(prefix_weight=float(prefix_weight))
        self._jw = _rapidfuzz_distance().JaroWinkler

    def _pair(self, output: str, reference: str) -> float:
        return float(self._jw.similarity(output, reference, prefix_weight=self.params["prefix_weight"]))
