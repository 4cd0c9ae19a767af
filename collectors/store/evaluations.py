"""The trace store's continuous-evaluation tables: evaluator versions, online scores, alerts,
refit runs, and Langfuse delivery bookkeeping.

Why here: the store is the only code that writes SQL against its tables.  The monitor, the
worker, the CLI, the dashboard and the Langfuse push call these methods; they never see a
table.  :class:`EvaluationStore` is a mixin of :class:`~autometrics.collectors.store.TraceStore`
(it uses the store's ``engine`` and ``_insert``).  JSON columns go in as Python values and come
out parsed.

Every method is scoped by ``project`` and ``target`` (the feedback name an evaluator predicts)
where the table has them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

import sqlalchemy as sa
from autometrics.collectors.files import dumps
from autometrics.collectors.store.schema import (
    evaluator_versions,
    monitor_alerts,
    refit_runs,
    spans,
    trace_scores,
    traces,
)

__all__ = ["EvaluationStore", "VERSION_STATUSES"]

VERSION_STATUSES = ("champion", "retired", "rejected")


def _parse_version(row, *, with_artifact: bool) -> dict:
    r = dict(row)
    r["statistics"] = json.loads(r.get("statistics") or "{}")
    if with_artifact:
        r["artifact"] = json.loads(r["artifact"])
    else:
        r.pop("artifact", None)
    r.pop("report", None)
    return r


class EvaluationStore:
    """Continuous-evaluation methods of the trace store (see the module docstring)."""

    engine: sa.Engine

    # ------------------------------------------------------------------ versions
    @staticmethod
    def _scope(table, project: str, target: str):
        return (table.c.project == project) & (table.c.target == target)

    def evaluator_versions(self, project: str, target: str, *, with_artifact: bool = False) -> list[dict]:
        """Every evaluator version of (project, target), oldest first, statistics parsed."""
        v = evaluator_versions
        q = sa.select(v).where(self._scope(v, project, target)).order_by(v.c.version)
        with self.engine.connect() as conn:
            return [_parse_version(r, with_artifact=with_artifact) for r in conn.execute(q).mappings().all()]

    def evaluator_version(self, project: str, target: str, number: int) -> dict:
        """One version with its artifact; ``KeyError`` naming what is missing."""
        v = evaluator_versions
        q = sa.select(v).where(self._scope(v, project, target), v.c.version == int(number))
        with self.engine.connect() as conn:
            row = conn.execute(q).mappings().first()
        if row is None:
            raise KeyError(f"no evaluator version {number} for target {target!r} in project {project!r}")
        return _parse_version(row, with_artifact=True)

    def version_report(self, evaluator_id: str) -> str | None:
        """The Markdown report stored with a version."""
        v = evaluator_versions
        with self.engine.connect() as conn:
            return conn.execute(sa.select(v.c.report).where(v.c.id == evaluator_id)).scalar()

    def champion(self, project: str, target: str) -> dict | None:
        """The current champion version (with artifact), or None."""
        v = evaluator_versions
        q = sa.select(v).where(self._scope(v, project, target), v.c.status == "champion")
        with self.engine.connect() as conn:
            row = conn.execute(q).mappings().first()
        return None if row is None else _parse_version(row, with_artifact=True)

    def add_version(self, project: str, target: str, *, evaluator_id: str, promote: bool, reason: str, method: str,
                    feedback_max_ns: int, n_feedback: int, artifact: dict, report: str | None, statistics: dict) -> int:
        """Store a fitted evaluator as the next version number; with ``promote`` it becomes the
        champion and the previous champion is retired (one transaction).  Returns the number."""
        v = evaluator_versions
        scope = self._scope(v, project, target)
        with self.engine.begin() as conn:
            number = int(conn.execute(sa.select(sa.func.max(v.c.version)).where(scope)).scalar() or 0) + 1
            if promote:
                conn.execute(v.update().where(scope & (v.c.status == "champion")).values(status="retired"))
            conn.execute(v.insert().values(
                id=evaluator_id, project=project, target=target, version=number,
                status="champion" if promote else "rejected", reason=reason, method=method, created_at_ns=time.time_ns(),
                feedback_max_ns=int(feedback_max_ns), n_feedback=int(n_feedback), artifact=dumps(artifact), report=report,
                statistics=dumps(statistics)))
        return number

    def make_champion(self, project: str, target: str, evaluator_id: str, reason: str) -> None:
        """Make one version the champion (the current one becomes ``retired``)."""
        v = evaluator_versions
        scope = self._scope(v, project, target)
        with self.engine.begin() as conn:
            conn.execute(v.update().where(scope & (v.c.status == "champion")).values(status="retired"))
            conn.execute(v.update().where(v.c.id == evaluator_id).values(status="champion", reason=reason))

    def update_version_statistics(self, evaluator_id: str, key: str, value) -> None:
        """Set one key of a version's statistics (e.g. the latest live validity)."""
        v = evaluator_versions
        with self.engine.begin() as conn:
            stats = json.loads(conn.execute(sa.select(v.c.statistics).where(v.c.id == evaluator_id)).scalar() or "{}")
            stats[key] = value
            conn.execute(v.update().where(v.c.id == evaluator_id).values(statistics=dumps(stats)))

    def feedback_mark(self, project: str, target: str) -> int:
        """Newest feedback time (ns) any stored version of (project, target) was fitted on; 0 if none."""
        v = evaluator_versions
        with self.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.max(v.c.feedback_max_ns)).where(self._scope(v, project, target))).scalar() or 0)

    # ------------------------------------------------------------------ refit runs
    def record_run(self, run_id: str, project: str, target: str, worker: str, **values) -> None:
        """Insert or update one refit attempt (``started_ns``, ``ended_ns``, ``outcome``, ``message``, ``evaluator_id``)."""
        r = refit_runs
        with self.engine.begin() as conn:
            if conn.execute(sa.select(r.c.id).where(r.c.id == run_id)).first() is None:
                conn.execute(r.insert().values(id=run_id, project=project, target=target, worker=worker, **values))
            else:
                conn.execute(r.update().where(r.c.id == run_id).values(**values))

    def close_running_runs(self, message) -> list[dict]:
        """Mark every run still ``running`` as ``interrupted``; ``message(run) -> str`` says why.
        Call only while holding the refit lock.  Returns the runs closed."""
        r = refit_runs
        with self.engine.begin() as conn:
            stale = [dict(x) for x in conn.execute(sa.select(r.c.id, r.c.worker, r.c.started_ns, r.c.project, r.c.target)
                                                   .where(r.c.outcome == "running")).mappings().all()]
            now = time.time_ns()
            for x in stale:
                conn.execute(r.update().where(r.c.id == x["id"], r.c.outcome == "running")
                             .values(outcome="interrupted", ended_ns=now, message=message(x)))
        return stale

    def runs(self, project: str, target: str, limit: int = 50) -> list[dict]:
        r = refit_runs
        q = sa.select(r).where(self._scope(r, project, target)).order_by(r.c.started_ns.desc()).limit(limit)
        with self.engine.connect() as conn:
            return [dict(x) for x in conn.execute(q).mappings().all()]

    # ------------------------------------------------------------------ alerts
    def add_alert(self, project: str, target: str, *, alert_id: str, kind: str, severity: str, message: str,
                  evaluator_id: str | None = None, details=None) -> None:
        with self.engine.begin() as conn:
            conn.execute(monitor_alerts.insert().values(
                id=alert_id, project=project, target=target, evaluator_id=evaluator_id, kind=kind, severity=severity,
                message=message, details=dumps(details) if details is not None else None, created_at_ns=time.time_ns()))

    def has_alert(self, kind: str, evaluator_id: str) -> bool:
        a = monitor_alerts
        with self.engine.connect() as conn:
            return conn.execute(sa.select(a.c.id).where(a.c.kind == kind, a.c.evaluator_id == evaluator_id)).first() is not None

    def alerts(self, project: str, target: str, limit: int = 100) -> list[dict]:
        """Newest first, details parsed."""
        a = monitor_alerts
        q = sa.select(a).where(self._scope(a, project, target)).order_by(a.c.created_at_ns.desc()).limit(limit)
        with self.engine.connect() as conn:
            rows = [dict(r) for r in conn.execute(q).mappings().all()]
        for r in rows:
            r["details"] = json.loads(r["details"]) if r["details"] else None
        return rows

    # ------------------------------------------------------------------ online scores
    def unscored_traces(self, project: str, evaluator_id: str, limit: int, *,
                        seen_before_ns: int | None = None) -> list[tuple[str, int]]:
        """(trace id, first seen ns) of traces the version has not scored, newest first."""
        s = trace_scores
        j = traces.outerjoin(s, (s.c.trace_id == traces.c.trace_id) & (s.c.evaluator_id == evaluator_id))
        q = sa.select(traces.c.trace_id, traces.c.first_seen_ns).select_from(j).where(s.c.trace_id.is_(None))
        q = q.where(traces.c.project == project)
        if seen_before_ns is not None:
            q = q.where(traces.c.first_seen_ns <= seen_before_ns)
        q = q.order_by(traces.c.first_seen_ns.desc()).limit(limit)
        with self.engine.connect() as conn:
            return [(r[0], r[1]) for r in conn.execute(q).all()]

    def trace_texts(self, trace_ids: Sequence[str]):
        """DataFrame ``trace_id, input, output, start``: each trace's outermost span that captured
        content (as in the training frame) and its start time."""
        import pandas as pd

        cols = [spans.c.trace_id, spans.c.start_time_ns, spans.c.end_time_ns, spans.c.input, spans.c.output]
        with self.engine.connect() as conn:
            sp = pd.DataFrame(conn.execute(sa.select(*cols).where(spans.c.trace_id.in_(list(trace_ids)))).all(),
                              columns=["trace_id", "start", "end", "input", "output"])
        if sp.empty:
            return pd.DataFrame(columns=["trace_id", "input", "output", "start"])
        start = sp.groupby("trace_id")["start"].min()
        sp = sp[sp["input"].notna() | sp["output"].notna()]
        sp = sp.sort_values(["trace_id", "start", "end"], ascending=[True, True, False], kind="stable")
        first = sp.groupby("trace_id", sort=False).head(1).set_index("trace_id")[["input", "output"]]
        out = first.reindex(start.index)
        out["start"] = start
        return out.reset_index()

    def write_scores(self, rows: list[dict]) -> None:
        """Insert online scores (``metrics``/``contributions``/``rationales`` as Python values);
        a (trace, version) already scored is left as it is."""
        if not rows:
            return
        cols = [c.name for c in trace_scores.columns]
        out = []
        for r in rows:
            r = {c: r.get(c) for c in cols}
            for k in ("metrics", "contributions", "rationales"):
                if r[k] is not None and not isinstance(r[k], str):
                    r[k] = dumps(r[k])
            out.append(r)
        with self.engine.begin() as conn:
            conn.execute(self._insert(trace_scores, ["trace_id", "evaluator_id"]), out)

    def scores_frame(self, evaluator_id: str, *, limit: int | None = None):
        """Online scores of one version (newest trace first), JSON columns as stored text."""
        import pandas as pd

        s = trace_scores
        q = sa.select(s).where(s.c.evaluator_id == evaluator_id).order_by(s.c.trace_start_ns.desc())
        if limit:
            q = q.limit(limit)
        with self.engine.connect() as conn:
            return pd.DataFrame(conn.execute(q).mappings().all(), columns=[c.name for c in s.columns])

    @staticmethod
    def empty_scores_frame():
        import pandas as pd

        return pd.DataFrame(columns=[c.name for c in trace_scores.columns])

    # ------------------------------------------------------------------ Langfuse delivery
    def undelivered_scores(self, evaluator_id: str, *, max_attempts: int, limit: int) -> list[dict]:
        """Online scores of a version not yet acknowledged by Langfuse and not given up on."""
        s = trace_scores
        q = (sa.select(s).where(s.c.evaluator_id == evaluator_id, s.c.pushed_at_ns.is_(None),
                                sa.func.coalesce(s.c.push_attempts, 0) < max_attempts)
             .order_by(s.c.trace_start_ns.desc()).limit(limit))
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(q).mappings().all()]

    def mark_delivery(self, what: str, keys: Sequence[str], *, delivered: bool, error: str | None,
                      evaluator_id: str | None = None) -> None:
        """One delivery attempt on ``keys`` (trace ids of ``what="scores"`` of one version, or
        alert ids of ``what="alerts"``): attempts + 1, the error, ``pushed_at_ns`` when delivered."""
        if not keys:
            return
        table, key_col = (trace_scores, trace_scores.c.trace_id) if what == "scores" else (monitor_alerts, monitor_alerts.c.id)
        values = {"push_attempts": sa.func.coalesce(table.c.push_attempts, 0) + 1, "push_error": error}
        if delivered:
            values["pushed_at_ns"] = time.time_ns()
        keys = list(keys)
        with self.engine.begin() as conn:
            for i in range(0, len(keys), 500):
                q = table.update().where(key_col.in_(keys[i:i + 500]))
                if what == "scores" and evaluator_id is not None:
                    q = q.where(trace_scores.c.evaluator_id == evaluator_id)
                conn.execute(q.values(**values))
