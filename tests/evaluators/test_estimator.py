"""AutoMetricsRegressor: the scikit-learn contract (clone, get_params/set_params, NotFittedError,
fitted ``*_`` attributes), the same evaluator as ``fit_evaluator`` on the same rows, and
scikit-learn model selection with groups.  Bounded: a 90-row SimpEval sample scored with a few
LLM-free MetricBank metrics."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from autometrics.evaluators.benchmark.interface import MetricFeatures
from autometrics.evaluators.data import load_dataset
from autometrics.evaluators.estimator import AutoMetricsRegressor, tau_scorer
from autometrics.evaluators.fit import fit_evaluator
from autometrics.evaluators.judges.options import LLMOptions
from autometrics.evaluators.regression import PLSMetricSelector
from autometrics.evaluators.selection import ElasticNetMetricSelector, NNLSMetricSelector, SingleMetricSelector
from autometrics.evaluators.validity import CrossFit
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GroupKFold, cross_val_score

METRICS = ["FKGL", "LengthRatio", "InputSimilarity", "NovelNGramRatio", "OutputLength"]
#: cheap validation: these tests check the estimator, not the validity statistics
FAST = CrossFit(folds=3, repeats=1, permutations=0, n_boot=0)


@pytest.fixture(scope="module")
def rows(datasets_dir) -> pd.DataFrame:
    frame = pd.read_csv(datasets_dir / "simpeval.csv")
    keep = sorted(frame["input"].drop_duplicates().sample(15, random_state=0))
    return frame[frame["input"].isin(keep)].head(90).reset_index(drop=True)


def _est(**kw) -> AutoMetricsRegressor:
    return AutoMetricsRegressor("score", metrics=METRICS, crossfit=FAST, n_boot=0, **kw)


def test_params_round_trip_and_clone():
    opts = LLMOptions(llm="openai/m@http://localhost:1/v1", use_bank="never")
    est = AutoMetricsRegressor("score", task="Simplify", llm_options=opts, top_n=3, seed=7, reference_cols=["reference"])
    params = est.get_params()
    assert params["target"] == "score" and params["top_n"] == 3 and params["llm_options"] is opts
    assert AutoMetricsRegressor(**params).get_params() == params  # __init__ only stores its parameters
    twin = clone(est)
    assert twin is not est and twin.get_params().keys() == params.keys()
    assert twin.llm_options == opts and twin.llm_options is not opts  # a deep copy, equal settings
    assert twin.set_params(top_n=4, llm=None).top_n == 4
    assert est.top_n == 3
    assert est.judge_options() == opts
    assert est.set_params(llm="openai/other@http://localhost:1/v1").judge_options().llm.startswith("openai/other")
    assert AutoMetricsRegressor().judge_options() is None


def test_not_fitted_error(rows):
    est = _est()
    with pytest.raises(NotFittedError):
        est.predict(rows)
    with pytest.raises(NotFittedError):
        est.predict_usage()


def test_fit_predict_equals_fit_evaluator_on_the_same_rows(rows):
    est = _est().fit(rows, rows["score"])
    assert est.evaluator_ is est.result_.evaluator and est.features_ == [f["feature"] for f in est.evaluator_.features]
    assert set(est.validity_) >= {"validated", "tau", "method"}
    pred = est.predict(rows)
    assert pred.shape == (len(rows),) and np.isfinite(pred).all()

    ref = fit_evaluator(rows, "score", metrics=METRICS, crossfit=FAST, n_boot=0)
    a, b = est.evaluator_.artifact, ref.evaluator.artifact
    for key in ("features", "intercept", "method", "statistics", "validity", "dataset", "label", "columns"):
        assert a[key] == b[key], key
    assert np.array_equal(pred, ref.evaluator.score(rows)["autometrics_score"].to_numpy())
    assert ref.train.equals(est.result_.train)
    timing = ["seconds"]  # how long each metric took to score: the only column two fits may differ in
    assert ref.candidates.drop(columns=timing).equals(est.result_.candidates.drop(columns=timing))

    # the labels may also come from X's target column, and a loaded Dataset is read as it is
    assert np.array_equal(_est().fit(rows).predict(rows), pred)
    ds = load_dataset(rows, "score")
    assert np.array_equal(_est().fit(ds).predict(ds), pred)


def test_fits_on_exactly_the_rows_given(rows):
    half = rows.iloc[: len(rows) // 2]
    est = _est().fit(half, half["score"].to_numpy())
    art = est.evaluator_.artifact
    assert art["dataset"]["n_labelled"] == len(half) and art["dataset"]["n_train"] == len(half)
    assert art["label"]["min"] == half["score"].min() and art["label"]["max"] == half["score"].max()
    assert np.isfinite(est.predict(rows.iloc[len(rows) // 2:])).all()


def test_groups_given_to_fit(rows):
    groups = np.arange(len(rows)) // 10  # 9 groups of 10 rows, not the inputs
    est = _est().fit(rows, rows["score"], groups=groups)
    assert est.evaluator_.artifact["dataset"]["n_groups"] == 9
    assert est.evaluator_.artifact["method"]["split"] == "grouped by the groups given to fit"
    with pytest.raises(ValueError, match="one group per row"):
        _est().fit(rows, rows["score"], groups=groups[:-1])


def test_feature_cache_gives_the_same_evaluator(rows):
    cache = MetricFeatures(METRICS)
    a = _est(feature_cache=cache).fit(rows, rows["score"])
    b = _est().fit(rows, rows["score"])
    assert a.evaluator_.artifact["features"] == b.evaluator_.artifact["features"]
    assert np.allclose(a.predict(rows), b.predict(rows), rtol=0, atol=1e-12)


def test_cross_val_score_with_group_kfold(rows):
    groups = rows["input"].to_numpy()
    cv = GroupKFold(n_splits=3)
    taus = cross_val_score(_est(), rows, rows["score"], groups=groups, cv=cv, scoring=tau_scorer)
    assert taus.shape == (3,) and np.isfinite(taus).all() and (np.abs(taus) <= 1).all()
    # each fold is the estimator fitted on the other folds' rows: the same figure by hand
    first_train, first_test = next(cv.split(rows, rows["score"], groups))
    est = _est().fit(rows.iloc[first_train], rows["score"].iloc[first_train])
    assert taus[0] == pytest.approx(tau_scorer(est, rows.iloc[first_test], rows["score"].iloc[first_test]), abs=1e-12)
    r2 = cross_val_score(_est(), rows, rows["score"], groups=groups, cv=cv)  # RegressorMixin's R²
    assert np.isfinite(r2).all()


def test_bad_input_is_refused(rows):
    with pytest.raises(TypeError, match="DataFrame"):
        _est().fit(rows.to_numpy(), rows["score"])
    with pytest.raises(ValueError, match="one label per row"):
        _est().fit(rows, rows["score"].to_numpy()[:-1])


@pytest.mark.parametrize("selector", [PLSMetricSelector(top_n=3), NNLSMetricSelector(top_n=2, dedup_threshold=None),
                                      ElasticNetMetricSelector(top_n=4, seed=3), SingleMetricSelector()])
def test_selectors_are_estimators(selector):
    twin = clone(selector)
    assert twin.get_params() == selector.get_params() and type(twin) is type(selector)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 6))
    y = X[:, 0] - 0.5 * X[:, 1] + rng.normal(scale=0.3, size=40)
    a, b = selector.fit(X, y), twin.fit(X, y)
    assert np.array_equal(a.predict(X), b.predict(X))
    assert not hasattr(clone(a), "coef_")  # a clone carries the settings, not the fit
