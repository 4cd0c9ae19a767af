"""MetricBank: classic evaluation metrics behind one batch interface, each with a Metric Card."""

from .base import Metric, MetricUnavailable, as_references
from .registry import (
    CARD_SECTIONS,
    default_metrics,
    get_metric,
    list_metrics,
    load_card,
    metric_class,
    metric_from_spec,
    missing_card_sections,
    register,
)

__all__ = [
    "CARD_SECTIONS",
    "Metric",
    "MetricUnavailable",
    "as_references",
    "default_metrics",
    "get_metric",
    "list_metrics",
    "load_card",
    "metric_class",
    "metric_from_spec",
    "missing_card_sections",
    "register",
]
