"""Cross-fitted validity (autometrics.evaluators.validity and fit_on_features): tests that cannot
pass by luck.

Real MetricBank scores of shared human-judgment data (SimpEval: several outputs per input, so
groups of several sizes after sampling) with (a) the real labels, (b) labels shuffled across
groups, (c) constant features, at 40, 80 and 160 labels; plus synthetic data whose signal is known.
Every fit is seeded, so each outcome is deterministic; the bounds on shuffled labels are what a
5 % test allows over the number of fits made here, not tuned to the observed count."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from autometrics.evaluators.data import load_dataset
from autometrics.evaluators.features import score_metrics
from autometrics.evaluators.fit import fit_evaluator
from autometrics.evaluators.validity import (
    MIN_GROUPS,
    CrossFit,
    crossfit,
    crossfit_validity,
    fold_plan,
    group_permutation,
    holdout_validity,
)
from autometrics.metricbank import default_metrics

FAST = CrossFit(folds=5, repeats=2, permutations=99, n_boot=200)


@pytest.fixture(scope="module")
def simpeval(datasets_dir):
    """SimpEval with every CPU MetricBank metric scored once (reference-free and reference-based)."""
    ds = load_dataset(datasets_dir / "simpeval.csv", "score")
    lab = ds.labelled("score")
    bank = default_metrics(with_reference=lab.has_references, with_input=lab.has_input)
    X, meta, notes = score_metrics(bank, lab.outputs, lab.inputs, lab.references)
    return lab, X, meta, notes


def _sample(lab, X, n, seed):
    """About n labelled rows made of whole groups: SimpEval's inputs have several outputs each, and
    a random set of groups gives groups of several sizes."""
    from autometrics.evaluators.sampling import sample_groups

    pos = sample_groups(lab.frame["group"].to_numpy(), n, seed)
    return lab.subset(pos), X.iloc[pos].reset_index(drop=True)


def _fit(sub, Xs, meta, notes, *, y=None, seed=0, cf=FAST):
    if y is not None:
        sub = sub.subset(np.arange(len(sub)))
        sub.frame["score"] = y
    return fit_evaluator(None, "score", dataset=sub, features=(Xs, meta, notes), seed=seed, crossfit=cf, n_boot=cf.n_boot)


# ----------------------------------------------------------------------------- the machinery


def test_group_permutation_moves_whole_groups_between_groups_of_equal_size():
    groups = np.array(["a"] * 3 + ["b"] * 3 + ["c"] * 2 + ["d"] * 2 + ["e"])
    rng = np.random.default_rng(0)
    seen_moves = set()
    for _ in range(50):
        src = group_permutation(groups, rng)
        assert sorted(src) == list(range(len(groups)))  # a permutation
        for g in np.unique(groups):
            rows = np.flatnonzero(groups == g)
            donors = {groups[s] for s in src[rows]}
            assert len(donors) == 1, "a group's labels come from one group only"
            donor = donors.pop()
            assert (groups == donor).sum() == len(rows), "labels move only between groups of the same size"
            seen_moves.add((g, donor))
    assert ("a", "b") in seen_moves and ("c", "d") in seen_moves
    assert ("e", "e") in seen_moves  # a group whose size is unique stays


def test_folds_keep_groups_whole_and_every_row_gets_an_out_of_fold_prediction():
    rng = np.random.default_rng(1)
    groups = np.repeat(np.arange(30), rng.integers(1, 5, 30)).astype(str)
    y = rng.normal(size=len(groups))
    plan = fold_plan(groups, CrossFit(folds=5, repeats=3), seed=0)
    assert len(plan) == 3
    for fid in plan:
        for g in np.unique(groups):
            assert len(set(fid[groups == g])) == 1
    seen = []

    def fit_predict(tr, te, yy):
        assert not set(groups[tr]) & set(groups[te])
        seen.append(len(te))
        return np.full(len(te), yy[tr].mean())

    oof = crossfit(fit_predict, y, plan)
    assert np.isfinite(oof).all() and sum(seen) == 3 * len(y)


def test_signal_is_validated_and_noise_is_not_on_synthetic_data():
    rng = np.random.default_rng(2)
    n = 60
    groups = np.repeat(np.arange(20), 3).astype(str)
    y = rng.normal(size=n)
    x_signal = y + rng.normal(scale=1.0, size=n)
    plan = fold_plan(groups, FAST, seed=0)
    lin = lambda x: (lambda tr, te, yy: np.polyval(np.polyfit(x[tr], yy[tr], 1), x[te]))  # noqa: E731
    v, _ = crossfit_validity(lin(x_signal), y, groups, plan, FAST)
    assert v.validated and v.p_value <= 0.05 and v.tau > 0.2, v.reason
    noise_validated = 0
    for s in range(10):
        x_noise = np.random.default_rng(100 + s).normal(size=n)
        v, _ = crossfit_validity(lin(x_noise), y, groups, plan, FAST, seed=s)
        noise_validated += v.validated
        assert v.validated or "not above chance" in v.reason or "no agreement above 0" in v.reason
    assert noise_validated <= 2  # 10 fits at a 5 % level


def test_holdout_validity_uses_a_group_block_null():
    rng = np.random.default_rng(3)
    groups = np.repeat(np.arange(15), 2).astype(str)
    y = rng.normal(size=30)
    v = holdout_validity(y + rng.normal(scale=0.5, size=30), y, groups, FAST)
    assert v.validated and v.method == "holdout" and v.n_groups == 15
    v = holdout_validity(-y, y, groups, FAST)
    assert not v.validated and v.p_value == 1.0


def test_too_few_groups_is_never_validated():
    y = np.array([1.0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12])
    groups = np.repeat(["a", "b", "c", "d"], 3)
    v, _ = crossfit_validity(lambda tr, te, yy: te.astype(float), y, groups, fold_plan(groups, FAST), FAST)
    assert v.n_groups == 4 < MIN_GROUPS and not v.validated
    assert f"at least {MIN_GROUPS} different inputs" in v.reason


# ----------------------------------------------------------------------------- fits on real data


@pytest.mark.parametrize("n", [40, 80, 160])
def test_shuffled_labels_are_not_validated(simpeval, n):
    """Labels moved between groups (whole blocks) carry no signal: at a 5 % level at most 1 of 6
    fits per size may pass, and the shipped evaluator says it is unvalidated everywhere."""
    lab, X, meta, notes = simpeval
    validated = 0
    for seed in range(6):
        sub, Xs = _sample(lab, X, n, seed)
        y = sub.y("score")[group_permutation(sub.frame["group"].to_numpy(), np.random.default_rng(seed))]
        res = _fit(sub, Xs, meta, notes, y=y, seed=seed)
        v = res.evaluator.validity
        validated += v["validated"]
        if not v["validated"]:
            assert any(w.startswith("not validated:") for w in res.evaluator.artifact["warnings"])
            assert v["method"] == "cross-fit" and v["n_labels"] == len(sub) and v["n_groups"] == sub.frame["group"].nunique()
    assert validated <= 1


@pytest.mark.parametrize("n", [40, 80, 160])
def test_constant_features_are_not_validated(simpeval, n):
    lab, X, meta, notes = simpeval
    sub, Xs = _sample(lab, X, n, 0)
    const = pd.DataFrame({c: np.where(np.arange(len(Xs)) == 0, 1.0, 1.0) for c in Xs.columns[:3]})
    const.iloc[0, 0] = 2.0  # one row differs: "usable", but carries nothing
    res = _fit(sub, const, {c: meta[c] for c in const.columns}, notes)
    assert not res.evaluator.validity["validated"]


@pytest.mark.parametrize("n,at_least", [(80, 2), (160, 3)])
def test_real_signal_is_validated_and_the_evaluator_uses_every_row(simpeval, n, at_least):
    """SimpEval's reference-based metrics carry the human signal (held-out τ ≈ 0.35 on all 360
    rows): the cross-fit finds it on every 160-label sample tried and on most 80-label ones (a
    13-input sample can be one where the metrics say little: τ 0.05 on seed 1)."""
    lab, X, meta, notes = simpeval
    validated = 0
    for seed in range(3):
        sub, Xs = _sample(lab, X, n, seed)
        res = _fit(sub, Xs, meta, notes, seed=seed)
        a = res.evaluator.artifact
        v = res.evaluator.validity
        validated += v["validated"]
        assert v["validated"] == (v["p_value"] <= 0.05 and v["tau"] > 0 and v["ci"][0] > 0), v
        assert a["dataset"]["n_train"] == len(sub) and a["dataset"]["n_test"] == 0
        assert a["statistics"]["train"]["n"] == len(sub)  # the shipped evaluator saw every label
        assert a["statistics"]["test"]["method"] == "cross-fit" and a["statistics"]["test"]["tau"] == v["tau"]
        assert len(res.test) == len(sub) and res.test["score"].notna().all()  # an out-of-fold score for every row
        assert v["ci"][0] < v["tau"] < v["ci"][1] and v["folds"] == 5 and v["repeats"] == FAST.repeats
    assert validated >= at_least


def test_real_signal_at_40_labels_reports_what_would_help(simpeval):
    """At 40 labels (6 SimpEval inputs) a sample validates or not depending on the draw and on
    which metrics can run here; an unvalidated one always says what would help."""
    lab, X, meta, notes = simpeval
    for seed in range(3):
        sub, Xs = _sample(lab, X, 40, seed)
        v = _fit(sub, Xs, meta, notes, seed=seed).evaluator.validity
        assert v["validated"] or "labels" in v["reason"] or "stronger model" in v["reason"], v["reason"]
        assert v["n_groups"] == sub.frame["group"].nunique() and v["n_labels"] == len(sub)


def test_test_size_keeps_the_holdout_protocol(simpeval):
    lab, X, meta, notes = simpeval
    sub, Xs = _sample(lab, X, 120, 0)
    res = fit_evaluator(None, "score", dataset=sub, features=(Xs, meta, notes), test_size=0.3, crossfit=FAST, n_boot=200)
    a = res.evaluator.artifact
    assert a["validity"]["method"] == "holdout" and a["method"]["validation"] == "holdout"
    assert a["dataset"]["n_test"] > 0 and a["dataset"]["n_train"] + a["dataset"]["n_test"] == len(sub)
    assert a["statistics"]["test"]["n"] == a["dataset"]["n_test"] == a["validity"]["n_labels"]


def test_legacy_artifact_without_validity_reads_its_holdout():
    from autometrics.evaluators.evaluator import Evaluator

    art = {"format": "autometrics.evaluator", "format_version": 1, "statistics": {"test": {"tau": 0.3, "p_value": 0.2, "n": 30}}}
    v = Evaluator(art).validity
    assert v["validated"] is False and "holdout" in v["method"]
    art["statistics"]["test"]["p_value"] = 0.001
    assert Evaluator(art).validated


def test_auto_regression_is_chosen_inside_each_fold(simpeval, monkeypatch):
    """With ``--regression auto`` the choice of procedure is part of what is cross-fitted: each
    fold chooses on its own training rows, the shipped evaluator on every row."""
    import autometrics.evaluators.induce as induce

    lab, X, meta, notes = simpeval
    sub, Xs = _sample(lab, X, 80, 0)
    seen = []
    real = induce.choose_regression

    def spy(Xt, y, groups, generated, **kw):
        seen.append(len(y))
        return real(Xt, y, groups, generated, **kw)

    monkeypatch.setattr(induce, "choose_regression", spy)
    cf = CrossFit(folds=4, repeats=1, permutations=0, n_boot=0)
    res = fit_evaluator(None, "score", dataset=sub, features=(Xs, meta, notes), regression="auto", crossfit=cf, n_boot=0)
    assert seen[0] == len(sub) and len(seen) == 1 + 4 and all(n < len(sub) for n in seen[1:])
    v = res.evaluator.validity
    assert not v["validated"] and "not tested against chance" in v["reason"]


def test_the_permutation_test_has_a_time_limit(simpeval):
    lab, X, meta, notes = simpeval
    sub, Xs = _sample(lab, X, 80, 0)
    cf = CrossFit(repeats=1, permutations=99, n_boot=0, max_seconds=0.0)
    v = fit_evaluator(None, "score", dataset=sub, features=(Xs, meta, notes), crossfit=cf, n_boot=0).evaluator.validity
    assert v["permutations"] == 1 and v["p_value"] in (0.5, 1.0)  # one permutation: p is 1/2 or 1
    assert not v["validated"] and "over 1 permutations" in v["reason"]


def test_groups_that_cannot_be_exchanged_are_said_not_tested():
    """Every input has a different number of labelled outputs: no group-block permutation exists,
    so the verdict says the fit cannot be tested instead of calling it "not above chance"."""
    rng = np.random.default_rng(5)
    groups = np.repeat(np.arange(8), np.arange(1, 9)).astype(str)
    y = rng.normal(size=len(groups))
    x = y + rng.normal(scale=0.3, size=len(groups))
    v, _ = crossfit_validity(lambda tr, te, yy: x[te], y, groups, fold_plan(groups, FAST), FAST)
    assert v.tau > 0.5 and not v.validated and "cannot be tested against chance" in v.reason


def test_a_nested_choice_is_validated_as_one_procedure():
    """The choice between two procedures is made inside each fold, on its training rows alone:
    the signal procedure is chosen and validated; two noise procedures are not validated by
    taking the better one; no choice ever sees the rows it then predicts."""
    from autometrics.evaluators.validity import crossfit_validity, nested_choice

    rng = np.random.default_rng(7)
    groups = np.repeat(np.arange(30), 2).astype(str)
    y = rng.normal(size=60)
    plan = fold_plan(groups, FAST, seed=0)
    seen: list[tuple[set, set]] = []

    def lin(x):
        def fit_predict(tr, te, yy):
            seen.append((set(tr.tolist()), set(te.tolist())))
            return np.polyval(np.polyfit(x[tr], yy[tr], 1), x[te])
        return fit_predict

    signal = y + rng.normal(scale=1.0, size=60)
    chosen: list[int] = []
    v, _ = crossfit_validity(nested_choice([lin(rng.normal(size=60)), lin(signal)], groups, record=chosen), y, groups,
                             plan, FAST)
    n_folds = sum(len(np.unique(f)) for f in plan)
    assert v.validated and sum(chosen[:n_folds]) >= n_folds - 1
    assert all(not (tr & te) for tr, te in seen)
    # the outer fold's rows are never in an inner fit: every fit of the first outer fold stays inside its training rows
    outer_te = set(np.flatnonzero(plan[0] == 0).tolist())
    assert all(not (tr & outer_te) for tr, _ in seen[: 2 * 3 + 1])
    passed = 0
    for s in range(8):
        noise = np.random.default_rng(50 + s)
        v, _ = crossfit_validity(nested_choice([lin(noise.normal(size=60)), lin(noise.normal(size=60))], groups, seed=s),
                                 y, groups, plan, FAST, seed=s)
        passed += v.validated
    assert passed <= 1


def test_a_single_metric_beating_the_evaluator_beyond_noise_is_said():
    """The evaluator's cross-fitted τ next to the best single metric's on the same folds: a fold
    procedure that ranks badly (here one that reads the best metric upside down) loses to the
    metric alone by far more than noise, and the fit says so in its warnings; a paired CI near
    zero says nothing."""
    from autometrics.evaluators.induce import fit_on_features, paired_difference

    rng = np.random.default_rng(3)
    n = 80
    df = pd.DataFrame({"input": [f"q{i // 2}" for i in range(n)], "output": [f"a{i}" for i in range(n)],
                       "score": rng.normal(size=n)})
    ds = load_dataset(df, "score")
    y = ds.labelled("score").y("score")
    X = pd.DataFrame({"good": y + rng.normal(scale=0.5, size=n), "noise": rng.normal(size=n)})
    meta = {c: {"feature": c, "signature": c, "metric": None, "submetric": None, "generated": False,
                "higher_is_better": True, "seconds": 0.0} for c in X.columns}
    res = fit_on_features(ds, "score", (X, meta, []), n_boot=200, crossfit=FAST,
                          fold_fit=lambda Xa, tr, te, yy: -Xa[te, 0])
    best = res.evaluator.statistics["best_single_metric"]
    assert best["feature"] == "good" and best["vs_evaluator"]["beats_beyond_noise"]
    assert any("the best single metric, good, agrees with the labels better than the evaluator beyond noise" in w
               for w in res.evaluator.artifact["warnings"])
    same = paired_difference([X["good"].to_numpy()], [X["good"].to_numpy() + 1e-9 * rng.normal(size=n)], y,
                             ds.labelled("score").frame["group"], 200, 0)
    assert not same["beats_beyond_noise"] and abs(same["difference"]) < 0.01
