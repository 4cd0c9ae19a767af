"""Candidate features for screening (:mod:`.screening`): anything a fit may add to the evaluator
at a cost — an LLM judge, a code-generated metric, a nearest-exemplar metric.

A candidate is a name, a kind, a per-row cost estimate and a way to score a subset of the
labelled rows, so every kind goes through the same screening and the same selection.
:class:`JudgeCandidate` wraps an :class:`~.metric.LLMJudgeMetric` (judges that score the same
rows are asked row-major, so the server's prefix cache serves each example across criteria);
:class:`FunctionCandidate` wraps a plain function of row positions.  A candidate source
(``LLMOptions.candidate_sources``) is a callable that builds candidates from a
:class:`CandidateContext`.

Example::

    FunctionCandidate("exemplar.minilm", "exemplar", lambda pos: loo_scores[pos], metric=ExemplarMetric(...))
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ...metricbank.errors import UserError
from ..llm.client import estimate_tokens
from .about_output import MIN_PROBES, input_verdict, probe_pairs
from .metric import prefetch_row_major, read_score

__all__ = ["Candidate", "FunctionCandidate", "JudgeCandidate", "CandidateContext"]

log = logging.getLogger("autometrics")

_COUNTERS = ("rows", "calls", "cached", "tokens", "prompt_tokens", "completion_tokens", "failures", "parse_failures")


class Candidate:
    """One expensive candidate feature: ``name`` (its feature name), ``kind`` (``judge:single``,
    ``code``, ``exemplar``, ...), ``cost_per_row`` (estimated LLM tokens to score one row; 0 for
    local computations) and ``metric``, the Metric object stored in the evaluator when it is
    selected.  ``positive``: higher means better by construction (a judge), so the regression
    may only give it a positive weight; False lets the data choose its sign.

    Subclasses implement :meth:`score`.  Before candidates score the same rows, the screener
    hands all candidates of one class to :meth:`prepare` (LLM judges ask row-major there).
    ``spent`` counts rows, calls, tokens and failures; ``error`` holds why it failed, if it did."""

    positive = True
    input_probe = False  # it reads an input and an output, and has about_output(positions, values) (LLM judges)

    def __init__(self, name: str, kind: str, *, metric=None, cost_per_row: float = 0.0, positive: bool | None = None):
        self.name = name
        self.kind = kind
        self.metric = metric
        self.cost_per_row = float(cost_per_row)
        if positive is not None:
            self.positive = bool(positive)
        self.spent = dict.fromkeys(_COUNTERS, 0)
        self.seconds = 0.0
        self.error: str | None = None

    @classmethod
    def prepare(cls, candidates: list[Candidate], positions: np.ndarray) -> None:
        """Called with every candidate of this class that is about to score ``positions``."""

    def score(self, positions: np.ndarray) -> np.ndarray:
        """Values (NaN = missing) for the labelled rows at ``positions``."""
        raise NotImplementedError

    def meta(self) -> dict:
        """The feature metadata the regression and the artifact read (as ``score_metrics`` gives it).
        ``metric`` must score new data under the candidate's name (``metric.feature_names()`` is
        ``[name]``): that is the column a loaded evaluator reads.  ``generated`` (weight sign-constrained)
        is ``positive``."""
        m = self.metric
        if m is None:
            raise UserError(f"candidate {self.name!r} has no metric to store in the evaluator; pass metric=")
        names = m.feature_names() if hasattr(m, "feature_names") else [getattr(m, "name", None)]
        if names != [self.name]:
            raise UserError(f"candidate {self.name!r}: its metric scores the feature(s) {names}, not {self.name!r}; a loaded "
                             "evaluator could not find the column. Name the candidate after its metric's feature")
        return {"feature": self.name, "signature": m.signature(), "metric": m.to_spec(), "submetric": None,
                "higher_is_better": bool(getattr(m, "higher_is_better", True)), "generated": self.positive,
                "seconds": self.seconds}


class FunctionCandidate(Candidate):
    """A candidate computed by ``fn(positions) -> values`` (NaN = missing), e.g. a code metric run
    in its sandbox or a nearest-exemplar metric; ``metric`` is what the evaluator stores and runs on
    new data (its one feature is named ``name``)."""

    def __init__(self, name: str, kind: str, fn: Callable[[np.ndarray], Sequence[float]], *, metric=None,
                 cost_per_row: float = 0.0, positive: bool | None = None):
        super().__init__(name, kind, metric=metric, cost_per_row=cost_per_row, positive=positive)
        self.fn = fn

    def score(self, positions):
        positions = np.asarray(positions, dtype=int)
        values = np.asarray(self.fn(positions), dtype=float).reshape(-1)
        if len(values) != len(positions):
            raise ValueError(f"candidate {self.name!r} returned {len(values)} values for {len(positions)} rows")
        self.spent["rows"] += len(positions)
        return values


def _norm(x) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else str(x)


class JudgeCandidate(Candidate):
    """An LLM judge (:class:`~.metric.LLMJudgeMetric`) over the labelled rows ``outputs``/``inputs``.
    Tokens are counted from the replies it was paid for (cache hits cost nothing)."""

    input_probe = True

    def __init__(self, judge, outputs: Sequence, inputs: Sequence | None = None):
        self.judge = judge
        self.outputs = [_norm(o) for o in outputs]
        self.inputs = [_norm(i) for i in (inputs if inputs is not None else [""] * len(self.outputs))]
        super().__init__(judge.name, f"judge:{judge.spec.kind}", metric=judge, cost_per_row=self._cost())

    def _cost(self) -> float:
        if not self.outputs:
            return 0.0
        step = max(1, len(self.outputs) // 5)
        rows = list(range(0, len(self.outputs), step))[:5]
        reqs = self.judge.requests([self.outputs[r] for r in rows], [self.inputs[r] for r in rows])
        sizes = [sum(estimate_tokens(m["content"]) for m in q["messages"]) + int(q.get("max_tokens") or 1) for q in reqs]
        return float(np.mean(sizes))

    @classmethod
    def prepare(cls, candidates, positions):
        by_model: dict[str, list[JudgeCandidate]] = {}
        for c in candidates:
            by_model.setdefault(c.judge.llm_config.model, []).append(c)
        for group in by_model.values():
            first = group[0]
            started = time.perf_counter()
            prefetch_row_major([c.judge for c in group], [first.outputs[p] for p in positions],
                               [first.inputs[p] for p in positions])
            share = (time.perf_counter() - started) / len(group)
            for c in group:
                c.seconds += share
                for r in c.judge._prefetched.values():
                    c._paid(r)

    def _paid(self, r) -> None:
        """Count one reply (cache hits cost nothing)."""
        if r.cached:
            self.spent["cached"] += 1
        else:
            self.spent["calls"] += 1
            self.spent["prompt_tokens"] += r.prompt_tokens
            self.spent["completion_tokens"] += r.completion_tokens
            self.spent["tokens"] += r.prompt_tokens + r.completion_tokens

    def score(self, positions):
        positions = np.asarray(positions, dtype=int)
        outs = [self.outputs[p] for p in positions]
        ins = [self.inputs[p] for p in positions]
        if not all((o, i) in self.judge._prefetched for o, i in zip(outs, ins, strict=True)):
            type(self).prepare([self], positions)
        started = time.perf_counter()
        values = self.judge.score_all(outs, inputs=ins)[self.name]
        self.seconds += time.perf_counter() - started
        self.spent["rows"] += len(positions)
        for d in self.judge.last_details:
            if d["score"] is None:
                self.spent["failures" if d.get("error") else "parse_failures"] += 1
        return np.asarray(values, dtype=float)

    def about_output(self, positions, values) -> dict:
        """The input-swap probe (:mod:`.about_output`) on rows this judge has scored: a few extra
        judge calls, each the output of one row under the input of another.  Returns the evidence
        (``grades_input`` True: it grades the input, not the output)."""
        spec = self.judge.spec
        pairs = probe_pairs(values, self.inputs, positions, scale=(spec.scale_min, spec.scale_max))
        if len(pairs) < MIN_PROBES:
            return {"probes": 0, "grades_input": False,
                    "detail": f"not checked: {len(pairs)} pairs of rows with different inputs and scores (needs {MIN_PROBES})"}
        reqs = self.judge.requests([self.outputs[i] for i, _ in pairs], [self.inputs[j] for _, j in pairs], count_cases=False)
        started = time.perf_counter()
        replies = self.judge.client.chat_many(reqs, stage="score:probe")
        self.seconds += time.perf_counter() - started
        swapped = []
        for r in replies:
            swapped.append(read_score(r, spec.scale_min, spec.scale_max)[0])
            self._paid(r)
        return input_verdict([(values[i], values[j], s) for (i, j), s in zip(pairs, swapped, strict=True)])


@dataclass
class CandidateContext:
    """What a candidate source (``LLMOptions.candidate_sources``) gets to build its candidates:
    the labelled rows (texts, references, labels), which of them are training rows (a source must
    learn from ``y[train_pos]`` only), their split groups, and the fit's LLM clients."""

    task: str | None
    target: str
    outputs: list[str]
    inputs: list[str]
    references: list[list[str]] | None
    y: np.ndarray
    train_pos: np.ndarray
    groups: np.ndarray
    generator: object = None
    judge: object = None
    seed: int = 0
    echo: Callable = field(default=lambda *a, **k: None)
    axes: list[str] = field(default_factory=list)  # the generated judges' criteria (code metrics may measure them)
