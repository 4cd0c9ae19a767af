"""autometrics: interpretable evaluators induced from human feedback (the AutoMetrics method),
embedded in an LLM observability stack.

The import root is light: heavy parts (scikit-learn, MetricBank, pandas) load on first use.

    import autometrics
    result = autometrics.fit_evaluator("data.csv", target="score")
    scores = result.evaluator.score(df)   # a DataFrame with input/output(/reference) columns
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "fit_evaluator",
    "load_evaluator",
    "load_dataset",
    "Evaluator",
    "AutoMetricsRegressor",
    # the error hierarchy (autometrics.metricbank.errors): what an application may catch
    "AutometricsError",
    "UserError",
    "DataError",
    # capture (autometrics.capture; needs the `observe` extra)
    "configure",
    "observe",
    "instrument",
    "current_trace_id",
    "current_span_id",
    "update_current_span",
    "set_input",
    "set_output",
    "feedback",
    "feedback_schema",
    "flush",
    "shutdown",
    "trace_attributes",
    "update_current_trace",
    "in_context",
    "ContextThreadPoolExecutor",
    "propagate_threads",
    "stop_propagating_threads",
]

_OBSERVE_NAMES = frozenset(__all__[__all__.index("configure"):]) | {"stats", "training_frame"}


def __getattr__(name: str):
    # Lazy re-exports keep `import autometrics` fast (no pandas/sklearn at import time).
    if name in ("fit_evaluator", "Evaluator", "load_evaluator", "AutoMetricsRegressor"):
        from autometrics.evaluators import fit as _fit

        return getattr(_fit, name)
    if name in _OBSERVE_NAMES:
        # OpenTelemetry loads only when capture is first used
        from autometrics import capture as _capture

        return getattr(_capture, name)
    if name in ("AutometricsError", "UserError", "DataError"):
        from autometrics.metricbank import errors as _errors

        return getattr(_errors, name)
    if name == "load_dataset":
        from autometrics.evaluators.data import load_dataset

        return load_dataset
    raise AttributeError(f"module 'autometrics' has no attribute {name!r}")
