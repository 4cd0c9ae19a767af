"""Fixtures for continuous evaluation: stores (SQLite; Postgres when AUTOMETRICS_TEST_POSTGRES_URL
is set, see .ci/postgres.sh), a store pre-filled with SimpEval traces + feedback, and the
OpenAPI-checked Langfuse test server."""

from __future__ import annotations

import os
import uuid

import pytest

pytest.importorskip("sqlalchemy", reason="needs the `observe` extra")
pytest.importorskip("apscheduler", reason="needs the `observe` extra")

@pytest.fixture(scope="session")
def fitted_store(tmp_path_factory):
    """A SQLite store with 220 labelled SimpEval traces, one refit (v1 champion) and 140
    unlabelled traces scored online; shared read-only by several tests (copy the file to mutate it)."""
    from autometrics.collectors.continuous import Monitor, MonitorConfig
    from autometrics.collectors.store import TraceStore

    from .helpers import simpeval, write_traces

    d = tmp_path_factory.mktemp("fitted")
    url = f"sqlite:///{d / 'traces.db'}"
    store = TraceStore(url)
    df = simpeval()
    write_traces(store, df.iloc[:220], project="p")
    write_traces(store, df.iloc[220:], project="p", t0_ns=5_000_000_000, feedback=False)
    mon = Monitor(store, MonitorConfig(target="score", project="p", settle_seconds=0, n_boot=200))
    out = mon.refit()
    assert out.outcome == "promoted", out
    assert mon.score_new() == 360
    store.dispose()
    return url


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for k in list(os.environ):
        if k.startswith(("AUTOMETRICS_", "LANGFUSE_")) and k != "AUTOMETRICS_SHARED":
            monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AUTOMETRICS_HOME", str(tmp_path / "home"))


@pytest.fixture
def langfuse_server(monkeypatch):
    pytest.importorskip("langfuse")
    pytest.importorskip("yaml", reason="pyyaml reads Langfuse's OpenAPI spec")
    from .langfuse_server import LangfuseSpecServer

    # the langfuse SDK keeps one client per public key per process: a fresh key per test
    with LangfuseSpecServer(public_key="pk-lf-" + uuid.uuid4().hex[:8], secret_key="sk-lf-" + uuid.uuid4().hex[:8]) as srv:
        monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", srv.public_key)
        monkeypatch.setenv("LANGFUSE_SECRET_KEY", srv.secret_key)
        monkeypatch.setenv("LANGFUSE_BASE_URL", srv.url)
        monkeypatch.delenv("LANGFUSE_HOST", raising=False)
        monkeypatch.setenv("LANGFUSE_FLUSH_INTERVAL", "0.2")
        yield srv
