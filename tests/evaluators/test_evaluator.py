"""End-to-end LLM-free fit on real data, the JSON artifact, and scoring with a loaded evaluator."""

from __future__ import annotations

import json

import numpy as np
import pytest
from autometrics.evaluators.fit import SCORE_COLUMN, Evaluator, fit_evaluator
from autometrics.metricbank import get_metric


@pytest.fixture(scope="module")
def simpeval_fit():
    return fit_evaluator("demo:simpeval", "score", task="Simplify a sentence", n_boot=200)


def test_fit_on_demo_data_produces_a_validated_evaluator(simpeval_fit):
    ev = simpeval_fit.evaluator
    st = ev.statistics
    assert 1 <= len(ev.features) <= 5
    # fitted on every row; agreement cross-fitted on every row (each predicted by a fit without it)
    assert st["test"]["n"] == st["train"]["n"] == 360 and st["test"]["method"] == "cross-fit"
    assert st["test"]["ci_low"] <= st["test"]["tau"] <= st["test"]["ci_high"]
    # the evaluator must beat chance out of sample on this dataset
    assert st["test"]["tau"] > 0.1 and st["test"]["p_value"] < 0.05 and ev.validated
    assert ev.validity["n_groups"] == 60 and ev.validity["tau"] == st["test"]["tau"]
    assert abs(sum(f["importance"] for f in ev.features) - 1) < 1e-9
    assert ev.artifact["dataset"]["fingerprint"].startswith("sha256:")
    assert ev.artifact["package_version"]


def test_artifact_is_plain_json_and_round_trips(simpeval_fit, tmp_path):
    path = simpeval_fit.evaluator.save(tmp_path / "evaluator.json")
    raw = json.loads(path.read_text())
    assert raw["format"] == "autometrics.evaluator" and raw["format_version"] == 1
    for f in raw["features"]:
        assert {"signature", "metric", "mean", "scale", "impute", "weight"} <= set(f)
        assert f["signature"].startswith(f["metric"]["name"])
    loaded = Evaluator.load(tmp_path)
    assert loaded.artifact == raw


def test_loaded_evaluator_reproduces_fit_predictions(simpeval_fit, tmp_path):
    simpeval_fit.evaluator.save(tmp_path / "evaluator.json")
    ev = Evaluator.load(tmp_path / "evaluator.json")
    scored = ev.score("demo:simpeval")
    assert len(scored) == 360 and SCORE_COLUMN in scored
    by_id = scored.set_index("id")[SCORE_COLUMN]
    shipped = simpeval_fit.train  # the evaluator's own scores of the rows it was fitted on (every row)
    np.testing.assert_allclose(by_id.loc[shipped["id"]].to_numpy(), shipped["score"].to_numpy(), rtol=1e-6, atol=1e-6)
    for f in ev.features:
        assert f["feature"] in scored.columns


def test_score_texts_handles_empty_outputs(simpeval_fit):
    ev = simpeval_fit.evaluator
    out = ev.score_texts(["", "a short simple sentence."], inputs=["a long complex sentence here.", "a long complex sentence here."], references=[["a simple sentence."], ["a simple sentence."]])
    assert np.isfinite(out[SCORE_COLUMN]).all()


def test_artifact_from_newer_format_is_refused(simpeval_fit):
    art = dict(simpeval_fit.evaluator.artifact, format_version=99)
    with pytest.raises(ValueError, match="upgrade"):
        Evaluator(art)


def test_fit_without_references_uses_reference_free_metrics(datasets_dir):
    res = fit_evaluator(datasets_dir / "evalgen_product.csv", "grade", n_boot=100)
    for f in res.evaluator.features:
        assert not get_metric(f["metric"]["name"]).needs_reference
    assert res.evaluator.artifact["columns"]["references"] == []
    assert res.evaluator.statistics["n_candidates"] >= 5


def test_broken_metric_is_skipped_not_fatal():
    from autometrics.metricbank import Metric

    class Broken(Metric):
        name = "Broken"

        def _compute(self, outputs, inputs, references):
            raise RuntimeError("boom")

    res = fit_evaluator("demo:simpeval", "score", metrics=[Broken(), get_metric("OutputLength"), get_metric("LengthRatio")], n_boot=50)
    assert any("Broken: failed" in w for w in res.evaluator.artifact["warnings"])
    assert {f["metric"]["name"] for f in res.evaluator.features} <= {"OutputLength", "LengthRatio"}


def test_default_regression_is_sign_constrained_and_recorded(simpeval_fit):
    """NNLS by default; each weight agrees in sign with its metric's train tau, no two
    selected metrics are near-duplicates (each lists the ones it stands for), and the fit shows
    the best single metric and the black-box reference on the same split."""
    a = simpeval_fit.evaluator.artifact
    assert a["method"]["regression"] == "nnls" and a["method"]["name"] == "autometrics-nnls"
    for f in a["features"]:
        assert np.sign(f["weight"]) == np.sign(f["tau_train"]), f
        assert f["feature"] not in f["represents"]
    stood_for = [m for f in a["features"] for m in f["represents"]]
    assert len(stood_for) == len(set(stood_for)) and not set(stood_for) & {f["feature"] for f in a["features"]}
    st = a["statistics"]
    assert st["best_single_metric"]["test"]["n"] == st["test"]["n"]
    assert st["blackbox_reference"]["test"]["n"] == st["test"]["n"] and "XGBoost" in st["blackbox_reference"]["model"]


def test_pls_and_auto_regressions_are_selectable_and_auto_never_sees_the_test_split(monkeypatch):
    pls = fit_evaluator("demo:simpeval", "score", n_boot=0, regression="pls")
    assert pls.evaluator.artifact["method"]["regression"] == "pls"
    import autometrics.evaluators.induce as induce

    seen = {}
    real = induce.choose_regression

    def spy(X, y, groups, generated, **kw):
        seen["n"] = len(y)
        return real(X, y, groups, generated, **kw)

    monkeypatch.setattr(induce, "choose_regression", spy)
    auto = fit_evaluator("demo:simpeval", "score", n_boot=0, regression="auto", test_size=0.3)
    m = auto.evaluator.artifact["method"]
    assert m["regression"] in ("nnls", "pls", "enet", "single") and m["regression_choice"]["note"]
    assert seen["n"] == auto.evaluator.artifact["dataset"]["n_train"]  # train rows only
    with pytest.raises(ValueError, match="unknown regression"):
        fit_evaluator("demo:simpeval", "score", n_boot=0, regression="ols")


def test_an_evaluator_written_before_the_regression_option_still_scores_the_same(simpeval_fit):
    """Artifacts of earlier releases have no method.regression / features[].represents /
    blackbox_reference: they load and score exactly as before (same formula)."""
    old = json.loads(json.dumps(simpeval_fit.evaluator.artifact))
    old["method"].pop("regression"), old["method"].pop("regression_choice")
    old["method"]["name"] = "autometrics-pls"
    old["statistics"].pop("blackbox_reference", None)
    for f in old["features"]:
        f.pop("represents")
    outs = ["A short sentence.", "The cat sat on the mat because it was tired."]
    ins = ["A rather long and complicated sentence.", "Owing to fatigue, the feline reposed upon the mat."]
    refs = [["A short sentence."], ["The cat rested on the mat because it was tired."]]
    new_scores = simpeval_fit.evaluator.score_texts(outs, inputs=ins, references=refs)[SCORE_COLUMN].to_numpy()
    old_scores = Evaluator(old).score_texts(outs, inputs=ins, references=refs)[SCORE_COLUMN].to_numpy()
    np.testing.assert_allclose(old_scores, new_scores)


def test_scores_stay_within_the_label_range(simpeval_fit):
    ev = simpeval_fit.evaluator
    lo, hi = ev.label_range
    extreme = ["word " * 400, "", "a", "The cat sat on the mat. " * 50]
    kw = {"inputs": ["The old cat sat there quietly on the mat."] * 4, "references": [["The cat sat on the mat."]] * 4}
    s = ev.score_texts(extreme, **kw)[SCORE_COLUMN].to_numpy()
    assert np.all((s >= lo) & (s <= hi))
    feats = ev.score_texts(extreme, **kw).drop(columns=[SCORE_COLUMN])
    raw = ev.predict(feats, clip=False)
    assert np.any((raw < lo) | (raw > hi))  # these outputs do push the linear formula out of range
    assert list(np.argsort(raw, kind="stable")) == list(np.argsort(s, kind="stable"))  # order kept


def test_soft_clip_is_identity_inside_and_strictly_increasing():
    from autometrics.evaluators.evaluator import soft_clip

    x = np.linspace(-1e4, 1e4, 200001)
    y = soft_clip(x, 1.0, 5.0)
    assert np.all((y >= 1.0) & (y <= 5.0)) and np.all(np.diff(y) > 0)
    inside = (x > 1.2) & (x < 4.8)
    assert np.array_equal(y[inside], x[inside])
    assert 4.99 < soft_clip(np.array([13.09]), 1, 5)[0] < 5 and np.isnan(soft_clip(np.array([np.nan]), 1, 5)[0])
    assert abs(soft_clip(np.array([4.8 + 1e-9]), 1, 5)[0] - 4.8) < 1e-8  # continuous at the join


def test_an_evaluator_written_by_the_pls_release_scores_as_it_did_then():
    """tests/evaluators/data/evaluator_v1_pls.json was written by the code before the NNLS default
    (commit f47d3e5's parent) on demo:simpeval, with that code's scores of every row beside it."""
    import pathlib

    here = pathlib.Path(__file__).parent / "data"
    old = json.loads((here / "evaluator_v1_pls_scores.json").read_text())
    ev = Evaluator.load(here / "evaluator_v1_pls.json")
    assert ev.artifact["method"].get("regression") in (None, "pls")
    now = ev.score("demo:simpeval").set_index("id")[SCORE_COLUMN]
    ids = [r[0] for r in old["full"]]
    np.testing.assert_allclose(now.loc[ids].to_numpy(), [r[1] for r in old["full"]], rtol=1e-9, atol=1e-9)
