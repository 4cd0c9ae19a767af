"""Benchmarking the evaluator against baselines on the same grouped splits: ``baselines`` (best
existing metric, MetaMetrics-style XGBoost, frozen encoder + head, LLM judge, DnA-Eval,
AutoMetrics) and ``harness`` (``autometrics benchmark``: seeds, tau ± CI, cost, JSON/Markdown)."""
