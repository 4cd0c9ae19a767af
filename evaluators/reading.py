"""How an evaluator's figures and weights read, the same on every page: the report, the
dashboard and the CLI format numbers and p-values with these functions and read a weight
against its metric's card with :func:`metric_direction`.
"""

from __future__ import annotations

import math

__all__ = ["fmt_number", "fmt_p", "metric_direction", "shape_lines"]


def fmt_number(v, digits: int = 3) -> str:
    """A number for a page: fixed digits, an en dash when missing or not finite."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    return f"{v:.{digits}f}"


def fmt_p(v) -> str:
    """A p-value for a page: two significant digits, scientific below 0.001, a dash when missing."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    return f"{v:.2g}" if v >= 1e-3 else f"{v:.1e}"


def metric_direction(f: dict, n_train: int | None = None) -> dict:
    """How the evaluator uses one selected metric, read against the metric's card.

    The score adds ``weight * z(metric)`` with z the plain standardised value, not flipped by
    ``higher_is_better`` (:meth:`Evaluator.contributions`), so the weight's sign alone says which
    way the metric moves the score; ``higher_is_better`` is the card's claim (MetricBank's class
    attribute, per sub-score; True for LLM judges), recorded in the artifact at fit time.  NNLS
    gives each weight the sign of the metric's train τ, so a weight against the card means the
    humans preferred the other direction on this feedback.  Returns ``uses`` (the direction the
    evaluator uses), ``card``, ``contradicts`` and a one-line ``reading``.
    """
    name, w = f["feature"], float(f["weight"])
    card_higher = bool(f.get("higher_is_better", True))
    card = "higher is better" if card_higher else "lower is better"
    if w == 0 or not math.isfinite(w):
        return {"uses": "no effect (weight 0)", "card": card, "contradicts": False,
                "reading": f"{name} has weight 0: it does not move the score."}
    up = w > 0
    uses = "higher value raises the score" if up else "lower value raises the score"
    t = f.get("tau_train")
    t = float(t) if isinstance(t, int | float) and math.isfinite(t) else None
    on = "fit-time training split" + (f" (n={n_train})" if n_train is not None else "")
    tau = "" if t is None else f" (its τ with the labels on the {on}: {t:+.2f})"
    if up == card_higher:
        reading = (f"a higher {name} raises the score, as its card expects" if up else
                   f"negative weight on a lower-is-better metric: a lower {name} raises the score, as its card expects "
                   "(the usual direction, not a penalty)")
        return {"uses": uses, "card": card, "contradicts": False, "reading": reading}
    hi, lo = ("higher", "lower") if up else ("lower", "higher")
    if t is not None and t != 0 and (t > 0) != up:  # e.g. PLS: the weight goes against the metric's own τ
        why = f"its own τ points the other way{tau}: the weight corrects for the other metrics, read it only together with them"
    else:
        why = f"on this feedback humans preferred {hi} {name}{tau}: a task-specific signal, not the card's notion of quality"
    reading = f"contradicts its card: a {hi} {name} raises the score although the card says {lo} is better; {why}"
    return {"uses": uses, "card": card, "contradicts": True, "reading": reading}


def shape_lines(a: dict, points: int = 6) -> list[str]:
    """One line per shape of a shape model's artifact: the metric's contribution at ``points``
    values spread over its bins (and for a missing value), then each pairwise term's range."""
    import numpy as np

    from .shapes import shape_contribution

    out = []
    for f in a["features"]:
        shape = f.get("shape")
        if not shape:
            continue
        cuts = np.asarray(shape["cuts"], dtype=float)
        if len(cuts):
            xs = np.unique(cuts[np.linspace(0, len(cuts) - 1, min(points, len(cuts))).round().astype(int)])
        else:
            xs = np.array([f["mean"]])
        ys = shape_contribution(shape, xs)
        miss = float(np.asarray(shape["scores"], dtype=float)[0])
        steps = ", ".join(f"{x:.3g} → {y:+.3f}" for x, y in zip(xs, ys, strict=True))
        out.append(f"{f['feature']}: {steps}; missing → {miss:+.3f}")
    for p in a.get("pairs") or []:
        t = np.asarray(p["scores"], dtype=float)[1:-1, 1:-1]
        out.append(f"{p['features'][0]} × {p['features'][1]}: a joint term from {t.min():+.3f} to {t.max():+.3f} "
                   "(added to both metrics' shapes)")
    return out
