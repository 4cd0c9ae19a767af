from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("AUTOMETRICS_SHARED", ROOT.parent / "shared"))
DATASETS = SHARED / "datasets"


@pytest.fixture(scope="session")
def datasets_dir() -> Path:
    if not (DATASETS / "simpeval.csv").exists():
        pytest.skip(f"shared datasets not found at {DATASETS} (set AUTOMETRICS_SHARED)")
    return DATASETS
