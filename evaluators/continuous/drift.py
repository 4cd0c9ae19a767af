"""Drift statistics for a deployed evaluator (pure functions; the worker stores the alerts).

Two different questions, two signals:

- **Score drift**: are the evaluator's scores on new traces distributed differently from the
  scores it produced at fit time?  Two-sample Kolmogorov-Smirnov test plus the Population
  Stability Index (PSI, reference-decile bins).  KS alone flags tiny shifts on large samples and
  PSI alone has no notion of sample size, so an alert needs both (p < ``ks_alpha`` and PSI >=
  ``psi_alert``).  Drift does not prove the evaluator is wrong: it says the traffic changed.
- **Validity decay**: does the evaluator still agree with *new* human feedback?  Kendall tau of
  its online scores against feedback that arrived after the fit, with a bootstrap CI, compared
  to the tau measured on held-out data at fit time.  An alert when the fit-time tau lies above
  the new window's 95 % CI (agreement dropped beyond noise); a warning when the new window's
  agreement is not significant (p > 0.05).

Every threshold above is a field of :class:`DriftThresholds` (defaults as stated); the
``Monitor`` takes one in its config and ``autometrics worker`` sets them with ``--drift-*`` /
``--validity-*`` flags.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

__all__ = ["DriftThresholds", "psi", "score_drift", "validity_decay"]


@dataclass(frozen=True)
class DriftThresholds:
    """When drift statistics raise an alert or a warning.

    - ``ks_alpha``: score drift needs the two-sample KS p-value below this (default 0.01) ...
    - ``psi_alert``: ... and the PSI at least this (default 0.2; 0.1 = small, 0.25 = large shift).
    - ``min_scores``: no score-drift test with fewer scores than this on either side (default 30).
    - ``validity_min_n``: no validity verdict on fewer new feedback points than this (default 20).
    - ``validity_p``: the new window's agreement is "not significant" (a warning) above this
      p-value (default 0.05).
    """

    ks_alpha: float = 0.01
    psi_alert: float = 0.2
    min_scores: int = 30
    validity_min_n: int = 20
    validity_p: float = 0.05

    def __post_init__(self):
        for name in ("ks_alpha", "validity_p"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and 0 < v < 1):
                raise ValueError(f"drift threshold {name} must be a probability in (0, 1), got {v!r}")
        if not (isinstance(self.psi_alert, int | float) and math.isfinite(self.psi_alert) and self.psi_alert >= 0):
            raise ValueError(f"drift threshold psi_alert must be a finite number >= 0, got {self.psi_alert!r}")
        for name, low in (("min_scores", 2), ("validity_min_n", 3)):
            v = getattr(self, name)
            if not (isinstance(v, int) and not isinstance(v, bool) and v >= low):
                raise ValueError(f"drift threshold {name} must be an integer >= {low}, got {v!r}")

    def to_dict(self) -> dict:
        return asdict(self)


def psi(reference, current, *, bins: int = 10) -> float:
    """Population Stability Index of ``current`` against ``reference`` (quantile bins of the
    reference; 0.1 = small shift, 0.25 = large shift by the usual rule of thumb)."""
    import numpy as np

    ref = np.asarray(reference, dtype=float)
    cur = np.asarray(current, dtype=float)
    ref, cur = ref[np.isfinite(ref)], cur[np.isfinite(cur)]
    if len(ref) < 2 or len(cur) < 2:
        return float("nan")
    edges = np.unique(np.quantile(ref, np.linspace(0, 1, bins + 1)))
    if len(edges) < 2:
        return 0.0 if np.allclose(cur, ref[0]) else float("inf")
    edges[0], edges[-1] = -np.inf, np.inf
    r = np.histogram(ref, edges)[0] / len(ref)
    c = np.histogram(cur, edges)[0] / len(cur)
    eps = 1e-4
    r, c = np.clip(r, eps, None), np.clip(c, eps, None)
    return float(np.sum((c - r) * np.log(c / r)))


def score_drift(reference, current, *, thresholds: DriftThresholds | None = None, alpha: float | None = None,
                psi_alert: float | None = None, min_n: int | None = None) -> dict:
    """KS + PSI between two score samples; ``alert`` is True when both say the shift is real.

    Thresholds come from ``thresholds`` (default :class:`DriftThresholds`); ``alpha``,
    ``psi_alert`` and ``min_n`` override single fields.  The result records the ones used.
    """
    import numpy as np
    from scipy.stats import ks_2samp

    th = thresholds or DriftThresholds()
    alpha = th.ks_alpha if alpha is None else alpha
    psi_alert = th.psi_alert if psi_alert is None else psi_alert
    min_n = th.min_scores if min_n is None else min_n
    ref = np.asarray(reference, dtype=float)
    cur = np.asarray(current, dtype=float)
    ref, cur = ref[np.isfinite(ref)], cur[np.isfinite(cur)]
    out = {"n_reference": int(len(ref)), "n_current": int(len(cur)), "ks": None, "p_value": None, "psi": None,
           "mean_reference": float(ref.mean()) if len(ref) else None, "mean_current": float(cur.mean()) if len(cur) else None,
           "alert": False, "reason": None, "thresholds": {"ks_alpha": alpha, "psi_alert": psi_alert, "min_scores": min_n}}
    if len(ref) < min_n or len(cur) < min_n:
        out["reason"] = f"too few scores to test (reference {len(ref)}, current {len(cur)}; need {min_n} each)"
        return out
    res = ks_2samp(ref, cur, method="asymp")
    out["ks"], out["p_value"] = float(res.statistic), float(res.pvalue)
    p = psi(ref, cur)
    out["psi"] = p if math.isfinite(p) else None
    out["alert"] = bool(res.pvalue < alpha and math.isfinite(p) and p >= psi_alert)
    return out


def validity_decay(pred, human, fit_tau: float | None, *, n_boot: int = 500, seed: int = 0, min_n: int | None = None,
                   thresholds: DriftThresholds | None = None) -> dict:
    """Tau of online scores against new feedback vs the fit-time held-out tau.

    ``level``: ``alert`` (fit-time tau above the new window's CI), ``warning`` (new window not
    significant, p > ``thresholds.validity_p``) or ``ok``; ``None`` when the window has fewer
    than ``thresholds.validity_min_n`` points (``min_n`` overrides it).
    """
    import numpy as np
    from autometrics.evaluators.stats import agreement_from_boot, bootstrap_taus

    th = thresholds or DriftThresholds()
    min_n = th.validity_min_n if min_n is None else min_n

    x, y = np.asarray(pred, dtype=float), np.asarray(human, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if len(y) >= 3:
        a = agreement_from_boot(x, y, bootstrap_taus([x], y, n_boot, seed)[:, 0]).to_dict()
    else:
        a = {"n": int(len(y)), "tau": None, "ci_low": None, "ci_high": None, "p_value": None}
    out = {"window": a, "fit_tau": fit_tau, "level": None, "drop": None,
           "thresholds": {"validity_min_n": min_n, "validity_p": th.validity_p}}
    if a["n"] < min_n or a["tau"] is None:
        return out
    if fit_tau is not None and math.isfinite(fit_tau):
        out["drop"] = fit_tau - a["tau"]
    if fit_tau is not None and a["ci_high"] is not None and fit_tau > a["ci_high"]:
        out["level"] = "alert"
    elif a["p_value"] is None or a["p_value"] > th.validity_p:
        out["level"] = "warning"
    else:
        out["level"] = "ok"
    return out
