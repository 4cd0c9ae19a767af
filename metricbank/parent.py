"""PseudoPARENT: PARENT (Dhingra et al., 2019) with the input text standing in for the table.

PARENT scores a generation against a reference *and* a table: an n-gram of the output counts
as correct when the reference has it or when the table entails it, and recall mixes recall of
the reference (weighted by how much of each reference n-gram the table supports) with recall
of the table records.  Following the AutoMetrics project's PseudoPARENT, the "table" here is
the set of input tokens, each token one record, and entailment is the word-overlap model.
The formulas, smoothing and multi-reference rule (best F over references) are those of the
PARENT paper and its released implementation.
"""

from __future__ import annotations

import math
from collections import Counter
from functools import cache

import numpy as np

from ._text import tokenize
from .base import Metric
from .errors import UserError
from .registry import register

__all__ = ["PseudoPARENT"]


def _counts(tokens: tuple[str, ...], n: int) -> Counter:
    return Counter(tokens[i : i + n] for i in range(len(tokens) - n + 1))


def _entailments(tokens: tuple[str, ...], table: frozenset[str], max_order: int, smoothing: float) -> list[dict]:
    """Word-overlap entailment w(g) of every n-gram of ``tokens`` (orders 1..max_order):
    the share of the n-gram's tokens found in the pseudo-table, Laplace-smoothed."""
    hits = [0]
    for t in tokens:
        hits.append(hits[-1] + (t in table))
    out = []
    for n in range(1, max_order + 1):
        denom = n + smoothing
        out.append({tokens[i : i + n]: (hits[i + n] - hits[i] + smoothing) / denom for i in range(len(tokens) - n + 1)})
    return out


class _Scorer:
    """PARENT for one (input, output) pair against any number of references."""

    def __init__(self, table: frozenset[str], output: tuple[str, ...], max_order: int, smoothing: float):
        self.table = table
        self.max_order = max_order
        self.smoothing = smoothing
        self.out_counts = [_counts(output, n) for n in range(1, max_order + 1)]
        self.out_weights = _entailments(output, table, max_order, smoothing)
        # sum_g c_G(g) * w(g): the precision numerator if no output n-gram were in the reference
        self.out_base = [sum(c[g] * w[g] for g in c) for c, w in zip(self.out_counts, self.out_weights, strict=True)]
        self.out_totals = [sum(c.values()) for c in self.out_counts]
        if table:
            mentioned = set(output)
            self.table_recall = sum(1 for t in table if t in mentioned) / len(table) or smoothing
        else:
            self.table_recall = 1.0  # nothing to mention

    def f_score(self, ref: _Reference, lambda_weight: float) -> float:
        s = self.smoothing
        precisions, recalls = [], []
        for n in range(self.max_order):
            oc, ow, rc = self.out_counts[n], self.out_weights[n], ref.counts[n]
            overlap_p = overlap_r = 0.0
            for g in oc.keys() & rc.keys():
                m = min(oc[g], rc[g])
                w = ow[g]
                overlap_p += m * (1.0 - w)
                overlap_r += m * w
            total = self.out_totals[n]
            precisions.append((self.out_base[n] + overlap_p) / total if total else 0.0)
            recalls.append(overlap_r / ref.weighted_total[n] if ref.weighted_total[n] else 1.0)
        # smoothing of zero scores for orders >= 2, as in the released implementation
        for n in range(1, self.max_order):
            precisions[n] = precisions[n] or s
            recalls[n] = recalls[n] or s
        if any(p == 0.0 for p in precisions):
            prec = 0.0
        else:
            prec = math.exp(math.fsum(math.log(p) for p in precisions) / self.max_order)
        if any(r == 0.0 for r in recalls):
            ref_rec = s
        else:
            ref_rec = math.exp(math.fsum(math.log(r) for r in recalls) / self.max_order)
        rec = math.exp((1.0 - lambda_weight) * math.log(ref_rec) + lambda_weight * math.log(self.table_recall))
        return 2.0 * prec * rec / (prec + rec + 1e-8)


class _Reference:
    """Reference n-gram counts and the entailment-weighted totals (recall denominators)."""

    def __init__(self, tokens: tuple[str, ...], table: frozenset[str], max_order: int, smoothing: float):
        self.counts = [_counts(tokens, n) for n in range(1, max_order + 1)]
        weights = _entailments(tokens, table, max_order, smoothing)
        self.weighted_total = [
            sum(c * w[g] for g, c in counts.items()) for counts, w in zip(self.counts, weights, strict=True)
        ]


@register
class PseudoPARENT(Metric):
    """PARENT F-score with the input tokens as the table (input-grounded n-gram precision/recall)."""

    name = "PseudoPARENT"
    version = "1"
    higher_is_better = True
    needs_reference = True
    needs_input = True
    description = "PARENT F-score with the input's tokens as a pseudo-table: n-gram overlap with the reference, credited when the input supports it"

    LAMBDA_WEIGHT = 0.5
    SMOOTHING = 1e-5
    MAX_ORDER = 4
    signature_keys = {"lambda_weight": "lambda", "smoothing": "smooth", "max_order": "n"}

    def __init__(
        self, *, lambda_weight: float = LAMBDA_WEIGHT, smoothing: float = SMOOTHING, max_order: int = MAX_ORDER
    ):
        if not 0.0 <= lambda_weight <= 1.0:
            raise UserError("lambda_weight must be in [0, 1]")
        if max_order < 1:
            raise UserError("max_order must be >= 1")
        super().__init__(lambda_weight=lambda_weight, smoothing=smoothing, max_order=max_order)
        self.lambda_weight = float(lambda_weight)
        self.smoothing = float(smoothing)
        self.max_order = int(max_order)

    def _compute(self, outputs, inputs, references):
        @cache
        def toks(text: str) -> tuple[str, ...]:
            return tuple(tokenize(text))

        @cache
        def table(text: str) -> frozenset[str]:
            return frozenset(toks(text))

        ref_cache: dict[tuple[str, str], _Reference] = {}
        scores = np.empty(len(outputs))
        for i, (out, inp, refs) in enumerate(zip(outputs, inputs, references, strict=True)):
            scorer = _Scorer(table(inp), toks(out), self.max_order, self.smoothing)
            best = 0.0
            for r in refs:
                key = (inp, r)
                ref = ref_cache.get(key)
                if ref is None:
                    ref = ref_cache[key] = _Reference(toks(r), scorer.table, self.max_order, self.smoothing)
                best = max(best, scorer.f_score(ref, self.lambda_weight))
            scores[i] = best
        return scores
