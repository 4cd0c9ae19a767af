"""Capture: ``@observe`` turns calls into OpenTelemetry spans; ``feedback()`` records human signals.

    import autometrics
    autometrics.configure(project="support-bot", task="Answer customer questions")

    @autometrics.observe(model="gpt-4o-mini")
    def answer(question: str) -> str: ...

    answer("hi")
    autometrics.feedback(autometrics.current_trace_id(), "thumbs", True)   # inside the call, or
                                                                           # keep the id for later

Each call becomes a span named after the function (LLM-call spans, ``@observe(model=...)``: kind
CLIENT, named ``"chat <model>"``), with input, output, model, token usage, finish reason and
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

Layout (one concern per module; this package re-exports the public API):

* :mod:`~autometrics.capture.settings`: :class:`ObserveConfig` and how arguments / environment resolve into it
* :mod:`~autometrics.capture.runtime`: provider, background writer and their lifecycle
  (``configure``, ``flush``, ``shutdown``, ``stats``); the *only* home of capture's mutable state
* :mod:`~autometrics.capture.content`: call values as GenAI input/output messages and usage attributes
* :mod:`~autometrics.capture.decorator`: ``@observe`` and its sync / async / generator wrappers
* :mod:`~autometrics.capture.streams`: returned streams (generators, openai / litellm streams)
  whose span ends with the stream
* :mod:`~autometrics.capture.spans`: the current span's ids, ``update_current_span``, and
  ``set_input`` / ``set_output`` (what the evaluator sees)
* :mod:`~autometrics.capture.signals`: ``feedback()``, ``feedback_schema()`` and ``training_frame()``
* :mod:`~autometrics.capture.rule_cache`: the feedback rules this process knows (declared,
  or read from the store in the background) and recently sent feedback ids
* :mod:`~autometrics.capture.instrumentation`: ``instrument("openai", "litellm", "dspy")``: the LLM
  clients' own OpenTelemetry instrumentations, their GenAI client spans in the same trees
* :mod:`~autometrics.capture.threads`: work fanned out to threads kept in its request's trace
  (``in_context``, ``ContextThreadPoolExecutor``, ``propagate_threads``)
* :mod:`~autometrics.capture.provider`: the private provider, or the app's own
  (``configure(tracer_provider=...)``) with autometrics' span processor added to it
"""

from __future__ import annotations

from . import runtime as _runtime_module
from .decorator import observe
from .instrumentation import instrument
from .runtime import SCOPE as SCOPE
from .runtime import configure, flush, shutdown, stats
from .runtime import log as log
from .settings import ObserveConfig
from .signals import feedback, feedback_schema, training_frame
from .spans import (
    current_span_id,
    current_trace_id,
    set_input,
    set_output,
    trace_attributes,
    update_current_span,
    update_current_trace,
)
from .threads import ContextThreadPoolExecutor, in_context, propagate_threads, stop_propagating_threads

__all__ = [
    "configure",
    "observe",
    "instrument",
    "current_trace_id",
    "current_span_id",
    "update_current_span",
    "set_input",
    "set_output",
    "feedback",
    "feedback_schema",
    "flush",
    "shutdown",
    "stats",
    "training_frame",
    "ObserveConfig",
    "trace_attributes",
    "update_current_trace",
    "in_context",
    "ContextThreadPoolExecutor",
    "propagate_threads",
    "stop_propagating_threads",
]

# ``log`` and ``SCOPE`` (imported above as explicit re-exports) were module-level names of the
# former single-module capture and stay importable from here.

# Rebound by configure()/shutdown(), so never copied here: reading e.g. ``capture._runtime``
# (as the tests do) is forwarded to the one module that owns the state.
_RUNTIME_STATE = frozenset({"_runtime", "_disabled", "_lock", "_atexit_registered"})


def __getattr__(name: str):
    if name in _RUNTIME_STATE:
        return getattr(_runtime_module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
