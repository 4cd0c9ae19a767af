"""Two-stage PLS metric selection (AutoMetrics, Section 3): standardise every candidate metric,
fit a one-component PLS regression to the human scores, keep the top-n metrics by |weight|, and
refit on those.  Generated (LLM-judge) metrics with a negative weight are dropped, since a judge
is written so that higher means better; existing metrics keep their sign (a distance legitimately
gets a negative weight).

Example::

    sel = PLSMetricSelector(top_n=5).fit(X_train, y_train, generated=[False] * X_train.shape[1])
    sel.selected_, sel.coef_, sel.predict(X_test)
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin

from ..metricbank.errors import UserError

__all__ = ["LinearSelector", "PLSMetricSelector", "prepare"]


def _pls_1(Z: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """One-component PLS on already-standardised Z: coefficients and intercept such that
    ``Z @ coef + intercept`` equals scikit-learn's ``PLSRegression.predict``."""
    from sklearn.cross_decomposition import PLSRegression

    pls = PLSRegression(n_components=1, scale=False)
    pls.fit(Z, y)
    coef = np.asarray(pls.coef_, dtype=float).reshape(-1)
    if coef.shape[0] != Z.shape[1]:  # older scikit-learn stores (n_features, n_targets)
        coef = np.asarray(pls.coef_, dtype=float).T.reshape(-1)
    # PLS predicts (Z - mean of Z's training columns) @ coef + intercept_; that mean is what it centres by
    x_mean = np.asarray(Z, dtype=float).mean(axis=0)
    intercept = float(np.ravel(pls.intercept_)[0]) - float(x_mean @ coef)
    return coef, intercept


def prepare(X, y, generated):
    """Validated arrays plus the train median imputation and standardisation (as PLS does)."""
    X = np.asarray(X, dtype=float)
    y = np.asarray(y, dtype=float)
    if X.ndim != 2 or y.ndim != 1 or X.shape[0] != y.shape[0]:
        raise UserError(f"X must be (n_examples, n_metrics) with n_examples={y.shape[0]}, got {X.shape}")
    if np.isnan(y).any():
        raise UserError("y contains NaN: drop unlabelled rows before fitting")
    p = X.shape[1]
    generated = np.zeros(p, dtype=bool) if generated is None else np.asarray(generated, dtype=bool)
    if generated.shape != (p,):
        raise UserError(f"generated must have one flag per metric ({p}), got {generated.shape}")
    with np.errstate(all="ignore"):
        impute = np.nanmedian(X, axis=0)
    Xi = np.where(np.isnan(X), impute, X)
    mean = Xi.mean(axis=0)
    scale = Xi.std(axis=0)
    usable = np.isfinite(impute) & np.isfinite(scale) & (scale > 1e-12)
    if not usable.any():
        raise UserError("no candidate metric varies on the training rows; nothing to regress on")
    safe_scale = np.where(usable, scale, 1.0)
    Z = np.where(usable, (Xi - mean) / safe_scale, 0.0)
    return X, y, generated, impute, mean, safe_scale, usable, Z


class LinearSelector(RegressorMixin, BaseEstimator):
    """Base of every selector (here and in :mod:`.selection`), the scoring half: ``predict = transform_selected(X) @ coef_ + intercept_``.

    A scikit-learn estimator: subclasses' ``__init__`` only store their settings, so
    ``get_params``, ``set_params`` and ``sklearn.base.clone`` work on every selector."""

    def _store(self, p, impute, mean, scale, usable, stage1, selected, coef, intercept) -> None:
        self.n_features_in_ = p
        self.impute_ = impute
        self.mean_ = mean
        self.scale_ = scale
        self.usable_ = usable
        self.stage1_coef_ = stage1
        self.selected_ = np.asarray(selected, dtype=int)
        self.coef_ = np.asarray(coef, dtype=float)
        self.intercept_ = float(intercept)

    def _check_fitted(self) -> None:
        if not hasattr(self, "coef_"):
            raise RuntimeError(f"{type(self).__name__} is not fitted; call fit(X, y) first")

    def transform_selected(self, X) -> np.ndarray:
        """Imputed, standardised values of the selected metrics."""
        self._check_fitted()
        X = np.asarray(X, dtype=float)
        if X.ndim != 2 or X.shape[1] != self.n_features_in_:
            raise UserError(f"X must have {self.n_features_in_} metric columns, got shape {X.shape}")
        sel = self.selected_
        Xs = np.where(np.isnan(X[:, sel]), self.impute_[sel], X[:, sel])
        return (Xs - self.mean_[sel]) / self.scale_[sel]

    def predict(self, X) -> np.ndarray:
        return self.transform_selected(X) @ self.coef_ + self.intercept_

    @property
    def importance_(self) -> np.ndarray:
        """Share (sum 1) of each selected metric in the prediction: |weight| on standardised scale."""
        self._check_fitted()
        a = np.abs(self.coef_)
        return a / a.sum() if a.sum() > 0 else np.full(len(a), 1.0 / len(a))



class PLSMetricSelector(LinearSelector):
    """scikit-learn style estimator: ``__init__`` stores settings, ``fit`` learns the ``*_`` state."""

    def __init__(self, *, top_n: int = 5, drop_negative_generated: bool = True):
        self.top_n = top_n
        self.drop_negative_generated = drop_negative_generated

    def fit(self, X, y, *, generated=None) -> PLSMetricSelector:
        if self.top_n < 1:
            raise UserError(f"top_n must be >= 1, got {self.top_n}")
        X, y, generated, impute, mean, safe_scale, usable, Z = prepare(X, y, generated)
        p = X.shape[1]

        cols = np.flatnonzero(usable)
        stage1, _ = _pls_1(Z[:, cols], y)
        stage1_coef = np.full(p, np.nan)
        stage1_coef[cols] = stage1

        candidates = [j for j in cols if not (self.drop_negative_generated and generated[j] and stage1_coef[j] < 0)]
        if not candidates:
            raise UserError("every candidate metric was dropped (negative-weight generated metrics only)")
        ranked = sorted(candidates, key=lambda j: -abs(stage1_coef[j]))
        selected = ranked[: self.top_n]
        while True:
            coef, intercept = _pls_1(Z[:, selected], y)
            bad = [j for j, c in zip(selected, coef, strict=True) if self.drop_negative_generated and generated[j] and c < 0]
            if not bad or len(bad) == len(selected):
                break
            selected = [j for j in selected if j not in bad]

        self._store(p, impute, mean, safe_scale, usable, stage1_coef, selected, coef, intercept)
        return self
