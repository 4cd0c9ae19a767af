"""The ``@observe`` decorator: one span per call of a sync, ``async``, generator or async
generator function.

``_start`` opens the span (name, GenAI request attributes, the redacted input) and makes it
current; ``_end`` records the result or the error and ends it.  The four wrappers differ only in
how they drive the call: streams re-attach the span's context around every step (so the
generator's own code sees the span as current, yet the consumer's code between steps does not),
collect the chunks as the output, and also record an early stop or a thrown-in exception.

The application's call always runs, and its exceptions propagate unchanged: capture's own
failures are caught, counted (``internal_errors``) and the call runs uncaptured.  The wrappers
call ``_start`` / ``_end`` as globals of *this* module, which is where a test replaces them.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from . import runtime
from .content import _input_messages, _llm_result_fields, _output_messages
from .runtime import _get_runtime, _internal, _Runtime


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
        rt = runtime._runtime if runtime._runtime is not None else _get_runtime()
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
