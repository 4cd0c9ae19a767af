"""Offline loading machinery of the model metrics: where weights are looked for, the
messages when they are missing, lazy imports, the model cache, and the pipeline's handling
of metrics that cannot run here."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from autometrics.metricbank import MetricUnavailable, _models, get_metric, list_metrics, metric_class
from autometrics.metricbank._models import MODELS_DIR_ENV, ModelMetric, Resources, locate_model

MODEL_METRICS = [n for n in list_metrics() if issubclass(metric_class(n), ModelMetric)]


def test_all_model_metrics_of_the_paper_are_registered():
    expected = {
        "BERTScore", "MoverScore", "BARTScore", "BLEURT", "InfoLM", "MAUVE", "ParaScore", "UniEval-Sum",
        "UniEval-Dialogue", "LENS", "YiSi", "Perplexity", "YiSi-2", "SummaQA", "FactCC", "Toxicity", "Sentiment",
        "ParaScoreFree", "UniEval-Fact", "LENS_SALSA", "FastTextEducationalValue", "FastTextNSFW",
        "FastTextToxicity", "GRMRewardModel", "INFORMRewardModel", "LDLRewardModel", "MathProcessRewardModel",
    }
    assert expected <= set(MODEL_METRICS)


@pytest.mark.parametrize("name", MODEL_METRICS)
def test_declares_resources_and_default_model(name):
    cls = metric_class(name)
    assert cls.default_model
    assert isinstance(cls.resources, Resources) and cls.resources.cpu_memory_gb >= 0
    assert cls.resources.params != "?"


@pytest.mark.parametrize("name", MODEL_METRICS)
def test_missing_weights_give_a_precise_message(name, monkeypatch, tmp_path):
    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path / "empty"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hfcache"))
    m = get_metric(name)  # construction never fails: artifacts can be rebuilt anywhere
    with pytest.raises(MetricUnavailable) as err:
        m.check_available()
    msg = str(err.value)
    assert name in msg
    if "needs the Python package" in msg:
        assert "pip install" in msg
    else:
        assert m.default_model.rsplit("/", 1)[-1] in msg
        assert str(tmp_path / "empty") in msg  # where it looked
        assert "model=" in msg  # how to provide it
    with pytest.raises(MetricUnavailable):  # scoring fails fast with the same message
        m.score_all(["x"], inputs=["y"], references=[["z"]])


def test_models_dir_env_var_and_hf_cache_are_searched(monkeypatch, tmp_path, standin):
    tiny = standin("gpt2")
    models = tmp_path / "models"
    (models / "openai-community").mkdir(parents=True)
    (models / "gpt2-large").symlink_to(tiny, target_is_directory=True)
    monkeypatch.setenv(MODELS_DIR_ENV, str(models))
    m = get_metric("Perplexity")  # the default model name now resolves to the stand-in
    m.check_available()
    assert m.model_path() == models / "gpt2-large"
    assert np.isfinite(m.score(["the cat sat"])).all()
    m.release()
    # org/name layout and the org--name layout
    (models / "facebook--bart-large-cnn").symlink_to(standin("bart"), target_is_directory=True)
    assert locate_model("BARTScore", "facebook/bart-large-cnn") == models / "facebook--bart-large-cnn"
    # a Hugging Face cache snapshot
    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path / "nothing"))
    snap = tmp_path / "hub" / "models--org--tiny" / "snapshots" / "abc123"
    snap.parent.mkdir(parents=True)
    snap.symlink_to(tiny, target_is_directory=True)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert locate_model("X", "org/tiny") == snap


def test_packaged_minilm_is_found_by_its_hub_name(minilm):
    assert locate_model("BERTScore", "sentence-transformers/all-MiniLM-L6-v2") == minilm


def test_importing_the_bank_imports_no_torch():
    code = (
        "import sys; from autometrics.metricbank import list_metrics, get_metric; n = list_metrics(); "
        "[get_metric(x) for x in n]; "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules and 'fasttext' not in sys.modules, "
        "[m for m in ('torch', 'transformers', 'fasttext') if m in sys.modules]"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_model_loaded_once_per_process_and_released(standin):
    path = str(standin("gpt2"))
    a, b = get_metric("Perplexity", model=path), get_metric("Perplexity", model=path)
    a.score(["one text"])
    b.score(["another text"])
    keys = [k for k in _models.loaded_models() if k[1] == path]
    assert len(keys) == 1
    assert a.model() is b.model()
    assert a.release() >= 1
    assert not [k for k in _models.loaded_models() if k[1] == path]


def test_device_choice(monkeypatch):
    pytest.importorskip("torch")
    import torch

    monkeypatch.delenv(_models.DEVICE_ENV, raising=False)
    assert _models.pick_device() == ("cuda" if torch.cuda.is_available() else "cpu")
    assert _models.pick_device("cpu") == "cpu"
    monkeypatch.setenv(_models.DEVICE_ENV, "cpu")
    assert _models.pick_device() == "cpu"


def test_missing_package_message(monkeypatch):
    with pytest.raises(MetricUnavailable, match=r"pip install lens-metric"):
        _models.require_packages("LENS", ["lens"])


def test_default_metrics_skip_unavailable(monkeypatch, tmp_path):
    from autometrics.metricbank import default_metrics

    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path))
    names = {m.name for m in default_metrics()}
    assert "BERTScore" not in names and "ROUGE" in names


def test_fit_scoring_notes_unavailable_metrics_instead_of_crashing(monkeypatch, tmp_path):
    from autometrics.evaluators.fit import score_metrics

    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path))
    X, meta, notes = score_metrics(
        [get_metric("ROUGE"), get_metric("BERTScore"), get_metric("Perplexity")],
        ["the cat sat"], ["a cat was sitting"], [["the cat sat down"]], progress=False,
    )
    assert any(c.startswith("ROUGE") for c in X.columns)
    assert not any(c.startswith(("BERTScore", "Perplexity")) for c in X.columns)
    joined = " ".join(notes)
    assert "BERTScore: unavailable here" in joined and "roberta-large" in joined
    assert "Perplexity: unavailable here" in joined


def test_bank_list_shows_why_a_metric_cannot_run(capsys, monkeypatch, tmp_path):
    from autometrics._cli.main import main

    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path))
    assert main(["bank", "list"]) == 0
    out = capsys.readouterr().out
    line = next(row for row in out.splitlines() if row.startswith("BERTScore "))
    assert "unavailable" in line and "roberta-large" in line
