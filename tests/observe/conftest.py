"""Fixtures for the capture half: an isolated SDK, stores on SQLite and (when
AUTOMETRICS_TEST_POSTGRES_URL is set, see .ci/postgres.sh) a real Postgres, an in-thread
collector and the Langfuse test double."""

from __future__ import annotations

import os
import uuid

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


@pytest.fixture
def langfuse_double(monkeypatch):
    from .langfuse_double import LangfuseDouble

    # the langfuse SDK keeps one client per public key per process: a fresh key per test
    with LangfuseDouble(public_key="pk-lf-" + uuid.uuid4().hex[:8], secret_key="sk-lf-" + uuid.uuid4().hex[:8]) as d:
        monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", d.public_key)
        monkeypatch.setenv("LANGFUSE_SECRET_KEY", d.secret_key)
        monkeypatch.setenv("LANGFUSE_BASE_URL", d.url)
        monkeypatch.setenv("LANGFUSE_FLUSH_INTERVAL", "0.2")
        yield d
