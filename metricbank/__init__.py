"""MetricBank: classic evaluation metrics behind one batch interface, each with a Metric Card.

The names below load on first use (PEP 562), so importing :mod:`.errors`, the package's error
hierarchy that lives in this bottom stage, does not load numpy: the CLI names errors before it
loads anything heavy.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "Metric": "base", "MetricUnavailable": "base", "as_references": "base",
    "CARD_SECTIONS": "registry", "default_metrics": "registry", "get_metric": "registry", "list_metrics": "registry",
    "load_card": "registry", "metric_class": "registry", "metric_from_spec": "registry",
    "missing_card_sections": "registry", "register": "registry",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
