"""The AutoMetrics fit as a scikit-learn estimator: :class:`AutoMetricsRegressor`.

``fit(X, y)`` takes labelled rows (a pandas DataFrame laid out like the data ``fit_evaluator``
reads: input, output, reference(s), id columns, named by the column parameters; or an already
loaded :class:`~autometrics.evaluators.data.Dataset`) and fits the evaluator on exactly those
rows.  Its validity is cross-fitted inside them (or, with ``test_size``, measured on a grouped
held-out part of them), so nothing outside ``X`` is ever read.  ``predict(X)`` returns the
fitted evaluator's scores for any rows, the same numbers ``Evaluator.score`` gives.

Because it follows the estimator contract (``__init__`` only stores its parameters,
``get_params``/``set_params``, ``clone``, fitted state in ``*_`` attributes), scikit-learn's
model selection runs the whole method, metric scoring and selection included, inside each of
its folds::

    from sklearn.model_selection import GroupKFold, cross_val_score

    est = AutoMetricsRegressor(target="score", metrics=["FKGL", "BLEU", "SARI"])
    cross_val_score(est, rows, rows["score"], groups=rows["input"], cv=GroupKFold(5), scoring=tau_scorer)
    est.fit(rows, rows["score"]).predict(new_rows)
    est.evaluator_.save("out/evaluator.json")

:func:`~autometrics.evaluators.fit.fit_evaluator` is this estimator fitted on a loaded dataset;
it returns ``result_``.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.metrics import make_scorer
from sklearn.utils.validation import check_is_fitted

from ..collectors.files import json_safe
from ..metricbank.errors import DataError, UserError
from ..metricbank.notices import collect_warnings
from .data import Dataset, check_target, load_dataset, parse_labels
from .evaluator import SCORE_COLUMN
from .induce import DEFAULT_REGRESSION, fit_on_features
from .judges.metric import LLMJudgeMetric
from .judges.options import LLMOptions
from .retrieval import score_bank
from .stats import kendall_tau
from .validity import CrossFit

__all__ = ["AutoMetricsRegressor", "tau_scorer"]

#: the group label recorded in the artifact when ``fit`` is given ``groups``
GIVEN_GROUPS = "the groups given to fit"


def _tau(y_true, y_pred) -> float:
    return kendall_tau(np.asarray(y_pred, dtype=float), np.asarray(y_true, dtype=float))[0]


#: Kendall's τ-b of the predictions with the labels, the figure every report of this package uses
#: (``RegressorMixin.score`` is R², which also rewards being on the labels' scale)
tau_scorer = make_scorer(_tau)


def _noop(*_a, **_k) -> None:
    return None


def _check_rows(X) -> None:
    if not isinstance(X, pd.DataFrame | Dataset):
        raise TypeError(f"X must be a pandas DataFrame of rows (input, output, reference... columns) or a Dataset, "
                        f"not {type(X).__name__}")


class AutoMetricsRegressor(RegressorMixin, BaseEstimator):
    """AutoMetrics as an estimator (module docstring).

    What is fitted:

    - ``target``: the label's name (the column read from ``X`` when ``y`` is not given; the
      evaluator artifact records it).
    - ``task``: one sentence describing the task (judges and metric retrieval read it).
    - ``metrics``: limit the LLM-free path to these MetricBank metrics (names or objects); None:
      the retrieval policy (every cheap metric, model-based ones by measured signal).
    - ``llm`` / ``llm_options``: a model string, or an :class:`~.judges.options.LLMOptions`
      (every setting of the judges: models, counts, screening, budgets, cache), turns on the full
      method with generated judges; ``llm`` wins over ``llm_options.llm``.  None: LLM-free.
    - ``regression``, ``top_n``: how metrics are selected and weighted (see ``fit_evaluator``).

    How it is validated: ``test_size`` None (default) cross-fits validity on every row given
    (``crossfit``: folds, repeats, permutations), a fraction keeps a grouped held-out part of
    them; ``n_boot`` bootstrap resamples for the agreement intervals; ``seed`` seeds every split.

    How rows are read: ``input_col``, ``output_col``, ``reference_cols``, ``id_col``,
    ``group_col`` name the columns of a DataFrame ``X`` as for
    :func:`~autometrics.evaluators.data.load_dataset` (a Dataset ``X`` is already read).

    ``feature_cache``: an object whose ``frame(rows)`` returns the MetricBank scores of a
    :class:`Dataset`'s rows as ``(values, meta, notes)`` (e.g. the benchmark's
    :class:`~.benchmark.base.MetricFeatures`); the LLM-free path then takes its candidates from it
    when fitting and predicting instead of scoring the texts (the LLM path ignores it).
    ``progress`` shows progress bars; ``echo`` receives the LLM path's progress lines.

    Fitted attributes: ``evaluator_`` (the :class:`~.evaluator.Evaluator`), ``result_`` (the
    :class:`~.induce.FitResult`: evaluator, per-row predictions, candidate table, notes),
    ``features_`` (names of the selected metrics) and ``validity_`` (the validity verdict).
    """

    def __init__(
        self,
        target: str = "label",
        *,
        task: str | None = None,
        metrics=None,
        llm: str | None = None,
        llm_options: LLMOptions | None = None,
        regression: str = DEFAULT_REGRESSION,
        top_n: int = 5,
        test_size: float | None = None,
        crossfit: CrossFit | None = None,
        n_boot: int = 1000,
        seed: int = 0,
        input_col: str = "input",
        output_col: str = "output",
        reference_cols: list[str] | None = None,
        id_col: str | None = "id",
        group_col: str | None = None,
        feature_cache=None,
        progress: bool = False,
        echo=None,
    ):
        self.target = target
        self.task = task
        self.metrics = metrics
        self.llm = llm
        self.llm_options = llm_options
        self.regression = regression
        self.top_n = top_n
        self.test_size = test_size
        self.crossfit = crossfit
        self.n_boot = n_boot
        self.seed = seed
        self.input_col = input_col
        self.output_col = output_col
        self.reference_cols = reference_cols
        self.id_col = id_col
        self.group_col = group_col
        self.feature_cache = feature_cache
        self.progress = progress
        self.echo = echo

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True  # rows of texts, not a numeric matrix
        tags.non_deterministic = self.llm is not None or self.llm_options is not None
        return tags

    # ------------------------------------------------------------------ settings
    def judge_options(self) -> LLMOptions | None:
        """The options of the judges (``llm`` applied to ``llm_options``), or None on the LLM-free path."""
        if self.llm is None and self.llm_options is None:
            return None
        opts = self.llm_options or LLMOptions()
        return dataclasses.replace(opts, llm=self.llm) if self.llm is not None else opts

    def fit_options(self) -> dict:
        """The options both paths hand to the regression and its validation (``crossfit`` resolved)."""
        return {"task": self.task, "test_size": self.test_size, "seed": self.seed, "top_n": self.top_n,
                "n_boot": self.n_boot, "regression": self.regression,
                "crossfit": self.crossfit or CrossFit(n_boot=self.n_boot)}

    # ---------------------------------------------------------------------- rows
    def _read(self, X, *, labelled: bool) -> Dataset:
        """``X`` as a Dataset: a Dataset as it is; a DataFrame read with the column parameters
        (with its target only when ``labelled``)."""
        _check_rows(X)
        if isinstance(X, Dataset):
            return X
        return load_dataset(X, self.target if labelled else None, input_col=self.input_col, output_col=self.output_col,
                            reference_cols=self.reference_cols, id_col=self.id_col,
                            group_col=self.group_col if labelled else None, require_target=labelled)

    def _dataset(self, X, y, groups) -> Dataset:
        """The labelled rows to fit on: ``X`` with ``y`` as its ``target`` (``y`` None: the target
        is already in ``X``), grouped by ``groups`` when given."""
        target = self.target
        _check_rows(X)
        if y is not None:
            y = np.asarray(y)
            if y.ndim == 2 and y.shape[1] == 1:
                y = y[:, 0]
            if y.ndim != 1 or len(y) != len(X):
                raise UserError(f"y must hold one label per row of X ({len(X)}), got shape {np.shape(y)}")
            if isinstance(X, pd.DataFrame):
                X = X.reset_index(drop=True).copy()
                X[target] = y
            else:
                labels, info = parse_labels(pd.Series(y), target, X.source)
                warnings = list(X.warnings) + check_target(info, target, X.source)
                frame = X.frame.copy()
                frame[target] = labels
                X = dataclasses.replace(X, frame=frame, targets=list(dict.fromkeys([*X.targets, target])),
                                        labels={**X.labels, target: info}, warnings=warnings)
        ds = self._read(X, labelled=True)
        if target not in ds.targets:
            raise DataError(f"target {target!r} was not loaded; loaded targets: {ds.targets}")
        if groups is not None:
            groups = np.asarray(groups).astype(str)
            if groups.shape != (len(ds),):
                raise UserError(f"groups must hold one group per row of X ({len(ds)}), got shape {groups.shape}")
            frame = ds.frame.copy()
            frame["group"] = groups
            ds = dataclasses.replace(ds, frame=frame, columns={**ds.columns, "group": GIVEN_GROUPS},
                                     warnings=list(ds.warnings))
        return ds

    # ----------------------------------------------------------------------- fit
    def fit(self, X, y=None, groups=None, *, features=None) -> AutoMetricsRegressor:
        """Fit on the rows of ``X`` (labels ``y``, or ``X``'s ``target`` column; rows without a
        label are left out).  ``groups``: one group per row (rows of a group are never split
        apart by the validation); default: ``group_col``, else the input.  ``features``:
        ``(values, meta, notes)`` already scored on the labelled rows, in their order (the
        LLM-free path then scores nothing)."""
        started = time.perf_counter()
        with collect_warnings() as shown:  # what the fit logs or warns goes into its report too
            ds = self._dataset(X, y, groups)
            opts = self.judge_options()
            echo = self.echo or _noop
            if opts is not None:
                from .judges.pipeline import fit_with_judges

                result = fit_with_judges(ds, self.target, opts, progress=self.progress, echo=echo, metrics=self.metrics,
                                         **self.fit_options())
            else:
                result = self._fit_llm_free(ds, features, started)
        result.keep_shown_warnings(shown.messages)
        self.result_ = result
        self.evaluator_ = result.evaluator
        self.features_ = [f["feature"] for f in result.evaluator.features]
        self.validity_ = result.evaluator.validity
        self._judge_client = None
        return self

    def _fit_llm_free(self, ds: Dataset, features, started: float):
        lab = ds.labelled(self.target)
        unavailable: dict[str, str] = {}
        plan = None
        if features is None and self.feature_cache is not None:
            features = self.feature_cache.frame(lab)
        if features is None:
            # the retrieval policy (cheap metrics always, expensive ones by measured signal), or the given metrics
            features, _bank, unavailable, plan = score_bank(lab, self.target, self.task, test_size=self.test_size,
                                                            seed=self.seed, progress=self.progress, metrics=self.metrics)
        result = fit_on_features(ds, self.target, features, unavailable=unavailable, started=started, **self.fit_options())
        if plan is not None:
            result.evaluator.artifact["retrieval"] = json_safe(plan.to_dict())
        return result

    # ------------------------------------------------------------------- predict
    def predict(self, X) -> np.ndarray:
        """The evaluator's score for each row of ``X`` (a DataFrame laid out like the training
        rows, or a Dataset)."""
        check_is_fitted(self, "evaluator_")
        rows = self._read(X, labelled=False)
        ev = self.evaluator_
        if self.feature_cache is not None and self.judge_options() is None:
            values, _meta, _notes = self.feature_cache.frame(rows)
            return ev.predict(values)
        metrics = ev.metrics()
        if any(m.needs_reference for m in metrics) and not rows.has_references:
            raise DataError(f"{rows.source}: this evaluator uses reference-based metrics but the rows have no reference "
                            "column; pass reference_cols naming it.")
        self._bind_judges(metrics)
        scored = ev.score_texts(rows.outputs, rows.inputs if rows.has_input else None, rows.references,
                                progress=self.progress)
        return scored[SCORE_COLUMN].to_numpy(dtype=float)

    def _bind_judges(self, metrics) -> None:
        """Generated judges score new rows through one client built from ``llm_options`` (its
        cache, concurrency, timeouts), as they did in the fit, rather than through a default
        client; its accounting is :meth:`predict_usage`."""
        opts = self.judge_options()
        if opts is None:
            return

        if self._judge_client is None:
            from .judges.pipeline import llm_clients

            self._judge_client = llm_clients(opts)[1]
        for m in metrics:
            if isinstance(m, LLMJudgeMetric) and m.llm_config.model == self._judge_client.config.model:
                m.client = self._judge_client

    def predict_usage(self) -> dict:
        """LLM usage of the judges' calls made by :meth:`predict` so far (``requests``, ``calls``,
        tokens... as in the artifact's ``llm.usage.total``); empty when none was made."""
        check_is_fitted(self, "evaluator_")
        client = getattr(self, "_judge_client", None)
        return client.usage.to_dict()["total"] if client is not None else {}
