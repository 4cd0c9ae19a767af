"""``autometrics collector serve``: an HTTP service that receives traces and feedback from
applications in other processes (any language) and writes them to the trace store.

Endpoints:

- ``POST /v1/traces``: OTLP/HTTP traces, ``application/x-protobuf`` or ``application/json``,
  optionally ``Content-Encoding: gzip``; answers an OTLP ``ExportTraceServiceResponse`` in the
  request's encoding (``partial_success`` lists spans rejected for bad ids).
- ``POST /v1/feedback``: JSON object or list of objects ``{trace_id, name, value, comment?,
  kind?, span_id?, source?, metadata?, id?, timestamp?}`` (``id``: idempotency key;
  ``timestamp``: when the user gave it, epoch seconds or ISO 8601, default now); answers
  ``{"accepted": n, "ids": [...]}``.
- ``GET /health``: liveness plus store reachability and counters (no authentication, no secrets).

Why a response means "stored": every request's rows go to one writer thread that commits many
requests in one transaction (group commit; SQLite runs WAL with ``synchronous=FULL``) and only
then answers each of them.  So an acknowledged span or feedback survives ``kill -9`` of the
collector, the stored count equals the acknowledged count (writes are idempotent, retries do
not double-count), and batching gives the throughput (one commit per many requests).

Why the standard library's ``ThreadingHTTPServer``: no extra dependency, HTTP/1.1 keep-alive,
and the time goes into decoding and SQL anyway (see ``benchmarks/collector_throughput.py``).

Authentication: ``Authorization: Bearer KEY`` or ``X-API-Key: KEY``, compared in constant time
against the configured keys; keys are never logged or stored.  Bodies over ``max_body`` bytes
(or decompressing beyond ``max_decompressed``) are refused with 413.
"""

from __future__ import annotations

import collections
import hmac
import json
import logging
import os
import signal
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from autometrics.collectors.convert import parse_otlp_json, parse_otlp_protobuf, rows_from_otlp
from autometrics.collectors.exporter import Counters, RateLimitedLog
from autometrics.collectors.feedback import make_feedback_row
from autometrics.collectors.store import TraceStore

log = logging.getLogger("autometrics.collectors.server")

__all__ = ["CollectorServer", "serve", "Overloaded"]

MAX_FEEDBACK_ITEMS = 1000


class Overloaded(Exception):
    """Too many rows waiting for the writer: the client should retry later (HTTP 503)."""


class _Job:
    __slots__ = ("spans", "feedback", "event", "ok", "error")

    def __init__(self, spans, feedback):
        self.spans = spans
        self.feedback = feedback
        self.event = threading.Event()
        self.ok = False
        self.error = None


class GroupCommitWriter:
    """One thread commits the rows of many concurrent requests per transaction, then wakes them."""

    def __init__(self, store: TraceStore, counters: Counters, *, max_pending_rows: int = 200_000, max_batch_rows: int = 20_000):
        self.store = store
        self.counters = counters
        self.max_pending_rows = max_pending_rows
        self.max_batch_rows = max_batch_rows
        self.errors = RateLimitedLog(log, 30.0)
        self._jobs: collections.deque[_Job] = collections.deque()
        self._pending = 0
        self._cv = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="collector-writer", daemon=True)
        self._thread.start()

    def submit(self, spans: list[dict], feedback: list[dict], timeout: float = 30.0) -> None:
        """Block until the rows are committed; raises Overloaded, TimeoutError or the store's error."""
        n = len(spans) + len(feedback)
        job = _Job(spans, feedback)
        with self._cv:
            if self._stop:
                raise Overloaded("collector is shutting down")
            if self._pending + n > self.max_pending_rows and self._pending:
                raise Overloaded(f"{self._pending} rows waiting to be written")
            self._jobs.append(job)
            self._pending += n
            self._cv.notify()
        if not job.event.wait(timeout):
            raise TimeoutError("the trace store did not commit in time")
        if not job.ok:
            raise job.error or RuntimeError("write failed")

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._jobs and not self._stop:
                    self._cv.wait()
                if not self._jobs and self._stop:
                    return
                jobs, rows = [], 0
                while self._jobs and (not jobs or rows + len(self._jobs[0].spans) + len(self._jobs[0].feedback) <= self.max_batch_rows):
                    j = self._jobs.popleft()
                    jobs.append(j)
                    rows += len(j.spans) + len(j.feedback)
            self._commit(jobs)
            with self._cv:
                self._pending -= rows

    def _commit(self, jobs: list[_Job]) -> None:
        try:
            self.store.write([r for j in jobs for r in j.spans], [r for j in jobs for r in j.feedback])
            done = jobs
        except Exception as exc:
            self.errors.warning("batch", "collector: batch write of %d request(s) failed, retrying one by one: %s: %s",
                                len(jobs), type(exc).__name__, str(exc)[:300])
            done = []
            for j in jobs:  # isolate a bad request so it cannot fail the others
                try:
                    self.store.write(j.spans, j.feedback)
                    done.append(j)
                except Exception as exc1:
                    j.error = exc1
                    self.counters.add("write_errors")
                    j.event.set()
        for j in done:
            j.ok = True
            self.counters.add("spans_stored", len(j.spans))
            self.counters.add("feedback_stored", len(j.feedback))
            j.event.set()

    def stop(self, timeout: float = 10.0) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        self._thread.join(timeout)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "autometrics-collector"
    sys_version = ""

    # the server object carries the configuration
    @property
    def app(self) -> CollectorServer:
        return self.server.app  # type: ignore[attr-defined]

    def log_message(self, format, *args):  # noqa: A002 - request lines only, never headers
        log.debug("%s %s", self.address_string(), format % args)

    def _send(self, code: int, body: bytes, ctype: str = "application/json", extra: dict | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, code: int, obj) -> None:
        self._send(code, json.dumps(obj).encode())

    def _error(self, code: int, message: str, extra: dict | None = None) -> None:
        self.app.counters.add(f"http_{code}")
        self._send(code, json.dumps({"error": message}).encode(), extra=extra)

    def _authorised(self) -> bool:
        keys = self.app.api_keys
        if not keys:
            return True
        given = self.headers.get("X-API-Key")
        auth = self.headers.get("Authorization", "")
        if given is None and auth[:7].lower() == "bearer ":
            given = auth[7:].strip()
        if not given:
            return False
        g = given.encode()
        ok = False
        for k in keys:  # check every key: timing does not reveal which one matched
            ok |= hmac.compare_digest(g, k)
        return ok

    def _body(self) -> bytes | None:
        """Request body, decompressed and size-checked; None after an error was sent."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            self._error(411, "send a Content-Length (chunked bodies are not accepted)")
            return None
        try:
            n = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._error(411, "Content-Length required")
            return None
        if n < 0 or n > self.app.max_body:
            self.close_connection = True
            self._error(413, f"body of {n} bytes exceeds the limit of {self.app.max_body} bytes")
            return None
        data = self.rfile.read(n)
        enc = self.headers.get("Content-Encoding", "identity").lower()
        if enc in ("gzip", "x-gzip", "deflate"):
            try:
                d = zlib.decompressobj(wbits=31 if "gzip" in enc else 15)
                out = d.decompress(data, self.app.max_decompressed + 1)
                if len(out) > self.app.max_decompressed or d.unconsumed_tail:
                    self._error(413, f"decompressed body exceeds {self.app.max_decompressed} bytes")
                    return None
                data = out
            except zlib.error as exc:
                self._error(400, f"bad {enc} body: {exc}")
                return None
        elif enc not in ("identity", ""):
            self._error(415, f"unsupported Content-Encoding {enc!r} (use gzip or none)")
            return None
        return data

    def do_GET(self):
        if self.path.split("?")[0] in ("/health", "/healthz", "/v1/health"):
            code, body = self.app.health()
            return self._json(code, body)
        return self._error(404, "not found")

    def do_POST(self):
        path = self.path.split("?")[0]
        if path not in ("/v1/traces", "/v1/feedback"):
            return self._error(404, "not found; POST /v1/traces or /v1/feedback")
        if not self._authorised():
            # drain the body so the keep-alive connection stays usable
            self._discard_body()
            return self._error(401, "missing or invalid API key (Authorization: Bearer KEY or X-API-Key)",
                               {"WWW-Authenticate": 'Bearer realm="autometrics"'})
        data = self._body()
        if data is None:
            return
        try:
            if path == "/v1/traces":
                self._traces(data)
            else:
                self._feedback(data)
        except Overloaded as exc:
            self._error(503, f"overloaded: {exc}; retry later", {"Retry-After": "1"})
        except TimeoutError as exc:
            self._error(503, str(exc), {"Retry-After": "1"})
        except Exception as exc:  # the store failed: not acknowledged, the client may retry
            self.app.errors.warning("store", "collector: request not stored: %s: %s", type(exc).__name__, str(exc)[:300])
            self._error(503, f"trace store unavailable ({type(exc).__name__}); retry later", {"Retry-After": "2"})

    def _discard_body(self) -> None:
        try:
            n = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            n = 0
        if 0 < n <= self.app.max_body:
            self.rfile.read(n)
        elif n:
            self.close_connection = True

    def _traces(self, data: bytes) -> None:
        ctype = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
        is_json = ctype == "application/json"
        if ctype not in ("application/x-protobuf", "application/protobuf", "application/json"):
            return self._error(415, "Content-Type must be application/x-protobuf or application/json")
        try:
            req = parse_otlp_json(data) if is_json else parse_otlp_protobuf(data)
            rows, rejected, reason = rows_from_otlp(req)
        except Exception as exc:
            return self._error(400, f"not a valid OTLP ExportTraceServiceRequest: {type(exc).__name__}: {str(exc)[:200]}")
        if rows:
            self.app.writer.submit(rows, [])
            self.app.forward_spans(req)
        self.app.counters.add("spans_acknowledged", len(rows))
        self.app.counters.add("spans_rejected", rejected)
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

        resp = ExportTraceServiceResponse()
        if rejected:
            resp.partial_success.rejected_spans = rejected
            resp.partial_success.error_message = reason
        if is_json:
            from google.protobuf import json_format

            body = json.dumps(json_format.MessageToDict(resp)).encode()
            self._send(200, body, "application/json")
        else:
            self._send(200, resp.SerializeToString(), "application/x-protobuf")

    def _feedback(self, data: bytes) -> None:
        try:
            payload = json.loads(data)
        except ValueError as exc:
            return self._error(400, f"body is not JSON: {exc}")
        items = payload if isinstance(payload, list) else [payload]
        if not items or len(items) > MAX_FEEDBACK_ITEMS:
            return self._error(400, f"send 1..{MAX_FEEDBACK_ITEMS} feedback objects")
        rows = []
        for i, it in enumerate(items):
            if not isinstance(it, dict):
                return self._error(400, f"item {i}: expected an object")
            unknown = set(it) - {"trace_id", "name", "value", "comment", "kind", "span_id", "source", "metadata", "id", "timestamp"}
            if unknown:
                return self._error(400, f"item {i}: unknown field(s) {sorted(unknown)}")
            if "value" not in it:
                return self._error(400, f"item {i}: 'value' is required")
            try:
                rows.append(make_feedback_row(it.get("trace_id"), it.get("name"), it["value"], it.get("comment"), it.get("kind"),
                                              it.get("span_id"), it.get("source") or "collector", it.get("metadata"), it.get("id"),
                                              timestamp=it.get("timestamp")))
            except ValueError as exc:
                return self._error(400, f"item {i}: {exc}")
        self.app.writer.submit([], rows)
        self.app.counters.add("feedback_acknowledged", len(rows))
        self.app.forward_feedback(rows)
        self._json(200, {"accepted": len(rows), "ids": [r["id"] for r in rows]})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


class CollectorServer:
    """The collector: HTTP front, group-commit writer, optional Langfuse forwarding."""

    def __init__(self, store: TraceStore | str | None = None, *, host: str = "127.0.0.1", port: int = 4318,
                 api_keys: list[str] | tuple = (), allow_no_auth: bool = False, max_body: int = 16 << 20,
                 max_decompressed: int = 64 << 20, langfuse: str = "auto"):
        keys = [k for k in (api_keys or []) if k]
        if not keys and not allow_no_auth:
            raise ValueError("no API key configured: pass --api-key / set AUTOMETRICS_COLLECTOR_API_KEYS, or --no-auth for local testing")
        self.api_keys = [k.encode() for k in keys]
        self.store = store if isinstance(store, TraceStore) else TraceStore(store)
        self.max_body = max_body
        self.max_decompressed = max_decompressed
        self.counters = Counters()
        self.errors = RateLimitedLog(log, 30.0)
        self.writer = GroupCommitWriter(self.store, self.counters)
        self.langfuse = None
        from autometrics.collectors.langfuse_export import langfuse_configured

        if langfuse != "off" and (langfuse == "on" or langfuse_configured()):
            from autometrics.collectors.langfuse_export import LangfuseForwarder

            self.langfuse = LangfuseForwarder(counters=self.counters, errors=self.errors)
        self.httpd = _Server((host, port), _Handler)
        self.httpd.app = self  # type: ignore[attr-defined]
        self._thread: threading.Thread | None = None
        self.started = time.time()

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def health(self) -> tuple[int, dict]:
        try:
            version = self.store.version()
            store_ok = True
        except Exception as exc:
            version, store_ok = None, False
            self.errors.warning("health", "collector: store check failed: %s", type(exc).__name__)
        body = {"status": "ok" if store_ok else "degraded", "store": "ok" if store_ok else "unreachable", "schema_version": version,
                "uptime_s": round(time.time() - self.started, 1), "counters": self.counters.snapshot(),
                "langfuse": self.langfuse.stats() if self.langfuse is not None else None}
        return (200 if store_ok else 503), body

    def forward_spans(self, request) -> None:
        if self.langfuse is not None:
            self.langfuse.forward_spans(request)

    def forward_feedback(self, rows: list[dict]) -> None:
        if self.langfuse is not None:
            self.langfuse.forward_feedback(rows)

    def start(self) -> CollectorServer:
        """Serve in a background thread (tests, embedding)."""
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2}, name="collector-http", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever(poll_interval=0.2)

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.writer.stop()
        if self.langfuse is not None:
            self.langfuse.shutdown()
        self.store.dispose()


def serve(store_url: str | None = None, *, host: str = "127.0.0.1", port: int = 4318, api_keys: list[str] | None = None,
          allow_no_auth: bool = False, max_body: int = 16 << 20, langfuse: str = "auto") -> int:
    """Run the collector until SIGINT/SIGTERM (the ``autometrics collector serve`` command)."""
    keys = list(api_keys or [])
    keys += [k.strip() for k in os.environ.get("AUTOMETRICS_COLLECTOR_API_KEYS", "").split(",") if k.strip()]
    app = CollectorServer(store_url, host=host, port=port, api_keys=keys, allow_no_auth=allow_no_auth, max_body=max_body, langfuse=langfuse)
    stopping = threading.Event()

    def _term(signum, frame):
        if not stopping.is_set():
            stopping.set()
            threading.Thread(target=app.httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, _term)
    signal.signal(signal.SIGINT, _term)
    auth = f"{len(keys)} API key(s)" if keys else "NO AUTHENTICATION (--no-auth)"
    print(f"autometrics collector listening on {app.url} (store: {app.store!r}; {auth}; "
          f"langfuse: {'on' if app.langfuse else 'off'})", flush=True)
    try:
        app.serve_forever()
    finally:
        app.httpd.server_close()
        app.writer.stop()
        if app.langfuse is not None:
            app.langfuse.shutdown()
        app.store.dispose()
    print("autometrics collector stopped", file=sys.stderr, flush=True)
    return 0

