"""Scoring a batch of texts with a list of metrics, and rebuilding metrics from artifact specs.

:func:`score_metrics` is what the fit, the evaluator and the reward call to turn texts into a
feature matrix: one metric that cannot run (missing dependency, a bug, bad data) is skipped with
a note, never a crash of the whole batch.  :func:`metric_from_artifact_spec` rebuilds a metric
from an evaluator artifact, importing only MetricBank and the generated-judge class.
"""

from __future__ import annotations

import importlib
import logging
import time

import numpy as np
import pandas as pd

from ..metricbank import Metric, MetricUnavailable, metric_from_spec
from ..metricbank.errors import UserError
from .judges.metric import LLMJudgeMetric, prefetch_row_major

__all__ = ["score_metrics", "metric_from_artifact_spec"]

log = logging.getLogger("autometrics")


# Metric classes outside MetricBank that an artifact may name (generated judges, code metrics,
# the nearest-exemplar metric).  Only these are imported: an artifact never makes us import
# arbitrary code.
_FACTORIES = {"autometrics.evaluators.judges:LLMJudgeMetric", "autometrics.evaluators.code_metric:CodeMetric",
              "autometrics.evaluators.exemplar:ExemplarMetric"}
# where artifacts written before these classes found their module name them: read the same
_FACTORY_HOMES = {"autometrics.evaluators.judges.code_metric:CodeMetric": "autometrics.evaluators.code_metric:CodeMetric",
                  "autometrics.evaluators.judges.exemplar:ExemplarMetric": "autometrics.evaluators.exemplar:ExemplarMetric"}


def metric_from_artifact_spec(spec: dict) -> Metric:
    factory = spec.get("factory")
    if not factory:
        return metric_from_spec(spec)
    factory = _FACTORY_HOMES.get(factory, factory)
    if factory not in _FACTORIES:
        raise UserError(f"evaluator names an unknown metric factory {factory!r}")
    module, cls = factory.split(":")
    return getattr(importlib.import_module(module), cls)(**spec.get("params", {}))


def _progress(iterable, *, total: int, desc: str, enabled: bool):
    if not enabled:
        return iterable
    from tqdm.auto import tqdm

    # disable=None: no bar when stderr is not a terminal (a log file would get every redraw and no
    # line end before the next line)
    return tqdm(iterable, total=total, desc=desc, unit="metric", leave=False, disable=None)


def is_llm_judge(metric) -> bool:
    """A metric that asks an LLM (a generated judge): its calls have budgets, sampling and rate
    limits that only one process can keep."""
    return hasattr(metric, "spec") and hasattr(metric, "llm_config")


def _ask_judges_row_major(metrics: list[Metric], outputs, inputs) -> None:
    """Generated LLM judges of one model are asked about one example after another, all criteria
    of an example in a row (as the fit does), so a server's prefix cache evaluates each example's
    text once; each judge's ``score`` then reads its prefetched replies.  A judge that already
    holds replies for these rows (the fit prefetched them) is not asked again."""
    judges = [m for m in metrics if getattr(m, "generated", False) and hasattr(m, "_prefetched") and hasattr(m, "requests")]
    if len(judges) < 2:
        return

    def norm(x):
        return "" if x is None or (isinstance(x, float) and np.isnan(x)) else str(x)

    keys = list(zip([norm(o) for o in outputs], [norm(i) for i in (inputs or [""] * len(outputs))], strict=True))
    by_model: dict[str, list] = {}
    for j in judges:
        if isinstance(j, LLMJudgeMetric) and not all(k in j._prefetched for k in keys):
            by_model.setdefault(j.llm_config.model, []).append(j)
    for group in by_model.values():
        try:
            prefetch_row_major(group, outputs, inputs)
        except Exception as exc:  # each judge then asks on its own, as before
            log.warning("asking the judges row by row failed (%s); they ask one after another", exc)


def score_metrics(
    metrics: list[Metric],
    outputs: list[str],
    inputs: list[str] | None,
    references: list[list[str]] | None,
    *,
    progress: bool = False,
) -> tuple[pd.DataFrame, dict[str, dict], list[str]]:
    """Score a batch with every metric.  A metric that cannot run (missing dependency, a bug,
    bad data) is skipped with a note, never a crash of the whole batch.

    Returns (features frame, feature metadata by column, notes about skipped metrics).
    """
    columns: dict[str, np.ndarray] = {}
    meta: dict[str, dict] = {}
    notes: list[str] = []
    _ask_judges_row_major(metrics, outputs, inputs)
    for metric in _progress(metrics, total=len(metrics), desc="scoring metrics", enabled=progress):
        if metric.needs_reference and references is None:
            notes.append(f"{metric.name}: skipped, the data has no references")
            continue
        if metric.needs_input and inputs is None:
            notes.append(f"{metric.name}: skipped, the data has no inputs")
            continue
        started = time.perf_counter()
        try:
            metric.check_available()
            values = metric.score_all(outputs, inputs=inputs, references=references)
        except MetricUnavailable as exc:
            notes.append(f"{metric.name}: unavailable here ({exc})")
            continue
        except Exception as exc:  # one broken metric must not sink the fit
            log.warning("metric %s failed: %s", metric.name, exc, exc_info=True)
            notes.append(f"{metric.name}: failed ({type(exc).__name__}: {exc})")
            continue
        seconds = time.perf_counter() - started
        for fname, fsig, hib in zip(metric.feature_names(), metric.feature_signatures(), metric.feature_higher_is_better(), strict=True):
            columns[fname] = values[fname]
            meta[fname] = {
                "feature": fname,
                "signature": fsig,
                "metric": metric.to_spec(),
                "submetric": fname.split(".", 1)[1] if "." in fname and metric.submetrics else None,
                "higher_is_better": hib,
                "generated": bool(getattr(metric, "generated", False)),
                "seconds": seconds / max(1, len(metric.feature_names())),
            }
    return pd.DataFrame(columns, index=range(len(outputs))), meta, notes
