"""The trace store: spans and feedback in SQL (SQLite by default, Postgres by URL).

Why SQL through SQLAlchemy Core: one schema for an embedded single-user store (SQLite in WAL
mode, no server to run) and a shared multi-writer one (Postgres), with the same queries.  The
schema is versioned (table ``schema_version``) and upgraded in place by :data:`MIGRATIONS`, so
a store written by an older release keeps its data.

Writes are idempotent (span ``(trace_id, span_id)`` and feedback ``id`` are primary keys, a
retried batch inserts nothing twice), which is what lets the collector promise "stored count ==
acknowledged count".  Every feedback row is kept; "latest wins per name" is applied when reading
(:meth:`TraceStore.training_frame`), so the history is never lost.  Feedback is checked in the
write transaction (:mod:`~autometrics.collectors.store.feedback_rules`): one kind and scale per
name and project, and a feedback ``id`` re-sent with another value is refused
(:class:`FeedbackInvalid` / :class:`FeedbackConflict`), so no writer can corrupt a label.

Example::

    store = TraceStore()                       # ~/.local/share/autometrics/traces.db
    df = store.training_frame("thumbs")        # id,input,output,thumbs,model,... -> fit
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa

from ...metricbank.errors import Unavailable

__all__ = ["TraceStore", "default_store_url", "SCHEMA_VERSION", "MIGRATIONS", "StoreError", "FEEDBACK_KINDS", "FeedbackInvalid",
           "FeedbackConflict", "FeedbackRejected"]

from ..feedback import FEEDBACK_KINDS  # noqa: E402  (re-export)
from ..files import data_dir  # noqa: E402


class StoreError(Unavailable):
    """The store cannot be used as asked (e.g. written by a newer autometrics)."""


def default_store_url() -> str:
    """$AUTOMETRICS_STORE_URL, else SQLite ``traces.db`` in the user data directory."""
    url = os.environ.get("AUTOMETRICS_STORE_URL")
    if url:
        return url
    return f"sqlite:///{data_dir() / 'traces.db'}"


from . import retention  # noqa: E402
from .browse import BrowseTables, TraceFilter  # noqa: E402,F401  (re-exported)
from .deliveries import DeliveryTables  # noqa: E402
from .feedback_log import FeedbackTables  # noqa: E402
from .feedback_rules import (  # noqa: E402
    FeedbackConflict,
    FeedbackInvalid,
    FeedbackRejected,
)
from .online_scores import OnlineScoreTables  # noqa: E402
from .schema import (  # noqa: E402
    MIGRATIONS,
    SCHEMA_VERSION,
    feedback,
    schema_version,
    spans,
    traces,
)
from .trace_tables import TraceTables, clock_skewed, first_seen_ns  # noqa: E402,F401  (re-exported)
from .versions import VERSION_STATUSES, VersionTables  # noqa: E402,F401  (re-exported)

# --------------------------------------------------------------------------- store


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    # WAL: readers never block the writer; synchronous=FULL: a committed (acknowledged) row
    # survives a crash of the process and of the machine; busy_timeout: concurrent writers wait.
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=FULL")
    cur.execute("PRAGMA busy_timeout=5000")
    cur.close()


class TraceStore(TraceTables, FeedbackTables, VersionTables, OnlineScoreTables, DeliveryTables, BrowseTables):
    """Spans and feedback in a SQL database, and everything continuous evaluation keeps there.

    One class for callers, one module per aggregate for readers: traces and spans
    (:mod:`.trace_tables`), feedback (:mod:`.feedback_log`), evaluator versions, refit runs and alerts
    (:mod:`.versions`), online scores and claims (:mod:`.online_scores`), deliveries
    (:mod:`.deliveries`).  This module holds the connection, the schema and its migrations.

    ``url``: SQLAlchemy URL (``sqlite:///path.db``, ``postgresql+psycopg://user@host/db``);
    default :func:`default_store_url`.  The schema is created or upgraded on open.
    ``connect_timeout`` bounds how long an unreachable Postgres can block a caller.
    """

    def __init__(self, url: str | None = None, *, connect_timeout: float = 5.0, migrate: bool = True):
        self.url = url or default_store_url()
        u = sa.engine.make_url(self.url)
        self.dialect = u.get_backend_name()
        kwargs: dict = {"future": True}
        if self.dialect == "sqlite":
            if u.database and u.database != ":memory:":
                Path(u.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
            kwargs["connect_args"] = {"timeout": 5.0, "check_same_thread": False}
        elif self.dialect == "postgresql":
            kwargs["connect_args"] = {"connect_timeout": max(1, int(connect_timeout))}
            kwargs["pool_pre_ping"] = True
        self.engine = sa.create_engine(u, **kwargs)
        if self.dialect == "sqlite":
            sa.event.listen(self.engine, "connect", _sqlite_pragmas)
        self._lock = threading.Lock()
        if migrate:
            self.migrate()

    def sqlite_path(self) -> Path | None:
        """The database file of a SQLite store (None for Postgres or an in-memory database)."""
        db = sa.engine.make_url(self.url).database
        if self.dialect == "sqlite" and db and db != ":memory:":
            return Path(db).expanduser().resolve()
        return None

    @property
    def shown_url(self) -> str:
        """The store's URL for people to read: the password masked."""
        return sa.engine.make_url(self.url).render_as_string(hide_password=True)

    def __repr__(self) -> str:  # never shows a password
        return f"TraceStore({self.shown_url!r})"

    # ---- schema
    def version(self) -> int:
        """Schema version of the database (0 = empty)."""
        with self.engine.connect() as conn:
            if not sa.inspect(conn).has_table("schema_version"):
                return 0
            v = conn.execute(sa.select(sa.func.max(schema_version.c.version))).scalar()
            return int(v or 0)

    def migrate(self, target: int | None = None) -> int:
        """Apply pending migrations up to ``target`` (default: latest); returns the version."""
        target = SCHEMA_VERSION if target is None else target
        with self.engine.begin() as conn:
            if self.dialect == "postgresql":
                # one migrator at a time across processes (collector + SDKs sharing a database)
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(7413001)"))
            elif self.dialect == "sqlite":
                # the same on SQLite: without it two openers both read the old version and the
                # second fails on schema_version's key (seen once v8's index builds widened the
                # window); the others wait (busy_timeout) and then find nothing left to do
                conn.exec_driver_sql("BEGIN IMMEDIATE")
            conn.execute(
                sa.text("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)")
            )
            current = int(conn.execute(sa.text("SELECT MAX(version) FROM schema_version")).scalar() or 0)
            if current > SCHEMA_VERSION:
                raise StoreError(
                    f"trace store {self!r} has schema v{current}, newer than this autometrics (v{SCHEMA_VERSION}); upgrade autometrics-sdk."
                )
            for version, fn in MIGRATIONS:
                if current < version <= target:
                    fn(conn)
                    conn.execute(schema_version.insert().values(version=version, applied_at=time.time()))
                    current = version
        return current

    # ---- writes
    def _insert(self, table: sa.Table, key: Sequence[str]):
        if self.dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        elif self.dialect == "sqlite":
            from sqlalchemy.dialects.sqlite import insert
        else:  # pragma: no cover - other dialects: plain insert (duplicates raise)
            return table.insert()
        return insert(table).on_conflict_do_nothing(index_elements=list(key))


    #: what makes a re-sent span the same span (a retry) rather than other content under its ids

    def count(self, table: str = "spans") -> int:
        t = {"spans": spans, "feedback": feedback, "traces": traces}[table]
        with self.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(t)).scalar() or 0)

    def prune(self, older_than, *, project: str | None = None, dry_run: bool = False, batch_size: int | None = None):
        """Delete traces older than ``older_than`` (``"30d"``, ``"12h"``, ``"90m"``) that have no
        feedback, with their spans and online scores, in batches; labelled traces, feedback and
        evaluator versions are kept.  See :func:`autometrics.collectors.store.retention.prune`."""
        return retention.prune(self, older_than, project=project, dry_run=dry_run,
                               batch_size=retention.DEFAULT_BATCH if batch_size is None else batch_size)

    def dispose(self) -> None:
        self.engine.dispose()



