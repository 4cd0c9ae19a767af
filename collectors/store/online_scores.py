"""The trace store's online scores, and what lets many scoring workers share one store: claims
with a lease on the traces being scored, and LLM-judge usage per evaluator and hour.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import sqlalchemy as sa

from ..files import dumps
from .schema import (
    judge_usage,
    score_claims,
    spans,
    trace_scores,
    traces,
)

__all__ = ["OnlineScoreTables"]


class OnlineScoreTables:
    """Online scores, claims and judge usage (see the module docstring)."""

    engine: sa.Engine

    def unscored_traces(self, project: str, evaluator_id: str, limit: int, *, seen_before_ns: int | None = None,
                        unclaimed: bool = False) -> list[tuple[str, int]]:
        """(trace id, first seen ns) of traces the version has not scored, newest first; with
        ``unclaimed`` only those no worker holds a live claim on.  A read: claims nothing (workers
        take traces with :meth:`claim_unscored`)."""
        s = trace_scores
        j = traces.outerjoin(s, (s.c.trace_id == traces.c.trace_id) & (s.c.evaluator_id == evaluator_id))
        q = sa.select(traces.c.trace_id, traces.c.first_seen_ns).select_from(j).where(s.c.trace_id.is_(None))
        q = q.where(traces.c.project == project)
        if seen_before_ns is not None:
            q = q.where(traces.c.first_seen_ns <= seen_before_ns)
        with self.engine.connect() as conn:
            if unclaimed:
                c = score_claims
                live = sa.select(c.c.trace_id).where(c.c.evaluator_id == evaluator_id, c.c.trace_id == traces.c.trace_id,
                                                     c.c.expires_ns > self._db_now_ns(conn))
                q = q.where(~live.exists())
            q = q.order_by(traces.c.first_seen_ns.desc()).limit(limit)
            return [(r[0], r[1]) for r in conn.execute(q).all()]

    def _db_now_ns(self, conn) -> int:
        """The database's clock on Postgres (workers on several machines compare lease expiry
        against one clock, so a skewed host cannot steal or keep a lease); this host's on SQLite
        (every writer of a SQLite file is on this host)."""
        if self.dialect == "postgresql":
            return int(conn.execute(sa.text("SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)")).scalar()) * 1000
        return time.time_ns()

    def claim_unscored(self, project: str, evaluator_id: str, limit: int, *, claim_id: str, worker: str, lease_ns: int,
                       seen_before_ns: int | None = None) -> list[tuple[str, int | None, int]]:
        """Claim up to ``limit`` traces (newest first) that the version has not scored and that no
        worker holds a live claim on; returns ``(trace id, first seen ns, claims so far)`` of what
        this call got.

        One ``INSERT ... SELECT ... ON CONFLICT DO UPDATE ... WHERE expired RETURNING`` statement:
        a trace is either newly claimed or taken over from a claim whose lease expired (its worker
        died or stalled), and two workers never both get it: on Postgres the candidate rows are
        locked ``FOR UPDATE SKIP LOCKED`` (a concurrent claimer picks the next ones instead of
        waiting) and the conflict clause re-checks expiry against the committed claim; SQLite runs
        the statement under its single write lock."""
        with self.engine.begin() as conn:
            now = self._db_now_ns(conn)
            params = {"eid": evaluator_id, "cid": claim_id, "worker": worker[:200], "now": now, "exp": now + int(lease_ns),
                      "project": project, "n": int(limit)}
            settled = ""
            if seen_before_ns is not None:
                settled, params["settled"] = "AND t.first_seen_ns <= :settled ", int(seen_before_ns)
            lock = "FOR UPDATE OF t SKIP LOCKED " if self.dialect == "postgresql" else ""
            got = conn.execute(sa.text(
                "INSERT INTO score_claims (evaluator_id, trace_id, claim_id, worker, claimed_at_ns, expires_ns, attempts) "
                "SELECT CAST(:eid AS VARCHAR(64)), t.trace_id, CAST(:cid AS VARCHAR(64)), CAST(:worker AS VARCHAR(200)), "
                "CAST(:now AS BIGINT), CAST(:exp AS BIGINT), 1 FROM traces t "
                f"WHERE t.project = :project {settled}"
                "AND NOT EXISTS (SELECT 1 FROM trace_scores s WHERE s.trace_id = t.trace_id AND s.evaluator_id = :eid) "
                "AND NOT EXISTS (SELECT 1 FROM score_claims c WHERE c.evaluator_id = :eid AND c.trace_id = t.trace_id "
                "AND c.expires_ns > :now) "
                f"ORDER BY t.first_seen_ns DESC LIMIT :n {lock}"
                "ON CONFLICT (evaluator_id, trace_id) DO UPDATE SET claim_id = excluded.claim_id, worker = excluded.worker, "
                "claimed_at_ns = excluded.claimed_at_ns, expires_ns = excluded.expires_ns, attempts = score_claims.attempts + 1 "
                "WHERE score_claims.expires_ns <= :now "
                "RETURNING trace_id, attempts"), params).all()
            attempts = {r[0]: int(r[1]) for r in got}
            seen: dict[str, int | None] = {}
            ids = list(attempts)
            for i in range(0, len(ids), 500):
                q = sa.select(traces.c.trace_id, traces.c.first_seen_ns).where(traces.c.trace_id.in_(ids[i:i + 500]))
                seen.update({r[0]: r[1] for r in conn.execute(q).all()})
        out = [(t, seen.get(t), attempts[t]) for t in ids]
        out.sort(key=lambda x: -(x[1] or 0))
        return out

    def renew_claim(self, claim_id: str, lease_ns: int) -> int:
        """Extend the lease of every trace still held under ``claim_id``; returns how many (fewer
        than claimed: some were taken over after the lease ran out)."""
        c = score_claims
        with self.engine.begin() as conn:
            exp = self._db_now_ns(conn) + int(lease_ns)
            return int(conn.execute(c.update().where(c.c.claim_id == claim_id).values(expires_ns=exp)).rowcount or 0)

    @staticmethod
    def _release(claim_id: str, keep: Sequence[str] = ()):
        q = score_claims.delete().where(score_claims.c.claim_id == claim_id)
        return q.where(score_claims.c.trace_id.not_in(list(keep))) if keep else q

    def release_claim(self, claim_id: str, *, keep: Sequence[str] = ()) -> None:
        """Give the traces of a claim back (scored, or free for any worker to try again), but
        those in ``keep``: they stay claimed until the lease runs out (a retry after a pause)."""
        with self.engine.begin() as conn:
            conn.execute(self._release(claim_id, keep))

    def claims(self, evaluator_id: str | None = None) -> list[dict]:
        """Claims in the store (live or expired), for inspection and tests."""
        c = score_claims
        q = sa.select(c) if evaluator_id is None else sa.select(c).where(c.c.evaluator_id == evaluator_id)
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(q).mappings().all()]

    def reserve_judge_budget(self, evaluator_id: str, hour: int, *, calls: int, tokens: int, max_calls: int | None,
                             max_tokens: int | None) -> bool:
        """Reserve ``calls`` judge requests and ``tokens`` tokens of hour ``hour`` for one trace,
        atomically across workers: one conditional ``UPDATE`` that succeeds only while the hour's
        usage plus the reservation stays within both limits (``None``: no limit).  A refusal is
        counted in ``denied``."""
        u = judge_usage
        key = (u.c.evaluator_id == evaluator_id) & (u.c.hour == int(hour))
        ok = key
        if max_calls is not None:
            ok = ok & (u.c.calls + int(calls) <= int(max_calls))
        if max_tokens is not None:
            ok = ok & (u.c.tokens + int(tokens) <= int(max_tokens))
        with self.engine.begin() as conn:
            conn.execute(self._insert(u, ["evaluator_id", "hour"]),
                         {"evaluator_id": evaluator_id, "hour": int(hour), "calls": 0, "tokens": 0, "traces": 0, "denied": 0})
            got = conn.execute(u.update().where(ok).values(calls=u.c.calls + int(calls), tokens=u.c.tokens + int(tokens),
                                                           traces=u.c.traces + 1)).rowcount
            if not got:
                conn.execute(u.update().where(key).values(denied=u.c.denied + 1))
        return bool(got)

    def settle_judge_usage(self, evaluator_id: str, hour: int, *, calls: int, tokens: int) -> None:
        """Correct a reservation by what was really used (``calls``/``tokens`` are differences:
        cached replies cost nothing, real token counts replace the estimate)."""
        if not calls and not tokens:
            return
        u = judge_usage
        with self.engine.begin() as conn:
            conn.execute(u.update().where(u.c.evaluator_id == evaluator_id, u.c.hour == int(hour))
                         .values(calls=u.c.calls + int(calls), tokens=u.c.tokens + int(tokens)))

    def judge_usage(self, evaluator_id: str, *, since_hour: int = 0) -> list[dict]:
        """Judge usage of a version per hour (oldest first): calls, tokens, traces judged, denied."""
        u = judge_usage
        q = sa.select(u).where(u.c.evaluator_id == evaluator_id, u.c.hour >= int(since_hour)).order_by(u.c.hour)
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(q).mappings().all()]

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

    def write_scores(self, rows: list[dict], *, release: str | None = None, keep: Sequence[str] = ()) -> None:
        """Insert online scores (``metrics``/``contributions``/``rationales`` as Python values);
        a (trace, version) already scored is left as it is.  ``release``: a claim id whose traces
        (but those in ``keep``) are given back in the same transaction, so a worker that dies
        before it commits has stored nothing and still holds the batch until its lease runs out."""
        if not rows:
            if release:
                self.release_claim(release, keep=keep)
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
            if release:
                conn.execute(self._release(release, keep))

    def scores_frame(self, evaluator_id: str, *, limit: int | None = None, columns: Sequence[str] | None = None,
                     since_ns: int | None = None, trace_ids: Sequence[str] | None = None):
        """Online scores of one version (newest trace first), JSON columns as stored text.

        ``columns`` (default all), ``since_ns`` (traces started after it) and ``trace_ids`` (only
        these, looked up by key) keep the monitor's and dashboard's reads proportional to what they
        use: reading every score of a version took 10-17 s at 10^6 scored traces (measured,
        ``tests/benchmarks/store_scale.py``)."""
        import pandas as pd

        s = trace_scores
        cols = [s.c[c] for c in columns] if columns else list(s.columns)
        names = [c.name for c in cols]
        base = sa.select(*cols).where(s.c.evaluator_id == evaluator_id)
        if since_ns is not None:
            base = base.where(s.c.trace_start_ns > int(since_ns))
        with self.engine.connect() as conn:
            if trace_ids is not None:
                ids = list(dict.fromkeys(trace_ids))
                rows = [tuple(r) for i in range(0, len(ids), 500)
                        for r in conn.execute(base.where(s.c.trace_id.in_(ids[i:i + 500]))).all()]
            else:
                q = base.order_by(s.c.trace_start_ns.desc())
                rows = [tuple(r) for r in conn.execute(q.limit(limit) if limit else q).all()]
        frame = pd.DataFrame(rows, columns=names)
        if trace_ids is not None and "trace_start_ns" in names and len(frame):
            frame = frame.sort_values("trace_start_ns", ascending=False, kind="stable").reset_index(drop=True)
        return frame

    @staticmethod
    def empty_scores_frame():
        import pandas as pd

        return pd.DataFrame(columns=[c.name for c in trace_scores.columns])
