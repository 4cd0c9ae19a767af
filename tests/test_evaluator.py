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
    assert st["test"]["n"] + st["train"]["n"] == 360
    assert st["test"]["ci_low"] <= st["test"]["tau"] <= st["test"]["ci_high"]
    # the evaluator must beat chance on held-out data for this dataset
    assert st["test"]["tau"] > 0.1 and st["test"]["p_value"] < 0.05
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
    test = simpeval_fit.test
    np.testing.assert_allclose(by_id.loc[test["id"]].to_numpy(), test["score"].to_numpy(), rtol=1e-6, atol=1e-6)
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
