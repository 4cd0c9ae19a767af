"""NNLS / elastic-net metric selection and the honest regression choice, on synthetic data whose
structure is known: signs, duplicates, judges, and a hand-computed NNLS."""

from __future__ import annotations

import numpy as np
import pytest
from autometrics.evaluators import selection as S
from autometrics.evaluators.selection import (
    ElasticNetMetricSelector,
    NNLSMetricSelector,
    SingleMetricSelector,
    choose_regression,
)
from autometrics.evaluators.stats import kendall_tau
from scipy.optimize import nnls


def _data(n=240, seed=0):
    """y rises with metric 0 and 2, falls with metric 1 (a distance); 3 and 4 are noise; 5 is constant."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 6))
    y = 1.5 * X[:, 0] - 1.0 * X[:, 1] + 0.7 * X[:, 2] + rng.normal(scale=0.6, size=n)
    X[:, 5] = 3.0
    return X, y


def _pos(sel, j) -> int:
    return list(sel.selected_).index(j)


def test_negative_relation_gets_negative_weight_and_signs_agree_with_train_tau():
    X, y = _data()
    sel = NNLSMetricSelector(top_n=3).fit(X, y)
    assert set(sel.selected_.tolist()) == {0, 1, 2}
    assert sel.coef_[_pos(sel, 1)] < 0 < sel.coef_[_pos(sel, 0)]
    for j, c in zip(sel.selected_, sel.coef_, strict=True):
        assert np.sign(c) == np.sign(kendall_tau(X[:, j], y)[0])
    assert not sel.usable_[5] and sel.orientation_[5] == 0
    assert sel.predict(X[:7]).shape == (7,)
    assert sel.transform_selected(X[:7]).shape == (7, 3)
    assert np.isclose(sel.importance_.sum(), 1.0)
    assert sel.n_features_in_ == 6 and sel.stage1_coef_.shape == (6,)


def test_matches_a_hand_nnls_on_a_tiny_case():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(30, 3))
    y = X[:, 0] - 0.5 * X[:, 1] + 0.1 * rng.normal(size=30)
    sel = NNLSMetricSelector(top_n=3, dedup_threshold=None).fit(X, y)
    Z = (X - X.mean(0)) / X.std(0)
    s = np.sign([kendall_tau(X[:, j], y)[0] for j in range(3)])
    w = nnls(Z * s, y - y.mean())[0]
    keep = np.flatnonzero(w > 0)
    expect = {j: w[j] * s[j] for j in keep}
    got = dict(zip(sel.selected_.tolist(), sel.coef_, strict=True))
    assert set(got) == set(expect.keys())
    for j in got:
        assert np.isclose(got[j], expect[j], rtol=1e-8)
    np.testing.assert_allclose(sel.predict(X), (Z[:, keep] * s[keep]) @ w[keep] + y.mean(), rtol=1e-8, atol=1e-10)
    assert sel.intercept_ == pytest.approx(y.mean())


def test_near_duplicates_are_collapsed_and_recorded():
    X, y = _data()
    rng = np.random.default_rng(1)
    dup = X[:, 0] * 2.0 + 0.01 * rng.normal(size=len(y))  # a rescaled copy of metric 0
    anti = -X[:, 0] + 0.01 * rng.normal(size=len(y))  # a distance version of it (|rho| ~ 1)
    X2 = np.column_stack([X, dup, anti])
    sel = NNLSMetricSelector(top_n=3).fit(X2, y)
    chosen = set(sel.selected_.tolist())
    assert len(chosen & {0, 6, 7}) == 1  # one representative of the cluster enters
    rep = (chosen & {0, 6, 7}).pop()
    assert sorted(sel.represents_[rep]) == sorted({0, 6, 7} - {rep})
    assert {1, 2} <= chosen  # the other top-n slots go to distinct signals
    off = NNLSMetricSelector(top_n=3, dedup_threshold=None).fit(X2, y)
    assert all(v == [] for v in off.represents_.values())


def test_a_near_duplicate_with_measured_added_value_comes_back():
    """Output length and the output/input length ratio rank rows almost alike (|rho| > 0.9) but
    the labels depend on both: the collapsed one is given back by the nested F-test, and a
    near-copy that adds nothing stays collapsed."""
    rng = np.random.default_rng(3)
    n = 600
    length = rng.lognormal(4.0, 0.6, n)
    source = rng.lognormal(5.0, 0.15, n)
    ratio = length / source
    copy = length * 1.5 + rng.normal(0, 0.5, n)  # the same signal, rescaled

    def z(v):
        return (v - v.mean()) / v.std()

    y = z(length) + z(ratio) + rng.normal(0, 0.6, n)
    X = np.column_stack([length, ratio, copy, rng.normal(size=n)])
    from autometrics.evaluators.selection import abs_spearman

    assert abs_spearman(X[:, :3]).min() > 0.9
    sel = NNLSMetricSelector(top_n=1).fit(X, y)
    assert len(sel.restored_) == 1 and set(sel.selected_.tolist()) >= {0, 1}  # length and ratio both in
    assert 2 not in sel.selected_  # the rescaled copy adds nothing given the others
    assert all(r not in sel.represents_[j] for j in sel.selected_ for r in sel.restored_)
    plain = NNLSMetricSelector(top_n=1, restore_alpha=0).fit(X, y)
    assert len(plain.selected_) == 1 and plain.restored_ == []


def test_leader_clusters_groups_by_threshold():
    rho = np.array([[1.0, 0.95, 0.2], [0.95, 1.0, 0.3], [0.2, 0.3, 1.0]])
    assert S.leader_clusters([4, 7, 9], rho, 0.9) == {4: [7], 9: []}
    assert S.leader_clusters([4, 7, 9], rho, None) == {4: [], 7: [], 9: []}


@pytest.mark.parametrize("cls", [NNLSMetricSelector, ElasticNetMetricSelector])
def test_generated_metric_with_negative_tau_is_never_selected(cls):
    X, y = _data()
    generated = np.zeros(6, dtype=bool)
    generated[1] = True  # the strongly, negatively related metric is now an LLM judge
    sel = cls(top_n=5).fit(X, y, generated=generated)
    assert 1 not in sel.selected_.tolist()
    assert all(c > 0 for j, c in zip(sel.selected_, sel.coef_, strict=True) if generated[j])
    # a judge that agrees with the labels may enter, with a positive weight
    generated = np.zeros(6, dtype=bool)
    generated[0] = True
    sel = cls(top_n=5).fit(X, y, generated=generated)
    assert 0 in sel.selected_.tolist() and sel.coef_[_pos(sel, 0)] > 0


def test_judge_kept_when_negative_dropping_is_off():
    X, y = _data()
    generated = np.zeros(6, dtype=bool)
    generated[1] = True
    sel = NNLSMetricSelector(top_n=3, drop_negative_generated=False).fit(X, y, generated=generated)
    assert 1 in sel.selected_.tolist() and sel.coef_[_pos(sel, 1)] < 0


def test_missing_values_imputed_and_scaling_invariant():
    X, y = _data()
    X[::9, 0] = np.nan
    a = NNLSMetricSelector(top_n=3).fit(X, y)
    X2 = X.copy()
    X2[:, 2] = X2[:, 2] * 1000 - 4
    b = NNLSMetricSelector(top_n=3).fit(X2, y)
    assert np.isfinite(a.predict(X)).all()
    np.testing.assert_allclose(a.predict(X), b.predict(X2), rtol=1e-7, atol=1e-7)


def test_elastic_net_and_single_interfaces():
    X, y = _data()
    en = ElasticNetMetricSelector(top_n=2).fit(X, y)
    assert len(en.selected_) <= 2 and set(en.selected_.tolist()) <= {0, 1, 2}
    assert en.predict(X).shape == (len(y),)
    one = SingleMetricSelector().fit(X, y)
    assert one.selected_.tolist() == [0] and one.coef_[0] > 0


def test_bad_input_raises():
    X, y = _data()
    with pytest.raises(ValueError, match="NaN"):
        NNLSMetricSelector().fit(X, np.where(np.arange(len(y)) == 3, np.nan, y))
    with pytest.raises(ValueError, match="top_n"):
        NNLSMetricSelector(top_n=0).fit(X, y)
    with pytest.raises(ValueError, match="varies"):
        NNLSMetricSelector().fit(np.ones((10, 3)), np.arange(10.0))
    with pytest.raises(RuntimeError, match="not fitted"):
        NNLSMetricSelector().predict(X)
    with pytest.raises(ValueError, match="metric columns"):
        NNLSMetricSelector().fit(X, y).predict(X[:, :3])


def test_choose_regression_only_sees_train_rows_and_keeps_groups_apart(monkeypatch):
    X, y = _data(n=150)
    groups = np.repeat(np.arange(50), 3)  # three outputs per input
    train = np.arange(105)  # the caller's train split; rows 105+ are its test split
    seen = []
    real = S.make_selector

    class Spy:
        def __init__(self, inner):
            self.inner = inner

        def fit(self, Xf, yf, generated=None):
            seen.append(("fit", Xf.copy()))
            self.inner.fit(Xf, yf, generated=generated)
            return self

        def predict(self, Xp):
            seen.append(("predict", Xp.copy()))
            return self.inner.predict(Xp)

    monkeypatch.setattr(S, "make_selector", lambda name, **kw: Spy(real(name, **kw)))
    choice = choose_regression(X[train], y[train], groups[train], None, candidates=("nnls", "pls"))
    assert choice.name in ("nnls", "pls") and np.isfinite(choice.tau)
    assert set(choice.scores) == {"nnls", "pls"} and all(len(v) == 5 for v in choice.scores.values())
    train_rows = {r.tobytes() for r in X[train]}
    row_group = {X[i].tobytes(): groups[i] for i in train}
    for (kind_f, Xf), (kind_p, Xp) in zip(seen[::2], seen[1::2], strict=True):
        assert (kind_f, kind_p) == ("fit", "predict")
        assert all(r.tobytes() in train_rows for r in np.vstack([Xf, Xp]))  # never a test row
        assert len(Xf) + len(Xp) == len(train)
        assert not {row_group[r.tobytes()] for r in Xf} & {row_group[r.tobytes()] for r in Xp}


def test_choose_regression_prefers_simpler_with_few_labels():
    X, y = _data(n=60)
    groups = np.arange(60) // 2
    choice = choose_regression(X, y, groups, None, candidates=("nnls", "pls", "single"))
    assert "one-standard-error" in choice.note
    assert choice.to_dict()["name"] == choice.name
    big = choose_regression(X, y, groups, None, candidates=("nnls", "pls"), n_labels=500)
    assert "best mean" in big.note
    assert big.tau == pytest.approx(max(np.mean(v) for v in big.scores.values()))
    with pytest.raises(ValueError, match="unknown regression"):
        choose_regression(X, y, groups, None, candidates=("ridge",))


def test_required_columns_enter_oriented_by_their_tau_and_do_not_count_against_top_n():
    """A judge that passed screening (required) is not lost to first-stage weights among
    correlated bank metrics, and one that reliably disagrees enters reversed."""
    rng = np.random.default_rng(3)
    n = 120
    y = rng.normal(size=n)
    bank = np.column_stack([y + 0.5 * rng.normal(size=n) for _ in range(6)])  # six strong, correlated metrics
    judge_up = y + 1.5 * rng.normal(size=n)
    judge_down = -y + 1.5 * rng.normal(size=n)
    X = np.column_stack([bank, judge_up, judge_down])
    generated = [False] * 6 + [True, True]
    plain = NNLSMetricSelector(top_n=2).fit(X, y, generated=generated)
    assert 7 not in plain.selected_.tolist()  # a disagreeing judge is dropped without `required`
    sel = NNLSMetricSelector(top_n=2).fit(X, y, generated=generated, required=[6, 7])
    chosen = sel.selected_.tolist()
    assert 6 in chosen and 7 in chosen
    assert len([j for j in chosen if j < 6]) <= 2  # the bank still gets at most top_n places
    coef = dict(zip(chosen, sel.coef_, strict=True))
    assert coef[6] > 0 and coef[7] < 0  # the disagreeing judge is used reversed
    assert np.corrcoef(sel.predict(X), y)[0, 1] > np.corrcoef(plain.predict(X), y)[0, 1]
