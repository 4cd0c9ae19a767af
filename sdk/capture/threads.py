"""Keeping work fanned out to threads in its request's trace.

OpenTelemetry keeps the current span in a ``contextvars`` context, and a thread started by
``threading.Thread`` or a ``ThreadPoolExecutor`` starts with an empty one: an LLM call made there
opens a new trace instead of joining the request's.  Three ways to carry the context over, from
the narrowest to the widest:

- :func:`in_context` wraps one callable so it runs in (a copy of) the caller's context;
- :class:`ContextThreadPoolExecutor` is a ``ThreadPoolExecutor`` whose ``submit``/``map`` do that
  for every task;
- :func:`propagate_threads` makes every ``ThreadPoolExecutor`` in the process do it (including
  the default executor of ``loop.run_in_executor``); :func:`stop_propagating_threads` undoes it.

``asyncio.to_thread`` and tasks already copy the context and need none of these.
"""

from __future__ import annotations

import contextvars
import functools
import threading
from concurrent.futures import ThreadPoolExecutor

__all__ = ["in_context", "ContextThreadPoolExecutor", "propagate_threads", "stop_propagating_threads"]


def in_context(fn):
    """``fn`` bound to a copy of the current context (the current span and trace): call the result
    from any thread and the spans it opens are children of the span current here and now."""
    ctx = contextvars.copy_context()

    @functools.wraps(fn)
    def run(*args, **kwargs):
        return ctx.copy().run(fn, *args, **kwargs)  # a copy per call: one context cannot be entered twice at once

    return run


class ContextThreadPoolExecutor(ThreadPoolExecutor):
    """A ``ThreadPoolExecutor`` whose tasks run in the context of the code that submitted them."""

    def submit(self, fn, /, *args, **kwargs):
        return super().submit(contextvars.copy_context().run, fn, *args, **kwargs)


_original_submit = ThreadPoolExecutor.submit
_lock = threading.Lock()


def _submit_in_context(self, fn, /, *args, **kwargs):
    return _original_submit(self, contextvars.copy_context().run, fn, *args, **kwargs)


def propagate_threads() -> None:
    """Every ``ThreadPoolExecutor`` (already made or not) runs its tasks in the submitter's context
    from now on.  Idempotent; :func:`stop_propagating_threads` restores the standard behaviour."""
    with _lock:
        ThreadPoolExecutor.submit = _submit_in_context


def stop_propagating_threads() -> None:
    with _lock:
        ThreadPoolExecutor.submit = _original_submit
