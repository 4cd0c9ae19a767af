"""Which TracerProvider makes capture's spans: a private one (the default), or the application's
own (``configure(tracer_provider=app_provider)``) so the app's APM and the trace store see one tree.

With the private provider, every span it makes (``@observe`` calls and instrumented LLM client
calls, :mod:`autometrics.capture.instrumentation`) goes to the store, and the application's global
provider is never touched.  The price is a split tree: an app span opened *inside* an
observed call has a parent that the app's exporter never receives.

With the application's provider, ``@observe`` and the instrumented clients create their spans
with *that* provider, so the app's exporters get them in place; autometrics adds one
:class:`StoreForwarder` to it, which hands the store the traces that contain a capture span:

* A trace is remembered when a span of a capture scope starts in it (``autometrics`` for
  ``@observe``, plus every instrumentation scope that asked :mod:`~autometrics.capture.instrumentation`'s
  tracer provider for a tracer).  From then on, each span of that trace that ends (the observed
  call's children, the app's HTTP span that encloses it, ...) goes to the store too, so the stored
  tree has no orphans.  The app's spans that ended before the first capture span started (e.g. an
  auth check before the LLM call) and traces without any capture span stay out of the store.
* The app's Resource names the app (``service.name``), not the autometrics project: the stored
  copy of each span gets a Resource with ``autometrics.project`` / ``autometrics.task`` merged in
  (what the store's ``project`` column is read from); the app's own exporters see the span
  unchanged.
* The app's sampler decides what is recorded (``configure(sample_rate=...)`` applies only to the
  private provider); the app owns its provider's lifecycle, so ``autometrics.shutdown()`` never
  shuts it down.
* An SDK TracerProvider cannot remove a span processor, so there is one forwarder per provider,
  re-pointed at the current runtime's store processor by each ``configure()`` and detached by
  ``shutdown()`` (then it does nothing).

This module imports no other capture module (the runtime binds itself here), so there is no
import cycle.
"""

from __future__ import annotations

import collections
import threading

from autometrics.collectors.conventions import stamp
from autometrics.metricbank.errors import UserError
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

# Instrumentation scopes whose spans make a trace worth storing (see the module docstring);
# autometrics.capture.instrumentation adds the scopes of the client instrumentations it enabled.
CAPTURE_SCOPES: set[str] = {"autometrics"}

_TRACES_REMEMBERED = 65_536  # traces in flight at once, far above any app's concurrency


class StoreForwarder(SpanProcessor):
    """The one span processor autometrics adds to an application's TracerProvider (see the module
    docstring): spans of traces that contain a capture span go to the bound store processor."""

    _lock = threading.Lock()

    def __init__(self):
        self._target = None  # the current runtime's StoreSpanProcessor, or None (detached)
        self._stamp: Resource | None = None
        self._merged: dict[int, tuple[Resource, Resource]] = {}
        self._traces: collections.OrderedDict[int, None] = collections.OrderedDict()
        self._traces_lock = threading.Lock()

    @classmethod
    def attach(cls, provider, target, project: str, task: str | None) -> StoreForwarder:
        """The forwarder of ``provider`` (added on first use), now forwarding to ``target``."""
        if not hasattr(provider, "add_span_processor"):
            raise UserError(f"tracer_provider must be an OpenTelemetry SDK TracerProvider (opentelemetry.sdk.trace."
                             f"TracerProvider), not {type(provider).__name__}: autometrics adds its span processor to it")
        with cls._lock:
            fwd = getattr(provider, "_autometrics_forwarder", None)
            if fwd is None:
                fwd = cls()
                provider.add_span_processor(fwd)
                provider._autometrics_forwarder = fwd
        attrs = {"autometrics.project": project}
        if task:
            attrs["autometrics.task"] = task
        fwd._stamp = Resource(attrs)
        fwd._merged = {}
        fwd._target = target
        return fwd

    def detach(self, target) -> None:
        """Stop forwarding to ``target`` (a runtime shutting down); a newer binding is kept."""
        if self._target is target:
            self._target = None

    def on_start(self, span, parent_context=None) -> None:
        try:
            if self._target is None:
                return
            stamp(span)  # the session/user/tags of autometrics.trace_attributes(), on every span of the request
            scope = span.instrumentation_scope
            if scope is not None and scope.name in CAPTURE_SCOPES and span.context.trace_flags.sampled:
                tid = span.context.trace_id
                with self._traces_lock:
                    self._traces[tid] = None
                    self._traces.move_to_end(tid)
                    if len(self._traces) > _TRACES_REMEMBERED:
                        self._traces.popitem(last=False)
        except Exception:  # pragma: no cover - nothing raises into the app
            pass

    def on_end(self, span) -> None:
        try:
            target = self._target
            if target is None or span.context is None or span.context.trace_id not in self._traces:
                return
            target.on_end(self._stored_copy(span))
        except Exception:  # pragma: no cover - nothing raises into the app
            pass

    def _stored_copy(self, span) -> ReadableSpan:
        """The span with the autometrics project/task merged into its Resource (one merged
        Resource per original, so the store encodes it once per batch)."""
        res = span.resource
        hit = self._merged.get(id(res))
        if hit is None or hit[0] is not res:
            hit = self._merged[id(res)] = (res, (res or Resource({})).merge(self._stamp))
        return ReadableSpan(name=span.name, context=span.context, parent=span.parent, resource=hit[1],
                            attributes=span.attributes, events=span.events, links=span.links, kind=span.kind,
                            status=span.status, start_time=span.start_time, end_time=span.end_time,
                            instrumentation_scope=span.instrumentation_scope)

    def shutdown(self) -> None:
        self._target = None  # the app shuts its provider down: the runtime's writer is ours to close

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        target = self._target
        return target.force_flush(timeout_millis) if target is not None else True
