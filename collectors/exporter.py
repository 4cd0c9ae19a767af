"""Getting spans and feedback out of the application without ever slowing or breaking it.

:class:`BatchWriter` is a bounded in-memory queue drained by one daemon thread that hands
batches to a *sink* (the trace store, or a remote collector).  The application thread only
appends to the queue: when the queue is full the item is dropped and counted, when the sink
fails the batch is retried a little, then dropped and counted, and the failure is logged at
most once a minute per kind.  Nothing here raises into the caller.

:class:`StoreSpanProcessor` is the OpenTelemetry ``SpanProcessor`` that feeds a BatchWriter.
"""

from __future__ import annotations

import collections
import gzip
import http.client
import json
import logging
import threading
import time
import urllib.parse

from opentelemetry.sdk.trace import SpanProcessor

log = logging.getLogger("autometrics.collectors")

__all__ = ["BatchWriter", "StoreSpanProcessor", "StoreSink", "CollectorSink", "RateLimitedLog", "Counters"]


class RateLimitedLog:
    """Log a recurring failure at most once per ``interval`` seconds per key, with a count of
    the suppressed repeats (a dead backend must not flood the application's logs)."""

    def __init__(self, logger: logging.Logger = log, interval: float = 60.0):
        self.logger = logger
        self.interval = interval
        self._last: dict[str, float] = {}
        self._suppressed: collections.Counter = collections.Counter()
        self._lock = threading.Lock()

    def warning(self, key: str, msg: str, *args) -> None:
        try:
            now = time.monotonic()
            with self._lock:
                last = self._last.get(key)
                if last is not None and now - last < self.interval:
                    self._suppressed[key] += 1
                    return
                self._last[key] = now
                n = self._suppressed.pop(key, 0)
            if n:
                msg += f" ({n} similar messages suppressed)"
            self.logger.warning(msg, *args)
        except Exception:  # logging itself must not raise into the app either
            pass


class Counters:
    """Thread-safe counters, read by ``autometrics.stats()`` and the collector's /health."""

    def __init__(self):
        self._c: collections.Counter = collections.Counter()
        self._lock = threading.Lock()

    def add(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._c[key] += n

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._c)


class BatchWriter:
    """Bounded queue of ``("span", ReadableSpan)`` / ``("feedback", dict)`` items, written in
    batches by a background thread.

    ``max_queue`` bounds memory; ``retries`` bounds how long one batch may hold the writer when
    the sink is down (the queue keeps absorbing, then drops, meanwhile).
    """

    def __init__(self, sink, *, max_queue: int = 10_000, batch_size: int = 512, interval: float = 0.5,
                 retries: int = 2, retry_delay: float = 0.5, counters: Counters | None = None,
                 errors: RateLimitedLog | None = None, name: str = "autometrics-writer"):
        self.sink = sink
        self.max_queue = max_queue
        self.batch_size = batch_size
        self.interval = interval
        self.retries = retries
        self.retry_delay = retry_delay
        self.counters = counters or Counters()
        self.errors = errors or RateLimitedLog()
        self._q: collections.deque = collections.deque()
        self._cv = threading.Condition()
        self._enqueued = 0  # sequence numbers: flush() waits for _done to reach _enqueued
        self._done = 0
        self._stop = False
        self._flush_now = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def put(self, kind: str, item) -> bool:
        """Queue one item; False (and a drop counted) when the queue is full or stopped."""
        with self._cv:
            if self._stop or len(self._q) >= self.max_queue:
                self.counters.add(f"{kind}_dropped")
                self.errors.warning(f"drop-{kind}", "autometrics: %s queue full or closed, dropping (see autometrics.stats())", kind)
                return False
            self._q.append((kind, item))
            self._enqueued += 1
            self.counters.add(f"{kind}_queued")
            if len(self._q) >= self.batch_size:
                self._cv.notify()
        return True

    def qsize(self) -> int:
        return len(self._q)

    def _take(self) -> list:
        # Wait until a full batch, a flush/stop request, or `interval` has passed: a burst of
        # calls then lands in one transaction instead of one commit per span.
        with self._cv:
            deadline = time.monotonic() + self.interval
            while len(self._q) < self.batch_size and not self._stop and not self._flush_now:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cv.wait(left)
            n = min(len(self._q), self.batch_size)
            batch = [self._q.popleft() for _ in range(n)]
            if not self._q:
                self._flush_now = False
            return batch

    def _run(self) -> None:
        while True:
            batch = self._take()
            if batch:
                self._write(batch)
                with self._cv:
                    self._done += len(batch)
                    self._cv.notify_all()
            elif self._stop:
                with self._cv:
                    self._cv.notify_all()
                return

    def _write(self, batch: list) -> None:
        spans = [x for k, x in batch if k == "span"]
        fb = [x for k, x in batch if k == "feedback"]
        for attempt in range(self.retries + 1):
            try:
                self.sink.write(spans, fb)
                self.counters.add("span_written", len(spans))
                self.counters.add("feedback_written", len(fb))
                return
            except Exception as exc:  # any sink failure: store down, disk full, network
                self.counters.add("write_errors")
                self.errors.warning(
                    f"sink-{type(self.sink).__name__}", "autometrics: writing %d span(s) and %d feedback item(s) to %s failed (attempt %d): %s: %s",
                    len(spans), len(fb), self.sink, attempt + 1, type(exc).__name__, _short(exc))
                if attempt < self.retries and not self._stop:
                    time.sleep(self.retry_delay * (attempt + 1))
        self.counters.add("span_failed", len(spans))
        self.counters.add("feedback_failed", len(fb))

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything queued before this call was written (or given up); True if done."""
        deadline = time.monotonic() + timeout
        with self._cv:
            target = self._enqueued
            self._flush_now = True
            self._cv.notify_all()
            while self._done < target:
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    return False
                self._cv.wait(min(left, 0.1))
        return True

    def shutdown(self, timeout: float = 5.0) -> bool:
        """Flush (bounded by ``timeout``) and stop the thread; later puts are dropped."""
        ok = self.flush(timeout)
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        self._thread.join(max(0.0, min(timeout, 1.0)))
        try:
            close = getattr(self.sink, "close", None)
            if close:
                close()
        except Exception:
            pass
        return ok


def _short(exc: BaseException, n: int = 300) -> str:
    s = str(exc).replace("\n", " ")
    return s if len(s) <= n else s[:n] + "..."


class StoreSpanProcessor(SpanProcessor):
    """OpenTelemetry SpanProcessor: finished, sampled spans go to a :class:`BatchWriter`."""

    def __init__(self, writer: BatchWriter):
        self.writer = writer

    def on_start(self, span, parent_context=None) -> None:
        pass

    def on_end(self, span) -> None:
        try:
            if span.context is not None and span.context.trace_flags.sampled:
                self.writer.put("span", span)
        except Exception:  # pragma: no cover - defensive: nothing raises into the app
            pass

    def shutdown(self) -> None:
        self.writer.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.writer.flush(timeout_millis / 1000)


# --------------------------------------------------------------------------- sinks


class StoreSink:
    """Writes to a :class:`~autometrics.collectors.store.TraceStore`, opened lazily in the
    writer thread (so ``configure()`` never blocks on, or fails because of, a down database)."""

    def __init__(self, url: str | None = None, store=None):
        self.url = url
        self.store = store

    def __repr__(self) -> str:
        return repr(self.store) if self.store is not None else "TraceStore(<not opened>)"

    def write(self, spans, feedback) -> None:
        from autometrics.collectors.convert import rows_from_readable_spans

        if self.store is None:
            from autometrics.collectors.store import TraceStore

            self.store = TraceStore(self.url)
        self.store.write(rows_from_readable_spans(spans), feedback)

    def close(self) -> None:
        if self.store is not None:
            self.store.dispose()


class CollectorSink:
    """Sends to an ``autometrics collector serve`` over HTTP: spans as OTLP protobuf (gzip) to
    ``/v1/traces``, feedback as JSON to ``/v1/feedback``.  The API key goes in a header only."""

    def __init__(self, url: str, api_key: str | None = None, timeout: float = 5.0):
        self.url = url.rstrip("/")
        self._api_key = api_key
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"collector {self.url}"

    def _post(self, path: str, body: bytes, ctype: str) -> None:
        u = urllib.parse.urlsplit(self.url + path)
        cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
        conn = cls(u.hostname, u.port, timeout=self.timeout)
        headers = {"Content-Type": ctype, "Content-Encoding": "gzip"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        try:
            conn.request("POST", u.path, body=gzip.compress(body, 1), headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            if resp.status >= 300:
                raise RuntimeError(f"collector answered HTTP {resp.status}: {data[:200]!r}")
        finally:
            conn.close()

    def write(self, spans, feedback) -> None:
        if spans:
            from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

            self._post("/v1/traces", encode_spans(spans).SerializeToString(), "application/x-protobuf")
        if feedback:
            items = []
            for r in feedback:  # store rows -> the /v1/feedback request shape
                it = {"id": r["id"], "trace_id": r["trace_id"], "name": r["name"], "kind": r["kind"],
                      "value": r["value"] if r.get("value") is not None else r.get("value_text"),
                      "timestamp": r["created_at_ns"] / 1e9}
                for k in ("span_id", "comment", "source"):
                    if r.get(k) is not None:
                        it[k] = r[k]
                if r.get("metadata"):
                    it["metadata"] = json.loads(r["metadata"])
                items.append(it)
            self._post("/v1/feedback", json.dumps(items).encode(), "application/json")
