"""The metric contract every MetricBank entry (and, later, every generated judge) follows.

A metric scores a *batch* of examples and returns one float per example.  Multi-output
metrics (ROUGE-1/2/L, ...) declare ``submetrics`` and return one array per sub-score; each
sub-score becomes its own feature in the regression.

Example::

    m = get_metric("BLEU")
    m.score(["the cat sat"], references=[["the cat sat down"]])   # -> array([...])
    m.signature()                                                  # 'BLEU|tok:13a|smooth:exp|v:1'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from .errors import Unavailable, UserError

__all__ = ["Metric", "MetricUnavailable", "as_references"]


class MetricUnavailable(Unavailable):
    """Raised at construction or first use when a metric cannot run in this environment
    (missing optional package, missing model weights, ...).  The message says how to fix it."""


def as_references(references, n: int) -> list[list[str]]:
    """Normalise references to one list of strings per example.

    Accepts ``None``, a list of strings (one reference each) or a list of lists.  Empty or
    missing entries become ``[]`` (the metric then yields NaN for that row, never 0).
    """
    if references is None:
        return [[] for _ in range(n)]
    if len(references) != n:
        raise UserError(f"got {len(references)} reference entries for {n} outputs; pass one entry per output")
    out: list[list[str]] = []
    for refs in references:
        if refs is None or (isinstance(refs, float) and math.isnan(refs)):
            out.append([])
        elif isinstance(refs, str):
            out.append([refs] if refs.strip() else [])
        else:
            out.append([r for r in refs if isinstance(r, str) and r.strip()])
    return out


def _fmt(v) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (list, tuple)):
        return ",".join(_fmt(x) for x in v)
    return str(v)


class Metric:
    """Base class: subclasses set the class attributes and implement :meth:`_compute`.

    ``__init__`` only stores keyword parameters (they go into the signature), so a metric can
    be rebuilt from ``(name, params)`` stored in an evaluator artifact.
    """

    name: ClassVar[str] = ""
    version: ClassVar[str] = "1"
    higher_is_better: ClassVar[bool] = True
    needs_reference: ClassVar[bool] = False
    needs_input: ClassVar[bool] = False
    #: names of the sub-scores for multi-output metrics; empty for a single score
    submetrics: ClassVar[tuple[str, ...]] = ()
    #: per-submetric direction when it differs from ``higher_is_better``
    submetric_higher_is_better: ClassVar[dict[str, bool]] = {}
    #: True when one example's score depends on the rest of the batch (corpus statistics such
    #: as CIDEr's document frequencies, SelfBLEU's other outputs)
    batch_dependent: ClassVar[bool] = False
    #: short one-line description, shown by ``autometrics bank list``
    description: ClassVar[str] = ""
    #: abbreviations used in the signature, e.g. {"smooth_method": "smooth"}
    signature_keys: ClassVar[dict[str, str]] = {}

    def __init__(self, **params):
        self.params = dict(params)

    # ----------------------------------------------------------------- identity
    def signature(self) -> str:
        """Name + every parameter that changes the number + version: feature name and cache key."""
        parts = [self.name]
        for key in sorted(self.params):
            parts.append(f"{self.signature_keys.get(key, key)}:{_fmt(self.params[key])}")
        parts.append(f"v:{self.version}")
        return "|".join(parts)

    def feature_names(self) -> list[str]:
        """Readable feature labels: ``BLEU`` or ``ROUGE.rouge1``, ``ROUGE.rougeL`` ..."""
        if not self.submetrics:
            return [self.name]
        return [f"{self.name}.{s}" for s in self.submetrics]

    def feature_signatures(self) -> list[str]:
        sig = self.signature()
        if not self.submetrics:
            return [sig]
        return [f"{sig}#{s}" for s in self.submetrics]

    def feature_higher_is_better(self) -> list[bool]:
        if not self.submetrics:
            return [self.higher_is_better]
        return [self.submetric_higher_is_better.get(s, self.higher_is_better) for s in self.submetrics]

    def check_available(self) -> None:
        """Raise :class:`MetricUnavailable` if this metric cannot run here.  Default: it can."""

    def to_spec(self) -> dict:
        return {"name": self.name, "params": dict(self.params), "signature": self.signature()}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.signature()}>"

    # ------------------------------------------------------------------ scoring
    def score_all(
        self,
        outputs: Sequence[str],
        inputs: Sequence[str] | None = None,
        references=None,
    ) -> dict[str, np.ndarray]:
        """Score a batch; returns ``{feature_name: float array of len(outputs)}``.

        Rows that lack something the metric needs (a reference, an input) get NaN.
        """
        outputs = ["" if o is None or (isinstance(o, float) and math.isnan(o)) else str(o) for o in outputs]
        n = len(outputs)
        if inputs is None:
            if self.needs_input:
                raise UserError(f"metric {self.name} needs the inputs (the prompts/sources); pass inputs=")
            inputs_l = [""] * n
        else:
            if len(inputs) != n:
                raise UserError(f"got {len(inputs)} inputs for {n} outputs; pass one input per output")
            inputs_l = ["" if i is None or (isinstance(i, float) and math.isnan(i)) else str(i) for i in inputs]
        refs = as_references(references, n)
        if self.needs_reference and references is None:
            raise UserError(f"metric {self.name} needs references; pass references= (one list per output)")

        rows = list(range(n))
        if self.needs_reference:
            rows = [i for i in rows if refs[i]]
        names = self.feature_names()
        result = {k: np.full(n, np.nan, dtype=float) for k in names}
        if not rows:
            return result
        sub_out = [outputs[i] for i in rows]
        sub_in = [inputs_l[i] for i in rows]
        sub_refs = [refs[i] for i in rows]
        raw = self._compute(sub_out, sub_in, sub_refs)
        if not isinstance(raw, dict):
            raw = {names[0] if not self.submetrics else self.submetrics[0]: raw}
        for sub, values in raw.items():
            key = sub if sub in result else f"{self.name}.{sub}"
            if key not in result:
                raise KeyError(f"metric {self.name} returned unknown sub-score {sub!r}")
            arr = np.asarray(values, dtype=float)
            if arr.shape != (len(rows),):
                raise ValueError(f"metric {self.name} returned {arr.shape} scores for {len(rows)} rows")
            result[key][rows] = arr
        return result

    def score(self, outputs: Sequence[str], inputs: Sequence[str] | None = None, references=None) -> np.ndarray:
        """One float per example (for multi-output metrics, the first sub-score)."""
        return next(iter(self.score_all(outputs, inputs=inputs, references=references).values()))

    def _compute(self, outputs: list[str], inputs: list[str], references: list[list[str]]):
        """Return an array of len(outputs), or a dict sub-score -> array.  Rows passed here
        always have what the metric needs (non-empty references when ``needs_reference``)."""
        raise NotImplementedError
