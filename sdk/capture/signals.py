"""Human signals: ``feedback()`` records a thumbs / rating / label / correction about a trace,
and ``training_frame()`` reads the captured traces back joined with that feedback (the table an
evaluator is fitted on).

Feedback rows are validated here (:func:`~autometrics.collectors.feedback.make_feedback_row`)
but written like spans: appended to the active runtime's background writer (and scored in
Langfuse when that export is on), so ``feedback()`` never blocks on or raises for a backend.
"""

from __future__ import annotations

from ..collectors.exporter import StoreSink
from ..collectors.feedback import make_feedback_row
from .runtime import _get_runtime, _internal
from .spans import current_trace_id


def feedback(trace_id: str | None, name: str, value, comment: str | None = None, kind: str | None = None, *,
             span_id: str | None = None, source: str | None = None, metadata: dict | None = None, id: str | None = None) -> str | None:
    """Record a human signal about a trace; returns the feedback id, or None if it was rejected.

    ``kind``: ``thumbs`` (True/False, up/down, 1/0), ``likert`` (a rating), ``numeric``,
    ``behavioral`` (e.g. ``"copied", 1``), ``categorical`` (a label) or ``correction`` (an edited
    output, used as a reference); inferred from the value when omitted.  Several values per
    trace and name are kept; reading for a fit takes the latest per name unless configured
    otherwise (``configure(feedback_aggregate=...)``).  ``trace_id=None``: the current trace.
    ``id``: your own idempotency key (a retried call is stored once).  Never raises: invalid
    input is logged and None returned.
    """
    rt = _get_runtime()
    if rt is None:
        return None
    try:
        row = make_feedback_row(trace_id if trace_id is not None else current_trace_id(), name, value, comment, kind, span_id,
                                source or "sdk", metadata, id)
    except Exception as exc:
        rt.counters.add("feedback_invalid")
        rt.errors.warning("feedback-invalid", "autometrics: feedback ignored: %s", exc)
        return None
    try:
        rt.writer.put("feedback", row)
        if rt.langfuse is not None:
            rt.langfuse.score(row)
    except Exception as exc:
        _internal(rt, "feedback", exc)
    return row["id"]


def training_frame(feedback_name, **kwargs):
    """The configured store's traces joined with feedback (see ``TraceStore.training_frame``);
    flushes first so what was just captured is included.  Only the configured project's traces
    (``configure(project=...)``, else ``$AUTOMETRICS_PROJECT``, else ``default``: what the worker and
    ``autometrics fit`` read); ``project=None`` reads every project."""
    import os

    from ..collectors.store import TraceStore

    rt = _get_runtime()
    kwargs.setdefault("project", rt.cfg.project if rt is not None else os.environ.get("AUTOMETRICS_PROJECT") or "default")
    if rt is not None:
        rt.flush(10.0)
        kwargs.setdefault("aggregate", rt.cfg.feedback_aggregate)
        if isinstance(rt.writer.sink, StoreSink) and rt.writer.sink.store is not None:
            return rt.writer.sink.store.training_frame(feedback_name, **kwargs)
    return TraceStore(rt.cfg.store_url if rt else None).training_frame(feedback_name, **kwargs)
