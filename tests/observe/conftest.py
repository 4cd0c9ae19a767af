"""Fixtures for the capture half: an isolated SDK, stores on SQLite and (when
AUTOMETRICS_TEST_POSTGRES_URL is set, see .ci/postgres.sh) a real Postgres, an in-thread
collector.  The Langfuse test server (``langfuse_server``, tests/langfuse_server.py) comes
from tests/conftest.py."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs the `observe` extra")
pytest.importorskip("sqlalchemy", reason="needs the `observe` extra")

@pytest.fixture
def capture(tmp_path, monkeypatch):
    """The SDK module with a clean environment; shut down after the test."""
    for k in list(os.environ):
        if k.startswith(("AUTOMETRICS_", "LANGFUSE_")) and k not in ("AUTOMETRICS_SHARED",):
            monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AUTOMETRICS_HOME", str(tmp_path / "home"))
    import autometrics.capture as cap

    yield cap
    cap.shutdown(5.0)


@pytest.fixture
def collector(tmp_path):
    from autometrics.collectors.server import CollectorServer

    srv = CollectorServer(f"sqlite:///{tmp_path / 'collector.db'}", port=0, api_keys=["test-key"], langfuse="off").start()
    yield srv
    srv.stop()
