"""The trace store's final check of feedback, inside the write transaction: every writer (the SDK
in any process, the collector, a script calling :meth:`TraceStore.write`) is held to one kind
and scale per feedback name and project, and a re-sent ``id`` must carry the same value.

Why in the write path: the SDK and the collector validate early with what they know (a
declaration in their process, the rules they last read), but only the store sees every writer,
so only here can "first seen wins" and "an id means one value" be made true under concurrency.

Per write (the fast path adds two indexed reads):

1. the project of each row: its ``project`` key, else its trace's project, else ``default``;
2. the rules of the names in the batch (``feedback_schemas``); a name without one gets its rule
   from the row's declaration, else its explicit kind, else the kind inferred from its value
   (:func:`~autometrics.collectors.feedback.infer_kind`); inserted with ``ON CONFLICT DO
   NOTHING``, and a writer that lost that race reads the winner's rule and checks again;
3. every row read under its name's rule (a row sent without ``kind`` is read again from
   ``raw_value``: ``1`` under a thumbs name is thumbs up); any bad row fails the whole write with
   :class:`FeedbackInvalid`, listing every bad row (index, id, field, reason);
4. insert ``ON CONFLICT (id) DO NOTHING``, then read the ids back: a stored row that differs from
   ours in trace, name, kind or value was there first, and the write fails with
   :class:`FeedbackConflict` (a retry of the same item is idempotent).

Both errors subclass SQLAlchemy's ``IntegrityError`` (callers that isolate bad rows, such as the
SDK's store sink, treat them as refused for good, not as an outage) and ``ValueError``.  On
SQLite the transaction takes the write lock first, so the rules read and the rows written are one
serialised step (Postgres relies on the unique keys as described).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import sqlalchemy as sa

from ..feedback import (
    FeedbackSchema,
    FeedbackValueError,
    coerce_value,
    infer_kind,
    make_schema,
    normalise_kind,
    row_fingerprint,
)
from .schema import feedback, feedback_schemas

__all__ = ["FeedbackRejected", "FeedbackInvalid", "FeedbackConflict", "write_feedback", "declare", "load_schemas"]

_FB_COLS = [c.name for c in feedback.columns]
_CHUNK = 5000  # ids per IN (...) list


class FeedbackRejected(sa.exc.IntegrityError, ValueError):
    """Feedback rows the store refused for good; ``problems``: one dict per bad row with
    ``index`` (position in the rows written), ``id``, ``field``, ``code`` and ``error``."""

    status = 400

    def __init__(self, problems: list[dict]):
        self.problems = problems
        head = "; ".join(f"item {p['index']} ({p['field']}): {p['error']}" for p in problems[:5])
        more = f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
        self._message = f"{len(problems)} feedback item(s) refused: {head}{more}"
        sa.exc.StatementError.__init__(self, self._message, None, None, None)
        self.connection_invalidated = False

    def __str__(self) -> str:
        return self._message

    def __reduce__(self):
        return type(self), (self.problems,)


class FeedbackInvalid(FeedbackRejected):
    """A value that does not fit its name's kind/scale (HTTP 400)."""


class FeedbackConflict(FeedbackRejected):
    """A feedback ``id`` already stored with a different trace, name, kind or value (HTTP 409)."""

    status = 409


def _problem(index: int, row: dict, exc: FeedbackValueError) -> dict:
    return {"index": index, "id": row.get("id"), "field": exc.field, "code": exc.code, "error": str(exc)}


def _schema_of(r) -> FeedbackSchema:
    """From a (project, name, kind, scale_min, scale_max, source, ...) row."""
    scale = None if r[3] is None else (float(r[3]), float(r[4]))
    return FeedbackSchema(r[2], scale, r[5])


def _in(conn: sa.Connection, n: int) -> str:
    """``n`` positional placeholders for a driver-level query.  The write path's reads go to the
    driver directly: a Core ``select ... in_()`` costs ~100 µs of statement building per call,
    the driver ~15 µs (measured on SQLite), and they run on every write."""
    return ", ".join(["?" if conn.dialect.paramstyle == "qmark" else "%s"] * n)


def _rows(conn: sa.Connection, sql: str, ids: list, extra: tuple = ()) -> list:
    out = []
    for k in range(0, len(ids), _CHUNK):
        part = ids[k:k + _CHUNK]
        out += conn.exec_driver_sql(sql.format(_in(conn, len(part))), (*part, *extra)).all()
    return out


def load_schemas(conn: sa.Connection, keys: set[tuple[str, str]] | None = None, project: str | None = None) -> dict:
    """{(project, name): FeedbackSchema} for ``keys`` (or every name of ``project``, or all)."""
    cols = "project, name, kind, scale_min, scale_max, source"
    if keys is not None:
        projects = sorted({p for p, _ in keys})
        found = _rows(conn, f"SELECT {cols} FROM feedback_schemas WHERE name IN ({{}}) AND project IN ({_in(conn, len(projects))})",
                      sorted({n for _, n in keys}), tuple(projects)) if keys else []
    else:
        q = sa.select(feedback_schemas)
        if project is not None:
            q = q.where(feedback_schemas.c.project == project)
        found = conn.execute(q).all()
    out = {(r[0], r[1]): _schema_of(r) for r in found}
    return out if keys is None else {k: v for k, v in out.items() if k in keys}


def _projects(conn: sa.Connection, pairs: list[tuple[int, dict]]) -> dict[int, str]:
    """Each row's project: its own ``project``, else its trace's, else ``default``."""
    out = {i: r["project"] for i, r in pairs if r.get("project")}
    need = sorted({r["trace_id"] for i, r in pairs if i not in out})
    found = {t: p for t, p in _rows(conn, "SELECT trace_id, project FROM traces WHERE trace_id IN ({})", need) if p}
    for i, r in pairs:
        if i not in out:
            out[i] = found.get(r["trace_id"], "default")
    return out


def _declared(row: dict) -> FeedbackSchema | None:
    d = row.get("schema")
    if not d:
        return None
    if not isinstance(d, dict) or "kind" not in d:
        raise FeedbackValueError("schema must be an object {\"kind\": ..., \"scale\": [low, high]}", field="schema", code="bad_schema")
    return make_schema(d["kind"], d.get("scale"), source="declared")


def _first_seen(row: dict) -> FeedbackSchema:
    kind = infer_kind(row["raw_value"]) if row.get("kind_inferred") and "raw_value" in row else normalise_kind(row.get("kind"))
    return make_schema(kind, source="first-seen")


def _apply(row: dict, rule: FeedbackSchema, project: str) -> dict:
    """The database row of ``row`` read under ``rule``; FeedbackValueError when it does not fit."""
    name = row.get("name")
    if row.get("kind_inferred") and "raw_value" in row:
        num, text = coerce_value(row["raw_value"], rule, name)
    else:
        kind = normalise_kind(row.get("kind"))
        if kind != rule.kind:
            raise FeedbackValueError(f"feedback {name!r} is {rule.describe()} ({rule.source}) in project {project!r}, not {kind}; "
                                     f"send it without kind or as {rule.kind}, or use another name", field="kind",
                                     code="kind_mismatch")
        stored = row.get("value") if rule.kind not in ("categorical", "correction") else row.get("value_text")
        num, text = coerce_value(stored, rule, name)
    out = {c: row.get(c) for c in _FB_COLS}
    out.update(kind=rule.kind, value=num, value_text=text)
    return out


def _resolve(pairs, projects, known):
    """(database rows with their index, new rules, declared upgrades, problems)."""
    rules = dict(known)
    new, upgrades, out, problems = {}, {}, [], []
    for i, row in pairs:
        key = (projects[i], row.get("name"))
        try:
            declared = _declared(row)
            cur = rules.get(key)
            if cur is None:
                cur = rules[key] = new[key] = declared or _first_seen(row)
            elif declared is not None and (cur.source != "declared" or not declared.same_rule(cur)):
                if cur.source == "declared" or cur.kind != declared.kind:
                    raise FeedbackValueError(f"feedback {key[1]!r} is {cur.describe()} ({cur.source}) in project {key[0]!r}; "
                                             f"this sender declares {declared.describe()}", field="schema", code="schema_mismatch")
                cur = rules[key] = upgrades[key] = declared
            out.append((i, _apply(row, cur, key[0])))
        except FeedbackValueError as exc:
            problems.append(_problem(i, row, exc))
    return out, new, upgrades, problems


def _save(conn, insert_ignore: Callable, new: dict, upgrades: dict) -> bool:
    """Store new rules and declarations; False when another writer fixed one first (re-check)."""
    now = time.time_ns()
    won = True
    for (project, name), s in new.items():
        lo, hi = s.scale if s.scale is not None else (None, None)
        stmt = insert_ignore(feedback_schemas, ["project", "name"]).values(
            project=project, name=name, kind=s.kind, scale_min=lo, scale_max=hi, source=s.source, created_at_ns=now, updated_at_ns=now)
        if conn.execute(stmt.returning(feedback_schemas.c.name)).first() is None:
            won = False
    for (project, name), s in upgrades.items():
        t = feedback_schemas
        res = conn.execute(sa.update(t).where(t.c.project == project, t.c.name == name, t.c.source == "first-seen", t.c.kind == s.kind)
                           .values(scale_min=s.scale[0] if s.scale else None, scale_max=s.scale[1] if s.scale else None,
                                   source="declared", updated_at_ns=now))
        if res.rowcount != 1:
            won = False
    return won


def _dedupe(rows: list[tuple[int, dict]]) -> list[tuple[int, dict]]:
    """One row per id; the same id twice in one write with different values is a conflict."""
    seen: dict[str, tuple[int, dict]] = {}
    out, problems = [], []
    for i, r in rows:
        first = seen.get(r["id"])
        if first is None:
            seen[r["id"]] = (i, r)
            out.append((i, r))
        elif row_fingerprint(first[1]) != row_fingerprint(r):
            problems.append(_conflict(i, r, first[1], f"item {first[0]} of the same write"))
    if problems:
        raise FeedbackConflict(problems)
    return out


def _conflict(i: int, row: dict, other: dict, where: str) -> dict:
    shown = other.get("value") if other.get("value") is not None else other.get("value_text")
    return {"index": i, "id": row["id"], "field": "id", "code": "conflict",
            "error": f"feedback id {row['id']!r} already has a different value ({where}: {other.get('name')!r}={shown!r} "
                     f"[{other.get('kind')}] on trace {other.get('trace_id')}); a re-sent id must carry the same trace, name and "
                     "value: send a new id for a new value"}


def write_feedback(conn: sa.Connection, dialect: str, insert_ignore: Callable, rows: list[dict]) -> None:
    """Check and insert feedback ``rows`` in the caller's transaction (see the module docstring).
    Raises :class:`FeedbackInvalid` / :class:`FeedbackConflict` (the caller's transaction then
    rolls back: nothing of the write is stored)."""
    if dialect == "sqlite":  # take the write lock now: the rules read below cannot change before the insert
        conn.exec_driver_sql("UPDATE feedback_schemas SET kind = kind WHERE 1 = 0")
    pairs = list(enumerate(rows))
    projects = _projects(conn, pairs)
    keys = {(projects[i], r.get("name")) for i, r in pairs}
    for _attempt in range(3):
        out, new, upgrades, problems = _resolve(pairs, projects, load_schemas(conn, keys))
        if problems:
            raise FeedbackInvalid(problems)
        if _save(conn, insert_ignore, new, upgrades):
            break
    else:  # pragma: no cover - three lost races in one write
        raise sa.exc.OperationalError("feedback rules", None, RuntimeError("feedback rules kept changing during the write"))
    out = _dedupe(out)
    conn.execute(insert_ignore(feedback, ["id"]), [r for _, r in out])
    _check_conflicts(conn, out)


def _check_conflicts(conn: sa.Connection, out: list[tuple[int, dict]]) -> None:
    """Read the batch's ids back: a stored row that is not ours was there before (or committed
    by a concurrent writer, which ``ON CONFLICT`` waited for), and differs = a conflict.  (One
    indexed read; ``INSERT ... RETURNING`` for many rows was 3x slower on Postgres, where the
    driver re-parses the long multi-row statement for every batch.)"""
    found = _rows(conn, "SELECT id, trace_id, name, kind, value, value_text FROM feedback WHERE id IN ({})", [r["id"] for _, r in out])
    stored = {t[0]: (t[1], t[2], t[3], None if t[4] is None else float(t[4]), t[5]) for t in found}
    problems = []
    for i, r in out:
        have = stored.get(r["id"])
        if have is not None and have != row_fingerprint(r):
            problems.append(_conflict(i, r, dict(zip(("trace_id", "name", "kind", "value", "value_text"), have, strict=True)),
                                      "stored"))
    if problems:
        raise FeedbackConflict(problems)


def declare(conn: sa.Connection, dialect: str, insert_ignore: Callable, project: str, name: str, schema: FeedbackSchema,
            replace: bool = False) -> FeedbackSchema:
    """Store ``schema`` as the declared rule of (project, name).  A first-seen rule of the same kind
    is upgraded; a different kind, or another declared scale, raises unless ``replace`` (stored
    rows are not re-checked then)."""
    if dialect == "sqlite":
        conn.exec_driver_sql("UPDATE feedback_schemas SET kind = kind WHERE 1 = 0")
    schema = FeedbackSchema(schema.kind, schema.scale, "declared")
    cur = load_schemas(conn, {(project, name)}).get((project, name))
    if cur is not None and cur.source == "declared" and cur.same_rule(schema):
        return cur
    if cur is not None and not replace and (cur.kind != schema.kind or cur.source == "declared"):
        raise FeedbackValueError(f"feedback {name!r} is already {cur.describe()} ({cur.source}) in project {project!r}; declaring "
                                 f"{schema.describe()} would mix kinds or scales under one name (use another name, or "
                                 "replace=True to overwrite the rule; stored rows are not changed)", field="kind", code="schema_mismatch")
    now = time.time_ns()
    lo, hi = schema.scale if schema.scale is not None else (None, None)
    if cur is None:
        stmt = insert_ignore(feedback_schemas, ["project", "name"]).values(
            project=project, name=name, kind=schema.kind, scale_min=lo, scale_max=hi, source="declared", created_at_ns=now,
            updated_at_ns=now)
        if conn.execute(stmt.returning(feedback_schemas.c.name)).first() is None:  # another writer was first
            return declare(conn, dialect, insert_ignore, project, name, schema, replace)
    else:
        t = feedback_schemas
        conn.execute(sa.update(t).where(t.c.project == project, t.c.name == name)
                     .values(kind=schema.kind, scale_min=lo, scale_max=hi, source="declared", updated_at_ns=now))
    return schema
