"""The current span, from inside an observed call: its trace / span ids (to hand to a client so
feedback can be attached later), ``update_current_span`` to add model, token usage or any
attribute once they are known (e.g. after the LLM client returned), and ``set_input`` /
``set_output`` to name what the evaluator should see as the call's input and output.

These read the OpenTelemetry context only, so they also see an application's own current span;
``set_input`` / ``set_output`` find the innermost ``@observe`` call through a context key that
the decorator sets next to its span (an application span opened inside the call does not hide
it).  None of them raises (a failure is counted against the active runtime).
"""

from __future__ import annotations

import contextlib

from opentelemetry import context as otel_context
from opentelemetry import trace

from . import runtime
from .runtime import internal_error

NOT_SET = object()
# the innermost @observe call, stored in the OpenTelemetry context next to its span
CALL_KEY = otel_context.create_key("autometrics-observed-call")


class ObservedCall:
    """One observed call: its span, the context its code runs in, and the input / output the
    application named with :func:`set_input` / :func:`set_output` (applied when the span ends)."""

    __slots__ = ("spec", "span", "ctx", "input", "output")

    def __init__(self, spec, span):
        self.spec = spec
        self.span = span
        self.ctx = None
        self.input = NOT_SET
        self.output = NOT_SET


def _set(what: str, value) -> bool:
    call = otel_context.get_value(CALL_KEY)
    if call is None:
        rt = runtime._runtime
        if rt is not None:
            rt.errors.warning(f"set_{what}-outside", "autometrics: set_%s() was called outside an @observe'd call; nothing "
                              "was recorded (call it inside the decorated function, or use @observe(%s=...))", what, what)
        return False
    setattr(call, what, value)
    return True


def set_output(value) -> bool:
    """Name the evaluator's output for the innermost ``@observe`` call running now.

    What the trace store records as this call's output (the ``output`` column the training
    frame, online scoring and the dashboard read) becomes ``value`` instead of the return value,
    e.g. the answer text instead of a ``{"answer", "trace_id"}`` response.  Objects are read like
    return values (a chat completion gives its message text, a ``dspy.Prediction`` its fields);
    ``redact`` still applies; the last call wins.  Recorded even with
    ``@observe(capture_output=False)`` (an explicit call), never with
    ``configure(capture_content=False)``.  Returns False (and logs) outside an observed call.
    """
    return _set("output", value)


def set_input(value) -> bool:
    """Name the evaluator's input for the innermost ``@observe`` call running now (e.g. the user's
    question rather than the whole request object); see :func:`set_output` for the rules."""
    return _set("input", value)


def current_trace_id() -> str | None:
    """The current trace id (32 hex digits) inside an observed call, else None.

    Hand it to the client (e.g. in the HTTP response) so feedback can be attached later.
    """
    ctx = trace.get_current_span().get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else None


def current_span_id() -> str | None:
    """The current span id (16 hex digits), else None."""
    ctx = trace.get_current_span().get_span_context()
    return format(ctx.span_id, "016x") if ctx.is_valid else None


def update_current_span(*, model: str | None = None, response_model: str | None = None, input_tokens: int | None = None,
                        output_tokens: int | None = None, operation: str | None = None, **attributes) -> None:
    """Add model / token usage (GenAI names) or any attribute to the current span, from inside
    an observed function (e.g. after the LLM client returned usage)."""
    try:
        span = trace.get_current_span()
        if not span.is_recording():
            return
        a = dict(attributes)
        if model:
            a["gen_ai.request.model"] = model
        if response_model:
            a["gen_ai.response.model"] = response_model
        if input_tokens is not None:
            a["gen_ai.usage.input_tokens"] = int(input_tokens)
        if output_tokens is not None:
            a["gen_ai.usage.output_tokens"] = int(output_tokens)
        if operation:
            a["gen_ai.operation.name"] = operation
        span.set_attributes(a)
    except Exception as exc:
        internal_error(runtime._runtime, "update_current_span", exc)


def _checked_trace_fields(session_id, user_id, tags, metadata) -> dict:
    """The attributes of :func:`trace_attributes` / :func:`update_current_trace`; a value of the
    wrong type is a caller's mistake and raises (with the field named)."""
    from ..collectors.conventions import trace_attributes as _attrs
    from ..metricbank.errors import UserError

    for name, v in (("session_id", session_id), ("user_id", user_id)):
        if v is not None and not isinstance(v, (str, int)):
            raise UserError(f"{name} must be a string (or an int), not {type(v).__name__}")
    if tags is not None and (isinstance(tags, str) or not all(isinstance(t, str) for t in tags)):
        raise UserError("tags must be a list of strings, e.g. tags=['beta', 'mobile']")
    if metadata is not None and not isinstance(metadata, dict):
        raise UserError(f"metadata must be a dict, not {type(metadata).__name__}")
    return _attrs(session_id, user_id, list(tags) if tags else None, metadata)


@contextlib.contextmanager
def trace_attributes(*, session_id=None, user_id=None, tags=None, metadata=None):
    """Every span started inside the block (``@observe`` calls and the LLM clients' own spans)
    carries this session (a conversation), user, tags and metadata: in the store and the training
    frame (``session_id``, ``user_id``, ``tags``, ``metadata`` columns; fits keep a session's
    traces on one side of every split), in Langfuse (``sessionId``, ``userId``, tags) and in Phoenix
    (``session.id``, ``user.id``).  Nested blocks add to the outer one's values.  ::

        with autometrics.trace_attributes(session_id=conversation.id, user_id=user.id, tags=["beta"]):
            answer = handle(question)
    """
    from ..collectors.conventions import TRACE_ATTRIBUTES, trace_fields

    _checked_trace_fields(session_id, user_id, tags, metadata)
    outer = trace_fields(TRACE_ATTRIBUTES.get() or {})
    merged_tags = list(dict.fromkeys([*outer["tags"], *(tags or [])]))
    token = TRACE_ATTRIBUTES.set(_checked_trace_fields(
        session_id if session_id is not None else outer["session_id"], user_id if user_id is not None else outer["user_id"],
        merged_tags or None, {**outer["metadata"], **(metadata or {})} or None))
    try:
        yield
    finally:
        TRACE_ATTRIBUTES.reset(token)


def update_current_trace(*, session_id=None, user_id=None, tags=None, metadata=None) -> None:
    """Set the session, user, tags or metadata of the current trace from inside an observed call
    (e.g. once the request's user is known), on the current span: the store's training frame,
    Langfuse and Phoenix read them per trace from any of its spans.  (Spans started later are not
    stamped: a value set here cannot leak into the caller's next request; for that, wrap the
    request in :func:`trace_attributes`.)  Does nothing outside a recorded span."""
    add = _checked_trace_fields(session_id, user_id, tags, metadata)
    try:
        span = trace.get_current_span()
        if not span.is_recording():
            return
        span.set_attributes(add)
    except Exception as exc:
        internal_error(runtime._runtime, "update_current_trace", exc)
