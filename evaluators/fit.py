"""The one fit entry point: labelled data in, a validated evaluator out.

``fit_evaluator`` loads and validates the data and fits
:class:`~autometrics.evaluators.estimator.AutoMetricsRegressor` on it, which takes one of two paths that end in the same
regression (:func:`~autometrics.evaluators.induce.fit_on_features`):

- ``llm=None`` (default): the LLM-free path.  Every cheap MetricBank metric the data can feed is
  scored on the labelled rows, and the model-based ones the retrieval policy picks by their
  measured signal (:func:`~autometrics.evaluators.retrieval.score_bank`).
- ``llm="local"`` / ``"local:1.5b"`` / a LiteLLM model string / ``"openai/m@http://host/v1"``:
  the full AutoMetrics method (:mod:`autometrics.evaluators.judges.pipeline`): generated LLM
  judges plus retrieved MetricBank metrics.  Everything else about the LLM half is one options
  object, :class:`~autometrics.evaluators.judges.options.LLMOptions` (``llm_options=``).

Example::

    result = fit_evaluator("simpeval.csv", target="score", task="Simplify a sentence")
    result.evaluator.save("out/evaluator.json")
    Evaluator.load("out/evaluator.json").score("new.csv")
"""

from __future__ import annotations

import pandas as pd

from ..metricbank import Metric
from ..metricbank.errors import DataError, UserError
from ..metricbank.notices import collect_warnings
from .data import Dataset, load_dataset
from .estimator import AutoMetricsRegressor
from .evaluator import SCORE_COLUMN, Evaluator, load_evaluator, score_metrics
from .induce import DEFAULT_REGRESSION, MIN_LABELS_FOR_CONFIDENCE, FitResult
from .judges.options import LLMOptions
from .judges.pipeline import fit_with_judges
from .sampling import sample_rows
from .validity import CrossFit

__all__ = ["fit_evaluator", "AutoMetricsRegressor", "FitResult", "Evaluator", "LLMOptions", "load_evaluator",
           "score_metrics", "SCORE_COLUMN", "MIN_LABELS_FOR_CONFIDENCE", "CrossFit"]


def fit_evaluator(
    data,
    target: str,
    *,
    task: str | None = None,
    llm: str | None = None,
    llm_options: LLMOptions | None = None,
    input_col: str = "input",
    output_col: str = "output",
    reference_cols: list[str] | None = None,
    id_col: str | None = "id",
    group_col: str | None = None,
    test_size: float | None = None,
    seed: int = 0,
    top_n: int = 5,
    metrics: list[Metric | str] | None = None,
    n_boot: int = 1000,
    regression: str = DEFAULT_REGRESSION,
    progress: bool = False,
    dataset: Dataset | None = None,
    features: tuple[pd.DataFrame, dict, list[str]] | None = None,
    dry_run: bool = False,
    max_rows: int | None = None,
    crossfit: CrossFit | None = None,
    echo=lambda *a, **k: None,
):
    """Fit an evaluator for the label column ``target`` (see the module docstring).

    ``llm`` (a model string) or ``llm_options`` (whose ``llm`` field names the model) turns on
    the LLM path; ``llm`` wins when both are given.  ``metrics`` limits the LLM-free path to
    these MetricBank metrics.  ``dataset``/``features`` let callers (benchmarks, refit jobs)
    reuse a loaded dataset and an already-scored feature matrix across several splits.
    ``regression``: how metrics are selected and weighted — ``nnls`` (default: sign-constrained
    least squares over near-duplicate-collapsed metrics), ``pls`` (the paper's two-stage PLS),
    ``enet``, ``single`` (best metric), ``nnls_nodedup``, or ``auto`` (chosen by grouped CV on
    the training rows).  ``dry_run`` (LLM path only) returns the estimated calls and tokens and makes no call.
    ``echo`` receives progress lines of the LLM path.  ``max_rows``: fit on a seeded sample of at
    most this many labelled rows, made of whole groups (inputs), so the split stays grouped.
    Validation: with ``test_size`` None (default) the evaluator is fitted on every labelled row
    and its validity is cross-fitted (``crossfit``: folds, repeats, permutations; see
    :mod:`autometrics.evaluators.validity`); with ``test_size`` a grouped held-out split is kept.
    """
    with collect_warnings() as shown:  # reading the data may warn too (the estimator collects the fit's own)
        ds = dataset or load_dataset(data, target, input_col=input_col, output_col=output_col, reference_cols=reference_cols,
                                     id_col=id_col, group_col=group_col)
        if target not in ds.targets:
            raise DataError(f"target {target!r} was not loaded; loaded targets: {ds.targets}")
        if max_rows is not None and features is None:
            ds = sample_rows(ds, target, max_rows, seed)
        est = AutoMetricsRegressor(target, task=task, metrics=metrics, llm=llm, llm_options=llm_options, regression=regression,
                                   top_n=top_n, test_size=test_size, crossfit=crossfit, n_boot=n_boot, seed=seed,
                                   input_col=input_col, output_col=output_col, reference_cols=reference_cols, id_col=id_col,
                                   group_col=group_col, progress=progress, echo=echo)
        if dry_run:
            return _dry_run(est, ds)
        result = est.fit(ds, features=features).result_
    result.keep_shown_warnings(shown.messages)
    return result


def _dry_run(est: AutoMetricsRegressor, ds: Dataset) -> dict:
    """What fitting ``est`` (the full method) on ``ds`` would cost: LLM calls and tokens, with
    ``llm_options.warmup`` seconds per stage from one measured call; no other call is made."""
    opts = est.judge_options()
    if opts is None:
        raise UserError("dry_run estimates LLM calls: pass llm= (the LLM-free fit makes none)")
    return fit_with_judges(ds, est.target, opts, progress=est.progress, dry_run=True, echo=est.echo, **est.fit_options())

