"""Capture runtime: the process-wide tracer provider and span/feedback writer, and their lifecycle
(``configure`` / ``flush`` / ``shutdown`` / ``stats``, plus the interpreter-exit hook).

This module is the single owner of capture's mutable state: the active :class:`Runtime`
(``_runtime``), the ``_disabled`` switch, the lock that serialises (re)configuration and the
atexit registration flag.  The other modules read that state as ``runtime._runtime`` (an
attribute of this module, never a copy), so ``configure()`` immediately changes what
``@observe``, ``feedback()`` and friends use; ``autometrics.capture._runtime`` forwards here too.

Backends are only reached from the writer's background thread; a ``Runtime`` counts and
rate-limits its own failures (``stats()``), and ``flush``/``shutdown`` are bounded in time, so
a down store, collector or Langfuse can neither fail nor hold up the application.
"""

from __future__ import annotations

import atexit
import threading
import time

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, TraceIdRatioBased

from ..collectors.exporter import BatchWriter, CollectorSink, Counters, RateLimitedLog, StoreSink, StoreSpanProcessor
from .settings import ObserveConfig, langfuse_wanted, log, resolve_config

SCOPE = "autometrics"


class Runtime:
    """Everything one configure() built: provider, writer, optional Langfuse export."""

    def __init__(self, cfg: ObserveConfig, store=None):
        self.cfg = cfg
        self.counters = Counters()
        self.errors = RateLimitedLog(log)
        if cfg.collector_url:
            sink = CollectorSink(cfg.collector_url, cfg.api_key)
        else:
            sink = StoreSink(cfg.store_url, store=store)
        from ..collectors.spool import Spool

        # failed batches wait in the durable spool and are replayed (configure(spool=..., spool_max_mb=...))
        self.writer = BatchWriter(sink, max_queue=cfg.queue_size, batch_size=cfg.batch_size, interval=cfg.flush_interval,
                                  counters=self.counters, errors=self.errors,
                                  spool=Spool.from_config(cfg.spool, cfg.spool_max_mb))
        self.store_processor = StoreSpanProcessor(self.writer)
        self._forwarder = None
        self._root_sampler = None  # ours when we built the provider: what trace_recorded() asks
        if cfg.tracer_provider is not None:
            # the app's own provider makes our spans (one tree in its APM and the store): see capture/provider.py
            from .provider import StoreForwarder

            try:
                self._forwarder = StoreForwarder.attach(cfg.tracer_provider, self.store_processor, cfg.project, cfg.task)
            except ValueError:
                self.writer.shutdown(0.1)
                raise
            self.provider = cfg.tracer_provider
        else:
            attrs = {"service.name": cfg.project, "autometrics.project": cfg.project}
            if cfg.task:
                attrs["autometrics.task"] = cfg.task
            root_sampler = ALWAYS_ON if cfg.sample_rate >= 1.0 else TraceIdRatioBased(cfg.sample_rate)
            self._root_sampler = root_sampler
            self.provider = TracerProvider(resource=Resource.create(attrs), sampler=ParentBased(root_sampler))
            self.provider.add_span_processor(self.store_processor)
        self.langfuse = None
        if langfuse_wanted(cfg.langfuse):
            try:
                from ..collectors.langfuse_client import LangfuseClient

                self.langfuse = LangfuseClient(tracer_provider=self.provider, export_spans=True, counters=self.counters,
                                               errors=self.errors)
            except Exception as exc:
                self.errors.warning("langfuse-init", "autometrics: Langfuse export disabled: %s: %s", type(exc).__name__, exc)
        self.tracer = self.provider.get_tracer(SCOPE)

    def trace_recorded(self, trace_id: str) -> bool | None:
        """Whether this process records the trace ``trace_id`` (32 hex digits): True when a sampled
        span of it started here or our sampler keeps every trace; False when our head sampler drops
        it (its decision is a function of the trace id, so it is asked again); None when this process
        cannot tell (an app's own provider and sampler, or an id that is not an OpenTelemetry one)."""
        try:
            tid = int(trace_id, 16)
        except (TypeError, ValueError):
            return None
        if self.store_processor.saw_trace(tid):
            return True
        if self._root_sampler is None:
            return None
        # the root sampler's own decision for this id (a root span here is recorded exactly when it says so)
        return self._root_sampler.should_sample(None, tid, "feedback").decision.is_sampled()

    def flush(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        ok = self.writer.flush(timeout)
        if self.langfuse is not None:
            ok = self.langfuse.flush(max(0.1, deadline - time.monotonic())) and ok
        return ok

    def shutdown(self, timeout: float) -> bool:
        """Flush and stop, all within ``timeout`` (a down backend cannot hold the exit)."""
        deadline = time.monotonic() + timeout
        if self._forwarder is not None:  # the app's spans stop coming before the writer closes
            self._forwarder.detach(self.store_processor)
        ok = self.flush(timeout)
        self.writer.shutdown(0.2)

        def _stop():
            try:
                if self.langfuse is not None:
                    self.langfuse.shutdown(max(0.1, deadline - time.monotonic()))
                if self._forwarder is None:  # an app's provider is the app's to shut down
                    self.provider.shutdown()
            except Exception:
                pass

        t = threading.Thread(target=_stop, name="autometrics-shutdown", daemon=True)
        t.start()
        t.join(max(0.1, deadline - time.monotonic()))
        return ok


# The module state (see the module docstring): rebound only by the functions below.
_runtime: Runtime | None = None
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
    spool: str | bool | None = None,
    spool_max_mb: float | None = None,
    feedback_errors: str | None = None,
    tracer_provider=None,
    store=None,
) -> ObserveConfig:
    """Set up capture (replacing an earlier configuration, whose queue is flushed first).

    Never contacts a backend here: stores, collectors and Langfuse are reached from the
    background thread, so a down backend cannot fail or slow the application's start.
    Raises ``ValueError`` only for an invalid argument (e.g. ``sample_rate=2``).
    ``store``: an already-open :class:`~autometrics.collectors.store.TraceStore` to write to.
    ``spool``: path of the durable local spool that keeps spans and feedback while the store or
    collector is unreachable (default ``spool.db`` in the data folder; ``False``: off);
    ``spool_max_mb`` bounds it.  ``feedback_errors``: ``"return"`` (default: a rejected
    feedback() returns None, logged and counted per reason) or ``"raise"`` (``ValueError``).
    ``tracer_provider``: the application's own TracerProvider, so ``@observe`` spans and the
    app's spans form one tree in both the app's exporters and the trace store.
    """
    global _runtime, _disabled, _atexit_registered
    cfg = resolve_config(
        store_url=store_url, collector_url=collector_url, api_key=api_key, project=project, task=task,
        sample_rate=sample_rate, langfuse=langfuse, capture_content=capture_content,
        max_content_chars=max_content_chars, queue_size=queue_size, flush_interval=flush_interval,
        feedback_aggregate=feedback_aggregate, enabled=enabled, spool=spool, spool_max_mb=spool_max_mb,
        feedback_errors=feedback_errors, tracer_provider=tracer_provider,
    )
    with _lock:
        old, _runtime = _runtime, None
        if old is not None:
            old.shutdown(5.0)
        _disabled = not cfg.enabled
        if cfg.enabled:
            _runtime = Runtime(cfg, store=store)
        if not _atexit_registered:
            atexit.register(_at_exit)
            _atexit_registered = True
    return cfg


def get_runtime() -> Runtime | None:
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


def internal_error(rt: Runtime | None, where: str, exc: Exception) -> None:
    """Count and (rate-limited) log a failure of capture's own code; never raises."""
    try:
        if rt is not None:
            rt.counters.add("internal_errors")
            rt.errors.warning(where, "autometrics: %s failed (the call ran uncaptured): %s: %s", where, type(exc).__name__, exc)
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
    """Counters since configure(), per item kind (``span_*``, ``feedback_*``): ``queued``;
    ``written`` (committed by the store / acknowledged by the collector, replays included);
    ``spooled`` (kept in the durable spool while the backend was down) and ``replayed`` (written
    from it later); ``lost_spool_full``; ``rejected`` (refused for good by the backend);
    ``dropped`` (in-memory queue full); ``failed`` (neither written nor spooled: no spool).
    Also ``write_errors``, ``store_reopened`` (the SQLite file was deleted or replaced under the
    writer), ``spool_errors``, ``internal_errors``, Langfuse's ``langfuse_*`` (``langfuse_spans_lost``,
    ``langfuse_span_batches_lost``, ``langfuse_scores_sent``, ``langfuse_scores_retried``,
    ``langfuse_scores_lost``, ...: see ``autometrics.collectors.langfuse_client``), ``feedback_orphaned``
    (feedback for a trace the head sampler did not record: stored, never sent to Langfuse), and the gauges ``queue_size``
    and ``spool_pending`` (items waiting in the spool for this backend)."""
    rt = _runtime
    if rt is None:
        return {}
    out = rt.counters.snapshot()
    out["queue_size"] = rt.writer.qsize()
    out["spool_pending"] = rt.writer.spool_pending()
    return out
