"""The ``@observe`` decorator: one span per call of a sync, ``async``, generator or async
generator function, and per stream such a function returns.

``_start`` opens the span (name and kind, GenAI request attributes, the redacted input) and makes
it current; ``_end`` records the result or the error and ends it.  Streams (generator functions,
and generators / ``openai`` / ``litellm`` streams returned by a plain function) are driven by
:mod:`autometrics.capture.streams`, which calls ``_finish_stream`` when the stream ends, so the
span covers the whole stream and its output is the streamed text.

What the evaluator sees as input and output (the store's ``input`` / ``output`` columns, read by
the training frame, online scoring and the dashboard) is by default the call's arguments and
return value; ``@observe(input=..., output=...)`` selectors and ``set_input`` / ``set_output``
(:mod:`autometrics.capture.spans`) name them explicitly.

The application's call always runs, and its exceptions propagate unchanged: capture's own
failures are caught, counted (``internal_errors``) and the call runs uncaptured.  The wrappers
call ``_start`` / ``_end`` as globals of *this* module, which is where a test replaces them.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from autometrics.metricbank.errors import UserError
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from ..collectors.conventions import close_llm_span, open_llm_span
from .content import StreamText, input_messages, output_messages, provider_from_model, result_fields
from .runtime import Runtime, get_runtime, internal_error
from .spans import CALL_KEY, NOT_SET, ObservedCall
from .streams import drive_async_generator, drive_generator, mark_observed, stream_kind, wrap_stream

# GenAI operations that are a call to a model (CLIENT spans named "{operation} {model}"); the
# agent / tool operations run in-process (INTERNAL spans named "{operation} {function}").
_IN_PROCESS_OPS = frozenset({"execute_tool", "invoke_agent", "create_agent"})


@dataclass
class _Spec:
    name: str
    kind: SpanKind
    attrs: dict  # set when the span starts
    llm_attrs: dict  # an LLM-call span's GenAI attributes, set when it ends (unless it only wraps a client call)
    qualname: str
    auto_name: bool  # "{operation} {model}" may be completed with a model known only at the end
    operation: str | None
    capture_input: bool | None
    capture_output: bool | None
    redact: Callable | None
    input: Callable | None
    output: Callable | None
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


def _bound_arguments(spec: _Spec, args, kwargs) -> dict:
    """What an ``input=`` selector receives: the arguments by parameter name, defaults filled in,
    without ``self`` / ``cls``."""
    if spec.signature is None:
        return {"args": list(args), "kwargs": dict(kwargs)}
    bound = spec.signature.bind(*args, **kwargs)
    bound.apply_defaults()
    d = dict(bound.arguments)
    if spec.skip_first and d:
        d.pop(next(iter(d)))
    return d


def _capture_error(rt: Runtime, spec: _Spec, span, what: str, exc: Exception) -> None:
    """A selector or redactor failed: record nothing for ``what`` (never a wrong or unredacted
    value), say why on the span, count it and log it once a minute per function and reason.
    Only the exception's type is written: its message may quote the very content being kept out."""
    reason = f"{what} not recorded: the {what} selector or redact raised {type(exc).__name__}"
    try:
        span.set_attribute("autometrics.capture.error", reason)
    except Exception:
        pass
    rt.counters.add("internal_errors")
    rt.errors.warning(f"capture:{spec.name}:{what}:{type(exc).__name__}", "autometrics: %s of %s", reason, spec.name)


def _start(rt: Runtime, spec: _Spec, args, kwargs, *, attach: bool = True):
    """Open the call's span; ``attach``: make it current now and return the context token (the
    stream wrappers attach it around each step instead, so they pass False and get None)."""
    # an LLM-call span gets its GenAI attributes when it ends, unless an instrumented client made
    # the call inside it: then that client span is the one LLM-call span, and this one only wraps it
    span = rt.tracer.start_span(spec.name, kind=spec.kind, attributes=spec.attrs)
    call = ObservedCall(spec, span)
    if spec.llm_attrs and span.is_recording():
        open_llm_span(span.get_span_context().span_id)
    if span.is_recording() and rt.cfg.capture_content and spec.capture_input is not False:
        try:
            if spec.input is not None:
                value = spec.input(_bound_arguments(spec, args, kwargs))
            else:
                value = _call_input(spec, args, kwargs)
            if spec.redact is not None:
                value = spec.redact(value)
            span.set_attribute("gen_ai.input.messages", input_messages(value, rt.cfg.max_content_chars))
        except Exception as exc:  # never record a wrong or unredacted input
            _capture_error(rt, spec, span, "input", exc)
    call.ctx = otel_context.set_value(CALL_KEY, call, trace.set_span_in_context(span))
    return call, (otel_context.attach(call.ctx) if attach else None)


def _start_stream(spec: _Spec, args, kwargs):
    """(runtime, call) for an observed generator function, or (runtime, None) to run it uncaptured
    (capture off, or capture's own failure, counted).  Calling a generator function only creates
    the generator and runs none of its code, so nothing needs the span current until the first step."""
    rt = get_runtime()
    if rt is None:
        return None, None
    try:
        return rt, _start(rt, spec, args, kwargs, attach=False)[0]
    except Exception as exc:
        internal_error(rt, "observe", exc)
        return rt, None


def _end(rt: Runtime, call: ObservedCall, token, *, result=None, error: BaseException | None = None) -> None:
    try:
        otel_context.detach(token)
    except Exception:
        pass
    _record(rt, call, result=result, error=error)


def _finish_stream(rt: Runtime, call: ObservedCall, acc: StreamText, *, error: BaseException | None = None,
                   closed_early: bool = False) -> None:
    """End the span of a stream (called once by :mod:`~autometrics.capture.streams`)."""
    if acc.done:
        return
    acc.done = True
    _record(rt, call, error=error, stream=acc, closed_early=closed_early)


def _record(rt: Runtime, call: ObservedCall, *, result=None, error: BaseException | None = None, stream: StreamText | None = None,
            closed_early: bool = False) -> None:
    spec, span = call.spec, call.span
    try:
        if span.is_recording():
            content = rt.cfg.capture_content
            if stream is not None:
                span.set_attribute("gen_ai.request.stream", True)
                if stream.first_ns is not None and getattr(span, "start_time", None):
                    span.set_attribute("gen_ai.response.time_to_first_chunk", (stream.first_ns - span.start_time) / 1e9)
            if error is not None:
                span.set_attribute("error.type", type(error).__qualname__)
                span.record_exception(error)
                span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"[:500]))
                if content and call.output is not NOT_SET:
                    _record_output(rt, call, call.output, None, explicit=True)
            else:
                raw, attrs, finish = stream.result() if stream is not None else result_fields(result)
                if closed_early:
                    span.set_attribute("autometrics.stream.closed_early", True)
                    finish = finish or "cancelled"  # unless the model had already said why it stopped
                if finish:
                    attrs["gen_ai.response.finish_reasons"] = (finish,)
                if attrs:
                    span.set_attributes(attrs)
                if content:
                    if call.output is not NOT_SET:
                        _record_output(rt, call, call.output, finish, explicit=True)
                    elif spec.capture_output is not False:
                        # the selector sees the return value itself (a stream: its joined text)
                        selected = raw if stream is not None else result
                        if spec.output is not None:
                            try:
                                selected = spec.output(selected)
                            except Exception as exc:
                                _capture_error(rt, spec, span, "output", exc)
                                selected = NOT_SET
                        elif stream is None:
                            selected = raw
                        if selected is not NOT_SET:
                            _record_output(rt, call, selected, finish, explicit=False)
            if content and call.input is not NOT_SET:
                try:
                    value = call.input if spec.redact is None else spec.redact(call.input)
                    span.set_attribute("gen_ai.input.messages", input_messages(value, rt.cfg.max_content_chars))
                except Exception as exc:
                    _capture_error(rt, spec, span, "input", exc)
            if spec.llm_attrs:
                if close_llm_span(span.get_span_context().span_id):
                    span.update_name(spec.qualname)  # one LLM-call span per call: the client's
                    span.set_attribute("autometrics.wraps_llm_call", True)
                elif "gen_ai.request.model" in spec.llm_attrs and (span.attributes or {}).get("gen_ai.request.model"):
                    # the call named its model itself (update_current_span(model=...)): that one stays
                    span.set_attributes({k: v for k, v in spec.llm_attrs.items() if k != "gen_ai.request.model"})
                else:
                    span.set_attributes(spec.llm_attrs)
            if spec.auto_name and span.name == spec.name:
                model = (span.attributes or {}).get("gen_ai.request.model")
                if isinstance(model, str) and model:  # the model became known inside the call
                    span.update_name(f"{spec.operation} {model}")
    except Exception as exc:
        rt.counters.add("internal_errors")
        rt.errors.warning("end", "autometrics: could not record the result of %s: %s: %s", spec.name, type(exc).__name__, exc)
    finally:
        try:
            span.end()
        except Exception:
            rt.counters.add("internal_errors")


def _record_output(rt: Runtime, call: ObservedCall, value, finish: str | None, *, explicit: bool) -> None:
    spec = call.spec
    try:
        if explicit or spec.output is not None:  # a named value may still be a response object
            value = result_fields(value)[0]
        if spec.redact is not None:
            value = spec.redact(value)
    except Exception as exc:  # never record an unredacted output
        _capture_error(rt, spec, call.span, "output", exc)
        return
    call.span.set_attribute("gen_ai.output.messages", output_messages(value, rt.cfg.max_content_chars, finish))


def _returned(rt: Runtime, call: ObservedCall, token, result):
    """End the span now, or, for a returned stream, hand back a stand-in that ends it with the stream."""
    try:
        kind = stream_kind(result) if call.span.is_recording() else None
        if kind is not None:
            proxy = wrap_stream(result, kind, call.ctx, functools.partial(_finish_stream, rt, call))
            otel_context.detach(token)
            return proxy
    except Exception as exc:
        internal_error(rt, "stream capture", exc)
    _end(rt, call, token, result=result)
    return result


def _pick(name: str):
    def pick(value):
        return value[name] if isinstance(value, Mapping) else getattr(value, name)

    pick.__qualname__ = f"pick[{name!r}]"
    return pick


def _selector(value, what: str, qualname: str, sig: inspect.Signature | None) -> Callable | None:
    if value is None or callable(value):
        return value
    if not isinstance(value, str):
        raise TypeError(f"@observe({what}=...) on {qualname}() must be a name (str) or a function, not {type(value).__name__}")
    if what == "input" and sig is not None:
        params = sig.parameters
        if value not in params and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            raise UserError(f"@observe(input={value!r}) on {qualname}(): it has no parameter {value!r} (parameters: "
                             f"{', '.join(params) or 'none'}); name one of them, or pass input=lambda args: ...")
    return _pick(value)


def observe(
    func: Callable | None = None,
    *,
    name: str | None = None,
    model: str | None = None,
    operation: str | None = None,
    provider: str | None = None,
    input: Callable | str | None = None,
    output: Callable | str | None = None,
    capture_input: bool | None = None,
    capture_output: bool | None = None,
    redact: Callable | None = None,
    attributes: dict | None = None,
):
    """Decorate a function (sync, ``async``, generator or async generator) so each call is a span.

    **What the evaluator sees.**  The outermost observed span of a trace gives the training
    frame's (and online scoring's, and the dashboard's) ``input`` and ``output``.  By default
    these are the call's arguments and return value; name them when the function returns more
    than the answer::

        @autometrics.observe(output="answer")                  # or output=lambda r: r["answer"]
        def handle(request):
            text = answer(request.question)
            return {"answer": text, "trace_id": autometrics.current_trace_id()}

        @autometrics.observe(input=lambda args: args["request"].question, output="answer")
        def handle(request): ...

    ``input``: a parameter name, or a function of the call's arguments by parameter name
    (defaults filled in, ``self`` left out).  ``output``: a key / attribute name (a dict key, a
    ``dspy.Prediction`` field), or a function of the return value (of the joined text for a
    stream).  Inside the call, :func:`set_input` / :func:`set_output` override both.  A selector
    that fails records nothing for that side (the reason is on the span and logged).

    **What is read from the return value.**  OpenAI / LiteLLM chat completions give their message
    text, ``usage``, response model and id, and finish reason; a ``dspy.Prediction`` its single
    output field (or all its fields as JSON); a plain string has no finish reason.  A returned
    stream (a generator, ``openai.Stream`` / ``AsyncStream``, LiteLLM ``CustomStreamWrapper``)
    comes back wrapped so that the span ends when the stream does, with the joined text of the
    deltas as output and the final chunk's usage; iteration, ``close()``, ``with`` and attribute
    access behave as on the original.  A stream closed early is recorded with
    ``autometrics.stream.closed_early`` and finish reason ``cancelled``, not as an error.

    **Span.**  ``model`` / ``operation`` (e.g. ``"chat"``, the default once a model is given)
    make this an LLM-call span: kind CLIENT, named ``"{operation} {model}"`` as the GenAI
    conventions say, with ``gen_ai.request.model`` / ``gen_ai.operation.name`` and
    ``gen_ai.provider.name`` (``provider=``, or a ``"provider/model"`` prefix).  Other spans are
    INTERNAL and named after the function.  ``name`` overrides the span name; a span not named
    after its function carries it as ``code.function.name`` (``module.qualname``).

    ``capture_input=False`` / ``capture_output=False``: record no content for this function
    (an explicit ``set_input`` / ``set_output`` still records); ``redact``: a function applied to
    the input and to the output before they are recorded (e.g. masking e-mail addresses).  The
    function's own exceptions propagate unchanged (and are recorded).
    """
    if func is None:
        return lambda f: observe(f, name=name, model=model, operation=operation, provider=provider, input=input,
                                 output=output, capture_input=capture_input, capture_output=capture_output,
                                 redact=redact, attributes=attributes)
    try:
        sig = inspect.signature(func)
        params = list(sig.parameters)
    except (TypeError, ValueError):
        sig, params = None, []
    qualname = (getattr(func, "__qualname__", None) or getattr(func, "__name__", "call")).split("<locals>.")[-1]
    if input is not None and capture_input is False:
        raise UserError(f"@observe on {qualname}(): input= and capture_input=False contradict each other; drop one")
    if output is not None and capture_output is False:
        raise UserError(f"@observe on {qualname}(): output= and capture_output=False contradict each other; drop one")
    in_sel = _selector(input, "input", qualname, sig)
    out_sel = _selector(output, "output", qualname, sig)

    op = operation or ("chat" if model is not None else None)
    kind, auto_name = SpanKind.INTERNAL, False
    if op is None:
        span_name = qualname
    elif op in _IN_PROCESS_OPS:
        span_name = f"{op} {qualname}"
    else:
        kind, auto_name = SpanKind.CLIENT, name is None and model is None
        span_name = f"{op} {model}" if model is not None else op
    attrs = {}
    if (name or span_name) != qualname:  # the span is not named after the function: say which it is
        module = getattr(func, "__module__", None)
        attrs["code.function.name"] = f"{module}.{qualname}" if module else qualname
    llm_attrs = {}
    if op:
        llm_attrs["gen_ai.operation.name"] = op
    if model:
        llm_attrs["gen_ai.request.model"] = model
    provider = provider or provider_from_model(model)
    if provider:
        llm_attrs["gen_ai.provider.name"] = provider
    if kind != SpanKind.CLIENT:  # agent / tool operations: nothing to wait for
        attrs.update(llm_attrs)
        llm_attrs = {}
    if attributes:
        attrs.update(attributes)
    spec = _Spec(name or span_name, kind, attrs, llm_attrs, qualname, auto_name, op, capture_input, capture_output, redact,
                 in_sel, out_sel, sig, bool(params) and params[0] in ("self", "cls"))

    if inspect.isasyncgenfunction(func):
        @functools.wraps(func)
        async def agen_wrapper(*args, **kwargs):
            rt, call = _start_stream(spec, args, kwargs)
            if call is None:
                async for item in func(*args, **kwargs):
                    yield item
                return
            driver = drive_async_generator(func(*args, **kwargs), call.ctx, StreamText(), functools.partial(_finish_stream, rt, call))
            step, arg = driver.asend, None
            while True:
                try:
                    item = await step(arg)
                except StopAsyncIteration:
                    return
                try:
                    arg, step = (yield item), driver.asend
                except GeneratorExit:
                    await driver.aclose()
                    raise
                except BaseException as exc:  # thrown in by the consumer: pass it on
                    step, arg = driver.athrow, exc

        mark_observed(agen_wrapper)
        return agen_wrapper

    if inspect.isgeneratorfunction(func):
        @functools.wraps(func)
        def gen_wrapper(*args, **kwargs):
            rt, call = _start_stream(spec, args, kwargs)
            if call is None:
                return (yield from func(*args, **kwargs))
            return (yield from drive_generator(func(*args, **kwargs), call.ctx, StreamText(), functools.partial(_finish_stream, rt, call)))

        mark_observed(gen_wrapper)
        return gen_wrapper

    if inspect.iscoroutinefunction(func):
        @functools.wraps(func)
        async def async_wrapper(*args, **kwargs):
            rt = get_runtime()
            if rt is None:
                return await func(*args, **kwargs)
            try:
                call, token = _start(rt, spec, args, kwargs)
            except Exception as exc:
                internal_error(rt, "observe", exc)
                return await func(*args, **kwargs)
            try:
                result = await func(*args, **kwargs)
            except BaseException as exc:
                _end(rt, call, token, error=exc)
                raise
            return _returned(rt, call, token, result)

        return async_wrapper

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        rt = get_runtime()
        if rt is None:
            return func(*args, **kwargs)
        try:
            call, token = _start(rt, spec, args, kwargs)
        except Exception as exc:
            internal_error(rt, "observe", exc)
            return func(*args, **kwargs)
        try:
            result = func(*args, **kwargs)
        except BaseException as exc:
            _end(rt, call, token, error=exc)
            raise
        return _returned(rt, call, token, result)

    return wrapper

