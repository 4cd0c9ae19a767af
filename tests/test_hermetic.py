"""The suite runs the same on every machine: offline, and blind to the developer's model cache."""

from __future__ import annotations

import os
from pathlib import Path


def test_no_model_cache_of_the_machine_is_read():
    from autometrics.metricbank._models import _hf_cache_dirs

    (hub,) = _hf_cache_dirs()
    assert Path.home() not in hub.parents and not hub.exists() or not any(hub.iterdir())
    assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"


def test_a_set_hf_home_replaces_the_default_cache(monkeypatch, tmp_path):
    from autometrics.metricbank._models import _hf_cache_dirs

    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    assert _hf_cache_dirs() == [tmp_path / "hub"]
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "c"))
    assert _hf_cache_dirs() == [tmp_path / "c"]
