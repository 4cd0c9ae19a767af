"""Fixtures for continuous evaluation: a store pre-filled with SimpEval traces + feedback and a
clean environment.  Stores (SQLite; Postgres when AUTOMETRICS_TEST_POSTGRES_URL is set, see
.ci/postgres.sh) and the Langfuse test server (``langfuse_server``, tests/langfuse_server.py)
come from tests/conftest.py."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def fitted_store(tmp_path_factory):
    """A SQLite store with 220 labelled SimpEval traces, one refit (v1 champion) and 140
    unlabelled traces scored online; shared read-only by several tests (copy the file to mutate it)."""
    from autometrics.collectors.store import TraceStore
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig
    from monitor_data import simpeval, write_traces

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
