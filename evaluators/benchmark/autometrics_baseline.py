"""This package's method as a benchmark baseline: :func:`~autometrics.evaluators.fit.fit_evaluator`
on the split (MetricBank only, or with generated judges when an LLM is given)."""

from __future__ import annotations

import logging

import numpy as np
from autometrics.evaluators.benchmark.base import USAGE_KEYS, Baseline, MetricFeatures, SplitContext, _ids
from autometrics.evaluators.data import Dataset

log = logging.getLogger("autometrics")


# --------------------------------------------------------------------------- AutoMetrics


class AutoMetricsBaseline(Baseline):
    """The AutoMetrics evaluator: :func:`.fit.fit_evaluator` (``llm=None``) or
    :func:`~autometrics.evaluators.fit.fit_evaluator` with an LLM (generated judges + retrieval) when ``llm`` is given.

    Both split the labelled data themselves; with a :class:`SplitContext` they get the full
    labelled data and the same seed/test size, so their split equals the harness's (checked:
    a mismatch raises).  Test labels are then only used for the artifact's own statistics,
    never for selection.  Without a context, ``train`` is all they see and they hold out
    ``test_size`` of it internally as ``autometrics fit`` does."""

    key = "autometrics"

    def __init__(self, features: MetricFeatures | None = None, *, llm: str | None = None, judge_llm: str | None = None,
                 bank: str = "cpu", top_n: int = 5, counts=None, cache=None, concurrency=None, timeout=None,
                 max_retries=None, use_bank: str = "auto", seed: int = 0):
        self.llm = llm
        self.seed = seed
        self.judge_llm = judge_llm
        self.needs_llm = bool(llm)
        self.uses_metric_features = not llm
        self.features = features if features is not None else (MetricFeatures(bank=bank) if not llm else None)
        self.top_n = top_n
        self.counts = counts
        self.cache = cache
        self.concurrency = concurrency
        self.timeout = timeout
        self.max_retries = max_retries
        self.use_bank = use_bank
        self._usage = dict.fromkeys(USAGE_KEYS, 0)

    @property
    def title(self) -> str:
        if self.llm:
            return f"AutoMetrics (LLM judges: {self.llm})"
        return "AutoMetrics (no LLM: MetricBank + NNLS)"

    def fit(self, train, y, *, context=None):
        y = self._check_fit_args(train, y)
        standalone = context is None
        if standalone:
            from autometrics.evaluators.data import parse_labels

            frame = train.frame.copy()
            frame["__y__"] = y
            _, info = parse_labels(frame["__y__"], "__y__")
            full = Dataset(frame=frame, targets=["__y__"], labels={"__y__": info}, source=train.source,
                           columns=train.columns, has_references=train.has_references, has_input=train.has_input)
            context = SplitContext(target="__y__", full=full, seed=self.seed)
        target = context.target
        if self.llm:
            from autometrics.evaluators.fit import fit_evaluator
            from autometrics.evaluators.judges.options import PAPER_COUNTS, LLMOptions

            cache = self.cache if isinstance(self.cache, str) or self.cache is None else None
            opts = LLMOptions(llm=self.llm, judge_llm=self.judge_llm, counts=self.counts or PAPER_COUNTS,
                                      use_bank=self.use_bank, cache=cache, concurrency=self.concurrency,
                                      timeout=self.timeout, max_retries=self.max_retries)
            result = fit_evaluator(None, target, task=context.task, llm_options=opts, dataset=context.full,
                                   test_size=context.test_size, seed=context.seed, top_n=self.top_n, n_boot=0)
            total = (result.evaluator.artifact.get("llm") or {}).get("usage", {}).get("total", {})
            for k in USAGE_KEYS:
                self._usage[k] += int(total.get(k, 0))
        else:
            from autometrics.evaluators.fit import fit_evaluator

            result = fit_evaluator(None, target, task=context.task, dataset=context.full,
                                   features=self.features.frame(context.full), test_size=context.test_size,
                                   seed=context.seed, top_n=self.top_n, n_boot=0)
        fitted_train = set(result.train["id"].astype(str))
        if not standalone and fitted_train != set(_ids(train)):
            raise RuntimeError("AutoMetrics' internal split differs from the given training rows; pass the same "
                               "labelled data, seed and test size in the SplitContext")
        self.result_ = result
        self.evaluator_ = result.evaluator
        self._known = {}
        for f in (result.train, result.test):
            self._known.update(zip(f["id"].astype(str), f["score"].astype(float), strict=True))
        return self

    def predict(self, rows):
        ids = _ids(rows)
        if all(i in self._known for i in ids):  # rows of the fit: its own predictions (no re-scoring)
            return np.array([self._known[i] for i in ids], dtype=float)
        scored = self.evaluator_.score_texts(rows.outputs, rows.inputs if rows.has_input else None, rows.references)
        return scored["autometrics_score"].to_numpy(dtype=float)

    def usage(self):
        return dict(self._usage)

    def details(self):
        a = self.evaluator_.artifact
        return {"selected": [{"feature": f["feature"], "weight": f["weight"]} for f in a["features"]],
                "method": a["method"]["name"], "n_candidates": a["statistics"].get("n_candidates")}
