"""The current span, from inside an observed call: its trace / span ids (to hand to a client so
feedback can be attached later) and ``update_current_span`` to add model, token usage or any
attribute once they are known (e.g. after the LLM client returned).

These read the OpenTelemetry context only, so they also see an application's own current span;
``update_current_span`` never raises (a failure is counted against the active runtime).
"""

from __future__ import annotations

from opentelemetry import trace

from . import runtime
from .runtime import _internal


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
        _internal(runtime._runtime, "update_current_span", exc)
