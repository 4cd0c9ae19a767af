"""Agreement statistics between predicted and human scores: Kendall's tau-b with a p-value and a
percentile-bootstrap 95 % confidence interval."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

__all__ = ["Agreement", "kendall_tau", "agreement"]


@dataclass
class Agreement:
    n: int
    tau: float
    ci_low: float
    ci_high: float
    p_value: float

    def to_dict(self) -> dict:
        return {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in asdict(self).items()}

    def __str__(self) -> str:
        return f"tau={self.tau:.3f} [95% CI {self.ci_low:.3f}, {self.ci_high:.3f}] p={self.p_value:.3g} n={self.n}"


def kendall_tau(pred, human) -> tuple[float, float]:
    """Kendall's tau-b and its two-sided p-value; NaN pairs are dropped; NaN when undefined."""
    from scipy.stats import kendalltau

    pred = np.asarray(pred, dtype=float)
    human = np.asarray(human, dtype=float)
    ok = ~(np.isnan(pred) | np.isnan(human))
    if ok.sum() < 3 or np.ptp(pred[ok]) == 0 or np.ptp(human[ok]) == 0:
        return float("nan"), float("nan")
    res = kendalltau(pred[ok], human[ok])
    return float(res.statistic), float(res.pvalue)


def agreement(pred, human, *, n_boot: int = 1000, seed: int = 0) -> Agreement:
    """tau-b with a percentile bootstrap CI over examples (resampled with replacement)."""
    pred = np.asarray(pred, dtype=float)
    human = np.asarray(human, dtype=float)
    ok = ~(np.isnan(pred) | np.isnan(human))
    pred, human = pred[ok], human[ok]
    tau, p = kendall_tau(pred, human)
    n = len(pred)
    if not np.isfinite(tau) or n_boot <= 0:
        return Agreement(n, tau, float("nan"), float("nan"), p)
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(n_boot):
        idx = rng.integers(0, n, n)
        t, _ = kendall_tau(pred[idx], human[idx])
        if np.isfinite(t):
            boots.append(t)
    if len(boots) < n_boot // 2:
        return Agreement(n, tau, float("nan"), float("nan"), p)
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return Agreement(n, tau, float(lo), float(hi), p)
