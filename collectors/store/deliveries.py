"""The trace store's delivery bookkeeping: which online scores still have to reach Langfuse, and
the outcome of each attempt.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import sqlalchemy as sa

from .schema import (
    monitor_alerts,
    trace_scores,
)

__all__ = ["DeliveryTables"]


class DeliveryTables:
    """Delivery state of online scores (see the module docstring)."""

    engine: sa.Engine

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
