"""Human signals: ``feedback()`` records a thumbs / rating / label / correction about a trace,
and ``training_frame()`` reads the captured traces back joined with that feedback (the table an
evaluator is fitted on).

Feedback rows are validated here (:func:`~autometrics.collectors.feedback.make_feedback_row`)
but written like spans: appended to the active runtime's background writer (and scored in
Langfuse when that export is on), so ``feedback()`` never blocks on or raises for a backend.
"""

from __future__ import annotations

from ..collectors.feedback import FeedbackSchema, FeedbackValueError, make_feedback_row
from . import rule_cache as _rules
from . import runtime as _runtime_module
from .runtime import get_runtime, internal_error
from .spans import current_trace_id


def feedback(trace_id: str | None, name: str, value, comment: str | None = None, kind: str | None = None, *,
             span_id: str | None = None, source: str | None = None, metadata: dict | None = None, id: str | None = None) -> str | None:
    """Record a human signal about a trace; returns the feedback id, or None if it was rejected.

    ``kind``: ``thumbs`` (True/False, up/down, 1/0), ``likert`` (an integer rating, 1..5 unless
    declared), ``numeric``, ``behavioral`` (e.g. ``"copied", 1``), ``categorical`` (a label) or
    ``correction`` (an edited output, used as a reference).  A name keeps one kind and scale per
    project: declared with :func:`feedback_schema`, else the first stored item's; a value that
    does not fit (another kind, outside the scale, null, NaN, an object) is refused.  Without
    ``kind`` the value is read under the name's kind.  Several values per trace and name are
    kept; reading for a fit takes the latest per name unless configured otherwise
    (``configure(feedback_aggregate=...)``).  ``trace_id=None``: the current trace.  ``id``: your
    own idempotency key (a retried call is stored once; the same id with another value is refused
    as a conflict).

    A refused item is counted (``feedback_invalid``, ``feedback_invalid_<reason>``,
    ``feedback_conflict`` in ``stats()``) and logged once per reason and name per minute; then
    None is returned, or, with ``configure(feedback_errors="raise")``, ``ValueError`` is raised
    with the reason.  Backend failures never raise.  Checks here use the rules this process knows
    (declared here, or read from the store in the background); the store checks every item again
    when writing (an item it refuses counts as ``feedback_rejected``).
    """
    rt = get_runtime()
    if rt is None:
        return None
    refused = None
    try:
        project = rt.cfg.project
        tid = trace_id if trace_id is not None else current_trace_id()
        if tid is None:
            raise FeedbackValueError("no trace_id and no current trace: pass the trace id (autometrics.current_trace_id() "
                                     "inside the observed call), or call feedback() inside it", field="trace_id",
                                     code="no_trace")
        schema = _rules.known_schema(rt, project, name)
        row = make_feedback_row(tid, name, value, comment, kind, span_id, source or "sdk", metadata, id, project=project,
                                schema=schema)
        if id is not None:
            _rules.check_id(rt, row)
    except FeedbackValueError as exc:
        refused = exc
    except Exception as exc:
        internal_error(rt, "feedback", exc)
        return None
    if refused is not None:
        _refuse(rt, name, refused)
    else:
        try:
            if not rt.writer.put("feedback", row, durable=True):  # on disk (spool) before its id is returned
                refused = FeedbackValueError("the capture queue is full or closed; the item was not accepted",
                                             field="queue", code="not_queued")
            else:
                if row.get("truncated"):
                    rt.counters.add("feedback_truncated")
                    rt.errors.warning(f"feedback-truncated-{name}", "autometrics: feedback %r: comment cut to %d characters "
                                      "(marked at its end)", name, len(row["comment"]))
                if rt.trace_recorded(tid) is False:  # the sampler dropped the trace: no score for a trace Langfuse lacks
                    rt.counters.add("feedback_orphaned")
                    rt.errors.warning("feedback-orphaned", "autometrics: feedback %r is for trace %s, which the sampler "
                                      "did not record (sample_rate %s): kept in the store as orphaned, not sent to "
                                      "Langfuse. Record every trace that may get feedback (sample_rate=1) and sample "
                                      "what is judged instead (worker --judge-sample-rate)", name, tid, rt.cfg.sample_rate)
                elif rt.langfuse is not None:
                    rt.langfuse.score(row)
        except Exception as exc:
            internal_error(rt, "feedback", exc)
            return None
    if refused is not None:
        if rt.cfg.feedback_errors == "raise":
            raise refused
        return None
    return row["id"]


def _refuse(rt, name, exc: FeedbackValueError) -> None:
    """Count and log a refused item: one log line per reason and name per minute (a rate limit
    keyed by reason, so one noisy reason cannot hide the others)."""
    try:
        label = name.strip()[:60] if isinstance(name, str) else "?"
        if exc.code == "conflict":
            rt.counters.add("feedback_conflict")
        else:
            rt.counters.add("feedback_invalid")
            rt.counters.add(f"feedback_invalid_{exc.code}")
        rt.errors.warning(f"feedback-{exc.code}-{label}", "autometrics: feedback %r refused (%s: %s): %s", label, exc.code,
                          exc.field, exc)
    except Exception:
        pass


def feedback_schema(name: str, kind: str, scale: tuple[float, float] | None = None, *, project: str | None = None) -> FeedbackSchema:
    """Declare the kind (and scale) of feedback ``name``: e.g. ``feedback_schema("stars",
    kind="likert", scale=(1, 5))``.  From then on this process refuses values that do not fit
    (likert: integers within the scale; numeric/behavioral: within it when given; thumbs:
    True/False, up/down, 1/0), and the declaration goes to the trace store (in the background,
    and with every item under the name) so the collector and other processes hold to it too.
    ``project``: default, the configured project whatever it is later.  Raises ``ValueError`` for
    a bad argument; a store that already holds another kind for the name is logged and counted
    (``feedback_schema_conflicts``), and it refuses the items.  Declare once at start-up, before
    the first feedback: a name's kind cannot change once items were stored under it."""
    schema = _rules.declare(name, kind, scale, project)
    rt = _runtime_module._runtime
    if rt is not None:
        try:
            _rules.persist_declaration(rt, project or rt.cfg.project, name.strip(), schema)
        except Exception as exc:
            internal_error(rt, "feedback_schema", exc)
    return schema


def training_frame(feedback_name, **kwargs):
    """The configured store's traces joined with feedback (see ``TraceStore.training_frame``);
    flushes first so what was just captured is included.  Only the configured project's traces
    (``configure(project=...)``, else ``$AUTOMETRICS_PROJECT``, else ``default``: what the worker and
    ``autometrics fit`` read); ``project=None`` reads every project."""
    from ..collectors.files import project_name
    from ..collectors.store import TraceStore

    rt = get_runtime()
    kwargs.setdefault("project", rt.cfg.project if rt is not None else project_name())
    if rt is not None:
        rt.flush(10.0)
        kwargs.setdefault("aggregate", rt.cfg.feedback_aggregate)
        store = _rules._store_of(rt)
        if store is not None:
            return store.training_frame(feedback_name, **kwargs)
    return TraceStore(rt.cfg.store_url if rt else None).training_frame(feedback_name, **kwargs)
