"""The embedded 0.5B server shared by the real-LLM tests of this folder (one per module)."""

from __future__ import annotations

import pytest
from autometrics.evaluators.llm import local as local_llm


@pytest.fixture(scope="module")
def local_server():
    if not local_llm.llama_cpp_available():
        pytest.skip('llama-cpp-python[server] is not installed (pip install ".[llm]")')
    if local_llm.model_path("0.5b") is None:
        pytest.skip("the 0.5B model is not installed (autometrics llm install --model 0.5b)")
    srv = local_llm.shared_server("0.5b")  # the server a `local:0.5b` fit uses
    yield srv
    local_llm.stop_shared_servers()
    assert srv.proc is None  # stopped cleanly
