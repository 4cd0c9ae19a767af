"""Capture: ``@observe`` turns calls into OpenTelemetry spans; ``feedback()`` records human signals.

    import autometrics
    autometrics.configure(project="support-bot", task="Answer customer questions")

    @autometrics.observe(model="gpt-4o-mini")
    def answer(question: str) -> str: ...

    answer("hi")
    autometrics.feedback(autometrics.current_trace_id(), "thumbs", True)   # inside the call, or
                                                                           # keep the id for later

Each call becomes a span named after the function, with input, output, model, token usage and
errors in OpenTelemetry GenAI semantic-convention attributes (``gen_ai.input.messages``,
``gen_ai.request.model``, ``gen_ai.usage.input_tokens``, ``error.type``, ...).  Spans are made
by a *private* TracerProvider: the application's own (global) TracerProvider is never replaced
or modified, yet our spans join the application's current trace because the OpenTelemetry
context is shared.

Why it can't hurt the application: the call itself runs untouched; everything we add is inside
``try/except`` and only *appends* to a bounded queue that a background thread writes to the
trace store (or a remote collector, or Langfuse).  Backend failures are counted (``stats()``)
and logged at most once a minute; a full queue drops and counts.  ``flush()``/``shutdown()``
are bounded and also run at interpreter exit.

Configuration (arguments of :func:`configure`, else environment variables):

=====================  =============================  ==========================================
argument               environment variable           meaning
=====================  =============================  ==========================================
store_url              AUTOMETRICS_STORE_URL          SQLAlchemy URL; default SQLite in the user data dir
collector_url          AUTOMETRICS_COLLECTOR_URL      send to ``autometrics collector serve`` instead
api_key                AUTOMETRICS_API_KEY            key for the collector (never logged)
project                AUTOMETRICS_PROJECT            project name (default: ``default``)
task                   AUTOMETRICS_TASK               task description (used by later fits)
sample_rate            AUTOMETRICS_SAMPLE_RATE        fraction of new traces recorded (0..1)
langfuse               AUTOMETRICS_LANGFUSE           ``auto`` (on when LANGFUSE_PUBLIC_KEY/SECRET_KEY set), on, off
capture_content        AUTOMETRICS_CAPTURE_CONTENT    false: record no inputs/outputs anywhere (PII)
enabled                AUTOMETRICS_DISABLED=1         switch everything off
=====================  =============================  ==========================================
"""

from __future__ import annotations

import atexit
import functools
import inspect
import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, TraceIdRatioBased
from opentelemetry.trace import SpanKind, Status, StatusCode

from .collectors.exporter import BatchWriter, CollectorSink, Counters, RateLimitedLog, StoreSink, StoreSpanProcessor
from .collectors.feedback import make_feedback_row

__all__ = [
    "configure",
    "observe",
    "current_trace_id",
    "current_span_id",
    "update_current_span",
    "feedback",
    "flush",
    "shutdown",
    "stats",
    "training_frame",
    "ObserveConfig",
]

log = logging.getLogger("autometrics.capture")
SCOPE = "autometrics"


def _env_bool(name: str, default: bool) -> bool:
    v = os.environ.get(name)
    if v is None or v.strip() == "":
        return default
    return v.strip().lower() not in ("0", "false", "no", "off")


@dataclass
class ObserveConfig:
    """Resolved configuration (arguments win over environment variables)."""

    store_url: str | None = None
    collector_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    project: str = "default"
    task: str | None = None
    sample_rate: float = 1.0
    langfuse: str = "auto"
    capture_content: bool = True
    max_content_chars: int = 32_000
    queue_size: int = 10_000
    batch_size: int = 512
    flush_interval: float = 0.5
    feedback_aggregate: str | dict = "latest"
    enabled: bool = True


class _Runtime:
    """Everything one configure() built: provider, writer, optional Langfuse export."""

    def __init__(self, cfg: ObserveConfig, store=None):
        self.cfg = cfg
        self.counters = Counters()
        self.errors = RateLimitedLog(log)
        if cfg.collector_url:
            sink = CollectorSink(cfg.collector_url, cfg.api_key)
        else:
            sink = StoreSink(cfg.store_url, store=store)
        self.writer = BatchWriter(sink, max_queue=cfg.queue_size, batch_size=cfg.batch_size, interval=cfg.flush_interval,
                                  counters=self.counters, errors=self.errors)
        attrs = {"service.name": cfg.project, "autometrics.project": cfg.project}
        if cfg.task:
            attrs["autometrics.task"] = cfg.task
        root_sampler = ALWAYS_ON if cfg.sample_rate >= 1.0 else TraceIdRatioBased(cfg.sample_rate)
        self.provider = TracerProvider(resource=Resource.create(attrs), sampler=ParentBased(root_sampler))
        self.provider.add_span_processor(StoreSpanProcessor(self.writer))
        self.langfuse = None
        if _langfuse_wanted(cfg.langfuse):
            try:
                from .collectors.langfuse_export import LangfuseExport

                self.langfuse = LangfuseExport(self.provider, counters=self.counters, errors=self.errors)
            except Exception as exc:
                self.errors.warning("langfuse-init", "autometrics: Langfuse export disabled: %s: %s", type(exc).__name__, exc)
        self.tracer = self.provider.get_tracer(SCOPE)

    def flush(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        ok = self.writer.flush(timeout)
        if self.langfuse is not None:
            ok = self.langfuse.flush(max(0.1, deadline - time.monotonic())) and ok
        return ok

    def shutdown(self, timeout: float) -> bool:
        """Flush and stop, all within ``timeout`` (a down backend cannot hold the exit)."""
        deadline = time.monotonic() + timeout
        ok = self.flush(timeout)
        self.writer.shutdown(0.2)

        def _stop():
            try:
                if self.langfuse is not None:
                    self.langfuse.shutdown(max(0.1, deadline - time.monotonic()))
                self.provider.shutdown()
            except Exception:
                pass

        t = threading.Thread(target=_stop, name="autometrics-shutdown", daemon=True)
        t.start()
        t.join(max(0.1, deadline - time.monotonic()))
        return ok


def _langfuse_wanted(mode: str) -> bool:
    mode = (mode or "auto").lower()
    if mode in ("off", "false", "0", "no"):
        return False
    have_keys = bool(os.environ.get("LANGFUSE_PUBLIC_KEY") and os.environ.get("LANGFUSE_SECRET_KEY"))
    if mode in ("on", "true", "1", "yes") and not have_keys:
        log.warning("autometrics: langfuse=on but LANGFUSE_PUBLIC_KEY / LANGFUSE_SECRET_KEY are not set; Langfuse export off")
    return have_keys


_runtime: _Runtime | None = None
_disabled = False
_lock = threading.RLock()
_atexit_registered = False


def configure(
    *,
    store_url: str | None = None,
    collector_url: str | None = None,
    api_key: str | None = None,
    project: str | None = None,
    task: str | None = None,
    sample_rate: float | None = None,
    langfuse: str | bool | None = None,
    capture_content: bool | None = None,
    max_content_chars: int | None = None,
    queue_size: int | None = None,
    flush_interval: float | None = None,
    feedback_aggregate: str | dict | None = None,
    enabled: bool | None = None,
    store=None,
) -> ObserveConfig:
    """Set up capture (replacing an earlier configuration, whose queue is flushed first).

    Never contacts a backend here: stores, collectors and Langfuse are reached from the
    background thread, so a down backend cannot fail or slow the application's start.
    Raises ``ValueError`` only for an invalid argument (e.g. ``sample_rate=2``).
    ``store``: an already-open :class:`~autometrics.collectors.store.TraceStore` to write to.
    """
    global _runtime, _disabled, _atexit_registered
    env = os.environ
    cfg = ObserveConfig()
    cfg.store_url = store_url or env.get("AUTOMETRICS_STORE_URL") or None
    cfg.collector_url = collector_url or env.get("AUTOMETRICS_COLLECTOR_URL") or None
    cfg.api_key = api_key or env.get("AUTOMETRICS_API_KEY") or None
    cfg.project = project or env.get("AUTOMETRICS_PROJECT") or "default"
    cfg.task = task or env.get("AUTOMETRICS_TASK") or None
    if sample_rate is None:
        try:
            sample_rate = float(env.get("AUTOMETRICS_SAMPLE_RATE", "1"))
        except ValueError:
            log.warning("autometrics: AUTOMETRICS_SAMPLE_RATE is not a number; using 1.0")
            sample_rate = 1.0
    if not (0.0 <= float(sample_rate) <= 1.0) or math.isnan(float(sample_rate)):
        raise ValueError(f"sample_rate must be between 0 and 1, not {sample_rate!r}")
    cfg.sample_rate = float(sample_rate)
    if isinstance(langfuse, bool):
        langfuse = "on" if langfuse else "off"
    cfg.langfuse = langfuse or env.get("AUTOMETRICS_LANGFUSE", "auto")
    cfg.capture_content = capture_content if capture_content is not None else _env_bool("AUTOMETRICS_CAPTURE_CONTENT", True)
    if max_content_chars is not None:
        cfg.max_content_chars = int(max_content_chars)
    if queue_size is not None:
        if queue_size < 1:
            raise ValueError("queue_size must be >= 1")
        cfg.queue_size = int(queue_size)
    if flush_interval is not None:
        cfg.flush_interval = float(flush_interval)
    if feedback_aggregate is not None:
        cfg.feedback_aggregate = feedback_aggregate
    cfg.enabled = enabled if enabled is not None else not _env_bool("AUTOMETRICS_DISABLED", False)
    with _lock:
        old, _runtime = _runtime, None
        if old is not None:
            old.shutdown(5.0)
        _disabled = not cfg.enabled
        if cfg.enabled:
            _runtime = _Runtime(cfg, store=store)
        if not _atexit_registered:
            atexit.register(_at_exit)
            _atexit_registered = True
    return cfg


def _get_runtime() -> _Runtime | None:
    rt = _runtime
    if rt is not None or _disabled:
        return rt
    try:  # first use without configure(): configure from the environment
        with _lock:
            if _runtime is None and not _disabled:
                configure()
    except Exception as exc:
        log.warning("autometrics: capture disabled, configuration failed: %s", exc)
        _set_disabled()
    return _runtime


def _set_disabled() -> None:
    global _disabled
    _disabled = True


def _at_exit() -> None:
    try:
        shutdown(timeout=5.0)
    except Exception:
        pass


def flush(timeout: float = 10.0) -> bool:
    """Write everything captured so far (bounded by ``timeout`` seconds); True when all was handled."""
    rt = _runtime
    if rt is None:
        return True
    try:
        return rt.flush(timeout)
    except Exception:
        return False


def shutdown(timeout: float = 5.0) -> bool:
    """Flush and stop capture; later decorated calls run uncaptured until configure() is called."""
    global _runtime
    with _lock:
        rt, _runtime = _runtime, None
        _set_disabled()
    if rt is None:
        return True
    try:
        return rt.shutdown(timeout)
    except Exception:
        return False


def stats() -> dict:
    """Counters: ``span_queued``, ``span_written``, ``span_dropped``, ``span_failed``, the same
    for ``feedback_*``, ``write_errors``, ``internal_errors``, ``langfuse_*``, and ``queue_size``."""
    rt = _runtime
    if rt is None:
        return {}
    out = rt.counters.snapshot()
    out["queue_size"] = rt.writer.qsize()
    return out


# --------------------------------------------------------------------------- content


def _truncate(s: str, n: int) -> str:
    return s if len(s) <= n else s[:n] + f"...[truncated {len(s) - n} chars]"


def _to_text(value) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int | float | bool) or value is None:
        return str(value)
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except Exception:
        return repr(value)


def _is_chat_messages(value) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) and "role" in m for m in value)


_dumps_str = json.JSONEncoder(ensure_ascii=False).encode  # one C-accelerated call per content string


def _input_messages(value, limit: int) -> str:
    """GenAI-semconv ``gen_ai.input.messages`` JSON for a call's input."""
    if _is_chat_messages(value):
        msgs = []
        for m in value:
            c = m.get("content")
            parts = m["parts"] if isinstance(m.get("parts"), list) else [{"type": "text", "content": _truncate(_to_text(c), limit)}]
            msgs.append({"role": m["role"], "parts": parts})
        return json.dumps(msgs, ensure_ascii=False, default=str)
    return '[{"role":"user","parts":[{"type":"text","content":' + _dumps_str(_truncate(_to_text(value), limit)) + "}]}]"


def _output_messages(value, limit: int) -> str:
    return ('[{"role":"assistant","parts":[{"type":"text","content":' + _dumps_str(_truncate(_to_text(value), limit))
            + '}],"finish_reason":"stop"}]')


def _llm_result_fields(result) -> tuple[object, dict]:
    """Duck-typed OpenAI/Anthropic-style responses: (output text or the result, attributes)."""
    attrs: dict = {}
    if result is None or isinstance(result, str | int | float | bool | bytes):
        return result, attrs
    get = (lambda o, k: o.get(k)) if isinstance(result, dict) else getattr
    try:
        usage = get(result, "usage", None) if not isinstance(result, dict) else result.get("usage")
        if usage is not None:
            ug = (lambda k: usage.get(k)) if isinstance(usage, dict) else (lambda k: getattr(usage, k, None))
            it = ug("input_tokens") if ug("input_tokens") is not None else ug("prompt_tokens")
            ot = ug("output_tokens") if ug("output_tokens") is not None else ug("completion_tokens")
            if isinstance(it, int):
                attrs["gen_ai.usage.input_tokens"] = it
            if isinstance(ot, int):
                attrs["gen_ai.usage.output_tokens"] = ot
        model = result.get("model") if isinstance(result, dict) else getattr(result, "model", None)
        if isinstance(model, str) and (attrs or usage is not None):
            attrs["gen_ai.response.model"] = model
        choices = result.get("choices") if isinstance(result, dict) else getattr(result, "choices", None)
        if choices:
            c0 = choices[0]
            msg = c0.get("message") if isinstance(c0, dict) else getattr(c0, "message", None)
            content = (msg.get("content") if isinstance(msg, dict) else getattr(msg, "content", None)) if msg is not None else None
            if isinstance(content, str):
                return content, attrs
    except Exception:
        pass
    return result, attrs


@dataclass
class _Spec:
    name: str
    model: str | None
    operation: str | None
    capture_input: bool | None
    capture_output: bool | None
    redact: Callable | None
    attributes: dict
    signature: inspect.Signature | None
    skip_first: bool


def _call_input(spec: _Spec, args, kwargs):
    """What the call received: a lone argument as itself, else {parameter: value}."""
    n = len(args) - (1 if spec.skip_first else 0) + len(kwargs)
    if n == 1:
        return kwargs[next(iter(kwargs))] if kwargs else args[-1]
    if spec.signature is not None:
        try:
            bound = spec.signature.bind_partial(*args, **kwargs)
            d = dict(bound.arguments)
            if spec.skip_first and d:
                d.pop(next(iter(d)))
            return d
        except TypeError:
            pass
    return {"args": list(args[1:] if spec.skip_first else args), "kwargs": kwargs}


def _start(rt: _Runtime, spec: _Spec, args, kwargs):
    attrs = {}  # the project is on the resource, not repeated per span
    if spec.operation:
        attrs["gen_ai.operation.name"] = spec.operation
    if spec.model:
        attrs["gen_ai.request.model"] = spec.model
    if spec.attributes:
        attrs.update(spec.attributes)
    span = rt.tracer.start_span(spec.name, kind=SpanKind.INTERNAL, attributes=attrs)
    if span.is_recording() and rt.cfg.capture_content and spec.capture_input is not False:
        try:
            value = _call_input(spec, args, kwargs)
            if spec.redact is not None:
                value = spec.redact(value)
            span.set_attribute("gen_ai.input.messages", _input_messages(value, rt.cfg.max_content_chars))
        except Exception as exc:  # never record unredacted content when redaction fails
            span.set_attribute("autometrics.capture.error", f"input not recorded: {type(exc).__name__}")
            _internal(rt, "input capture", exc)
    token = otel_context.attach(trace.set_span_in_context(span))
    return span, token


def _end(rt: _Runtime, spec: _Spec, span, token, *, result=None, error: BaseException | None = None, streamed: bool = False, ttfc_ns=None) -> None:
    try:
        otel_context.detach(token)
    except Exception:
        pass
    try:
        if span.is_recording():
            if error is not None:
                span.set_attribute("error.type", type(error).__qualname__)
                span.record_exception(error)
                span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"[:500]))
            else:
                out, extra = _llm_result_fields(result)
                if extra:
                    span.set_attributes(extra)
                if streamed:
                    span.set_attribute("gen_ai.request.stream", True)
                    if ttfc_ns is not None:
                        span.set_attribute("gen_ai.response.time_to_first_chunk", ttfc_ns / 1e9)
                if rt.cfg.capture_content and spec.capture_output is not False:
                    if spec.redact is not None:
                        try:
                            out = spec.redact(out)
                        except Exception:  # never record unredacted content when redaction fails
                            span.set_attribute("autometrics.capture.error", "output not recorded: redaction failed")
                            raise
                    span.set_attribute("gen_ai.output.messages", _output_messages(out, rt.cfg.max_content_chars))
    except Exception as exc:
        rt.counters.add("internal_errors")
        rt.errors.warning("end", "autometrics: could not record the result of %s: %s: %s", spec.name, type(exc).__name__, exc)
    finally:
        try:
            span.end()
        except Exception:
            rt.counters.add("internal_errors")


def _internal(rt: _Runtime | None, where: str, exc: Exception) -> None:
    try:
        if rt is not None:
            rt.counters.add("internal_errors")
            rt.errors.warning(where, "autometrics: %s failed (the call ran uncaptured): %s: %s", where, type(exc).__name__, exc)
    except Exception:
        pass


_MAX_CHUNKS = 100_000  # bound memory for endless streams


def _join_chunks(chunks: list):
    if chunks and all(isinstance(c, str) for c in chunks):
        return "".join(chunks)
    return chunks


def observe(
    func: Callable | None = None,
    *,
    name: str | None = None,
    model: str | None = None,
    operation: str | None = None,
    capture_input: bool | None = None,
    capture_output: bool | None = None,
    redact: Callable | None = None,
    attributes: dict | None = None,
):
    """Decorate a function (sync, ``async``, generator or async generator) so each call is a span.

    ``name``: span name (default: the function's qualified name). ``model``/``operation``: GenAI
    ``gen_ai.request.model`` / ``gen_ai.operation.name`` (e.g. ``"chat"``).
    ``capture_input=False`` / ``capture_output=False``: record no content for this function;
    ``redact``: a function applied to the input and to the output before they are recorded
    (e.g. masking e-mail addresses). Streamed output (generators) is recorded once the stream
    completes. The function's own exceptions propagate unchanged (and are recorded).
    """
    if func is None:
        return lambda f: observe(f, name=name, model=model, operation=operation, capture_input=capture_input,
                                 capture_output=capture_output, redact=redact, attributes=attributes)
    try:
        sig = inspect.signature(func)
        params = list(sig.parameters)
    except (TypeError, ValueError):
        sig, params = None, []
    default_name = getattr(func, "__qualname__", None) or getattr(func, "__name__", "call")
    spec = _Spec(name or default_name.split("<locals>.")[-1], model, operation, capture_input,
                 capture_output, redact, dict(attributes or {}), sig, bool(params) and params[0] in ("self", "cls"))

    if inspect.isasyncgenfunction(func):
        @functools.wraps(func)
        async def agen_wrapper(*args, **kwargs):
            rt = _get_runtime()
            try:
                span, token = _start(rt, spec, args, kwargs) if rt is not None else (None, None)
                if token is not None:
                    otel_context.detach(token)  # re-attached around each step of the stream
            except Exception as exc:
                _internal(rt, "observe", exc)
                span = None
            if span is None:
                async for item in func(*args, **kwargs):
                    yield item
                return
            ctx = trace.set_span_in_context(span)
            chunks, t0, ttfc = [], time.perf_counter_ns(), None
            try:
                tok = otel_context.attach(ctx)
                try:
                    agen = func(*args, **kwargs)
                finally:
                    otel_context.detach(tok)
                step, arg = agen.asend, None
                while True:
                    tok = otel_context.attach(ctx)
                    try:
                        item = await step(arg)
                    except StopAsyncIteration:
                        break
                    finally:
                        otel_context.detach(tok)
                    if ttfc is None:
                        ttfc = time.perf_counter_ns() - t0
                    if len(chunks) < _MAX_CHUNKS:
                        chunks.append(item)
                    try:
                        arg, step = (yield item), agen.asend
                    except GeneratorExit:
                        await agen.aclose()
                        raise
                    except BaseException as exc:  # thrown in by the consumer: pass it on
                        step, arg = agen.athrow, exc
            except GeneratorExit:
                # the consumer stopped early: record what was streamed so far, not an error
                _end(rt, spec, span, otel_context.attach(ctx), result=_join_chunks(chunks), streamed=True, ttfc_ns=ttfc)
                raise
            except BaseException as exc:
                _end(rt, spec, span, otel_context.attach(ctx), error=exc)
                raise
            _end(rt, spec, span, otel_context.attach(ctx), result=_join_chunks(chunks), streamed=True, ttfc_ns=ttfc)

        return agen_wrapper

    if inspect.isgeneratorfunction(func):
        @functools.wraps(func)
        def gen_wrapper(*args, **kwargs):
            rt = _get_runtime()
            try:
                span, token = _start(rt, spec, args, kwargs) if rt is not None else (None, None)
                if token is not None:
                    otel_context.detach(token)  # re-attached around each step of the stream
            except Exception as exc:
                _internal(rt, "observe", exc)
                span = None
            if span is None:
                return (yield from func(*args, **kwargs))
            ctx = trace.set_span_in_context(span)
            chunks, t0, ttfc = [], time.perf_counter_ns(), None
            ret = None
            try:
                tok = otel_context.attach(ctx)
                try:
                    gen = func(*args, **kwargs)
                finally:
                    otel_context.detach(tok)
                step, arg = gen.send, None
                while True:
                    tok = otel_context.attach(ctx)
                    try:
                        item = step(arg)
                    except StopIteration as stop:
                        ret = stop.value
                        break
                    finally:
                        otel_context.detach(tok)
                    if ttfc is None:
                        ttfc = time.perf_counter_ns() - t0
                    if len(chunks) < _MAX_CHUNKS:
                        chunks.append(item)
                    try:
                        arg, step = (yield item), gen.send
                    except GeneratorExit:
                        gen.close()
                        raise
                    except BaseException as exc:  # thrown in by the consumer: pass it on
                        step, arg = gen.throw, exc
            except GeneratorExit:
                # the consumer stopped early: record what was streamed so far, not an error
                _end(rt, spec, span, otel_context.attach(ctx), result=_join_chunks(chunks), streamed=True, ttfc_ns=ttfc)
                raise
            except BaseException as exc:
                _end(rt, spec, span, otel_context.attach(ctx), error=exc)
                raise
            _end(rt, spec, span, otel_context.attach(ctx), result=_join_chunks(chunks), streamed=True, ttfc_ns=ttfc)
            return ret

        return gen_wrapper

    if inspect.iscoroutinefunction(func):
        @functools.wraps(func)
        async def async_wrapper(*args, **kwargs):
            rt = _get_runtime()
            if rt is None:
                return await func(*args, **kwargs)
            try:
                span, token = _start(rt, spec, args, kwargs)
            except Exception as exc:
                _internal(rt, "observe", exc)
                return await func(*args, **kwargs)
            try:
                result = await func(*args, **kwargs)
            except BaseException as exc:
                _end(rt, spec, span, token, error=exc)
                raise
            _end(rt, spec, span, token, result=result)
            return result

        return async_wrapper

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        rt = _runtime if _runtime is not None else _get_runtime()
        if rt is None:
            return func(*args, **kwargs)
        try:
            span, token = _start(rt, spec, args, kwargs)
        except Exception as exc:
            _internal(rt, "observe", exc)
            return func(*args, **kwargs)
        try:
            result = func(*args, **kwargs)
        except BaseException as exc:
            _end(rt, spec, span, token, error=exc)
            raise
        _end(rt, spec, span, token, result=result)
        return result

    return wrapper


# --------------------------------------------------------------------------- ids, annotations


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
        _internal(_runtime, "update_current_span", exc)


# --------------------------------------------------------------------------- feedback


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
    flushes first so what was just captured is included."""
    from .collectors.store import TraceStore

    rt = _get_runtime()
    if rt is not None:
        rt.flush(10.0)
        kwargs.setdefault("aggregate", rt.cfg.feedback_aggregate)
        if isinstance(rt.writer.sink, StoreSink) and rt.writer.sink.store is not None:
            return rt.writer.sink.store.training_frame(feedback_name, **kwargs)
    return TraceStore(rt.cfg.store_url if rt else None).training_frame(feedback_name, **kwargs)
