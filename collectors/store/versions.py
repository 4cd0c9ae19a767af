"""The trace store's evaluator lifecycle: versions (champion, retired, rejected) with their
artifacts and reports, refit runs, and alerts.  Every method is scoped by ``project`` and
``target`` (the feedback name an evaluator predicts).  JSON columns go in as Python values and
come out parsed.
"""

from __future__ import annotations

import json
import time

import sqlalchemy as sa

from ...metricbank.errors import NotFound
from ..files import dumps
from .schema import (
    evaluator_versions,
    monitor_alerts,
    refit_runs,
)

__all__ = ["VersionTables", "VERSION_STATUSES"]

VERSION_STATUSES = ("champion", "retired", "rejected")


class VersionTables:
    """Evaluator versions, refit runs and alerts (see the module docstring)."""

    engine: sa.Engine

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
            raise NotFound(f"no evaluator version {number} for target {target!r} in project {project!r}")
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


def _parse_version(row, *, with_artifact: bool) -> dict:
    r = dict(row)
    r["statistics"] = json.loads(r.get("statistics") or "{}")
    if with_artifact:
        r["artifact"] = json.loads(r["artifact"])
    else:
        r.pop("artifact", None)
    r.pop("report", None)
    return r
