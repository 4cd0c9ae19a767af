"""Name -> metric class registry, and the Metric Cards that document each entry."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from .base import Metric, MetricUnavailable
from .errors import MissingFile, NotFound

__all__ = [
    "CARD_SECTIONS",
    "register",
    "get_metric",
    "metric_class",
    "list_metrics",
    "load_card",
    "card_path",
    "missing_card_sections",
    "default_metrics",
    "metric_from_spec",
]

CARDS_DIR = Path(__file__).parent / "cards"

#: The seven sections of a Metric Card (AutoMetrics paper, Appendix on MetricBank).
CARD_SECTIONS = (
    "Metric Details",
    "Intended Use",
    "Metric Implementation",
    "Known Limitations",
    "Related Metrics",
    "Further Reading",
    "Metric Card Authors",
)

_REGISTRY: dict[str, type[Metric]] = {}

# Modules whose import registers metrics.  Kept explicit (not a package scan) so import
# order and cost are predictable.
_METRIC_MODULES = (
    "lexical",
    "ngram",
    "ter",
    "cider",
    "rouge",
    "meteor",
    "simplification",
    "charcut_metric",
    "parent",
    "diversity",
    "surface",
    # model-based metrics (torch/transformers/fasttext imported lazily, inside the metrics)
    "embedding",
    "lm",
    "distribution",
    "classifiers",
    "summaqa",
    "lens",
    "fasttext_metrics",
)
_loaded = False


def register(cls: type[Metric]) -> type[Metric]:
    """Class decorator adding a metric to MetricBank under ``cls.name``."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"metric name {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def _ensure_loaded() -> None:
    global _loaded
    if _loaded:
        return
    for mod in _METRIC_MODULES:
        importlib.import_module(f"{__package__}.{mod}")
    _loaded = True


def list_metrics() -> list[str]:
    _ensure_loaded()
    return sorted(_REGISTRY, key=str.lower)


def metric_class(name: str) -> type[Metric]:
    _ensure_loaded()
    if name in _REGISTRY:
        return _REGISTRY[name]
    lower = {k.lower(): k for k in _REGISTRY}
    if name.lower() in lower:
        return _REGISTRY[lower[name.lower()]]
    import difflib

    close = difflib.get_close_matches(name, list(_REGISTRY), n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(close)}?" if close else " Run `autometrics bank list` to see them."
    raise NotFound(f"no metric named {name!r} in MetricBank.{hint}")


def get_metric(name: str, **params) -> Metric:
    return metric_class(name)(**params)


def metric_from_spec(spec: dict) -> Metric:
    """Rebuild a metric from the ``{"name", "params"}`` spec stored in an evaluator artifact."""
    return get_metric(spec["name"], **spec.get("params", {}))


def default_metrics(
    *, with_reference: bool = True, with_input: bool = True, unavailable: dict[str, str] | None = None
) -> list[Metric]:
    """One instance of every registered metric that the data can feed and that runs here.

    Pass a dict as ``unavailable`` to collect ``{name: reason}`` for the metrics that cannot run
    here (missing weights or packages), so callers can report them.
    """
    out = []
    for name in list_metrics():
        cls = _REGISTRY[name]
        if cls.needs_reference and not with_reference:
            continue
        if cls.needs_input and not with_input:
            continue
        m = cls()
        try:
            m.check_available()
        except MetricUnavailable as exc:
            if unavailable is not None:
                unavailable[name] = str(exc)
            continue
        out.append(m)
    return out


def card_path(name: str) -> Path:
    return CARDS_DIR / f"{re.sub(r'[^A-Za-z0-9_+-]', '_', name)}.md"


def load_card(name: str) -> str:
    cls = metric_class(name)
    path = card_path(cls.name)
    if not path.exists():
        raise MissingFile(f"no Metric Card for {cls.name} (expected {path})")
    return path.read_text(encoding="utf-8")


def missing_card_sections(text: str) -> list[str]:
    """Card sections that are absent or have no content under their ``##`` heading."""
    missing = []
    for section in CARD_SECTIONS:
        m = re.search(rf"^##\s+{re.escape(section)}\s*$(.*?)(?=^##\s|\Z)", text, flags=re.M | re.S)
        if not m or not re.sub(r"^#+.*$", "", m.group(1), flags=re.M).strip():
            missing.append(section)
    return missing
