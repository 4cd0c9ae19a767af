"""Two-stage PLS selection: parity with scikit-learn, invariants, and the selection rules."""

from __future__ import annotations

import numpy as np
import pytest
from autometrics.evaluators.regression import PLSMetricSelector
from sklearn.cross_decomposition import PLSRegression


def _data(n=200, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 8))
    y = 2.0 * X[:, 0] - 1.5 * X[:, 3] + 0.5 * X[:, 5] + rng.normal(scale=0.5, size=n)
    X[:, 1] = 7.0  # constant: unusable
    return X, y


def test_predictions_match_sklearn_pls_on_standardised_selected_columns():
    X, y = _data()
    sel = PLSMetricSelector(top_n=3).fit(X, y)
    Z = (X[:, sel.selected_] - X[:, sel.selected_].mean(0)) / X[:, sel.selected_].std(0)
    ref = PLSRegression(n_components=1, scale=False).fit(Z, y).predict(Z).ravel()
    np.testing.assert_allclose(sel.predict(X), ref, rtol=1e-8, atol=1e-8)


def test_selects_the_informative_metrics_and_skips_constant_ones():
    X, y = _data()
    sel = PLSMetricSelector(top_n=3).fit(X, y)
    assert set(sel.selected_.tolist()) == {0, 3, 5}
    assert not sel.usable_[1]
    assert np.isclose(sel.importance_.sum(), 1.0)
    # a distance-like existing metric keeps its negative sign
    assert sel.coef_[list(sel.selected_).index(3)] < 0


def test_scaling_a_metric_leaves_predictions_unchanged():
    X, y = _data()
    X2 = X.copy()
    X2[:, 0] = X2[:, 0] * 1000 + 5
    a = PLSMetricSelector(top_n=3).fit(X, y).predict(X)
    b = PLSMetricSelector(top_n=3).fit(X2, y).predict(X2)
    np.testing.assert_allclose(a, b, rtol=1e-7, atol=1e-7)


def test_negative_generated_metrics_are_dropped_existing_kept():
    X, y = _data()
    generated = np.zeros(X.shape[1], dtype=bool)
    generated[3] = True  # the negatively related column is now an "LLM judge"
    sel = PLSMetricSelector(top_n=3).fit(X, y, generated=generated)
    assert 3 not in sel.selected_.tolist()
    assert (sel.coef_[generated[sel.selected_]] >= 0).all()
    keep = PLSMetricSelector(top_n=3, drop_negative_generated=False).fit(X, y, generated=generated)
    assert 3 in keep.selected_.tolist()


def test_missing_values_are_imputed_with_train_median():
    X, y = _data()
    X[::7, 0] = np.nan
    sel = PLSMetricSelector(top_n=2).fit(X, y)
    assert np.isfinite(sel.predict(X)).all()
    assert np.isclose(sel.impute_[0], np.nanmedian(X[:, 0]))


def test_errors_are_clear():
    X, y = _data()
    with pytest.raises(ValueError, match="NaN"):
        PLSMetricSelector().fit(X, np.where(np.arange(len(y)) == 3, np.nan, y))
    with pytest.raises(RuntimeError, match="not fitted"):
        PLSMetricSelector().predict(X)
    with pytest.raises(ValueError, match="varies"):
        PLSMetricSelector().fit(np.ones((10, 3)), np.arange(10.0))
