"""What the served dashboard reads: the scored traces of a project and target, filtered and paged
in SQL (one indexed query per page, whatever the store's size), and one trace whole."""

from __future__ import annotations

import dataclasses

import sqlalchemy as sa

from .schema import evaluator_versions, feedback, spans, trace_scores

__all__ = ["BrowseTables", "TraceFilter"]


@dataclasses.dataclass(frozen=True)
class TraceFilter:
    """Which scored traces to list: each field None is no condition.  ``evaluator_id``: the
    version that scored them (None: every version's scores); times in ns since the epoch; the
    model, user and session match any span of the trace; the label is the target's feedback."""

    evaluator_id: str | None = None
    start_ns: int | None = None
    end_ns: int | None = None
    model: str | None = None
    user_id: str | None = None
    session_id: str | None = None
    score_min: float | None = None
    score_max: float | None = None
    label_min: float | None = None
    label_max: float | None = None


class BrowseTables:
    """The served dashboard's reads (see the module docstring)."""

    engine: sa.Engine

    def dashboard_keys(self) -> list[dict]:
        """(project, target) pairs that have evaluator versions, with their newest version number."""
        v = evaluator_versions
        q = sa.select(v.c.project, v.c.target, sa.func.max(v.c.version), sa.func.count()).group_by(v.c.project, v.c.target)
        with self.engine.connect() as conn:
            rows = conn.execute(q.order_by(v.c.project, v.c.target)).all()
        return [{"project": p, "target": t, "newest": int(n), "versions": int(c)} for p, t, n, c in rows]

    def _where(self, project: str, target: str, f: TraceFilter) -> list:
        s = trace_scores
        cond = [s.c.project == project, s.c.target == target]
        if f.evaluator_id:
            cond.append(s.c.evaluator_id == f.evaluator_id)
        if f.start_ns is not None:
            cond.append(s.c.trace_start_ns >= int(f.start_ns))
        if f.end_ns is not None:
            cond.append(s.c.trace_start_ns < int(f.end_ns))
        if f.score_min is not None:
            cond.append(s.c.score >= float(f.score_min))
        if f.score_max is not None:
            cond.append(s.c.score <= float(f.score_max))
        for col, val in ((spans.c.user_id, f.user_id), (spans.c.session_id, f.session_id)):
            if val:  # indexed and selective: the matching traces first
                cond.append(s.c.trace_id.in_(sa.select(spans.c.trace_id).where(col == val)))
        if f.model:  # a few models share every trace: probe each candidate's spans by key
            cond.append(sa.exists().where(spans.c.trace_id == s.c.trace_id, spans.c.model == f.model))
        if f.label_min is not None or f.label_max is not None:
            # the trace's newest label under the target (the one the page shows and a fit reads)
            newer = feedback.alias("newer")
            newest = (sa.select(newer.c.id).where(newer.c.trace_id == feedback.c.trace_id, newer.c.name == target)
                      .order_by(newer.c.created_at_ns.desc(), newer.c.id.desc()).limit(1).correlate(feedback)
                      .scalar_subquery())
            fb = [feedback.c.trace_id == s.c.trace_id, feedback.c.name == target, feedback.c.id == newest]
            if f.label_min is not None:
                fb.append(feedback.c.value >= float(f.label_min))
            if f.label_max is not None:
                fb.append(feedback.c.value <= float(f.label_max))
            cond.append(sa.exists().where(*fb))
        return cond

    def scored_traces(self, project: str, target: str, f: TraceFilter, *, limit: int = 50, offset: int = 0,
                      count_up_to: int = 100_000):
        """(page, total) of scored traces under ``f``, newest first: the page a DataFrame with
        ``trace_id, evaluator_id, score, error, trace_start_ns`` plus ``label`` (the newest
        target feedback), ``model``, ``user_id``, ``session_id``, ``input``, ``output`` (of the
        outermost span with content); ``total`` counts matches up to ``count_up_to`` + 1 (more
        than ``count_up_to``: "more than")."""
        import pandas as pd

        s = trace_scores
        cond = self._where(project, target, f)
        # a total order (one trace has a row per version): pages never repeat or skip a row
        q = (sa.select(s.c.trace_id, s.c.evaluator_id, s.c.score, s.c.error, s.c.trace_start_ns).where(*cond)
             .order_by(s.c.trace_start_ns.desc().nulls_last(), s.c.trace_id, s.c.evaluator_id).limit(limit).offset(offset))
        counted = sa.select(sa.func.count()).select_from(sa.select(s.c.trace_id).where(*cond).limit(count_up_to + 1).subquery())
        with self.engine.connect() as conn:
            page = pd.DataFrame([tuple(r) for r in conn.execute(q).all()],
                                columns=["trace_id", "evaluator_id", "score", "error", "trace_start_ns"])
            total = int(conn.execute(counted).scalar_one())
            ids = page["trace_id"].tolist()
            about = self._trace_facts(conn, ids, target)
        for col in ("label", "model", "user_id", "session_id", "input", "output"):
            page[col] = [about.get(t, {}).get(col) for t in ids]
        return page, total

    def _trace_facts(self, conn, ids: list[str], target: str) -> dict[str, dict]:
        """label / model / user / session / input / output of a page's traces, read by key."""
        out: dict[str, dict] = {t: {} for t in ids}
        if not ids:
            return out
        q = (sa.select(spans.c.trace_id, spans.c.model, spans.c.user_id, spans.c.session_id, spans.c.input, spans.c.output)
             .where(spans.c.trace_id.in_(ids)).order_by(spans.c.trace_id, spans.c.start_time_ns))
        for tid, model, user, session, inp, outp in conn.execute(q).all():
            d = out[tid]
            for k, v in (("model", model), ("user_id", user), ("session_id", session)):
                if v is not None and d.get(k) is None:
                    d[k] = v
            if d.get("input") is None and (inp is not None or outp is not None):  # the outermost span with content
                d["input"], d["output"] = inp, outp
        fq = (sa.select(feedback.c.trace_id, feedback.c.value, feedback.c.value_text)
              .where(feedback.c.trace_id.in_(ids), feedback.c.name == target).order_by(feedback.c.created_at_ns, feedback.c.id))
        for tid, value, text in conn.execute(fq).all():
            out[tid]["label"] = value if value is not None else text  # the newest wins
        return out

    def trace_scores_of(self, trace_id: str, project: str, target: str) -> list[dict]:
        """Every version's online score of one trace (metrics, contributions, rationales as JSON text)."""
        s = trace_scores
        q = sa.select(s).where(s.c.trace_id == trace_id, s.c.project == project, s.c.target == target)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(q.order_by(s.c.scored_at_ns.desc())).all()]

    def distinct_models(self, project: str, limit: int = 50) -> list[str]:
        """Up to ``limit`` model names of the project's spans (for the filter's suggestions)."""
        q = (sa.select(spans.c.model).where(spans.c.project == project, spans.c.model.is_not(None)).distinct()
             .limit(limit))
        with self.engine.connect() as conn:
            return sorted(r[0] for r in conn.execute(q).all())
