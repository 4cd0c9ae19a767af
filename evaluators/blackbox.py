"""The black-box reference: gradient-boosted trees over the same metric values.

Why it exists: the evaluator is a few weighted metrics, readable by design.  To show a user what
that readability costs, every fit also reports, on the same split, a MetaMetrics-style
regressor over *all* candidate metrics (XGBoost when installed, CPU-only wheel
``xgboost-cpu``; scikit-learn's HistGradientBoosting in the benchmark when it is not).  The
benchmark's ``metametrics`` baseline uses the same model, so the two figures agree.
"""

from __future__ import annotations

import importlib.util

import numpy as np

__all__ = ["xgboost_version", "gbm_model", "single_threaded", "blackbox_reference"]

GBM_DEFAULTS = {"n_estimators": 200, "max_depth": 3, "learning_rate": 0.05}


def xgboost_version() -> str | None:
    if importlib.util.find_spec("xgboost") is None:
        return None
    import xgboost

    return xgboost.__version__


def single_threaded():
    """Limit BLAS/OpenMP to one thread: the models here are small, and on a shared machine
    multi-threaded OpenBLAS/OpenMP oversubscribes (measured on 2 busy cores: ridge CV 15-40 s
    with default threads vs 1.2 s with one; a HistGradientBoostingRegressor fit 10.8 s vs 0.9 s)."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1)


def gbm_model(backend: str, seed: int, *, n_estimators: int = 200, max_depth: int = 3, learning_rate: float = 0.05):
    """A fresh gradient-boosting regressor (NaN handled natively): ``xgboost`` or ``sklearn``."""
    if backend == "xgboost":
        import xgboost

        return xgboost.XGBRegressor(n_estimators=n_estimators, max_depth=max_depth, learning_rate=learning_rate,
                                    subsample=0.8, colsample_bytree=0.8, min_child_weight=2.0, reg_lambda=1.0,
                                    tree_method="hist", n_jobs=1, random_state=seed)
    from sklearn.ensemble import HistGradientBoostingRegressor

    return HistGradientBoostingRegressor(max_iter=n_estimators, max_depth=max_depth, learning_rate=learning_rate,
                                         min_samples_leaf=5, l2_regularization=1.0, early_stopping=False, random_state=seed)


def blackbox_reference(X_train, y_train, X_test, *, seed: int = 0) -> tuple[np.ndarray, str] | None:
    """Test-split predictions of XGBoost trained on the train split over every candidate metric,
    and its name; None when xgboost is not installed (the fit then reports no reference)."""
    version = xgboost_version()
    if version is None:
        return None
    with single_threaded():
        model = gbm_model("xgboost", seed, **GBM_DEFAULTS).fit(np.asarray(X_train, dtype=float), np.asarray(y_train, dtype=float))
        pred = model.predict(np.asarray(X_test, dtype=float))
    return np.asarray(pred, dtype=float), f"XGBoost {version} over all {np.shape(X_train)[1]} candidate metrics"
