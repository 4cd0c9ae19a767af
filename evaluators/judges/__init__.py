"""The LLM half of AutoMetrics: generated judges, metric retrieval, and the fit that uses them.

- ``options``: :class:`LLMOptions` and the generator counts (light: no DSPy import).
- ``metric``: :class:`LLMJudgeMetric`, a generated judge as a MetricBank-style metric (its spec,
  card, prompts, logprob or JSON scoring).
- ``generate``: the paper's generators (single criterion, rubric, example-based, MIPROv2).
- ``retrieve``: the retrieval policy (cheap MetricBank metrics always, model-based ones by measured
  signal; :func:`score_bank`), and BM25 + dense ranking of Metric Cards (its tie-break).
- ``code_metric`` / ``sandbox`` / ``exemplar``: code metrics written by the LLM and run in a
  sandbox, and the nearest-exemplar metric: candidates screened like the judges.
- ``candidates`` / ``screening``: candidate features (judges, code metrics, exemplar metrics) and
  the successive-halving screening that scores them on a few training rows before paying for more.
- ``budget``: the server's measured speed, cost estimates, budget plans and the budget tracker.
- ``artifact``: every candidate's fate and cost, the judges' entries in the evaluator artifact.
- ``pipeline``: retrieve -> generate -> screen -> regress -> validate (:func:`fit_with_judges`).

Evaluator artifacts name the judge class as ``autometrics.evaluators.judges:LLMJudgeMetric``;
that name is kept stable here, so artifacts written by any version load.
"""

from __future__ import annotations


def __getattr__(name: str):
    # lazy: importing the package (e.g. for LLMOptions) must not load the judge machinery
    if name == "LLMJudgeMetric":
        from .metric import LLMJudgeMetric

        return LLMJudgeMetric
    raise AttributeError(f"module 'autometrics.evaluators.judges' has no attribute {name!r}")
