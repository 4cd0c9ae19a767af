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
    for col in expected.columns.drop("id"):
        np.testing.assert_allclose(got[col].to_numpy(float), expected[col].to_numpy(float), rtol=0, atol=1e-12, err_msg=col)
