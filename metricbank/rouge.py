"""ROUGE (Lin, 2004) following Google's ``rouge-score`` package, and UpdateROUGE.

Speed.  ``RougeScorer.score_multi`` re-tokenises and re-stems both texts for every
(output, reference) pair and fills its LCS tables in pure Python: ~45 s for ROUGE-1/2/L
on summeval (1,600 outputs x 11 references) and ~35 s for UpdateROUGE's ROUGE-Lsum.  So
the metrics here use rouge-score's own tokenizer (its regex + NLTK's Porter stemmer,
words of <= 3 characters unstemmed) with every distinct text tokenised once per batch,
and recompute its F-measures from cached n-gram counts, an LCS length from ``rapidfuzz``
(C++) and a leaner copy of its summary-level union-LCS.  The tests check every sub-score
against ``RougeScorer.score`` / ``score_multi`` to 1e-9 on real and adversarial texts.

rouge-score needs no NLTK data: its tokenizer is a regex, and the Porter stemmer is pure
code (only ``rougeLsum`` with ``split_summaries=True`` would need Punkt; we never set it).
"""

from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache
from typing import ClassVar

import numpy as np

from . import _text
from .base import Metric, MetricUnavailable
from .install import install_hint
from .registry import register

__all__ = ["ROUGE", "UpdateROUGE"]

_INSTALL = install_hint("rouge-score>=0.1.2", "nltk")


def _rouge_modules():
    try:
        from rouge_score import tokenize, tokenizers
    except ImportError as exc:  # pragma: no cover - rouge-score is a core dependency
        raise MetricUnavailable(f"rouge-score is not installed; {_INSTALL}") from exc
    return tokenize, tokenizers


@lru_cache(maxsize=1)
def _porter():
    """One shared Porter stemmer whose ``stem`` is memoised (stemming dominates tokenising)."""
    from nltk.stem import porter

    stemmer = porter.PorterStemmer()  # the same stemmer rouge-score's DefaultTokenizer builds

    class _MemoStemmer:
        stem = staticmethod(lru_cache(maxsize=200_000)(stemmer.stem))

    return _MemoStemmer()


def _caching_tokenizer(use_stemmer: bool):
    """A rouge-score ``Tokenizer`` producing exactly ``DefaultTokenizer(use_stemmer)``'s tokens,
    memoised per text.  Make one per batch so memory stays bounded."""
    tokenize, tokenizers = _rouge_modules()
    stemmer = _porter() if use_stemmer else None

    class _CachingTokenizer(tokenizers.Tokenizer):
        def __init__(self):
            self._cache: dict[str, list[str]] = {}

        def tokenize(self, text: str) -> list[str]:
            tokens = self._cache.get(text)
            if tokens is None:
                tokens = self._cache[text] = tokenize.tokenize(text, stemmer)
            return tokens

    return _CachingTokenizer()


def _f1(overlap: int, n_pred: int, n_ref: int) -> float:
    """rouge-score's F-measure: precision over the prediction, recall over the target; 0 when
    either side is empty or nothing overlaps."""
    if overlap == 0 or n_pred == 0 or n_ref == 0:
        return 0.0
    p, r = overlap / n_pred, overlap / n_ref
    return 2 * p * r / (p + r)


def _lcs_ref_indices(ref: tuple[str, ...], can: tuple[str, ...]) -> list[int]:
    """Positions in ``ref`` of the LCS that rouge-score's ``lcs_ind`` returns (same table,
    same backtracking tie-breaks).  Rows of reference tokens absent from ``can`` are skipped:
    such a row copies the row above and the backtrack always walks straight up through it,
    so dropping it changes neither the table nor the chosen path."""
    can_set = set(can)
    live = [i for i, tok in enumerate(ref) if tok in can_set]
    if not live:
        return []
    cols = len(can)
    table = [[0] * (cols + 1)]
    for i in live:
        tok, prev = ref[i], table[-1]
        row, left = [0], 0
        for j in range(cols):
            if can[j] == tok:
                left = prev[j] + 1
            elif prev[j + 1] > left:
                left = prev[j + 1]
            row.append(left)
        table.append(row)
    out: list[int] = []
    k, j = len(live), cols
    while k > 0 and j > 0:
        i = live[k - 1]
        if ref[i] == can[j - 1]:
            out.append(i)
            k -= 1
            j -= 1
        elif table[k][j - 1] > table[k - 1][j]:
            j -= 1
        else:
            k -= 1
    out.reverse()
    return out


class _Analysed:
    """Everything ROUGE needs about one text, computed once per batch."""

    __slots__ = ("tokens", "counts", "sentences")

    def __init__(self, tokens: list[str], counts: dict[int, Counter], sentences: list[tuple[str, ...]]):
        self.tokens = tokens
        self.counts = counts
        self.sentences = sentences


class _RougeBatch:
    """Per-batch ROUGE engine: rouge-score's tokenizer with every distinct text analysed once.

    Reproduces ``RougeScorer.score`` F-measures for ``rougeN``, ``rougeL`` (LCS length from
    rapidfuzz) and ``rougeLsum`` (summary-level union LCS, sentences = lines, as rouge-score
    does without ``split_summaries``)."""

    def __init__(self, use_stemmer: bool, orders: tuple[int, ...] = (1, 2), with_sentences: bool = False):
        from rapidfuzz.distance import LCSseq

        self._lcs_len = LCSseq.similarity
        self._tokenizer = _caching_tokenizer(use_stemmer)
        self._orders = orders
        self._with_sentences = with_sentences
        self._texts: dict[str, _Analysed] = {}
        self._lcs_cache: dict[tuple[tuple[str, ...], tuple[str, ...]], list[int]] = {}

    def analyse(self, text: str) -> _Analysed:
        a = self._texts.get(text)
        if a is None:
            tokens = self._tokenizer.tokenize(text)
            counts = {n: Counter(_text.ngrams(tokens, n)) for n in self._orders}
            sentences = []
            if self._with_sentences:
                sentences = [tuple(self._tokenizer.tokenize(s)) for s in text.split("\n") if s]
            a = self._texts[text] = _Analysed(tokens, counts, sentences)
        return a

    @staticmethod
    def ngram_f1(pred: _Analysed, ref: _Analysed, n: int) -> float:
        pc, rc = pred.counts[n], ref.counts[n]
        small, large = (pc, rc) if len(pc) <= len(rc) else (rc, pc)
        overlap = sum(min(c, large[g]) for g, c in small.items() if g in large)
        return _f1(overlap, max(len(pred.tokens) - n + 1, 0), max(len(ref.tokens) - n + 1, 0))

    def lcs_f1(self, pred: _Analysed, ref: _Analysed) -> float:
        if not pred.tokens or not ref.tokens:
            return 0.0
        return _f1(self._lcs_len(pred.tokens, ref.tokens), len(pred.tokens), len(ref.tokens))

    def lsum_f1(self, pred: _Analysed, ref: _Analysed) -> float:
        m = sum(map(len, ref.sentences))
        n = sum(map(len, pred.sentences))
        if not m or not n:
            return 0.0
        left_r = Counter(t for s in ref.sentences for t in s)
        left_c = Counter(t for s in pred.sentences for t in s)
        hits = 0
        for r in ref.sentences:
            union: set[int] = set()
            for c in pred.sentences:
                key = (r, c)
                idx = self._lcs_cache.get(key)
                if idx is None:
                    idx = self._lcs_cache[key] = _lcs_ref_indices(r, c)
                union.update(idx)
            for i in sorted(union):  # clip by token counts, as ROUGE-1.5.5 does
                t = r[i]
                if left_c[t] > 0 and left_r[t] > 0:
                    hits += 1
                    left_c[t] -= 1
                    left_r[t] -= 1
        return _f1(hits, n, m)


@register
class ROUGE(Metric):
    """ROUGE-1, ROUGE-2 and ROUGE-L F1 with Porter stemming; best reference per sub-score."""

    name = "ROUGE"
    higher_is_better = True
    needs_reference = True
    submetrics = ("rouge1", "rouge2", "rougeL")
    description = "ROUGE-1/2/L F1 (rouge-score tokenizer, Porter stemming), max over references."
    signature_keys = {"use_stemmer": "stem"}
    DEFAULT_USE_STEMMER: ClassVar[bool] = True

    def __init__(self, *, use_stemmer: bool = DEFAULT_USE_STEMMER):
        super().__init__(use_stemmer=bool(use_stemmer))

    def check_available(self) -> None:
        _rouge_modules()

    def _compute(self, outputs: list[str], inputs: list[str], references: list[list[str]]) -> dict[str, np.ndarray]:
        batch = _RougeBatch(self.params["use_stemmer"])
        result = {k: np.zeros(len(outputs)) for k in self.submetrics}
        r1, r2, rl = (result[k] for k in self.submetrics)
        for i, (out, refs) in enumerate(zip(outputs, references, strict=True)):
            pred = batch.analyse(out)
            for ref_text in refs:
                ref = batch.analyse(ref_text)
                r1[i] = max(r1[i], batch.ngram_f1(pred, ref, 1))
                r2[i] = max(r2[i], batch.ngram_f1(pred, ref, 2))
                rl[i] = max(rl[i], batch.lcs_f1(pred, ref))
        return result


_WORD = re.compile(r"[a-z0-9]+")


def _normalise(text: str) -> str:
    """Lowercased alphanumeric words joined by single spaces and padded with spaces, so that
    containment tests respect word boundaries and ignore punctuation/spacing differences
    (``"team 's"`` and ``"team's"`` both become `` team s ``)."""
    return " " + " ".join(_WORD.findall(text.lower())) + " "


def additions(source: str, text: str, *, source_norm: str | None = None) -> list[str]:
    """Sentences of ``text`` whose normalised words do not occur, as a contiguous run, in
    ``source``.  Sentences without any word (pure punctuation) are ignored."""
    norm_source = source_norm if source_norm is not None else _normalise(source)
    out = []
    for sent in _text.split_sentences(text):
        key = _normalise(sent)
        if key.strip() and key not in norm_source:
            out.append(sent)
    return out


@register
class UpdateROUGE(Metric):
    """ROUGE restricted to what the output and the reference *add* to the input.

    For editing/updating tasks most of the output is copied from the input, so plain ROUGE
    rewards copying.  Following FRUIT (Iv et al., 2022), both texts are cut into sentences
    and sentences already present in the input are dropped; ROUGE-1/2/Lsum F1 is computed
    between the remaining ("added") sentences, one sentence per line for Lsum.

    Edge cases: neither side adds anything -> 1.0 (the output correctly adds nothing);
    exactly one side adds something -> 0.0 (ROUGE F1 against an empty text).  Several
    references: max over references per sub-score.
    """

    name = "UpdateROUGE"
    higher_is_better = True
    needs_reference = True
    needs_input = True
    submetrics = ("rouge1", "rouge2", "rougeLsum")
    description = "ROUGE-1/2/Lsum F1 between the sentences output and reference add beyond the input."
    signature_keys = {"use_stemmer": "stem"}
    #: FRUIT/EditEval score additions without stemming
    DEFAULT_USE_STEMMER: ClassVar[bool] = False
    #: score when neither the output nor the reference adds a sentence
    BOTH_EMPTY_SCORE: ClassVar[float] = 1.0

    def __init__(self, *, use_stemmer: bool = DEFAULT_USE_STEMMER):
        super().__init__(use_stemmer=bool(use_stemmer))

    def check_available(self) -> None:
        _rouge_modules()

    def _compute(self, outputs: list[str], inputs: list[str], references: list[list[str]]) -> dict[str, np.ndarray]:
        batch = _RougeBatch(self.params["use_stemmer"], with_sentences=True)
        norm_inputs: dict[str, str] = {}
        added: dict[tuple[str, str], str] = {}

        def added_text(source: str, text: str) -> str:
            key = (source, text)
            if key not in added:
                if source not in norm_inputs:
                    norm_inputs[source] = _normalise(source)
                added[key] = "\n".join(additions(source, text, source_norm=norm_inputs[source]))
            return added[key]

        result = {k: np.zeros(len(outputs)) for k in self.submetrics}
        r1, r2, rls = (result[k] for k in self.submetrics)
        for i, (src, out, refs) in enumerate(zip(inputs, outputs, references, strict=True)):
            pred_add = added_text(src, out)
            pred = batch.analyse(pred_add)
            for ref_text in refs:
                ref_add = added_text(src, ref_text)
                if not pred_add and not ref_add:
                    scores = (self.BOTH_EMPTY_SCORE,) * 3
                else:
                    ref = batch.analyse(ref_add)
                    scores = (batch.ngram_f1(pred, ref, 1), batch.ngram_f1(pred, ref, 2), batch.lsum_f1(pred, ref))
                r1[i], r2[i], rls[i] = max(r1[i], scores[0]), max(r2[i], scores[1]), max(rls[i], scores[2])
        return result
