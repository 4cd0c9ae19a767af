"""Offline loading machinery of the model metrics: where weights are looked for, the
messages when they are missing, lazy imports, the model cache, and the pipeline's handling
of metrics that cannot run here."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest
from autometrics.metricbank import MetricUnavailable, _models, get_metric, list_metrics, load_card, metric_class
from autometrics.metricbank._models import MODELS_DIR_ENV, ModelMetric, Resources, locate_model, measured

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
def test_resource_declaration_names_its_source(name):
    """Every figure is either taken from a measurement published with the AutoMetrics reference
    implementation (file and value named, and the declared GB match those MB) or labelled as our
    estimate with how it was derived."""
    res = metric_class(name).resources
    assert res.source.strip(), "where the resource figures come from"
    assert res.gpu_memory_gb >= 0 and res.cpu_memory_gb > 0
    if res.is_estimate:
        assert res.source.startswith("our estimate")
        return
    assert re.search(r"measured in SALT-NLP/autometrics `autometrics/metrics/reference_(based|free)/\w+\.py`", res.source)
    taken = 0
    for label, attr, declared in (("GPU memory: gpu_mem", "gpu", res.gpu_memory_gb),
                                  ("RAM for a CPU-only run: cpu_mem", "cpu", res.cpu_memory_gb)):
        m = re.search(rf"{label} = (\d+) MB", res.source)
        if m:
            taken += 1
            gb = int(m.group(1)) / 1024
            assert abs(declared - gb) <= max(0.06, 0.02 * gb), f"{attr}: declared {declared} GB, measured {gb:.2f} GB"
    assert taken, "a measured source names at least one measured figure"
    if taken == 1:
        assert "our estimate" in res.source, "the figure not taken from the measurement says where it comes from"


@pytest.mark.parametrize("name", MODEL_METRICS)
def test_card_states_the_declared_resources_and_their_source(name):
    res = metric_class(name).resources
    card = load_card(name)
    assert f"~{res.gpu_memory_gb:g} GB GPU memory or ~{res.cpu_memory_gb:g} GB RAM" in card
    assert f"- Resource figures: {res.source}" in card


def test_measured_source_text():
    gpu = measured("reference_based/X.py", gpu_mb=1536.4)
    assert gpu.startswith("GPU memory: gpu_mem = 1536 MB measured in SALT-NLP/autometrics `autometrics/metrics/reference_based/X.py`")
    assert gpu.endswith("RAM for a CPU-only run: our estimate from the parameter count and default batch size")
    both = measured("reference_free/Y.py", gpu_mb=0, cpu_mb=900, rest="unused")
    assert "gpu_mem = 0 MB and RAM for a CPU-only run: cpu_mem = 900 MB" in both and "unused" not in both
    cpu = measured("reference_free/Y.py", cpu_mb=900, rest="our estimate (that run used the CPU)")
    assert cpu.endswith("GPU memory: our estimate (that run used the CPU)")
    assert not Resources("1M", 1, 1, False, cpu).is_estimate and Resources("1M", 1, 1, False).is_estimate
    with pytest.raises(ValueError):
        measured("reference_free/Y.py")


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
    pytest.importorskip('torch', reason='needs the `models` extra (torch)')
    pytest.importorskip('transformers', reason='needs the `models` extra (transformers)')
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
    pytest.importorskip('torch', reason='needs the `models` extra (torch)')
    pytest.importorskip('transformers', reason='needs the `models` extra (transformers)')
    from autometrics._cli.main import main

    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path))
    assert main(["bank", "list"]) == 0
    out = capsys.readouterr().out
    line = next(row for row in out.splitlines() if row.startswith("BERTScore "))
    assert " no weights " in line and "not found" not in line  # a short status in the table ...
    with pytest.raises(MetricUnavailable) as err:
        get_metric("BERTScore").check_available()
    assert " ".join(str(err.value).split()) in " ".join(out.split())  # ... and the whole reason below it
