"""Throwaway databases on the test Postgres cluster that `.ci/postgres.sh` starts
(``AUTOMETRICS_TEST_POSTGRES_URL``).  A module of its own, not part of a conftest: tests import it
by name, and ``from conftest import ...`` resolves to whichever of the suite's conftest files
Python imported first."""

from __future__ import annotations

import os
import uuid

# read once at import: some tests clear AUTOMETRICS_* variables for the code under test
PG_URL = os.environ.get("AUTOMETRICS_TEST_POSTGRES_URL")


def fresh_pg_database() -> str:
    """A new, empty database on the test cluster (each test starts from schema v0)."""
    import sqlalchemy as sa

    if not PG_URL:
        raise RuntimeError("AUTOMETRICS_TEST_POSTGRES_URL is not set (run `eval \"$(.ci/postgres.sh)\"`)")
    url = PG_URL
    name = "t_" + uuid.uuid4().hex[:12]
    eng = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with eng.connect() as c:
        c.execute(sa.text(f"CREATE DATABASE {name}"))
    eng.dispose()
    return str(sa.engine.make_url(url).set(database=name).render_as_string(hide_password=False))
