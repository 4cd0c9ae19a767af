"""The shape regression (``--regression ebm`` / ``ebm_pairs``): an explainable boosting machine's
per-metric shapes, stored as lookup tables, score exactly as the machine does, capture effects a
weighted sum cannot, and round-trip through evaluator.json without interpret-core at scoring."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from autometrics.evaluators.shapes import ShapeSelector
from autometrics.evaluators.stats import kendall_tau


def _data(n: int, seed: int):
    """Metric 0 matters as an inverted U (best in the middle), metric 1 linearly, metric 2 only
    together with metric 1; the rest are noise; some values are missing."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, size=(n, 8))
    y = -4 * (X[:, 0] - 0.5) ** 2 + 0.8 * X[:, 1] + 0.8 * X[:, 1] * (X[:, 2] > 0.5) + rng.normal(0, 0.15, n)
    X[rng.random(X.shape) < 0.03] = np.nan
    return X, y


def test_stored_tables_score_exactly_as_the_machine():
    from autometrics.evaluators.shapes import _fit, _machine

    X, y = _data(400, 0)
    sel = ShapeSelector(top_n=3, pairs=1, seed=0).fit(X, y)
    machine = _fit(_machine(1, sel.max_bins, sel.outer_bags, sel.seed), X[:, sel.selected_], y)  # the refit it stores
    Xt, _ = _data(300, 1)
    np.testing.assert_allclose(sel.predict(Xt), machine.predict(Xt[:, sel.selected_]), rtol=0, atol=1e-9)
    assert sorted(sel.selected_.tolist()) == [0, 1, 2] and len(sel.pairs_) == 1
    assert sel.contributions(Xt).shape == (300, 4)


def test_shapes_catch_what_a_weighted_sum_cannot():
    from autometrics.evaluators.selection import make_selector

    X, y = _data(600, 2)
    Xt, yt = _data(600, 3)
    shape = make_selector("ebm", top_n=3).fit(X, y)
    linear = make_selector("nnls", top_n=3).fit(X, y)
    tau_shape, tau_linear = kendall_tau(shape.predict(Xt), yt)[0], kendall_tau(linear.predict(Xt), yt)[0]
    assert tau_shape > tau_linear + 0.1, (tau_shape, tau_linear)
    x0 = np.linspace(0.02, 0.98, 49)
    from autometrics.evaluators.shapes import shape_contribution

    c = shape_contribution(shape.shapes_[shape.selected_.tolist().index(0)], x0)
    assert c[24] > c[0] + 0.3 and c[24] > c[-1] + 0.3  # the inverted U is read off the stored shape


def test_evaluator_round_trip_and_artifact_checks(tmp_path, datasets_dir):
    from autometrics.evaluators.evaluator import ArtifactError, Evaluator, check_artifact
    from autometrics.evaluators.fit import fit_evaluator
    from autometrics.evaluators.validity import CrossFit

    df = pd.read_csv(datasets_dir / "simpeval.csv")
    cf = CrossFit(folds=3, repeats=1, permutations=0)
    res = fit_evaluator(df.iloc[:200], target="score", regression="ebm_pairs", metrics=["BLEU", "SARI", "FKGL", "OutputLength",
                        "LengthRatio", "InputSimilarity"], top_n=4, crossfit=cf, n_boot=50)
    art = res.evaluator.artifact
    assert art["format_version"] == 2 and art["method"]["regression"] == "ebm_pairs"
    assert all("shape" in f for f in art["features"]) and 1 <= len(art.get("pairs", [])) <= 3
    path = res.evaluator.save(tmp_path / "evaluator.json")
    rows = df.iloc[200:260]
    np.testing.assert_allclose(Evaluator.load(path).score(rows)["autometrics_score"], res.evaluator.score(rows)["autometrics_score"],
                               rtol=0, atol=0)
    contrib = res.evaluator.contributions(res.evaluator.score(rows))
    assert any("×" in c for c in contrib.columns)  # the pairwise term is a contribution of its own
    broken = json.loads(path.read_text())
    broken["features"][0]["shape"]["scores"] = broken["features"][0]["shape"]["scores"][:-1]
    with pytest.raises(ArtifactError, match=r"features\[0\]\.shape\.scores"):
        check_artifact(broken)
    from autometrics.evaluators.report import render_html, render_markdown

    md, page = render_markdown(res), render_html(res)
    assert "shape(" in md and "### Shapes" in md and "missing →" in md and "Shapes (the contribution" in page
    assert page.count('aria-label="shape of ') == len(art["features"])  # one drawn curve per metric
    from autometrics.dashboards.render import _contributions_table

    scored = res.evaluator.score(rows)
    contrib = res.evaluator.contributions(scored)
    frame = pd.DataFrame({"contributions": [json.dumps(r) for r in contrib.to_dict(orient="records")]})
    table = _contributions_table({"artifact": art}, frame)
    assert table.count('aria-label="shape of ') == len(art["features"]) and "Σ shape(metric)" in table
    linear = fit_evaluator(df.iloc[:200], target="score", metrics=["BLEU", "SARI", "FKGL"], crossfit=cf, n_boot=50)
    assert linear.evaluator.artifact["format_version"] == 1  # linear evaluators stay readable by earlier releases


def test_auto_tries_shapes_from_300_labels_and_picks_them_on_a_curve():
    from autometrics.evaluators.induce import SHAPE_MIN_LABELS, auto_candidates
    from autometrics.evaluators.selection import choose_regression

    assert "ebm" not in auto_candidates(SHAPE_MIN_LABELS - 1) and "ebm" in auto_candidates(SHAPE_MIN_LABELS)
    X, y = _data(400, 4)
    groups = np.arange(400).astype(str)
    choice = choose_regression(X, y, groups, candidates=auto_candidates(len(y)), top_n=3)
    assert choice.name == "ebm" and choice.scores["ebm"] and "400 labels" in choice.note
