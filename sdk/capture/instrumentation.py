"""LLM client instrumentation through the ecosystem's own libraries: each call an application
makes with the ``openai`` client, ``litellm`` or a DSPy program becomes a GenAI span (kind CLIENT,
``chat <model>``: the messages sent, system prompt included, request model and parameters, token
usage, response id, finish reasons) nested under the ``@observe`` call that made it.

    autometrics.configure(project="support-bot")
    autometrics.instrument("openai", "litellm", "dspy")   # or instrument(): every one installed

Nothing here parses a client's requests or responses; the OpenTelemetry project's and the
clients' own instrumentations do, and are given autometrics' tracer provider:

* ``openai``: ``opentelemetry-instrumentation-genai-openai`` (the official OpenAI instrumentation,
  successor of ``...-openai-v2``): chat completions (sync, async, streamed), ``parse``, embeddings,
  the Responses API.
* ``litellm``: LiteLLM's own OpenTelemetry callback (``litellm.integrations.opentelemetry``) in its
  ``gen_ai_latest_experimental`` mode; every provider LiteLLM reaches.  (LiteLLM does not call the
  ``openai`` client's instrumented methods, so the ``openai`` instrumentation does not see it.)
  The callback records the span in LiteLLM's logging thread when the call (or stream) ends; we
  hand it the caller's current span as its documented parent (``litellm_parent_otel_span``) so
  the span nests under the ``@observe`` call instead of becoming a separate trace or overwriting
  the caller's span.
* ``dspy``: ``opentelemetry-instrumentation-genai-dspy`` (the official DSPy instrumentation: LM
  calls, tools, ReAct, retrievers) plus a DSPy callback (``dspy.configure(callbacks=[...])``) that
  makes an ``invoke_workflow <Module>`` span per module call, its inputs and output fields as
  messages.  (DSPy 3.4's default engine calls the endpoint itself; with ``engine="litellm"`` the
  LiteLLM call inside a DSPy LM call is not recorded twice: the DSPy LM span already is that call.)

Content: the GenAI instrumentations record messages only when
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` asks for it; ``instrument()`` sets it (only
while it builds them, the process environment is left as it was) from ``configure(capture_content=
...)``: ``span_only`` (what the trace store reads) unless the variable already names a span mode,
``no_content`` when capture_content is off.  Independently of that, while capture_content is off,
every span made through our provider drops message content (:data:`CONTENT_KEYS`), so the order of
``configure()`` and ``instrument()`` cannot leak it.  ``@observe(redact=...)`` does not apply to
client spans (they record what was sent).

The spans come from :data:`TRACER_PROVIDER`, which resolves, per span, to the current runtime's
provider: the private provider (the default) or the app's (``configure(tracer_provider=...)``,
:mod:`autometrics.capture.provider`).  So ``instrument()`` may run before or after ``configure()``,
and a later ``configure()`` is followed without instrumenting again.

Limits (of the instrumentations, measured): LiteLLM records a span only when its logging runs,
i.e. after the call, from a thread (an ``acompletion``: from a task on the event loop, so a loop
closed right after the call loses it), and leaves out a ``temperature`` of 0; ``llama_cpp.server``
sends no usage in streams, so a streamed call there has no token counts.  The instrumentations'
own work costs the calling thread about 0.2-0.3 ms per call (tests/benchmarks/observe_overhead.py).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import threading
from collections.abc import Callable

from autometrics.collectors.conventions import client_call_inside
from autometrics.metricbank.errors import UserError
from autometrics.metricbank.install import install_hint, plain
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from . import runtime
from .provider import CAPTURE_SCOPES
from .settings import env_bool, log

__all__ = ["instrument", "uninstrument", "instrumented", "CLIENTS", "TRACER_PROVIDER", "CONTENT_KEYS"]

CLIENTS = ("openai", "litellm", "dspy")
# what must be installed for each client: (the client, its instrumentation)
_NEEDS = {
    "openai": ("openai", "opentelemetry.instrumentation.genai.openai"),
    "litellm": ("litellm", "litellm.integrations.opentelemetry"),
    "dspy": ("dspy", "opentelemetry.instrumentation.genai.dspy"),
}
_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
# GenAI attributes that carry message content (dropped while capture_content is off)
CONTENT_KEYS = frozenset({
    "gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions", "gen_ai.tool.definitions",
    "gen_ai.tool.call.arguments", "gen_ai.tool.call.result", "gen_ai.retrieval.documents",
    "gen_ai.retrieval.query.text", "gen_ai.prompt", "gen_ai.completion", "gen_ai.prompt_variable",
})
_CONTENT_PREFIXES = ("gen_ai.prompt.", "gen_ai.completion.", "gen_ai.input.messages.", "gen_ai.output.messages.")

_lock = threading.RLock()
_active: dict[str, Callable[[], None]] = {}  # instrumented client -> how to undo it


def _is_content(key: str) -> bool:
    return key in CONTENT_KEYS or key.startswith(_CONTENT_PREFIXES)


def _without_content(attributes):
    if not attributes:
        return attributes
    return {k: v for k, v in attributes.items() if not _is_content(k)}


# --------------------------------------------------------------------------- the tracer provider


class _ContentFreeSpan(trace.Span):
    """A span that drops message content (capture_content is off); everything else passes."""

    __slots__ = ("_span",)

    def __init__(self, span):
        self._span = span

    def __getattr__(self, name):  # read-only SDK extras (name, attributes, ...)
        return getattr(self._span, name)

    def end(self, end_time=None) -> None:
        self._span.end(end_time)

    def get_span_context(self):
        return self._span.get_span_context()

    def set_attributes(self, attributes) -> None:
        self._span.set_attributes(_without_content(attributes))

    def set_attribute(self, key, value) -> None:
        if not _is_content(key):
            self._span.set_attribute(key, value)

    def add_event(self, name, attributes=None, timestamp=None) -> None:
        self._span.add_event(name, _without_content(attributes), timestamp)

    def add_link(self, context, attributes=None) -> None:
        self._span.add_link(context, attributes)

    def update_name(self, name) -> None:
        self._span.update_name(name)

    def is_recording(self) -> bool:
        return self._span.is_recording()

    def set_status(self, status, description=None) -> None:
        self._span.set_status(status, description)

    def record_exception(self, exception, attributes=None, timestamp=None, escaped=False) -> None:
        self._span.record_exception(exception, attributes, timestamp, escaped)


class _RuntimeTracer(trace.Tracer):
    """Starts spans with the current runtime's provider (none while capture is off or shut down)."""

    def __init__(self, name: str, version: str | None, schema_url: str | None, attributes):
        self._args = (name, version, schema_url, attributes)
        self._cache: tuple = (None, None)

    def _current(self):
        rt = runtime.get_runtime()
        if rt is None:
            return None, None
        cached = self._cache
        if cached[0] is not rt:
            name, version, schema_url, attributes = self._args
            cached = self._cache = (rt, rt.provider.get_tracer(name, version, schema_url=schema_url, attributes=attributes))
        return cached

    def start_span(self, name, context=None, kind=SpanKind.INTERNAL, attributes=None, links=None, start_time=None,
                   record_exception=True, set_status_on_exception=True):
        try:
            rt, tracer = self._current()
            if tracer is None:
                return trace.INVALID_SPAN
            content = rt.cfg.capture_content
            span = tracer.start_span(name, context, kind, attributes if content else _without_content(attributes),
                                     links, start_time, record_exception, set_status_on_exception)
            return span if content else _ContentFreeSpan(span)
        except Exception as exc:  # capture's own failure: the client call runs unrecorded
            runtime.internal_error(runtime._runtime, "instrument", exc)
            return trace.INVALID_SPAN

    @contextlib.contextmanager
    def start_as_current_span(self, name, context=None, kind=SpanKind.INTERNAL, attributes=None, links=None,
                              start_time=None, record_exception=True, set_status_on_exception=True, end_on_exit=True):
        span = self.start_span(name, context, kind, attributes, links, start_time, record_exception, set_status_on_exception)
        with trace.use_span(span, end_on_exit=end_on_exit, record_exception=record_exception,
                            set_status_on_exception=set_status_on_exception) as current:
            yield current


class _RuntimeTracerProvider(trace.TracerProvider):
    """The provider handed to the instrumentations: each tracer it gives resolves, per span, to the
    current runtime's provider; the scopes it serves count as capture scopes for an app provider."""

    def get_tracer(self, instrumenting_module_name, instrumenting_library_version=None, schema_url=None,
                   attributes=None):
        CAPTURE_SCOPES.add(instrumenting_module_name)
        return _RuntimeTracer(instrumenting_module_name, instrumenting_library_version, schema_url, attributes)


TRACER_PROVIDER = _RuntimeTracerProvider()


# --------------------------------------------------------------------------- public API


def instrument(*clients: str) -> list[str]:
    """Record the LLM calls made with ``clients`` (``"openai"``, ``"litellm"``, ``"dspy"``) as
    GenAI client spans nested under the current ``@observe`` call; without arguments, every one
    of them that is installed.  Returns the clients instrumented now.

    Calling it again re-applies the settings (e.g. after ``configure(capture_content=False)``).
    Raises ``ValueError`` for an unknown name and ``ImportError`` (naming what to install) for a
    named client whose library or instrumentation is missing; setup failures are not swallowed
    here, unlike failures while recording a call, which never reach the application.
    """
    unknown = [c for c in clients if c not in CLIENTS]
    if unknown:
        raise UserError(f"instrument(): unknown client {unknown[0]!r}; choose from {', '.join(map(repr, CLIENTS))}")
    names = list(dict.fromkeys(clients)) or [c for c in CLIENTS if _missing(c) is None]
    for c in names:
        missing = _missing(c)
        if missing == c:
            raise ImportError(f"instrument({c!r}): {c} is not installed ({plain(install_hint(c))})")
        if missing:
            raise ImportError(f"instrument({c!r}) needs {missing}: {plain(install_hint(extra='observe'))}")
    mode = _content_mode()
    done = []
    with _lock:
        for c in names:
            if c in _active:
                _active.pop(c)()
            _active[c] = _INSTRUMENT[c](mode)
            done.append(c)
    log.info("autometrics: instrumented %s (message content: %s)", ", ".join(done) or "nothing", mode)
    return done


def uninstrument(*clients: str) -> list[str]:
    """Undo :func:`instrument` for ``clients`` (default: all); returns those undone."""
    with _lock:
        names = [c for c in (clients or tuple(_active)) if c in _active]
        for c in names:
            _active.pop(c)()
    return names


def instrumented() -> list[str]:
    """The clients instrumented now."""
    return list(_active)


def _missing(client: str) -> str | None:
    for module in _NEEDS[client]:
        try:
            if importlib.util.find_spec(module) is None:
                return module
        except (ImportError, ValueError):
            return module
    return None


def _content_mode() -> str:
    """The GenAI content-capture mode for the instrumentations (see the module docstring)."""
    rt = runtime._runtime
    capture = rt.cfg.capture_content if rt is not None else env_bool("AUTOMETRICS_CAPTURE_CONTENT", True)
    if not capture:
        return "NO_CONTENT"
    user = os.environ.get(_CONTENT_ENV, "").strip().upper()
    if user in ("SPAN_ONLY", "SPAN_AND_EVENT", "NO_CONTENT"):
        return user
    if user == "EVENT_ONLY":
        return "SPAN_AND_EVENT"  # the app's events stay; the trace store reads the span
    return "SPAN_ONLY"


@contextlib.contextmanager
def _env(name: str, value: str):
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


# --------------------------------------------------------------------------- openai


def _instrument_otel(instrumentor, client: str, mode: str) -> bool:
    """Instrument with our provider; False (and a warning) when the app already instrumented it."""
    if instrumentor.is_instrumented_by_opentelemetry:
        log.warning("autometrics: %s was already instrumented by the application (its spans follow the application's "
                    "tracer provider; to store them, configure(tracer_provider=<that provider>))", client)
        return False
    with _env(_CONTENT_ENV, mode):
        instrumentor.instrument(tracer_provider=TRACER_PROVIDER)
    if not instrumentor.is_instrumented_by_opentelemetry:  # e.g. a client version it does not support
        raise ImportError(f"instrument({client!r}): the OpenTelemetry instrumentation refused the installed {client} "
                          "(see the log above for the version it needs)")
    return True


def _instrument_openai(mode: str) -> Callable[[], None]:
    from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor

    inst = OpenAIInstrumentor()
    return inst.uninstrument if _instrument_otel(inst, "openai", mode) else (lambda: None)


# --------------------------------------------------------------------------- litellm

_PARENT = "litellm_parent_otel_span"  # LiteLLM's documented explicit-parent metadata key
_INNER = "autometrics_inner_call"  # set on a call made inside another GenAI inference span


def _inside_inference() -> bool:
    try:
        from opentelemetry.util.genai.invocation import CLIENT_INFERENCE_CONTEXT_KEY
    except ImportError:
        return False
    return otel_context.get_value(CLIENT_INFERENCE_CONTEXT_KEY) is not None


def _adopt_parent(kwargs, at_start: bool) -> bool:
    """Give a LiteLLM call the caller's current span as its explicit parent; False when the call
    must not be recorded (it runs inside another GenAI inference span, e.g. a DSPy LM call)."""
    try:
        if kwargs.get(_INNER):
            return False
        if at_start and _inside_inference():
            kwargs[_INNER] = True
            return False
        params = kwargs.get("litellm_params")
        if not isinstance(params, dict):
            return True
        md = params.get("metadata") or {}
        if md.get(_PARENT) is None:
            span = trace.get_current_span()
            if span.get_span_context().is_valid:
                # a copy: the caller's own metadata dict is never changed
                params["metadata"] = {**md, _PARENT: span}
    except Exception as exc:
        runtime.internal_error(runtime._runtime, "instrument-litellm", exc)
    return True


def _litellm_callback(mode: str):
    from litellm.integrations.opentelemetry import OpenTelemetry, OpenTelemetryConfig
    from litellm.integrations.opentelemetry_utils.gen_ai_semconv import OTELSemconvCategory

    class AutometricsLiteLLMTelemetry(OpenTelemetry):
        """LiteLLM's OpenTelemetry callback, its spans parented to the caller's span."""

        def log_pre_api_call(self, model, messages, kwargs):
            if _adopt_parent(kwargs, at_start=True):  # this call's span is made later, after the call:
                client_call_inside(trace.get_current_span())  # tell an @observe(model=...) around it now

        def log_success_event(self, kwargs, response_obj, start_time, end_time):
            if _adopt_parent(kwargs, at_start=False):
                super().log_success_event(kwargs, response_obj, start_time, end_time)

        def log_failure_event(self, kwargs, response_obj, start_time, end_time):
            if _adopt_parent(kwargs, at_start=False):
                super().log_failure_event(kwargs, response_obj, start_time, end_time)

        async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
            if _adopt_parent(kwargs, at_start=False):
                await super().async_log_success_event(kwargs, response_obj, start_time, end_time)

        async def async_log_failure_event(self, kwargs, response_obj, start_time, end_time):
            if _adopt_parent(kwargs, at_start=False):
                await super().async_log_failure_event(kwargs, response_obj, start_time, end_time)

    config = OpenTelemetryConfig(skip_set_global=True, capture_message_content=mode,
                                 semconv_stability_opt_in={OTELSemconvCategory.GEN_AI_LATEST_EXPERIMENTAL})
    quiet = _DropProxyNotice()
    llm_log = logging.getLogger("LiteLLM")
    llm_log.addFilter(quiet)  # "Proxy Server is not installed": true and irrelevant for an app
    try:
        return AutometricsLiteLLMTelemetry(config=config, tracer_provider=TRACER_PROVIDER)
    finally:
        llm_log.removeFilter(quiet)


class _DropProxyNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "Proxy Server is not installed" not in record.getMessage()


def _instrument_litellm(mode: str) -> Callable[[], None]:
    import litellm

    callback = _litellm_callback(mode)
    litellm.callbacks = [*litellm.callbacks, callback]

    def undo():
        for name in ("callbacks", "input_callback", "success_callback", "failure_callback",
                     "_async_success_callback", "_async_failure_callback", "_async_input_callback"):
            registered = getattr(litellm, name, None)
            if isinstance(registered, list) and callback in registered:
                setattr(litellm, name, [c for c in registered if c is not callback])

    return undo


# --------------------------------------------------------------------------- dspy


def _module_text(value) -> str:
    """A DSPy module's inputs or Prediction as text: a lone field as itself, else JSON."""
    import json

    if hasattr(value, "toDict"):
        value = value.toDict()
    if isinstance(value, dict):
        if set(value) == {"args", "kwargs"}:  # Module.__call__(*args, **kwargs)
            value = value["kwargs"] if value["kwargs"] or not value["args"] else {"args": list(value["args"])}
        if len(value) == 1:
            value = next(iter(value.values()))
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _dspy_callback(handler):
    from dspy.utils.callback import BaseCallback
    from opentelemetry.util.genai.types import InputMessage, OutputMessage, TextPart

    class AutometricsModuleSpans(BaseCallback):
        """One ``invoke_workflow <Module>`` span per DSPy module call (DSPy's callback API)."""

        def __init__(self):
            self._open: dict[str, object] = {}

        def on_module_start(self, call_id, instance, inputs):
            try:
                inv = handler.workflow(type(instance).__name__)
                if handler.should_capture_content():
                    inv.input_messages = [InputMessage(role="user", parts=[TextPart(content=_module_text(inputs))])]
                self._open[call_id] = inv
            except Exception as exc:
                runtime.internal_error(runtime._runtime, "instrument-dspy", exc)

        def on_module_end(self, call_id, outputs, exception=None):
            inv = self._open.pop(call_id, None)
            if inv is None:
                return
            try:
                if exception is not None:
                    inv.fail(exception)
                    return
                if handler.should_capture_content() and outputs is not None:
                    inv.output_messages = [OutputMessage(role="assistant", parts=[TextPart(content=_module_text(outputs))])]
                inv.stop()
            except Exception as exc:
                runtime.internal_error(runtime._runtime, "instrument-dspy", exc)

    return AutometricsModuleSpans()


def _instrument_dspy(mode: str) -> Callable[[], None]:
    import dspy
    from opentelemetry.instrumentation.genai.dspy import DSPyInstrumentor
    from opentelemetry.util.genai.handler import TelemetryHandler

    with _env(_CONTENT_ENV, mode):
        handler = TelemetryHandler(tracer_provider=TRACER_PROVIDER, instrumentation_scope_name="autometrics.dspy")
    callback = _dspy_callback(handler)
    inst = DSPyInstrumentor()
    ours = _instrument_otel(inst, "dspy", mode)
    before = [c for c in (dspy.settings.get("callbacks") or []) if type(c).__name__ != "AutometricsModuleSpans"]
    try:
        dspy.configure(callbacks=[*before, callback])
    except RuntimeError as exc:  # DSPy lets only the thread that configured it first configure it again
        if ours:
            inst.uninstrument()
        raise RuntimeError(f"instrument('dspy'): {exc}; call it from the thread that calls dspy.configure()") from None

    def undo():
        if ours:
            inst.uninstrument()
        try:
            dspy.configure(callbacks=[c for c in (dspy.settings.get("callbacks") or []) if c is not callback])
        except RuntimeError:
            pass

    return undo


_INSTRUMENT = {"openai": _instrument_openai, "litellm": _instrument_litellm, "dspy": _instrument_dspy}
