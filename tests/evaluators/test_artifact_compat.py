"""An evaluator.json written by an earlier release scores the same rows identically: features,
weights and metric factories named by the modules of that release (data/previous_release)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).parent / "data" / "previous_release"


def test_previous_release_artifact_scores_identically():
    from autometrics.evaluators.evaluator import Evaluator

    art = json.loads((HERE / "evaluator.json").read_text())
    factories = {f["metric"].get("factory") for f in art["features"]} - {None}
    assert factories == {"autometrics.evaluators.judges.exemplar:ExemplarMetric",
                         "autometrics.evaluators.judges.code_metric:CodeMetric"}  # the old module paths
    rows = pd.read_csv(HERE / "rows.csv", keep_default_na=False)
    expected = pd.read_csv(HERE / "scores.csv")
    got = Evaluator.load(HERE / "evaluator.json").score(rows)
    assert list(got["id"]) == list(expected["id"])
    # exact for every metric computed by the package's own code; a metric computed by a neural
    # encoder (NearestExemplar: MiniLM through torch/transformers) moves by float noise between
    # library releases (1.6e-5 on transformers 5.25 / sentence-transformers 6.3), and the score with it
    model_based = {"NearestExemplar", "autometrics_score"}
    for col in expected.columns.drop("id"):
        tol = dict(rtol=1e-6, atol=1e-4) if col in model_based else dict(rtol=0, atol=1e-12)
        np.testing.assert_allclose(got[col].to_numpy(float), expected[col].to_numpy(float), err_msg=col, **tol)
    assert np.corrcoef(got["autometrics_score"], expected["autometrics_score"])[0, 1] > 0.999999
