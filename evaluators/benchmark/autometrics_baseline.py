"""This package's method as a benchmark baseline:
:class:`~autometrics.evaluators.estimator.AutoMetricsRegressor` fitted on the split's training
rows and predicting its test rows (MetricBank only, or with generated judges when an LLM is given)."""

from __future__ import annotations

import logging

from ..estimator import AutoMetricsRegressor
from ..validity import CrossFit
from .interface import USAGE_KEYS, Baseline, MetricFeatures

log = logging.getLogger("autometrics")

#: the estimator's own validation inside the training rows.  The harness measures the held-out
#: figure itself, so no permutation test and no bootstrap interval is paid for; the folds stay,
#: since the fit with judges chooses between itself and its LLM-free floor by their cross-fitted τ.
BENCHMARK_CROSSFIT = CrossFit(permutations=0, n_boot=0)


# --------------------------------------------------------------------------- AutoMetrics


class AutoMetricsBaseline(Baseline):
    """The AutoMetrics evaluator: :class:`.estimator.AutoMetricsRegressor`, LLM-free (on the
    shared MetricBank scores) or with generated judges and retrieval when ``llm`` is given.

    It is fitted on the training rows alone (its validity cross-fitted inside them) and predicts
    the test rows, so their labels never reach it.  A split context gives the target's name, the
    task and the split's seed."""

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

    def estimator(self, *, target: str = "label", task: str | None = None, seed: int | None = None) -> AutoMetricsRegressor:
        """The (unfitted) estimator this baseline fits."""
        common = {"task": task, "top_n": self.top_n, "n_boot": 0, "crossfit": BENCHMARK_CROSSFIT,
                  "seed": self.seed if seed is None else seed}
        if self.llm:
            from ..judges.options import PAPER_COUNTS, LLMOptions

            cache = self.cache if isinstance(self.cache, str) or self.cache is None else None
            opts = LLMOptions(llm=self.llm, judge_llm=self.judge_llm, counts=self.counts or PAPER_COUNTS,
                              use_bank=self.use_bank, cache=cache, concurrency=self.concurrency,
                              timeout=self.timeout, max_retries=self.max_retries)
            return AutoMetricsRegressor(target, llm_options=opts, **common)
        return AutoMetricsRegressor(target, feature_cache=self.features, **common)

    def fit(self, train, y, *, context=None):
        y = self._check_fit_args(train, y)
        est = self.estimator(target=context.target if context is not None else "label",
                             task=context.task if context is not None else None,
                             seed=context.seed if context is not None else None)
        est.fit(train, y)
        self._add_usage((est.evaluator_.artifact.get("llm") or {}).get("usage", {}).get("total", {}))
        self.estimator_ = est
        self.result_ = est.result_
        self.evaluator_ = est.evaluator_
        return self

    def predict(self, rows):
        before = self.estimator_.predict_usage()
        pred = self.estimator_.predict(rows)
        after = self.estimator_.predict_usage()
        self._add_usage({k: int(after.get(k, 0)) - int(before.get(k, 0)) for k in USAGE_KEYS})
        return pred

    def _add_usage(self, total: dict) -> None:
        for k in USAGE_KEYS:
            self._usage[k] += int(total.get(k, 0))

    def usage(self):
        return dict(self._usage)

    def details(self):
        a = self.evaluator_.artifact
        return {"selected": [{"feature": f["feature"], "weight": f["weight"]} for f in a["features"]],
                "method": a["method"]["name"], "n_candidates": a["statistics"].get("n_candidates")}
