"""Streams whose span ends when the stream does, not when the function returns.

Two cases reach here.  A decorated generator (or async generator) *function* is driven step by
step by :func:`drive_generator` / :func:`drive_async_generator`.  A plain function that *returns*
a stream (a generator object, an ``openai.Stream`` / ``AsyncStream``, a LiteLLM
``CustomStreamWrapper``) gets back a stand-in from :func:`wrap_stream`: a generator object is
re-wrapped in a driving generator (so it still is a generator, with ``send``/``throw``/``close``),
a client stream in a proxy that iterates, closes and works as a (async) context manager like the
original and forwards every other attribute (``stream.response``, ...) to it.

Either way each step runs with the observed call's context attached (code inside the stream sees
the call's span as current, the consumer's code between steps does not), every chunk passes
through a :class:`~autometrics.capture.content.StreamText`, and ``finish(acc, error=...,
closed_early=...)`` is called exactly once: at exhaustion, on an error raised by the stream, or
when the consumer closes it (or drops it unread) early, which is recorded as such, not as an error.
"""

from __future__ import annotations

import inspect
import types
import weakref

from opentelemetry import context as otel_context

from .content import StreamText

# Iterators from these packages are LLM streams (chunks with choices[0].delta.content): the
# clients' own (openai.Stream, litellm's CustomStreamWrapper) and client-instrumentation wrappers
# around them (OpenTelemetry / OpenInference instrumentations wrap a returned stream in their own
# object, or in a wrapt proxy whose ``__class__`` is the client's).
_STREAM_PACKAGES = frozenset({"openai", "litellm", "opentelemetry", "openinference"})
_PLAIN = frozenset({str, bytes, dict, list, tuple, int, float, bool, type(None)})


def _from_stream_package(result, t: type) -> bool:
    if any(c.__module__.split(".", 1)[0] in _STREAM_PACKAGES for c in t.__mro__[:-1]):
        return True
    cls = getattr(result, "__class__", t)
    return cls is not t and isinstance(cls, type) and cls.__module__.split(".", 1)[0] in _STREAM_PACKAGES


def stream_kind(result) -> str | None:
    """``"gen"``, ``"agen"``, ``"sync"``, ``"async"``, ``"dual"`` (both protocols) or None."""
    t = type(result)
    if t in _PLAIN:
        return None
    if t is types.GeneratorType:
        return "gen"
    if t is types.AsyncGeneratorType:
        return "agen"
    sync, asyn = hasattr(t, "__next__"), hasattr(t, "__anext__")
    if not (sync or asyn):  # only iterators: a client's pages / lists are returned as they are
        return None
    if issubclass(t, _StreamProxy):  # passed on by an outer observed call: its span ends with the stream too
        return t._am_kind
    if not _from_stream_package(result, t):
        return None
    return "dual" if sync and asyn else "sync" if sync else "async"


def wrap_stream(result, kind: str, ctx, finish):
    """The stand-in for a returned stream (``kind`` from :func:`stream_kind`)."""
    acc = StreamText()
    if isinstance(result, _StreamProxy) or (getattr(result, "gi_code", None) or getattr(result, "ag_code", None)) in _OBSERVED:
        acc.own_usage = False  # an inner observed call records the tokens: the trace's total must not count them twice
    if kind == "gen":
        out = drive_generator(result, ctx, acc, finish)
    elif kind == "agen":
        out = drive_async_generator(result, ctx, acc, finish)
    else:
        return {"sync": _SyncStream, "async": _AsyncStream, "dual": _DualStream}[kind](result, ctx, acc, finish)
    # a generator never iterated and never closed runs no code at all: end its span when it is dropped
    fin = weakref.finalize(out, _abandoned, acc, finish)
    fin.atexit = False
    return out


def mark_observed(fn) -> None:
    """Register the code of a generator (function) that records its own stream (``@observe``'s
    generator wrappers), so an outer call passing its generator on does not count usage twice."""
    _OBSERVED.add(fn.__code__)


def _abandoned(acc: StreamText, finish) -> None:
    if not acc.done:
        finish(acc, closed_early=True)


def drive_generator(gen, ctx, acc: StreamText, finish):
    """Yield what ``gen`` yields (``send``/``throw``/``close`` passed on), then return its value."""
    step, arg = gen.send, None
    try:
        while True:
            tok = otel_context.attach(ctx)
            try:
                item = step(arg)
            except StopIteration as stop:
                ret = stop.value
                break
            finally:
                otel_context.detach(tok)
            acc.add(item)
            try:
                arg, step = (yield item), gen.send
            except GeneratorExit:
                tok = otel_context.attach(ctx)
                try:
                    gen.close()
                finally:
                    otel_context.detach(tok)
                raise
            except BaseException as exc:  # thrown in by the consumer: pass it on
                step, arg = gen.throw, exc
    except GeneratorExit:
        finish(acc, closed_early=True)  # the consumer stopped early: what was streamed so far, not an error
        raise
    except BaseException as exc:
        finish(acc, error=exc)
        raise
    finish(acc)
    return ret


async def drive_async_generator(agen, ctx, acc: StreamText, finish):
    """The async twin of :func:`drive_generator` (``asend``/``athrow``/``aclose`` passed on)."""
    step, arg = agen.asend, None
    try:
        while True:
            tok = otel_context.attach(ctx)
            try:
                item = await step(arg)
            except StopAsyncIteration:
                break
            finally:
                otel_context.detach(tok)
            acc.add(item)
            try:
                arg, step = (yield item), agen.asend
            except GeneratorExit:
                await agen.aclose()
                raise
            except BaseException as exc:  # thrown in by the consumer: pass it on
                step, arg = agen.athrow, exc
    except GeneratorExit:
        finish(acc, closed_early=True)
        raise
    except BaseException as exc:
        finish(acc, error=exc)
        raise
    finish(acc)


_OBSERVED = {drive_generator.__code__, drive_async_generator.__code__}


class _StreamProxy:
    """Common part of the client-stream proxies: state, attribute forwarding, ``close``, and the
    end of the span when the proxy is dropped before the stream ended."""

    __slots__ = ("_am_inner", "_am_ctx", "_am_acc", "_am_finish", "__weakref__")

    def __init__(self, inner, ctx, acc: StreamText, finish):
        self._am_inner = inner
        self._am_ctx = ctx
        self._am_acc = acc
        self._am_finish = finish

    def __getattr__(self, name):  # only for names the proxy itself lacks: the original's attributes
        if name.startswith("_am_"):
            raise AttributeError(name)
        return getattr(self._am_inner, name)

    @property
    def __class__(self):  # isinstance(proxy, openai.Stream) stays true, as for the original
        return self._am_inner.__class__

    def __repr__(self) -> str:
        return repr(self._am_inner)

    def _am_end(self, error: BaseException | None = None, *, exhausted: bool = False) -> None:
        """End the span once: ``exhausted`` (the stream ran to its end) or not (closed early or
        dropped unread, recorded as such), or with the stream's own error."""
        if not self._am_acc.done:
            self._am_finish(self._am_acc, error=error, closed_early=error is None and not exhausted)

    def close(self):
        """Close the original (sync, or a coroutine for ``openai.AsyncStream``) and end the span."""
        try:
            r = self._am_inner.close()
        except BaseException:
            self._am_end()
            raise
        if inspect.isawaitable(r):
            return self._am_await_then_end(r)
        self._am_end()
        return r

    async def _am_await_then_end(self, awaitable):
        try:
            return await awaitable
        finally:
            self._am_end()

    def __del__(self):
        try:
            self._am_end()
        except Exception:
            pass


class _SyncStream(_StreamProxy):
    __slots__ = ()
    _am_kind = "sync"

    def __iter__(self):
        return self

    def __next__(self):
        tok = otel_context.attach(self._am_ctx)
        try:
            item = next(self._am_inner)
        except StopIteration:
            self._am_end(exhausted=True)
            raise
        except BaseException as exc:
            self._am_end(error=exc)
            raise
        finally:
            otel_context.detach(tok)
        self._am_acc.add(item)
        return item

    def __enter__(self):
        if hasattr(type(self._am_inner), "__enter__"):
            self._am_inner.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            if hasattr(type(self._am_inner), "__exit__"):
                return self._am_inner.__exit__(exc_type, exc, tb)
            if hasattr(self._am_inner, "close"):
                self._am_inner.close()
            return None
        finally:
            self._am_end()


class _AsyncStream(_StreamProxy):
    __slots__ = ()
    _am_kind = "async"

    def __aiter__(self):
        return self

    async def __anext__(self):
        tok = otel_context.attach(self._am_ctx)
        try:
            item = await self._am_inner.__anext__()
        except StopAsyncIteration:
            self._am_end(exhausted=True)
            raise
        except BaseException as exc:
            self._am_end(error=exc)
            raise
        finally:
            otel_context.detach(tok)
        self._am_acc.add(item)
        return item

    async def aclose(self):
        try:
            if hasattr(self._am_inner, "aclose"):
                return await self._am_inner.aclose()
            r = self._am_inner.close()
            return (await r) if inspect.isawaitable(r) else r
        finally:
            self._am_end()

    async def __aenter__(self):
        if hasattr(type(self._am_inner), "__aenter__"):
            await self._am_inner.__aenter__()
        return self

    async def __aexit__(self, exc_type, exc, tb):
        try:
            if hasattr(type(self._am_inner), "__aexit__"):
                return await self._am_inner.__aexit__(exc_type, exc, tb)
            await self.aclose()
            return None
        finally:
            self._am_end()


class _DualStream(_SyncStream, _AsyncStream):
    """Both protocols, like LiteLLM's ``CustomStreamWrapper``."""

    __slots__ = ()
    _am_kind = "dual"
