"""Evaluators: the AutoMetrics method (data, regression, evaluator artifact, report)."""
