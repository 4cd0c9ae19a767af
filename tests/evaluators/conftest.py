"""Fixtures for the LLM tests (tests/evaluators/llm, tests/evaluators/judges): the fake
OpenAI-compatible server (tests/fake_llm_server.py, fault injection) and a client bound to it."""

from __future__ import annotations

import pytest
from autometrics.evaluators.llm.client import LLMCache, LLMClient, LLMConfig
from fake_llm_server import FakeLLMServer


@pytest.fixture
def fake():
    def make(**kw):
        return FakeLLMServer(**kw)

    return make


@pytest.fixture
def client_for(tmp_path):
    def make(server: FakeLLMServer, **over):
        cfg = LLMConfig.parse(f"openai/fake@{server.url}", **{"backoff": 0.01, "timeout": 1.0, "max_retries": 3, **over})
        return LLMClient(cfg, cache=LLMCache(tmp_path / "cache.sqlite"))

    return make
