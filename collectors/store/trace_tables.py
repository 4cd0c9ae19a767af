"""The trace store's captured data: traces and their spans, written with their feedback in one
transaction, and read back as the training frame (traces joined with feedback).

A mixin of :class:`~autometrics.collectors.store.TraceStore`, like every aggregate's module here:
the store is the only code that writes SQL against its tables.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence

import sqlalchemy as sa

from ...metricbank.errors import UserError
from .feedback_log import aggregate_feedback, frame_of
from .schema import (
    feedback,
    spans,
    traces,
)

__all__ = ["TraceTables", "clock_skewed", "first_seen_ns", "CLOCK_FLOOR_NS", "CLOCK_AHEAD_NS"]


#: a span start before this (2000-01-01) or more than CLOCK_AHEAD_NS after the store's clock is a
#: client clock that is wrong: its trace is dated by arrival (retention and scoring windows read it)
CLOCK_FLOOR_NS = 946_684_800 * 10**9
CLOCK_AHEAD_NS = 300 * 10**9


def clock_skewed(start_ns, now_ns: int | None = None) -> bool:
    """Whether a span's client-side start time cannot be right (see :data:`CLOCK_FLOOR_NS`)."""
    if start_ns is None:
        return False
    now_ns = time.time_ns() if now_ns is None else now_ns
    return start_ns < CLOCK_FLOOR_NS or start_ns > now_ns + CLOCK_AHEAD_NS


def first_seen_ns(start_ns) -> int:
    """When a trace counts as seen: its first span's start, unless the client's clock was wrong
    (dated 2100 it would never be scored or pruned; dated 1970 it would be pruned at once), then
    the store's clock.  The span keeps the client's start time as sent."""
    return time.time_ns() if start_ns is None or clock_skewed(start_ns) else int(start_ns)

_SPAN_COLS = [c.name for c in spans.columns]


class TraceTables:
    """Traces and spans (see the module docstring)."""

    engine: sa.Engine

    SPAN_CONTENT = ("name", "start_time_ns", "end_time_ns", "status", "model", "input", "output")

    def write(self, span_rows: Iterable[dict] = (), feedback_rows: Iterable[dict] = (), *,
              conflicts: list | None = None) -> None:
        """Insert spans and feedback in one transaction (all or nothing); duplicates are ignored.
        ``conflicts``: a list that receives ``(row, differing fields)`` for each span whose ids were
        stored already with other content (:data:`SPAN_CONTENT`); looked up only when the insert
        skipped rows, so a write of new spans costs no extra query."""
        span_rows = list(span_rows)
        feedback_rows = list(feedback_rows)
        if not span_rows and not feedback_rows:
            return
        with self.engine.begin() as conn:
            if span_rows:
                seen: dict[str, dict] = {}
                for r in span_rows:
                    seen.setdefault(r["trace_id"], {"trace_id": r["trace_id"], "project": r.get("project"),
                                                    "first_seen_ns": first_seen_ns(r.get("start_time_ns"))})
                conn.execute(self._insert(traces, ["trace_id"]), list(seen.values()))
                values = [_span_defaults(r) for r in span_rows]
                res = conn.execute(self._insert(spans, ["trace_id", "span_id"]), values)
                if conflicts is not None and (res.rowcount is None or res.rowcount < len(values)):  # -1: unknown
                    conflicts.extend(self._span_conflicts(conn, span_rows, values))
            if feedback_rows:  # checked against each name's kind/scale and earlier ids (feedback_rules)
                from . import feedback_rules

                feedback_rules.write_feedback(conn, self.dialect, self._insert, feedback_rows)

    def _span_conflicts(self, conn, rows: list[dict], values: list[dict]) -> list[tuple[dict, list[str]]]:
        """(row, differing fields) for each of ``rows`` (written as ``values``) whose stored span
        has other content: a retry of the same span is not a conflict."""
        keys = list({(v["trace_id"], v["span_id"]) for v in values})
        cols = [spans.c.trace_id, spans.c.span_id] + [spans.c[c] for c in self.SPAN_CONTENT]
        stored = {}
        for k in range(0, len(keys), 500):
            q = sa.select(*cols).where(sa.tuple_(spans.c.trace_id, spans.c.span_id).in_(keys[k:k + 500]))
            for rec in conn.execute(q).mappings():
                stored[(rec["trace_id"], rec["span_id"])] = rec
        out = []
        for r, v in zip(rows, values, strict=True):
            old = stored.get((v["trace_id"], v["span_id"]))
            diff = [c for c in self.SPAN_CONTENT if old is not None and v.get(c) != old[c]]
            if diff:
                out.append((r, diff))
        return out

    def write_spans(self, rows: Iterable[dict]) -> None:
        self.write(span_rows=rows)

    def root_spans(self, trace_ids) -> dict[str, str]:
        """{trace id: its root span id (no parent; the earliest when several)} for the traces held."""
        ids = list(dict.fromkeys(trace_ids))
        out: dict[str, str] = {}
        with self.engine.connect() as conn:
            for i in range(0, len(ids), 500):
                q = (sa.select(spans.c.trace_id, spans.c.span_id).where(spans.c.trace_id.in_(ids[i:i + 500]),
                                                                        spans.c.parent_span_id.is_(None))
                     .order_by(spans.c.start_time_ns.desc()))
                out.update({t: s for t, s in conn.execute(q).all()})  # ascending wins: the earliest root last
        return out

    def spans_frame(self, trace_id: str | None = None, project: str | None = None):
        """All stored spans (optionally of one trace / project) as a DataFrame, oldest first."""
        q = sa.select(spans).order_by(spans.c.start_time_ns)
        if trace_id:
            q = q.where(spans.c.trace_id == trace_id)
        if project:
            q = q.where(spans.c.project == project)
        with self.engine.connect() as conn:
            return frame_of(conn.execute(q).all(), [c.name for c in spans.columns])

    def training_frame(
        self,
        feedback_name: str | Sequence[str],
        *,
        project: str | None = None,
        aggregate: str | dict = "latest",
        since_ns: int | None = None,
        include_unlabelled: bool = False,
        numeric: bool = False,
    ):
        """Traces joined with feedback: the input of a fit, and the one frame every reader builds on
        (``autometrics.training_frame``, ``autometrics fit sqlite:///…`` and the worker's refit).

        Columns ``id`` (trace id), ``input``, ``output``, ``references`` (JSON list, only when a
        ``correction`` feedback exists), one column per feedback name, then ``model``,
        ``input_tokens``, ``output_tokens``, ``latency_ms``, ``error``, ``name``, ``project``,
        ``start_time``, ``session_id``, ``user_id``, ``tags`` (JSON list), ``metadata`` (JSON) and
        ``conversation`` (``session:<id>`` when the trace names a session, else ``input:<text>``:
        the unit fits keep on one side of a split).  A trace's input/output come from its outermost span that captured
        content.  Several feedback values for one (trace, name) are combined by ``aggregate``:
        ``latest`` (default), ``first``, ``mean``, ``sum``, ``max``, ``min`` or ``count``; a dict
        gives one rule per name (e.g. ``{"copied": "sum"}``, others ``latest``).  ``feedback_ns``
        is the time of the newest feedback under the names (0 for none).

        A row has a label under at least one name and a captured output (a trace without output
        cannot be judged), unless ``include_unlabelled``.  With ``numeric`` (what a fit and the
        worker read) every label is a number and a value that is not one (a categorical label's
        text) counts as missing.

        Only the spans of traces with feedback under one of the names are read (looked up by
        trace id), unless ``include_unlabelled``: at 10^6 traces with 5 % labelled that reads 1/20
        of the spans, 2.4 s instead of 54 s on SQLite (tests/benchmarks/store_scale.py).
        """
        import pandas as pd

        names = [feedback_name] if isinstance(feedback_name, str) else list(feedback_name)
        rules = {n: (aggregate.get(n, "latest") if isinstance(aggregate, dict) else aggregate) for n in names}
        for how in rules.values():
            if how not in ("latest", "first", "mean", "sum", "max", "min", "count"):
                raise UserError(f"aggregate must be latest, first, mean, sum, max, min or count, not {how!r}")
        cols = [spans.c.trace_id, spans.c.span_id, spans.c.parent_span_id, spans.c.name, spans.c.project, spans.c.start_time_ns,
                spans.c.end_time_ns, spans.c.status, spans.c.error_type, spans.c.model, spans.c.input_tokens, spans.c.output_tokens,
                spans.c.input, spans.c.output, spans.c.session_id, spans.c.user_id, spans.c.tags, spans.c.trace_metadata]
        q = sa.select(*cols)
        if project:
            q = q.where(spans.c.project == project)
        if since_ns:
            q = q.where(spans.c.start_time_ns >= since_ns)
        with self.engine.connect() as conn:
            if include_unlabelled:
                rows = conn.execute(q).all()
            else:  # traces with feedback under a name (a superset of the labelled ones; the exact test is below)
                rows = _spans_of(conn, q, conn.execute(sa.select(feedback.c.trace_id).where(feedback.c.name.in_(names))
                                                       .distinct()).scalars().all())
            sp = frame_of(rows, [c.name for c in cols])
            fq = sa.select(feedback).where(sa.or_(feedback.c.name.in_(names), feedback.c.kind == "correction"))
            fb = frame_of(conn.execute(fq.order_by(feedback.c.created_at_ns, feedback.c.id)).all(), [c.name for c in feedback.columns])
            # no labelled trace: the empty frame has a references column when the full frame would have had one
            refs_col = sp.empty and (fb["kind"] == "correction").any() and conn.execute(q.limit(1)).first() is not None
        out_cols = ["id", "input", "output", "references", *names, "model", "input_tokens", "output_tokens", "latency_ms", "error", "name",
                    "project", "start_time", "session_id", "user_id", "tags", "metadata", "conversation", "feedback_ns"]
        if sp.empty:
            return pd.DataFrame(columns=[c for c in out_cols if c != "references" or refs_col])
        # start order; a parent before its child when both start in the same tick (times read back
        # from a tool that keeps milliseconds only, e.g. Langfuse's API)
        sp["_depth"] = _depths(sp) if sp.duplicated(["trace_id", "start_time_ns"], keep=False).any() else 0
        sp = sp.sort_values(["trace_id", "start_time_ns", "_depth", "end_time_ns"], ascending=[True, True, True, False],
                            kind="stable")
        sp = _innermost_usage(sp)
        g = sp.groupby("trace_id", sort=False)
        summary = pd.DataFrame(
            {
                "input_tokens": g["input_tokens"].sum(min_count=1),
                "output_tokens": g["output_tokens"].sum(min_count=1),
                "start": g["start_time_ns"].min(),
                "end": g["end_time_ns"].max(),
                "error": g["error_type"].first(),  # first non-null, in start order
                "model": g["model"].first(),
                "session_id": g["session_id"].first(),
                "user_id": g["user_id"].first(),
                "tags": g["tags"].agg(_union_tags),
                "metadata": g["trace_metadata"].agg(_merged_metadata),
            }
        )
        content = sp[sp["input"].notna() | sp["output"].notna()].groupby("trace_id", sort=False).head(1).set_index("trace_id")
        top = sp.groupby("trace_id", sort=False).head(1).set_index("trace_id")
        root = top[["name", "project"]].copy()
        root["input"] = content["input"].reindex(root.index)
        root["output"] = content["output"].reindex(root.index)
        frame = root.join(summary)
        # the unit a split keeps whole: the conversation when the trace names one, else the input
        frame["conversation"] = ("session:" + frame["session_id"]).where(frame["session_id"].notna(), "input:" + frame["input"].fillna(""))
        frame["latency_ms"] = (frame["end"] - frame["start"]) / 1e6
        frame["start_time"] = pd.to_datetime(frame["start"], unit="ns", utc=True)
        for name in names:
            frame[name] = aggregate_feedback(fb[fb["name"] == name], rules[name]).reindex(frame.index)
            if numeric:
                frame[name] = pd.to_numeric(frame[name], errors="coerce")
        newest = fb[fb["name"].isin(names)].groupby("trace_id")["created_at_ns"].max()
        frame["feedback_ns"] = newest.reindex(frame.index, fill_value=0).astype("int64")  # no float: ns lose digits
        corr = fb[fb["kind"] == "correction"]
        if not corr.empty:
            refs = corr.groupby("trace_id")["value_text"].agg(lambda s: json.dumps([x for x in s if x]))
            frame["references"] = refs.reindex(frame.index)
        frame = frame.reset_index().rename(columns={"trace_id": "id"})
        if not include_unlabelled:
            frame = frame[frame[names].notna().any(axis=1) & frame["output"].notna()]
        frame = frame.sort_values("start", kind="stable")
        return frame[[c for c in out_cols if c in frame.columns]].reset_index(drop=True)


def _spans_of(conn, q, trace_ids: list, chunk: int = 1000) -> list:
    """The rows of span query ``q`` for ``trace_ids``, looked up by key in chunks.  Why not one
    ``trace_id IN (SELECT ... FROM feedback)``: at 10^6 traces Postgres misjudged that semi-join
    and read the whole spans table (15-20 s); key lookups cost the same on both databases
    whatever the statistics say."""
    ids = sorted(trace_ids)
    out: list = []
    for i in range(0, len(ids), chunk):
        out += conn.execute(q.where(spans.c.trace_id.in_(ids[i:i + chunk]))).all()
    return out


def _union_tags(values) -> str | None:
    """The tags of a trace's spans, each once, in first-seen order (a JSON list), None for none."""
    tags: list = []
    for v in values:
        if isinstance(v, str):
            tags += [t for t in json.loads(v) if t not in tags]
    return json.dumps(tags, ensure_ascii=False) if tags else None


def _merged_metadata(values) -> str | None:
    """The metadata of a trace's spans merged (a later span's key wins), as JSON; None for none."""
    meta: dict = {}
    for v in values:
        if isinstance(v, str):
            meta.update(json.loads(v))
    return json.dumps(meta, ensure_ascii=False, sort_keys=True) if meta else None


def _covered(sp, has):
    """Per span: whether one of its descendants has ``has`` (a boolean Series over ``sp``)."""
    import pandas as pd

    tids = sp["trace_id"].tolist()
    key = pd.Series([f"{t}:{s}" for t, s in zip(tids, sp["span_id"].tolist(), strict=True)], index=sp.index)
    pkey = [f"{t}:{p}" if isinstance(p, str) and p else None for t, p in zip(tids, sp["parent_span_id"].tolist(), strict=True)]
    parent_of = {k: p for k, p in zip(key.tolist(), pkey, strict=True) if p is not None}
    covered: set = set()
    frontier = {p for p, h in zip(pkey, has.tolist(), strict=True) if h and p is not None}
    while frontier:  # every ancestor of a span with the property
        covered |= frontier
        frontier = {parent_of[k] for k in frontier if k in parent_of} - covered
    return key.isin(covered)


def _depths(sp) -> list[int]:
    """Each span's depth in its trace (0: no parent among the rows), for ordering ties."""
    tids, sids, pids = sp["trace_id"].tolist(), sp["span_id"].tolist(), sp["parent_span_id"].tolist()
    parent = {(t, s): p for t, s, p in zip(tids, sids, pids, strict=True)}
    out = []
    for t, p in zip(tids, pids, strict=True):
        d = 0
        while isinstance(p, str) and (t, p) in parent and d < 256:  # deeper than any call tree; a cycle stops
            d += 1
            p = parent[(t, p)]
        out.append(d)
    return out


def _innermost_usage(sp):
    """Token usage counted once per LLM call, and the model that was called: a span's tokens are
    dropped when one of its descendants carries usage too, and its model when a descendant names
    one.  An observed function that returns a completion records its usage (and the model label
    it was given), and the instrumented client call inside it records the same usage again with
    the model actually called; summing every span would count that call twice, and the outer
    label would hide the model.  Sibling calls still add up."""
    has = sp["input_tokens"].notna() | sp["output_tokens"].notna()
    named = sp["model"].notna()
    drop = has & _covered(sp, has) if has.any() else has
    outer = named & _covered(sp, named) if named.any() else named
    if drop.any() or outer.any():
        sp = sp.copy()
        sp.loc[drop, ["input_tokens", "output_tokens"]] = None
        sp.loc[outer, "model"] = None
    return sp


def _span_defaults(r: dict) -> dict:
    return {c: r.get(c) for c in _SPAN_COLS}
