"""N-gram overlap metrics against references: BLEU, NIST, GLEU, iBLEU, chrF++ (TER: :mod:`.ter`,
CIDEr-D: :mod:`.cider`), and the n-gram helpers they share.

Where a maintained implementation exists we use it for the numbers (sacrebleu for BLEU,
chrF++ and TER); where the maintained one is too slow for benchmark-sized batches we compute
the same definition ourselves with per-batch caching and pin it to the reference library in
the tests (NIST and GLEU against NLTK, TER against sacrebleu).  CIDEr-D is our own
implementation of Vedantam et al. (2015), checked against hand-computed values and, when it
is installed, against ``pycocoevalcap``.

Summarisation benchmarks repeat the same references for every system (summeval: 11
references x 16 systems per article), so everything that depends only on the references is
computed once per distinct reference (set) per batch.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import ClassVar

import numpy as np

from . import _text
from .base import Metric, MetricUnavailable
from .errors import UserError
from .install import install_hint
from .registry import register

__all__ = ["BLEU", "NIST", "GLEU", "iBLEU", "ChrFPlusPlus"]


_SACREBLEU_HINT = f"sacrebleu is not installed; {install_hint('sacrebleu>=2.4')}"


def sacrebleu_metrics():
    """Import ``sacrebleu.metrics`` lazily so the registry imports without it."""
    try:
        from sacrebleu import metrics
    except ImportError as exc:  # pragma: no cover - sacrebleu is a core dependency
        raise MetricUnavailable(_SACREBLEU_HINT) from exc
    return metrics


def count_ngrams(tokens: Sequence[str], lo: int, hi: int) -> Counter:
    """Counts of every n-gram of order ``lo..hi`` (tuples), all orders in one Counter."""
    counts: Counter = Counter()
    n_tok = len(tokens)
    for n in range(lo, hi + 1):
        for i in range(n_tok - n + 1):
            counts[tuple(tokens[i : i + n])] += 1
    return counts


def clipped_overlap(hyp: Counter | dict, ref: Counter | dict) -> int:
    """sum_g min(hyp[g], ref[g]): the clipped match count of BLEU-family metrics."""
    if len(hyp) > len(ref):
        common = ref.keys() & hyp.keys()
    else:
        common = hyp.keys() & ref.keys()
    return sum(min(hyp[g], ref[g]) for g in common)


class NgramCache(dict):
    """A per-batch memo ``key -> make(key)`` (references repeat across systems)."""

    def __init__(self, make: Callable):
        super().__init__()
        self._make = make

    def __missing__(self, key):
        value = self[key] = self._make(key)
        return value


class _RefMatrix:
    """The n-gram counts of one example's references as a matrix (n-gram x reference).

    Clipped matches of an output against all of its references then cost one dictionary
    lookup per output n-gram plus a few vectorised operations, instead of one set
    intersection per (output, reference) pair.
    """

    __slots__ = ("index", "counts", "totals")

    def __init__(self, per_reference: Sequence[Counter | dict]):
        keys = dict.fromkeys(itertools.chain.from_iterable(per_reference))
        self.index: dict = dict(zip(keys, range(len(keys)), strict=True))
        self.counts = np.zeros((len(self.index), len(per_reference)), dtype=float)
        for j, c in enumerate(per_reference):
            if c:
                self.counts[[self.index[g] for g in c], j] = list(c.values())
        self.totals = self.counts.sum(axis=0)

    def lookup(self, hyp: Counter | dict) -> tuple[np.ndarray, np.ndarray]:
        """Rows of the output's n-grams that occur in some reference, and their output counts."""
        rows = np.fromiter(map(self.index.get, hyp, itertools.repeat(-1)), dtype=np.int64, count=len(hyp))
        found = rows >= 0
        values = np.fromiter(hyp.values(), dtype=float, count=len(hyp))
        return rows[found], values[found]

    def clipped(self, hyp: Counter | dict, weights: np.ndarray | None = None) -> np.ndarray:
        """Per reference j: sum_g min(hyp[g], ref_j[g]) (times ``weights[g]`` when given)."""
        rows, values = self.lookup(hyp)
        if not len(rows):
            return np.zeros(self.counts.shape[1])
        matched = np.minimum(self.counts[rows], values[:, None])
        if weights is not None:
            matched *= weights[rows, None]
        return matched.sum(axis=0)


class _SacreSentenceScorer:
    """Sentence-level scores of a sacrebleu metric object, with each distinct reference set
    preprocessed once per batch instead of once per call.

    ``sentence_score`` re-tokenises every reference on every call, which is most of the cost
    on summarisation data.  The segment-statistics hooks used here are the ones sacrebleu's
    own paired significance tests are built on; if a sacrebleu release drops them we fall
    back to ``sentence_score`` (same numbers, slower).
    """

    _HOOKS = (
        "_preprocess_segment",
        "_extract_reference_info",
        "_compute_segment_statistics",
        "_compute_score_from_stats",
    )

    def __init__(self, metric):
        self.metric = metric
        self.fast = all(hasattr(metric, h) for h in self._HOOKS)
        self._refs = NgramCache(self._reference_info)

    def _reference_info(self, refs: tuple[str, ...]):
        m = self.metric
        return m._extract_reference_info([m._preprocess_segment(r) for r in refs])

    def __call__(self, hypothesis: str, references: Sequence[str]) -> float:
        if not self.fast:
            return float(self.metric.sentence_score(hypothesis, list(references)).score)
        m = self.metric
        stats = m._compute_segment_statistics(m._preprocess_segment(hypothesis), self._refs[tuple(references)])
        return float(m._compute_score_from_stats(stats).score)


# --------------------------------------------------------------------------- BLEU family
class _SacreBleuParams(Metric):
    """Shared parameters of the sacrebleu-BLEU based metrics."""

    DEFAULT_TOKENIZE: ClassVar[str] = "13a"
    DEFAULT_SMOOTH: ClassVar[str] = "exp"
    signature_keys: ClassVar[dict[str, str]] = {"tokenize": "tok", "smooth_method": "smooth"}

    def _bleu(self):
        return sacrebleu_metrics().BLEU(
            tokenize=self.params["tokenize"],
            smooth_method=self.params["smooth_method"],
            effective_order=True,
        )

    def check_available(self) -> None:
        self._bleu()


@register
class BLEU(_SacreBleuParams):
    """Sentence BLEU from sacrebleu, on sacrebleu's 0-100 scale.

    ``effective_order=True`` (the sacrebleu recommendation for sentence level) so that a
    hypothesis shorter than four tokens is not zeroed by its missing 4-grams.  Several
    references are used jointly, as in Papineni et al.: n-gram counts are clipped by the
    maximum count over references and the brevity penalty uses the closest reference length.
    """

    name = "BLEU"
    needs_reference = True
    description = "Sentence BLEU (sacrebleu, 0-100): clipped n-gram precision (1-4) x brevity penalty, multi-reference."

    def __init__(
        self, *, tokenize: str = _SacreBleuParams.DEFAULT_TOKENIZE, smooth_method: str = _SacreBleuParams.DEFAULT_SMOOTH
    ):
        super().__init__(tokenize=tokenize, smooth_method=smooth_method)

    def _compute(self, outputs, inputs, references) -> np.ndarray:
        score = _SacreSentenceScorer(self._bleu())
        return np.array([score(o, refs) for o, refs in zip(outputs, references, strict=True)], dtype=float)


@register
class iBLEU(_SacreBleuParams):  # noqa: N801 - the metric's published name
    """iBLEU (Sun & Zhou, 2012): alpha * BLEU(output, references) - (1 - alpha) * BLEU(output, input).

    Rewards adequacy to the references and penalises copying the source, for paraphrase
    generation.  alpha = 0.9 as in the AutoMetrics implementation.  Both BLEU terms are
    sentence BLEU on sacrebleu's 0-100 scale (same settings as :class:`BLEU`), so the score
    lies in [-10, 90].
    """

    name = "iBLEU"
    needs_reference = True
    needs_input = True
    description = (
        "iBLEU = 0.9*BLEU(output, refs) - 0.1*BLEU(output, input): reference fidelity minus copying the source."
    )
    DEFAULT_ALPHA: ClassVar[float] = 0.9

    def __init__(
        self,
        *,
        alpha: float = DEFAULT_ALPHA,
        tokenize: str = _SacreBleuParams.DEFAULT_TOKENIZE,
        smooth_method: str = _SacreBleuParams.DEFAULT_SMOOTH,
    ):
        if not 0.0 <= alpha <= 1.0:
            raise UserError(f"iBLEU alpha must be in [0, 1], got {alpha}")
        super().__init__(alpha=alpha, tokenize=tokenize, smooth_method=smooth_method)

    def _compute(self, outputs, inputs, references) -> np.ndarray:
        score = _SacreSentenceScorer(self._bleu())
        alpha = float(self.params["alpha"])
        out = np.empty(len(outputs), dtype=float)
        for i, (o, src, refs) in enumerate(zip(outputs, inputs, references, strict=True)):
            to_refs = score(o, refs)
            to_src = score(o, (src,)) if src.strip() else 0.0
            out[i] = alpha * to_refs - (1.0 - alpha) * to_src
        return out


# --------------------------------------------------------------------------- NIST
def _nist_length_penalty(ref_len: float, hyp_len: float) -> float:
    """Doddington (2002), Eq. 3: exp(beta * ln(min(hyp/ref, 1))^2) with beta chosen so that
    a hypothesis of 2/3 the reference length gets 0.5."""
    if ref_len <= 0:
        return 1.0
    ratio = hyp_len / ref_len
    if 0 < ratio < 1:
        beta = math.log(0.5) / math.log(1.5) ** 2
        return math.exp(beta * math.log(ratio) ** 2)
    return max(min(ratio, 1.0), 0.0)


class _NistReferences:
    """Information weights and per-order n-gram matrices of one example's reference set."""

    __slots__ = ("orders", "weights", "lengths")

    def __init__(self, token_lists: Sequence[Sequence[str]], n: int):
        per_ref = [[_text.ngram_counts(toks, k) for k in range(1, n + 1)] for toks in token_lists]
        freq: Counter = Counter()
        for orders in per_ref:
            for c in orders:
                freq.update(c)
        total_words = sum(len(toks) for toks in token_lists)
        self.lengths = np.array([len(toks) for toks in token_lists], dtype=float)
        self.orders = [_RefMatrix([orders[k] for orders in per_ref]) for k in range(n)]
        # Info(w1..wn) = log2(count(w1..wn-1) / count(w1..wn)); unigrams use the word total.
        self.weights = []
        for matrix in self.orders:
            w = np.empty(len(matrix.index))
            for g, row in matrix.index.items():
                w[row] = math.log((freq[g[:-1]] if len(g) > 1 else total_words) / freq[g], 2)
            self.weights.append(w)


@register
class NIST(Metric):
    """NIST (Doddington, 2002) at sentence level, computed as NLTK's ``sentence_nist``.

    The definition and its conventions are NLTK's (information weights from the example's
    own references; per n-gram order the reference with the best information-weighted
    precision is used).  We compute it ourselves because NLTK rebuilds every reference's
    statistics on each call (~12 s on 1,600 summeval rows; this takes well under a second
    after caching) and checks parity in the tests.  NLTK divides by zero when the output has
    fewer than ``n`` tokens; here orders for which the output has no n-grams contribute
    nothing (mteval's convention), which equals NLTK with ``n = len(output)``.  An empty
    output scores 0 (no matched information and a zero length penalty).
    """

    name = "NIST"
    needs_reference = True
    description = "NIST: information-weighted n-gram precision (1-5) with a gentle length penalty (NLTK definition)."
    DEFAULT_N: ClassVar[int] = 5

    def __init__(self, *, n: int = DEFAULT_N):
        if n < 1:
            raise UserError(f"NIST n must be >= 1, got {n}")
        super().__init__(n=n)

    def _compute(self, outputs, inputs, references) -> np.ndarray:
        n = int(self.params["n"])
        tokens = NgramCache(_text.tokenize)
        ref_sets = NgramCache(lambda refs: _NistReferences([tokens[r] for r in refs], n))
        return np.array(
            [self._sentence(tokens[o], ref_sets[tuple(refs)], n) for o, refs in zip(outputs, references, strict=True)],
            dtype=float,
        )

    @staticmethod
    def _sentence(hyp: list[str], refs: _NistReferences, n: int) -> float:
        precision = 0.0
        l_ref = l_sys = 0.0
        for k in range(n):
            denominator = len(hyp) - k  # number of (k+1)-grams in the output
            if denominator <= 0:
                break
            numerators = refs.orders[k].clipped(_text.ngram_counts(hyp, k + 1), refs.weights[k])
            precisions = numerators / denominator
            # NLTK keeps, per order, the reference with the largest (precision, ..., length)
            best = np.lexsort((refs.lengths, precisions))[-1]
            precision += precisions[best]
            l_ref += refs.lengths[best]
            l_sys += len(hyp)
        if l_sys == 0:
            return 0.0
        return float(precision * _nist_length_penalty(l_ref, l_sys))


# --------------------------------------------------------------------------- GLEU
@register
class GLEU(Metric):
    """Google-BLEU (Wu et al., 2016) at sentence level, computed as NLTK's ``sentence_gleu``.

    min(n-gram precision, n-gram recall) over all n-grams of orders ``min_len..max_len``;
    with several references the best reference counts.  Computed by us with cached
    reference n-grams (parity with NLTK is tested); 0 for an empty output.
    """

    name = "GLEU"
    needs_reference = True
    description = "Google-BLEU: min(precision, recall) of all 1-4-grams against the best reference (NLTK definition)."
    DEFAULT_MIN_LEN: ClassVar[int] = 1
    DEFAULT_MAX_LEN: ClassVar[int] = 4

    def __init__(self, *, min_len: int = DEFAULT_MIN_LEN, max_len: int = DEFAULT_MAX_LEN):
        if not 1 <= min_len <= max_len:
            raise UserError(f"GLEU needs 1 <= min_len <= max_len, got {min_len}, {max_len}")
        super().__init__(min_len=min_len, max_len=max_len)

    def _compute(self, outputs, inputs, references) -> np.ndarray:
        lo, hi = int(self.params["min_len"]), int(self.params["max_len"])

        def grams(text: str) -> Counter:
            return count_ngrams(_text.tokenize(text), lo, hi)

        ref_sets = NgramCache(lambda refs: _RefMatrix([grams(r) for r in refs]))
        scores = np.empty(len(outputs), dtype=float)
        for i, (o, refs) in enumerate(zip(outputs, references, strict=True)):
            hyp = grams(o)
            matrix = ref_sets[tuple(refs)]
            n_all = np.maximum(matrix.totals, sum(hyp.values()))
            matches = matrix.clipped(hyp)
            ok = n_all > 0
            scores[i] = float((matches[ok] / n_all[ok]).max()) if ok.any() else 0.0
        return scores


# --------------------------------------------------------------------------- chrF++
class _FastChrF:
    """chrF/chrF++ segment scores from a sacrebleu ``CHRF`` object, with each reference set's
    n-grams cached per batch and matched against all its references at once.

    The statistics (output, reference and matched n-gram counts per order) and the F-score
    are sacrebleu's; the score is the F-score of the best reference, as in
    ``CHRF._compute_segment_statistics``.  Falls back to ``sentence_score`` if the sacrebleu
    internals used here are missing.
    """

    def __init__(self, metric):
        self.metric = metric
        try:
            from sacrebleu.metrics.helpers import extract_all_char_ngrams, extract_word_ngrams
        except ImportError:  # pragma: no cover - depends on the sacrebleu release
            self.fast = False
        else:
            self._char = extract_all_char_ngrams
            self._word = extract_word_ngrams
            self.fast = all(
                hasattr(metric, h)
                for h in ("_preprocess_segment", "_remove_punctuation", "_compute_f_score", "char_order", "word_order")
            )
        self._sets = NgramCache(self._reference_set)

    def _ngrams(self, text: str) -> list[Counter]:
        m = self.metric
        text = m._preprocess_segment(text)
        orders = self._char(text, m.char_order, m.whitespace)
        if m.word_order > 0:
            words = m._remove_punctuation(text)
            orders.extend(self._word(words, n) for n in range(1, m.word_order + 1))
        return orders

    def _reference_set(self, refs: tuple[str, ...]) -> list[_RefMatrix]:
        per_ref = [self._ngrams(r) for r in refs]
        return [_RefMatrix([orders[k] for orders in per_ref]) for k in range(len(per_ref[0]))]

    def __call__(self, hypothesis: str, references: Sequence[str]) -> float:
        m = self.metric
        if not self.fast:
            return float(m.sentence_score(hypothesis, list(references)).score)
        matrices = self._sets[tuple(references)]
        stats = np.empty((len(references), 3 * len(matrices)))
        for k, (hyp, matrix) in enumerate(zip(self._ngrams(hypothesis), matrices, strict=True)):
            stats[:, 3 * k] = np.where(matrix.totals > 0, sum(hyp.values()), 0)
            stats[:, 3 * k + 1] = matrix.totals
            stats[:, 3 * k + 2] = matrix.clipped(hyp)
        return float(max(m._compute_f_score(row) for row in stats.tolist()))


@register
class ChrFPlusPlus(Metric):
    """chrF++ (Popović, 2017) from sacrebleu: character 1-6-gram and word 1-2-gram F-beta
    (beta=2), on sacrebleu's 0-100 scale; with several references the best one counts."""

    name = "chrF++"
    needs_reference = True
    description = "chrF++ (sacrebleu, 0-100): F2 of character 1-6-grams and word 1-2-grams vs the best reference."
    DEFAULT_CHAR_ORDER: ClassVar[int] = 6
    DEFAULT_WORD_ORDER: ClassVar[int] = 2
    DEFAULT_BETA: ClassVar[int] = 2
    signature_keys: ClassVar[dict[str, str]] = {"char_order": "nc", "word_order": "nw"}

    def __init__(
        self,
        *,
        char_order: int = DEFAULT_CHAR_ORDER,
        word_order: int = DEFAULT_WORD_ORDER,
        beta: int = DEFAULT_BETA,
    ):
        super().__init__(char_order=char_order, word_order=word_order, beta=beta)

    def _chrf(self):
        return sacrebleu_metrics().CHRF(
            char_order=self.params["char_order"], word_order=self.params["word_order"], beta=self.params["beta"]
        )

    def check_available(self) -> None:
        self._chrf()

    def _compute(self, outputs, inputs, references) -> np.ndarray:
        score = _FastChrF(self._chrf())
        return np.array([score(o, refs) for o, refs in zip(outputs, references, strict=True)], dtype=float)

