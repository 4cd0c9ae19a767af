"""The trace store's schema: tables and the versioned migrations that create and upgrade them.

Why hand-written migrations: the same DDL must run on SQLite (embedded default) and Postgres, and
an older store must be upgraded in place without losing data.  :data:`MIGRATIONS` are applied in
order by :meth:`autometrics.collectors.store.TraceStore.migrate`; the ``sa.Table`` objects below
are what every query of the store is written against.  Only the store package uses them.
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

schema_version = sa.Table(
    "schema_version",
    metadata,
    sa.Column("version", sa.Integer, primary_key=True),
    sa.Column("applied_at", sa.Float, nullable=False),
)

traces = sa.Table(
    "traces",
    metadata,
    sa.Column("trace_id", sa.String(32), primary_key=True),
    sa.Column("project", sa.String(200)),
    sa.Column("first_seen_ns", sa.BigInteger),
)

spans = sa.Table(
    "spans",
    metadata,
    sa.Column("trace_id", sa.String(32), primary_key=True),
    sa.Column("span_id", sa.String(16), primary_key=True),
    sa.Column("parent_span_id", sa.String(16)),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("kind", sa.String(16)),
    sa.Column("project", sa.String(200)),
    sa.Column("scope", sa.String(200)),
    sa.Column("start_time_ns", sa.BigInteger),
    sa.Column("end_time_ns", sa.BigInteger),
    sa.Column("status", sa.String(8)),  # UNSET | OK | ERROR
    sa.Column("error_type", sa.Text),
    sa.Column("error_message", sa.Text),
    sa.Column("operation", sa.String(64)),
    sa.Column("model", sa.String(200)),
    sa.Column("input_tokens", sa.BigInteger),
    sa.Column("output_tokens", sa.BigInteger),
    sa.Column("input", sa.Text),  # plain text extracted from gen_ai.input.messages (what a fit reads)
    sa.Column("output", sa.Text),
    sa.Column("attributes", sa.Text),  # JSON, every span attribute (lossless)
    sa.Column("resource", sa.Text),  # JSON (added in schema v2)
    # who and which conversation (added in schema v9): read from session.id / user.id /
    # langfuse.session.id / gen_ai.conversation.id ..., tags as a JSON list, metadata as JSON
    sa.Column("session_id", sa.String(200)),
    sa.Column("user_id", sa.String(200)),
    sa.Column("tags", sa.Text),
    sa.Column("trace_metadata", sa.Text),
    sa.Column("error_stack", sa.Text),  # the exception event's stack trace (schema v9)
)

feedback = sa.Table(
    "feedback",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("trace_id", sa.String(32), nullable=False),
    sa.Column("span_id", sa.String(16)),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("value", sa.Float),
    sa.Column("value_text", sa.Text),
    sa.Column("comment", sa.Text),
    sa.Column("source", sa.String(200)),
    sa.Column("created_at_ns", sa.BigInteger, nullable=False),
    sa.Column("metadata", sa.Text),  # JSON (added in schema v2)
)


def _migration_1(conn: sa.Connection) -> None:
    """Initial schema (v1): traces, spans and feedback without resource/metadata columns."""
    conn.execute(sa.text("CREATE TABLE IF NOT EXISTS traces (trace_id VARCHAR(32) PRIMARY KEY, project VARCHAR(200), first_seen_ns BIGINT)"))
    conn.execute(
        sa.text(
            "CREATE TABLE IF NOT EXISTS spans (trace_id VARCHAR(32) NOT NULL, span_id VARCHAR(16) NOT NULL, "
            "parent_span_id VARCHAR(16), name TEXT NOT NULL, kind VARCHAR(16), project VARCHAR(200), scope VARCHAR(200), "
            "start_time_ns BIGINT, end_time_ns BIGINT, status VARCHAR(8), error_type TEXT, error_message TEXT, "
            "operation VARCHAR(64), model VARCHAR(200), input_tokens BIGINT, output_tokens BIGINT, input TEXT, output TEXT, "
            "attributes TEXT, PRIMARY KEY (trace_id, span_id))"
        )
    )
    conn.execute(
        sa.text(
            "CREATE TABLE IF NOT EXISTS feedback (id VARCHAR(64) PRIMARY KEY, trace_id VARCHAR(32) NOT NULL, span_id VARCHAR(16), "
            "name VARCHAR(200) NOT NULL, kind VARCHAR(32) NOT NULL, value DOUBLE PRECISION, value_text TEXT, comment TEXT, "
            "source VARCHAR(200), created_at_ns BIGINT NOT NULL)"
        )
    )
    conn.execute(sa.text("CREATE INDEX IF NOT EXISTS ix_feedback_trace_name ON feedback (trace_id, name, created_at_ns)"))


def _migration_2(conn: sa.Connection) -> None:
    """v2: keep the span's resource (service, SDK) and free-form feedback metadata; index spans by time."""
    conn.execute(sa.text("ALTER TABLE spans ADD COLUMN resource TEXT"))
    conn.execute(sa.text("ALTER TABLE feedback ADD COLUMN metadata TEXT"))
    conn.execute(sa.text("CREATE INDEX IF NOT EXISTS ix_spans_start ON spans (start_time_ns)"))
    conn.execute(sa.text("CREATE INDEX IF NOT EXISTS ix_feedback_name ON feedback (name)"))



# ---- continuous evaluation (schema v3): evaluator versions, online scores, alerts, refit runs
evaluator_versions = sa.Table(
    "evaluator_versions",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("project", sa.String(200), nullable=False),
    sa.Column("target", sa.String(200), nullable=False),  # the feedback name it predicts
    sa.Column("version", sa.Integer, nullable=False),  # 1, 2, ... per (project, target)
    sa.Column("status", sa.String(16), nullable=False),  # champion | retired | rejected
    sa.Column("reason", sa.Text),
    sa.Column("method", sa.String(64)),
    sa.Column("created_at_ns", sa.BigInteger, nullable=False),
    sa.Column("feedback_max_ns", sa.BigInteger),  # newest feedback the fit saw
    sa.Column("n_feedback", sa.Integer),
    sa.Column("artifact", sa.Text, nullable=False),  # evaluator JSON
    sa.Column("report", sa.Text),  # Markdown report
    sa.Column("statistics", sa.Text),  # JSON: fit stats, held-out comparison, reference scores
    sa.UniqueConstraint("project", "target", "version", name="uq_evaluator_versions_ptv"),
)

trace_scores = sa.Table(
    "trace_scores",
    metadata,
    sa.Column("trace_id", sa.String(32), primary_key=True),
    sa.Column("evaluator_id", sa.String(64), primary_key=True),
    sa.Column("project", sa.String(200)),
    sa.Column("target", sa.String(200)),
    sa.Column("score", sa.Float),
    sa.Column("metrics", sa.Text),  # JSON {feature: raw value}
    sa.Column("contributions", sa.Text),  # JSON {feature: weight * z}
    sa.Column("rationales", sa.Text),  # JSON [{"metric", "text"}]
    sa.Column("error", sa.Text),
    sa.Column("trace_start_ns", sa.BigInteger),
    sa.Column("scored_at_ns", sa.BigInteger, nullable=False),
    sa.Column("pushed_at_ns", sa.BigInteger),  # delivered to Langfuse (its ingestion answered 2xx)
    sa.Column("push_attempts", sa.Integer),  # delivery attempts so far (schema v4; NULL = 0)
    sa.Column("push_error", sa.Text),  # why the last attempt failed (schema v4)
)

monitor_alerts = sa.Table(
    "monitor_alerts",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("project", sa.String(200)),
    sa.Column("target", sa.String(200)),
    sa.Column("evaluator_id", sa.String(64)),
    sa.Column("kind", sa.String(32), nullable=False),  # low_significance | small_n | validity_decay | validity_change | score_drift | traffic_change | refit_error
    sa.Column("severity", sa.String(16), nullable=False),  # warning | alert
    sa.Column("message", sa.Text, nullable=False),
    sa.Column("details", sa.Text),  # JSON
    sa.Column("created_at_ns", sa.BigInteger, nullable=False),
    sa.Column("pushed_at_ns", sa.BigInteger),  # delivered to Langfuse
    sa.Column("push_attempts", sa.Integer),  # schema v4, as in trace_scores
    sa.Column("push_error", sa.Text),
)

refit_runs = sa.Table(
    "refit_runs",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("project", sa.String(200)),
    sa.Column("target", sa.String(200)),
    sa.Column("worker", sa.String(200)),  # host:pid
    sa.Column("started_ns", sa.BigInteger, nullable=False),
    sa.Column("ended_ns", sa.BigInteger),
    sa.Column("outcome", sa.String(32)),  # running | promoted | rejected | skipped | locked | error | interrupted (its worker died)
    sa.Column("message", sa.Text),
    sa.Column("evaluator_id", sa.String(64)),
)


def _migration_3(conn: sa.Connection) -> None:
    """v3: continuous evaluation (evaluator versions, online scores per trace, alerts, refit runs)."""
    big = "BIGINT"
    conn.execute(sa.text(
        "CREATE TABLE IF NOT EXISTS evaluator_versions (id VARCHAR(64) PRIMARY KEY, project VARCHAR(200) NOT NULL, "
        "target VARCHAR(200) NOT NULL, version INTEGER NOT NULL, status VARCHAR(16) NOT NULL, reason TEXT, method VARCHAR(64), "
        f"created_at_ns {big} NOT NULL, feedback_max_ns {big}, n_feedback INTEGER, artifact TEXT NOT NULL, report TEXT, "
        "statistics TEXT, CONSTRAINT uq_evaluator_versions_ptv UNIQUE (project, target, version))"))
    conn.execute(sa.text(
        "CREATE TABLE IF NOT EXISTS trace_scores (trace_id VARCHAR(32) NOT NULL, evaluator_id VARCHAR(64) NOT NULL, "
        "project VARCHAR(200), target VARCHAR(200), score DOUBLE PRECISION, metrics TEXT, contributions TEXT, rationales TEXT, "
        f"error TEXT, trace_start_ns {big}, scored_at_ns {big} NOT NULL, pushed_at_ns {big}, PRIMARY KEY (trace_id, evaluator_id))"))
    conn.execute(sa.text("CREATE INDEX IF NOT EXISTS ix_trace_scores_eval_start ON trace_scores (evaluator_id, trace_start_ns)"))
    conn.execute(sa.text(
        "CREATE TABLE IF NOT EXISTS monitor_alerts (id VARCHAR(64) PRIMARY KEY, project VARCHAR(200), target VARCHAR(200), "
        "evaluator_id VARCHAR(64), kind VARCHAR(32) NOT NULL, severity VARCHAR(16) NOT NULL, message TEXT NOT NULL, details TEXT, "
        f"created_at_ns {big} NOT NULL, pushed_at_ns {big})"))
    conn.execute(sa.text(
        "CREATE TABLE IF NOT EXISTS refit_runs (id VARCHAR(64) PRIMARY KEY, project VARCHAR(200), target VARCHAR(200), "
        f"worker VARCHAR(200), started_ns {big} NOT NULL, ended_ns {big}, outcome VARCHAR(32), message TEXT, evaluator_id VARCHAR(64))"))
    conn.execute(sa.text("CREATE INDEX IF NOT EXISTS ix_traces_first_seen ON traces (first_seen_ns)"))


def _migration_4(conn: sa.Connection) -> None:
    """v4: Langfuse delivery bookkeeping: attempts and the last error per online score and alert
    (``pushed_at_ns`` is set only once Langfuse acknowledged the delivery)."""
    for table in ("trace_scores", "monitor_alerts"):
        conn.execute(sa.text(f"ALTER TABLE {table} ADD COLUMN push_attempts INTEGER"))
        conn.execute(sa.text(f"ALTER TABLE {table} ADD COLUMN push_error TEXT"))


def _migration_5(conn: sa.Connection) -> None:
    """v5: the refit worker's APScheduler job table (the columns APScheduler 3's
    ``SQLAlchemyJobStore`` expects).  Created here, under the migration lock, because two workers
    starting at once on one Postgres otherwise both run APScheduler's ``CREATE TABLE`` and one of
    them fails on the race (measured in CI)."""
    blob = "BYTEA" if conn.dialect.name == "postgresql" else "BLOB"
    conn.execute(sa.text(
        "CREATE TABLE IF NOT EXISTS apscheduler_jobs (id VARCHAR(191) NOT NULL PRIMARY KEY, "
        f"next_run_time DOUBLE PRECISION, job_state {blob} NOT NULL)"))
    conn.execute(sa.text("CREATE INDEX IF NOT EXISTS ix_apscheduler_jobs_next_run_time ON apscheduler_jobs (next_run_time)"))


# ---- feedback rules (schema v6): one kind and scale per feedback name and project
feedback_schemas = sa.Table(
    "feedback_schemas",
    metadata,
    sa.Column("project", sa.String(200), primary_key=True),
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("scale_min", sa.Float),  # inclusive bounds (likert: integers; numeric/behavioral: optional)
    sa.Column("scale_max", sa.Float),
    sa.Column("source", sa.String(16), nullable=False),  # declared | first-seen
    sa.Column("created_at_ns", sa.BigInteger, nullable=False),
    sa.Column("updated_at_ns", sa.BigInteger, nullable=False),
)


def _migration_6(conn: sa.Connection) -> None:
    """v6: ``feedback_schemas``, the kind and scale of each feedback name per project (declared, or
    fixed by the first stored item), so every writer (SDKs, collectors) judges values by one rule.
    Names already in the store get the kind of their oldest item (first-seen), so a later ``1``
    under an old thumbs name stays thumbs; a likert scale is 1..5 widened to the stored values."""
    conn.execute(sa.text(
        "CREATE TABLE IF NOT EXISTS feedback_schemas (project VARCHAR(200) NOT NULL, name VARCHAR(200) NOT NULL, "
        "kind VARCHAR(32) NOT NULL, scale_min DOUBLE PRECISION, scale_max DOUBLE PRECISION, source VARCHAR(16) NOT NULL, "
        "created_at_ns BIGINT NOT NULL, updated_at_ns BIGINT NOT NULL, PRIMARY KEY (project, name))"))
    import math
    import time

    found = conn.execute(sa.text(
        "SELECT COALESCE(t.project, 'default') AS project, f.name, f.kind, MIN(f.created_at_ns) AS first_ns, MIN(f.value) AS lo, "
        "MAX(f.value) AS hi FROM feedback f LEFT JOIN traces t ON t.trace_id = f.trace_id "
        "GROUP BY COALESCE(t.project, 'default'), f.name, f.kind")).all()
    first: dict = {}
    for project, name, kind, first_ns, lo, hi in found:
        key = (project[:200], name)
        if key not in first or (first_ns or 0) < first[key][1]:
            first[key] = (kind, first_ns or 0, lo, hi)
    now = time.time_ns()
    rows = []
    for (project, name), (kind, _ns, lo, hi) in first.items():
        smin = smax = None
        if kind == "likert":
            smin = float(min(1, math.floor(lo))) if lo is not None else 1.0
            smax = float(max(5, math.ceil(hi))) if hi is not None else 5.0
        rows.append({"p": project, "n": name, "k": kind, "lo": smin, "hi": smax, "now": now})
    if rows:
        conn.execute(sa.text("INSERT INTO feedback_schemas (project, name, kind, scale_min, scale_max, source, created_at_ns, "
                             "updated_at_ns) VALUES (:p, :n, :k, :lo, :hi, 'first-seen', :now, :now)"), rows)


# ---- scale-out of online scoring (schema v7): claims on traces being scored, judge usage per hour
score_claims = sa.Table(
    "score_claims",
    metadata,
    sa.Column("evaluator_id", sa.String(64), primary_key=True),
    sa.Column("trace_id", sa.String(32), primary_key=True),
    sa.Column("claim_id", sa.String(64), nullable=False),  # one per claimed batch (renew and release by it)
    sa.Column("worker", sa.String(200)),  # host:pid
    sa.Column("claimed_at_ns", sa.BigInteger, nullable=False),
    sa.Column("expires_ns", sa.BigInteger, nullable=False),  # after this any worker may take the trace over
    sa.Column("attempts", sa.Integer, nullable=False),  # claims of this trace so far (a takeover adds one)
)

judge_usage = sa.Table(
    "judge_usage",
    metadata,
    sa.Column("evaluator_id", sa.String(64), primary_key=True),
    sa.Column("hour", sa.BigInteger, primary_key=True),  # hours since the epoch (UTC)
    sa.Column("calls", sa.BigInteger, nullable=False),  # judge requests reserved (then settled to those sent)
    sa.Column("tokens", sa.BigInteger, nullable=False),  # prompt + completion tokens (reserved, then settled)
    sa.Column("traces", sa.BigInteger, nullable=False),  # traces judged
    sa.Column("denied", sa.BigInteger, nullable=False),  # traces refused for the budget
)


def _migration_7(conn: sa.Connection) -> None:
    """v7: many scoring workers on one store.  ``score_claims``: a worker claims a batch of
    unscored traces (a lease that expires, so a killed worker's batch is taken over) and releases
    it with the scores; ``judge_usage``: LLM-judge calls and tokens per evaluator and hour, the
    budget every worker shares."""
    conn.execute(sa.text(
        "CREATE TABLE IF NOT EXISTS score_claims (evaluator_id VARCHAR(64) NOT NULL, trace_id VARCHAR(32) NOT NULL, "
        "claim_id VARCHAR(64) NOT NULL, worker VARCHAR(200), claimed_at_ns BIGINT NOT NULL, expires_ns BIGINT NOT NULL, "
        "attempts INTEGER NOT NULL, PRIMARY KEY (evaluator_id, trace_id))"))
    conn.execute(sa.text("CREATE INDEX IF NOT EXISTS ix_score_claims_claim ON score_claims (claim_id)"))
    conn.execute(sa.text(
        "CREATE TABLE IF NOT EXISTS judge_usage (evaluator_id VARCHAR(64) NOT NULL, hour BIGINT NOT NULL, calls BIGINT NOT NULL, "
        "tokens BIGINT NOT NULL, traces BIGINT NOT NULL, denied BIGINT NOT NULL, PRIMARY KEY (evaluator_id, hour))"))


# (name, table, columns, partial-index condition or None): what each serves is in _migration_8's docstring
V8_INDEXES = [
    ("ix_traces_project_first_seen", "traces", "project, first_seen_ns", None),
    ("ix_feedback_name_created", "feedback", "name, created_at_ns", None),
    ("ix_trace_scores_undelivered", "trace_scores", "evaluator_id, trace_start_ns", "pushed_at_ns IS NULL"),
    ("ix_monitor_alerts_scope", "monitor_alerts", "project, target, created_at_ns", None),
    ("ix_monitor_alerts_evaluator", "monitor_alerts", "evaluator_id, kind", None),
    ("ix_refit_runs_scope", "refit_runs", "project, target, started_ns", None),
    ("ix_refit_runs_running", "refit_runs", "outcome", "outcome = 'running'"),
]


def _migration_8(conn: sa.Connection) -> None:
    """v8: indexes for the queries the worker, the dashboard and retention run at 10^5-10^6 traces
    (chosen with EXPLAIN on SQLite and Postgres; timings in tests/benchmarks/store_scale.py):

    - traces (project, first_seen_ns): the unscored-trace query (one project, newest first) and
      ``store prune --project``;
    - feedback (name, created_at_ns): ``count_feedback`` (new feedback since the last fit, every
      worker tick), ``feedback_frame(names=...)`` in time order, the training frame's labelled-trace
      filter; it replaces ix_feedback_name (name), its prefix;
    - trace_scores (evaluator_id, trace_start_ns) WHERE pushed_at_ns IS NULL: the Langfuse push's
      undelivered scores, newest first, without walking every delivered score;
    - monitor_alerts (project, target, created_at_ns) and (evaluator_id, kind): the dashboard's
      newest alerts and the monitor's one-alert-per-kind check;
    - refit_runs (project, target, started_ns) and the running ones: the dashboard's run list and
      the stale-run sweep at every refit.

    Not indexed on purpose: score_claims by trace_id (retention deletes a trace's claims; the
    table only holds batches in flight, and every claim and release would pay for the index).
    On Postgres the tables are analysed afterwards, so the planner sees the new indexes' use at once."""
    for name, table, cols, where in V8_INDEXES:
        cond = f" WHERE {where}" if where else ""
        conn.execute(sa.text(f"CREATE INDEX IF NOT EXISTS {name} ON {table} ({cols}){cond}"))
    conn.execute(sa.text("DROP INDEX IF EXISTS ix_feedback_name"))
    if conn.dialect.name == "postgresql":
        for table in sorted({t for _, t, _, _ in V8_INDEXES}):
            conn.execute(sa.text(f"ANALYZE {table}"))


def _migration_9(conn: sa.Connection) -> None:
    """v9: sessions, users, tags and metadata per span (what the training frame groups and the
    dashboard filters by), indexed by session and by user; and the stack trace of a span's
    exception.  Older spans keep NULL there (their
    attribute JSON still has whatever was sent)."""
    for col, typ in (("session_id", "VARCHAR(200)"), ("user_id", "VARCHAR(200)"), ("tags", "TEXT"), ("trace_metadata", "TEXT"),
                     ("error_stack", "TEXT")):
        conn.execute(sa.text(f"ALTER TABLE spans ADD COLUMN {col} {typ}"))
    conn.execute(sa.text("CREATE INDEX IF NOT EXISTS ix_spans_session ON spans (session_id)"))
    conn.execute(sa.text("CREATE INDEX IF NOT EXISTS ix_spans_user ON spans (user_id)"))


def _migration_10(conn: sa.Connection) -> None:
    """v10: the served dashboard's trace list, newest first across every version of a project's
    target (with one version chosen, ix_trace_scores_eval_start serves it)."""
    conn.execute(sa.text("CREATE INDEX IF NOT EXISTS ix_trace_scores_scope_start ON trace_scores (project, target, trace_start_ns)"))


MIGRATIONS: list[tuple[int, callable]] = [(1, _migration_1), (2, _migration_2), (3, _migration_3), (4, _migration_4),
                                          (5, _migration_5), (6, _migration_6), (7, _migration_7), (8, _migration_8),
                                          (9, _migration_9), (10, _migration_10)]
SCHEMA_VERSION = MIGRATIONS[-1][0]
