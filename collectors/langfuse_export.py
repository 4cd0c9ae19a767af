"""Optional export of spans and feedback to Langfuse, through the real ``langfuse`` SDK (5.x).

Why through the SDK: it owns Langfuse's OTLP endpoint (``/api/public/otel/v1/traces``, gzip
protobuf, its auth and ingestion headers) and its score API (``POST /api/public/scores``), so
we inherit its batching, retries and format changes instead of re-implementing them.

Why a private tracer provider: by default the SDK adds its span processor to the global
TracerProvider (or installs one), which would send *all* the application's spans to Langfuse.
We hand it the SDK-private provider that ``@observe`` uses instead, so only our spans go to
Langfuse and the application's own tracing is unaffected.

Settings come from the SDK's usual environment variables: ``LANGFUSE_PUBLIC_KEY``,
``LANGFUSE_SECRET_KEY``, ``LANGFUSE_BASE_URL`` (or ``LANGFUSE_HOST``).  Keys are never logged.

Caveat: the langfuse SDK keeps one client state per public key in a process; if the
application already created a ``Langfuse`` client with the same key, that one's tracer provider
is used and we log a warning (our spans then follow the application's Langfuse setup).

Losses are counted, not spooled: the SDK sends spans and scores from its own threads, retries
them itself and then drops them with a log line.  We wrap the exporter of its span processor and
its score uploader, so a batch the SDK gave up on is counted (``langfuse_spans_lost``,
``langfuse_span_batches_lost``, ``langfuse_scores_lost``; delivered: ``langfuse_spans_exported``,
``langfuse_scores_sent``) in ``autometrics.stats()``.  Those hooks reach into SDK internals
(checked against langfuse 5.x); when a future SDK moves them, counting is off with one warning
and the export itself keeps working.
"""

from __future__ import annotations

import os
import threading

__all__ = ["LangfuseExport", "langfuse_configured", "SCORE_DATA_TYPES"]

# feedback kind -> Langfuse score dataType
SCORE_DATA_TYPES = {
    "thumbs": "BOOLEAN",
    "likert": "NUMERIC",
    "numeric": "NUMERIC",
    "behavioral": "NUMERIC",
    "categorical": "CATEGORICAL",
    "correction": "CORRECTION",
}


def langfuse_configured() -> bool:
    return bool(os.environ.get("LANGFUSE_PUBLIC_KEY") and os.environ.get("LANGFUSE_SECRET_KEY"))


def _export_filter(span) -> bool:
    """Our spans always; others only by the SDK's own default rule (GenAI/LLM spans)."""
    from langfuse.span_filter import is_default_export_span

    scope = span.instrumentation_scope.name if span.instrumentation_scope else None
    return scope == "autometrics" or is_default_export_span(span)


class LangfuseExport:
    """Adds the Langfuse span processor to ``provider`` and turns feedback into Langfuse scores."""

    def __init__(self, provider, *, counters=None, errors=None, public_key: str | None = None, secret_key: str | None = None,
                 base_url: str | None = None, timeout: int | None = None):
        from langfuse import Langfuse

        self.counters = counters
        self.errors = errors
        self.client = Langfuse(
            public_key=public_key,
            secret_key=secret_key,
            base_url=base_url,
            timeout=timeout,
            tracer_provider=provider,
            should_export_span=_export_filter,
        )
        res = getattr(self.client, "_resources", None)
        if res is None:
            raise RuntimeError("langfuse client is disabled (missing LANGFUSE_PUBLIC_KEY / LANGFUSE_SECRET_KEY)")
        if getattr(res, "tracer_provider", provider) is not provider and errors is not None:
            errors.warning("langfuse-shared", "autometrics: a Langfuse client with this public key already exists in the process; "
                           "spans follow its tracer provider")
        self.counting = _count_losses(res, self)
        if not self.counting and errors is not None:
            errors.warning("langfuse-counting", "autometrics: this langfuse SDK version hides its exporter/score uploader; "
                           "Langfuse losses are not counted in autometrics.stats()")

    def _lost(self, what: str, n: int, exc: BaseException | None) -> None:
        if self.counters is not None:
            self.counters.add(f"langfuse_{what}_lost", n)
            if what == "spans":
                self.counters.add("langfuse_span_batches_lost")
        if self.errors is not None:
            self.errors.warning(f"langfuse-lost-{what}", "autometrics: Langfuse did not take %d %s (the SDK gave up after its "
                                "retries)%s; see autometrics.stats()", n, what,
                                f": {type(exc).__name__}: {str(exc)[:200]}" if exc is not None else "")

    def score(self, row: dict) -> None:
        """Queue one feedback row as a Langfuse score (the SDK sends it from its own thread)."""
        try:
            dtype = SCORE_DATA_TYPES.get(row["kind"], "NUMERIC")
            value = row["value"] if row.get("value") is not None else row.get("value_text")
            self.client.create_score(
                name=row["name"],
                value=value,
                trace_id=row["trace_id"],
                observation_id=row.get("span_id"),
                score_id=row["id"],
                data_type=dtype,
                comment=row.get("comment"),
                metadata={"source": row.get("source"), "kind": row["kind"]},
            )
            if self.counters is not None:
                self.counters.add("langfuse_scores_queued")
        except Exception as exc:
            if self.counters is not None:
                self.counters.add("langfuse_errors")
            if self.errors is not None:
                self.errors.warning("langfuse-score", "autometrics: Langfuse score not queued: %s: %s", type(exc).__name__, exc)

    def flush(self, timeout: float = 10.0) -> bool:
        """Flush the SDK, bounded by ``timeout`` (its own flush has no time limit when Langfuse is down)."""
        t = threading.Thread(target=self._safe, args=(self.client.flush,), daemon=True, name="autometrics-langfuse-flush")
        t.start()
        t.join(timeout)
        return not t.is_alive()

    def shutdown(self, timeout: float = 5.0) -> bool:
        t = threading.Thread(target=self._safe, args=(self.client.shutdown,), daemon=True, name="autometrics-langfuse-shutdown")
        t.start()
        t.join(timeout)
        return not t.is_alive()

    def _safe(self, fn) -> None:
        try:
            fn()
        except Exception as exc:
            if self.errors is not None:
                self.errors.warning("langfuse-flush", "autometrics: Langfuse flush failed: %s: %s", type(exc).__name__, exc)


class _CountingSpanExporter:
    """Wraps the Langfuse span processor's exporter: counts each batch it delivered or gave up on
    (the OTLP exporter returns FAILURE after its own retries; nothing else reports that loss)."""

    def __init__(self, inner, export: LangfuseExport):
        self.inner = inner
        self.export_owner = export  # re-pointed when a later configure() reuses the SDK's state

    def export(self, spans):
        from opentelemetry.sdk.trace.export import SpanExportResult

        n = len(spans)
        try:
            result = self.inner.export(spans)
        except Exception as exc:
            self.export_owner._lost("spans", n, exc)
            raise
        if result == SpanExportResult.SUCCESS:
            if self.export_owner.counters is not None:
                self.export_owner.counters.add("langfuse_spans_exported", n)
        else:
            self.export_owner._lost("spans", n, None)
        return result

    def shutdown(self, timeout_millis: float = 30_000):
        import inspect

        if "timeout_millis" in inspect.signature(self.inner.shutdown).parameters:
            return self.inner.shutdown(timeout_millis=timeout_millis)
        return self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _count_losses(res, export: LangfuseExport) -> bool:
    """Install the counting hooks on the SDK's span exporter and score uploader (see the module
    docstring); True when both were found."""
    spans_ok = scores_ok = False
    try:
        tp = getattr(res, "tracer_provider", None)
        for proc in getattr(getattr(tp, "_active_span_processor", None), "_span_processors", ()):
            bp = getattr(proc, "_batch_processor", None)
            if type(proc).__name__ != "LangfuseSpanProcessor" or getattr(bp, "_exporter", None) is None:
                continue
            if isinstance(bp._exporter, _CountingSpanExporter):
                bp._exporter.export_owner = export
            else:
                bp._exporter = _CountingSpanExporter(bp._exporter, export)
            spans_ok = True
        for consumer in getattr(res, "_score_consumers", ()):
            holder = getattr(consumer, "_autometrics_counting", None)
            if holder is not None:
                holder[0] = export
            elif callable(getattr(consumer, "_upload_batch", None)):
                holder = consumer._autometrics_counting = [export]
                consumer._upload_batch = _counting_upload(consumer._upload_batch, holder)
            else:
                continue
            scores_ok = True
    except Exception:
        return False
    return spans_ok and scores_ok


def _counting_upload(upload, holder: list):
    """The score consumer's ``_upload_batch`` (retries inside, raises when it gives up), counted."""

    def _upload_batch(batch):
        try:
            out = upload(batch)
        except Exception as exc:
            holder[0]._lost("scores", len(batch), exc)
            raise  # the SDK logs it as before
        if holder[0].counters is not None:
            holder[0].counters.add("langfuse_scores_sent", len(batch))
        return out

    return _upload_batch


class _OtlpForwardSink:
    """Posts accepted OTLP requests to Langfuse's OTLP endpoint (gzip protobuf, Basic auth)."""

    def __init__(self, base_url: str, public_key: str, secret_key: str, timeout: float):
        import base64

        self.endpoint = base_url.rstrip("/") + "/api/public/otel/v1/traces"
        token = base64.b64encode(f"{public_key}:{secret_key}".encode()).decode("ascii")
        self._headers = {"Authorization": "Basic " + token, "x-langfuse-public-key": public_key,
                         "x-langfuse-ingestion-version": "4", "Content-Type": "application/x-protobuf",
                         "Content-Encoding": "gzip"}
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"Langfuse {self.endpoint}"

    def write(self, requests, _feedback) -> None:
        import gzip

        import httpx
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        merged = ExportTraceServiceRequest()
        for r in requests:
            merged.resource_spans.extend(r.resource_spans)
        resp = httpx.post(self.endpoint, content=gzip.compress(merged.SerializeToString(), 1), headers=self._headers,
                          timeout=self.timeout)
        if resp.status_code >= 300:
            raise RuntimeError(f"Langfuse answered HTTP {resp.status_code}")


class LangfuseForwarder:
    """Collector side of the Langfuse export: spans received over OTLP are forwarded as they came
    (Langfuse ingests standard OTLP), feedback becomes scores through the SDK's ``create_score``.

    The SDK client gets its own empty TracerProvider, so it installs nothing global in the
    collector process.  Forwarding runs from a bounded queue: Langfuse being down never delays
    or fails the collector's acknowledgements (which only depend on the trace store).
    """

    def __init__(self, *, counters=None, errors=None, public_key: str | None = None, secret_key: str | None = None,
                 base_url: str | None = None, timeout: float = 10.0):
        from autometrics.collectors.exporter import BatchWriter, Counters
        from langfuse import Langfuse
        from opentelemetry.sdk.trace import TracerProvider

        public_key = public_key or os.environ.get("LANGFUSE_PUBLIC_KEY")
        secret_key = secret_key or os.environ.get("LANGFUSE_SECRET_KEY")
        base_url = base_url or os.environ.get("LANGFUSE_BASE_URL") or os.environ.get("LANGFUSE_HOST") or "https://cloud.langfuse.com"
        if not (public_key and secret_key):
            raise RuntimeError("LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY are required for the Langfuse export")
        self._provider = TracerProvider()
        self.scores = LangfuseExport(self._provider, counters=counters, errors=errors, public_key=public_key,
                                     secret_key=secret_key, base_url=base_url)
        self._langfuse_cls = Langfuse
        self.counters = Counters()
        self.writer = BatchWriter(_OtlpForwardSink(base_url, public_key, secret_key, timeout), max_queue=2_000, batch_size=50,
                                  interval=1.0, counters=self.counters, errors=errors, name="collector-langfuse")

    def forward_spans(self, request) -> None:
        self.writer.put("span", request)

    def forward_feedback(self, rows: list[dict]) -> None:
        for r in rows:
            self.scores.score(r)

    def stats(self) -> dict:
        c = self.counters.snapshot()
        return {"otlp_requests_forwarded": c.get("span_written", 0), "otlp_requests_dropped": c.get("span_dropped", 0),
                "otlp_requests_failed": c.get("span_failed", 0)}

    def flush(self, timeout: float = 10.0) -> bool:
        return self.writer.flush(timeout) and self.scores.flush(timeout)

    def shutdown(self) -> None:
        self.writer.shutdown(5.0)
        self.scores.shutdown(5.0)
