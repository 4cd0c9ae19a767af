"""The baselines' common ground: the interface every benchmark method implements
(:class:`Baseline`: ``fit(train, y)``, ``predict(rows)``; NaN = could not score that row), what a
method may know about its split besides the rows (:class:`SplitContext`), and the shared MetricBank score cache
(:class:`MetricFeatures`: the bank is scored once per benchmark and reused for every split)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...metricbank import default_metrics, get_metric
from ...metricbank._models import ModelMetric
from ...metricbank.errors import UserError
from ..data import Dataset
from ..fit import score_metrics

log = logging.getLogger("autometrics")

USAGE_KEYS = ("requests", "calls", "cache_hits", "prompt_tokens", "completion_tokens", "failures", "parse_failures")

#: generic 1-5 rubric for the LLM judge when the dataset does not describe its labels
GENERIC_RUBRIC = {
    "1": "Fails the task: wrong, irrelevant, unreadable or empty.",
    "2": "Poor: attempts the task but with serious errors or omissions.",
    "3": "Acceptable: does the task with noticeable flaws.",
    "4": "Good: does the task well with only minor flaws.",
    "5": "Excellent: does the task fully; correct, clear and well written.",
}


@dataclass
class SplitContext:
    """What the harness knows about the current split beyond its rows: ``target`` names the
    label, ``seed`` is the split's seed (seeded methods follow it, so every split refits with its
    own randomness), ``task`` and ``criterion`` describe the task and the target (the annotation
    instructions the LLM judges are given)."""

    target: str
    seed: int = 0
    task: str | None = None
    criterion: str | None = None


def row_ids(rows: Dataset) -> list[str]:
    return rows.frame["id"].astype(str).tolist()


def row_inputs(rows: Dataset) -> list[str]:
    return rows.inputs if rows.has_input else [""] * len(rows)


class Baseline:
    """Common interface.  Subclasses set ``key`` (CLI name), ``needs_llm`` and implement
    :meth:`fit` and :meth:`predict`; ``title`` is what tables print."""

    key: str = ""
    needs_llm: bool = False
    #: True when the method reads the shared MetricBank scores (their scoring time counts)
    uses_metric_features: bool = False

    @property
    def title(self) -> str:
        return self.key

    def fit(self, train: Dataset, y, *, context: SplitContext | None = None) -> Baseline:  # pragma: no cover
        raise NotImplementedError

    def predict(self, rows: Dataset) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def details(self) -> dict:
        """What the last fit chose (JSON-safe), for the benchmark report."""
        return {}

    def check_available(self) -> None:
        """Raise MetricUnavailable / ImportError when the method cannot run here (cheap: no model load)."""

    def usage(self) -> dict:
        """Cumulative LLM accounting of this method (zeros for LLM-free methods)."""
        return dict.fromkeys(USAGE_KEYS, 0)

    def _check_fit_args(self, train: Dataset, y) -> np.ndarray:
        y = np.asarray(y, dtype=float)
        if y.shape != (len(train),):
            raise UserError(f"{self.key}: got {len(y)} labels for {len(train)} training rows")
        if np.isnan(y).any():
            raise UserError(f"{self.key}: the training labels contain NaN; drop unlabelled rows first")
        return y


# ----------------------------------------------------------------------------- features


def bank_metrics(bank: str = "cpu", *, with_reference: bool = True, with_input: bool = True,
                 unavailable: dict | None = None) -> list:
    """MetricBank metrics that run here.  ``bank="cpu"``: only metrics that need no model
    weights (fast on CPU); ``"all"``: every metric that can run here, model-based ones too."""
    if bank not in ("cpu", "all"):
        raise UserError(f"bank must be 'cpu' or 'all', got {bank!r}")
    metrics = default_metrics(with_reference=with_reference, with_input=with_input, unavailable=unavailable)
    if bank == "cpu":
        metrics = [m for m in metrics if not isinstance(m, ModelMetric)]
    return metrics


class MetricFeatures:
    """MetricBank scores per row, computed once and looked up by row content.

    ``metrics``: explicit metric objects or names (default: :func:`bank_metrics` of ``bank``,
    chosen from the first rows scored: reference-based metrics only if they have references).
    """

    def __init__(self, metrics=None, *, bank: str = "cpu", progress: bool = False, scorer=None):
        self._scorer = scorer  # score_metrics by default; e.g. distributed.metric_scorer(client) on a Dask cluster
        self._metrics = metrics
        self.bank = bank
        self.progress = progress
        self.names: list[str] | None = None
        self.meta: dict[str, dict] = {}
        self.notes: list[str] = []
        self.unavailable: dict[str, str] = {}
        self.seconds = 0.0
        self._rows: dict[tuple, np.ndarray] = {}

    def __len__(self) -> int:
        """Rows scored so far."""
        return len(self._rows)

    @staticmethod
    def _keys(rows: Dataset) -> list[tuple]:
        f = rows.frame
        return [(str(i), a, b, tuple(r)) for i, a, b, r in zip(f["id"], f["input"], f["output"], f["references"], strict=True)]

    def _metric_list(self, rows: Dataset) -> list:
        if self._metrics is not None:
            return [get_metric(m) if isinstance(m, str) else m for m in self._metrics]
        return bank_metrics(self.bank, with_reference=rows.has_references, with_input=rows.has_input,
                            unavailable=self.unavailable)

    def ensure(self, rows: Dataset) -> None:
        """Score the rows not seen yet (one batch)."""
        import time

        keys = self._keys(rows)
        todo_pos, seen = [], set()
        for i, k in enumerate(keys):
            if k not in self._rows and k not in seen:
                seen.add(k)
                todo_pos.append(i)
        if not todo_pos:
            return
        sub = rows.subset(todo_pos)
        started = time.perf_counter()
        X, meta, notes = (self._scorer or score_metrics)(self._metric_list(sub), sub.outputs,
                                                         sub.inputs if sub.has_input else None, sub.references,
                                                         progress=self.progress)
        self.seconds += time.perf_counter() - started
        if self.names is None:
            if X.shape[1] == 0:
                raise UserError("no MetricBank metric could score these rows: " + "; ".join(notes))
            self.names = list(X.columns)
            self.meta = meta
            self.notes = notes
        X = X.reindex(columns=self.names)
        values = X.to_numpy(dtype=float)
        for j, pos in enumerate(todo_pos):
            self._rows[keys[pos]] = values[j]

    def matrix(self, rows: Dataset) -> np.ndarray:
        self.ensure(rows)
        return np.vstack([self._rows[k] for k in self._keys(rows)]) if len(rows) else np.zeros((0, len(self.names or [])))

    def frame(self, rows: Dataset) -> tuple[pd.DataFrame, dict, list[str]]:
        """``(features, meta, notes)`` as :func:`.fit.fit_evaluator` and
        :class:`~autometrics.evaluators.estimator.AutoMetricsRegressor` (``feature_cache``) take them."""
        X = self.matrix(rows)
        return pd.DataFrame(X, columns=self.names, index=range(len(rows))), self.meta, list(self.notes)
