"""Fixtures of the SDK and CLI tests."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from autometrics._cli.main import main
from autometrics.evaluators.data import builtin_dataset_path

ROWS = pd.read_csv(builtin_dataset_path("simpeval")).head(60)


@pytest.fixture(scope="module")
def good_run(tmp_path_factory) -> Path:
    """A folder written by a successful fit on 60 SimpEval rows (what later runs read, or must
    leave alone)."""
    d = tmp_path_factory.mktemp("good")
    data = d / "data.csv"
    ROWS.to_csv(data, index=False)
    assert main(["fit", str(data), "--target", "score", "--n-boot", "20", "--no-progress", "--out", str(d / "run")]) == 0
    return d / "run"
