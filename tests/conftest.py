from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("AUTOMETRICS_SHARED", ROOT.parent / "shared"))
DATASETS = SHARED / "datasets"


@pytest.fixture(scope="session")
def datasets_dir() -> Path:
    if not (DATASETS / "simpeval.csv").exists():
        pytest.skip(f"shared datasets not found at {DATASETS} (set AUTOMETRICS_SHARED)")
    return DATASETS


# ---- trace stores: SQLite always, Postgres when .ci/postgres.sh exported its URL -------------
PG_URL = os.environ.get("AUTOMETRICS_TEST_POSTGRES_URL")


def fresh_pg_database() -> str:
    """A new, empty database on the test cluster (each test starts from schema v0)."""
    import sqlalchemy as sa

    name = "t_" + uuid.uuid4().hex[:12]
    eng = sa.create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    with eng.connect() as c:
        c.execute(sa.text(f"CREATE DATABASE {name}"))
    eng.dispose()
    return str(sa.engine.make_url(PG_URL).set(database=name).render_as_string(hide_password=False))


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'traces.db'}"


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'traces.db'}"
    if not PG_URL:
        pytest.skip("AUTOMETRICS_TEST_POSTGRES_URL not set (run `eval \"$(.ci/postgres.sh)\"`)")
    return fresh_pg_database()


# ---- the Langfuse-compatible test server (tests/langfuse_server.py), for capture and continuous tests
@pytest.fixture
def langfuse_server(monkeypatch):
    """A fresh loopback Langfuse test server with LANGFUSE_* pointing at it (not Langfuse)."""
    pytest.importorskip("langfuse")
    pytest.importorskip("yaml", reason="pyyaml reads Langfuse's OpenAPI spec")
    from langfuse_server import LangfuseTestServer, spec_path

    if not spec_path().exists():
        pytest.skip(f"Langfuse's OpenAPI spec not found at {spec_path()} (set AUTOMETRICS_SHARED)")
    # the langfuse SDK keeps one client per public key per process: a fresh key per test
    with LangfuseTestServer(public_key="pk-lf-" + uuid.uuid4().hex[:8], secret_key="sk-lf-" + uuid.uuid4().hex[:8]) as srv:
        monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", srv.public_key)
        monkeypatch.setenv("LANGFUSE_SECRET_KEY", srv.secret_key)
        monkeypatch.setenv("LANGFUSE_BASE_URL", srv.url)
        monkeypatch.delenv("LANGFUSE_HOST", raising=False)
        monkeypatch.setenv("LANGFUSE_FLUSH_INTERVAL", "0.2")
        yield srv
