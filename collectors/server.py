"""``autometrics collector serve``: an HTTP service that receives traces and feedback from
applications in other processes (any language) and writes them to the trace store.

Endpoints:

- ``POST /v1/traces``: OTLP/HTTP traces, ``application/x-protobuf`` or ``application/json``,
  optionally ``Content-Encoding: gzip``; answers an OTLP ``ExportTraceServiceResponse`` in the
  request's encoding (``partial_success`` lists spans rejected for bad ids).
- ``POST /v1/feedback``: JSON object or list of objects ``{trace_id, name, value, comment?,
  kind?, span_id?, source?, metadata?, id?, timestamp?, project?, schema?}`` (``id``: idempotency
  key; ``timestamp``: when the user gave it, epoch seconds or ISO 8601, default now;
  ``project``: default the trace's; ``schema``: ``{"kind", "scale"}`` declared by the sender);
  answers ``{"accepted": n, "ids": [...]}``.  All or nothing: any item that does not fit its
  name's kind/scale (or is malformed) gives 400, a re-sent ``id`` with another value 409, each
  with ``errors: [{index, id, field, code, error}]``, and nothing of the request is stored.
- ``GET /health``: liveness plus store reachability and counters (no authentication, no secrets).

Why a response means "stored": every request's rows go to one writer thread that commits many
requests in one transaction (group commit; SQLite runs WAL with ``synchronous=FULL``) and only
then answers each of them.  So an acknowledged span or feedback survives ``kill -9`` of the
collector, the stored count equals the acknowledged count (writes are idempotent, retries do
not double-count), and batching gives the throughput (one commit per many requests).

Why the standard library's HTTP server (``http.server`` request handling): no extra dependency,
HTTP/1.1 keep-alive, and the time goes into decoding and SQL anyway (see
``benchmarks/collector_throughput.py``); its sockets are served by
:class:`~autometrics.collectors.http_limits.BoundedHTTPServer`, which a slow or idle client
cannot hold open (header, body and keep-alive deadlines, a connection bound, no thread per idle
connection).  Every limit: :class:`~autometrics.collectors.limits.CollectorLimits`.

Authentication: ``Authorization: Bearer KEY`` or ``X-API-Key: KEY``, compared in constant time
against the configured keys (as soon as the headers are in, before any body is read); keys are
never logged or stored.  Bodies over ``max_body`` bytes (or decompressing beyond
``max_decompressed``) are refused with 413.  A value the store can never hold (a number past
its column, a 200,000-deep JSON) is 400, not 503: retrying cannot help.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import signal
import sys
import threading
import time

from ..metricbank.errors import UserError
from .convert import parse_otlp_json, parse_otlp_protobuf, rows_from_otlp
from .exporter import Counters, RateLimitedLog
from .feedback import MAX_COMMENT_CHARS, FeedbackValueError, make_feedback_row, make_schema
from .group_commit import GroupCommitWriter, Overloaded
from .http_limits import BoundedHTTPServer, BufferedRequestHandler
from .langfuse_client import langfuse_configured
from .limits import (
    DECODE_COST,
    BodyError,
    ByteBudget,
    CollectorLimits,
    decompress,
    decompress_all,
    unstorable,
)
from .sinks import StoreSink
from .store import FeedbackRejected, TraceStore, clock_skewed

log = logging.getLogger("autometrics.collectors.server")

__all__ = ["CollectorServer", "serve", "Overloaded"]

MAX_FEEDBACK_ITEMS = 1000


def _origin(text: str) -> str:
    """An origin as browsers send it, for comparison: scheme://host[:port], lower case, no slash."""
    return text.strip().rstrip("/").lower()


class _Handler(BufferedRequestHandler):
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
        for k, v in ({**(extra or {}), **self.app.cors_headers(self.headers.get("Origin"))}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, code: int, obj) -> None:
        self._send(code, json.dumps(obj).encode())

    def _error(self, code: int, message: str, extra: dict | None = None) -> None:
        self.app.counters.add(f"http_{code}")
        self._send(code, json.dumps({"error": message}).encode(), extra=extra)

    def _authorised(self) -> bool:
        return _key_ok(self.app.api_keys, self.headers)

    def _body(self) -> bytes | None:
        """Request body, decompressed and size-checked, its decoding cost taken from the shared
        memory budget (``self._held``, given back by do_POST); None after an error was sent."""
        try:
            return self._read_body()
        except BodyError as exc:
            self.close_connection = self.close_connection or exc.status in (411, 413)
            self._error(exc.status, str(exc), exc.headers)
            return None

    def _read_body(self) -> bytes:
        n = body_length(self.headers, self.app.max_body)
        data = self.rfile.read(n)
        if len(data) != n:
            raise BodyError(400, f"body has {len(data)} bytes, its Content-Length says {n}")
        enc = self.headers.get("Content-Encoding", "identity").lower().strip()
        if enc in ("gzip", "x-gzip", "deflate"):
            plain = decompress(data, enc, self.app.max_decompressed)
        elif enc in ("identity", ""):
            plain = data
        else:
            raise BodyError(415, f"unsupported Content-Encoding {enc!r} (use gzip or none)")
        size = plain if isinstance(plain, int) else len(plain)
        cost, budget = max(size, 1) * DECODE_COST, self.app.decode_budget
        if cost > budget.total:
            raise BodyError(413, f"a body of {size} bytes needs about {cost >> 20} MiB to decode, more than the collector's decoding "
                                 f"memory ({budget.total >> 20} MiB, 3/4 of AUTOMETRICS_COLLECTOR_MEMORY_BUDGET); send smaller batches")
        if not budget.acquire(cost, self.app.limits.budget_wait):
            self.app.counters.add("budget_busy")
            raise BodyError(503, "the collector is decoding other large requests; retry later", {"Retry-After": "1"})
        self._held = cost
        return decompress_all(data, enc) if isinstance(plain, int) else plain

    def do_GET(self):
        if self.path.split("?")[0] in ("/health", "/healthz", "/v1/health"):
            code, body = self.app.health()
            return self._json(code, body)
        return self._error(404, "not found")

    def do_OPTIONS(self):
        """A browser's CORS preflight: 204 with the allowed methods and headers for a configured
        origin, 403 otherwise (no API key is asked: a preflight carries none)."""
        path = self.path.split("?")[0]
        if path not in ("/v1/traces", "/v1/feedback"):
            return self._error(404, "not found; POST /v1/traces or /v1/feedback")
        cors = self.app.cors_headers(self.headers.get("Origin"), preflight=True)
        if not cors:
            return self._error(403, "this origin may not post here: start the collector with --cors-origin ORIGIN "
                                    "(or AUTOMETRICS_COLLECTOR_CORS_ORIGINS)")
        self.send_response(204)
        for k, v in cors.items():
            self.send_header(k, v)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        path = self.path.split("?")[0]
        if path not in ("/v1/traces", "/v1/feedback"):
            return self._error(404, "not found; POST /v1/traces or /v1/feedback")
        if not self._authorised():  # (the server's front already refused it before reading the body)
            return self._error(401, "missing or invalid API key (Authorization: Bearer KEY or X-API-Key)",
                               {"WWW-Authenticate": 'Bearer realm="autometrics"'})
        self._held = 0
        try:
            data = self._body()
            if data is not None:
                self._traces(data) if path == "/v1/traces" else self._feedback(data)
        except Overloaded as exc:
            self._error(503, f"overloaded: {exc}; retry later", {"Retry-After": "1"})
        except TimeoutError as exc:
            self._error(503, str(exc), {"Retry-After": "1"})
        except Exception as exc:
            if isinstance(exc, RecursionError):
                self._error(400, "nothing of this request was stored: its JSON is nested too deeply to read; do not retry")
            elif unstorable(exc):  # a value in the request, not the store: retrying cannot help
                self._error(400, f"nothing of this request was stored: it holds a value the trace store cannot keep "
                                 f"({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}); fix it, do not retry")
            else:  # the store failed: not acknowledged, the client may retry
                self.app.errors.warning("store", "collector: request not stored: %s: %s", type(exc).__name__, str(exc)[:300])
                self._error(503, f"trace store unavailable ({type(exc).__name__}); retry later", {"Retry-After": "2"})
        finally:
            self.app.decode_budget.release(self._held)

    def _traces(self, data: bytes) -> None:
        """Partial acceptance (OTLP ``partial_success``): spans with a bad id or a value the store
        can never hold are rejected and named, the others stored and answered 200; a request none
        of whose spans can be stored is 400.  Fields cut to the field limit are reported in
        ``error_message`` as well (with ``rejected_spans`` 0 when every span was kept)."""
        ctype = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
        is_json = ctype == "application/json"
        if ctype not in ("application/x-protobuf", "application/protobuf", "application/json"):
            return self._error(415, "Content-Type must be application/x-protobuf or application/json")
        try:
            req = parse_otlp_json(data) if is_json else parse_otlp_protobuf(data)
            got = rows_from_otlp(req, self.app.max_field_chars)
        except Exception as exc:  # RecursionError (nesting too deep) included
            msg = str(exc) if len(str(exc)) <= 300 else f"{str(exc)[:120]} ... {str(exc)[-160:]}"  # the cause is at the end
            return self._error(400, f"not a valid OTLP ExportTraceServiceRequest: {type(exc).__name__}: {msg}")
        rows, rejected, notes = got.rows, got.rejected, [got.reason] if got.reason else []
        skewed = sum(clock_skewed(r.get("start_time_ns")) for r in rows)
        if skewed:  # kept as sent; dated by arrival for retention and scoring
            self.app.counters.add("spans_clock_skew", skewed)
            notes.append(f"{skewed} span(s) start before 2000 or more than 5 minutes ahead of the collector's clock: kept with "
                         "their time, dated by arrival for retention and scoring (check the sender's clock)")
        if rows:
            conflicts: list = []
            refused = self._store_spans(rows, conflicts)
            if refused:
                rejected += len(refused)
                gone = {id(r) for r, _ in refused}
                rows = [r for r in rows if id(r) not in gone]
                notes.append(f"{len(refused)} span(s) refused by the store: " + "; ".join(
                    f"traceId {r['trace_id']} spanId {r['span_id']}: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
                    for r, e in refused[:3]))
            if conflicts:  # the store kept the first content: said instead of acknowledged silently
                gone = {id(r) for r, _ in conflicts}
                rows = [r for r in rows if id(r) not in gone]
                rejected += len(conflicts)
                self.app.counters.add("spans_conflict", len(conflicts))
                notes.append(f"{len(conflicts)} span(s) already stored with other content, not replaced (send new spans "
                             "under new ids): " + "; ".join(
                                 f"traceId {r['trace_id']} spanId {r['span_id']} differs in {', '.join(d)}"
                                 for r, d in conflicts[:3]))
            if rows:
                self.app.forward_spans(req)
        if got.truncated:
            self.app.counters.add("fields_truncated", len(got.truncated))
            cut = sorted(set(got.truncated))
            notes.append(f"{len(got.truncated)} field(s) longer than {self.app.max_field_chars} characters truncated, spans kept "
                         f"(AUTOMETRICS_COLLECTOR_MAX_FIELD_CHARS): {', '.join(cut[:5])}{' ...' if len(cut) > 5 else ''}")
        self.app.counters.add("spans_acknowledged", len(rows))
        self.app.counters.add("spans_rejected", rejected)
        if rejected and not rows:
            return self._error(400, "no span of this request can be stored: " + "; ".join(notes))
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

        resp = ExportTraceServiceResponse()
        if notes:
            resp.partial_success.rejected_spans = rejected
            resp.partial_success.error_message = "; ".join(notes)
        if is_json:
            from google.protobuf import json_format

            body = json.dumps(json_format.MessageToDict(resp)).encode()
            self._send(200, body, "application/json")
        else:
            self._send(200, resp.SerializeToString(), "application/x-protobuf")

    def _store_spans(self, rows: list[dict], conflicts: list) -> list[tuple[dict, Exception]]:
        """Write ``rows`` (``conflicts`` receives the spans stored before with other content); when
        the store refuses a value in them, halve until only the rows it refuses are left out (each
        write is one transaction); a retryable error propagates."""
        try:
            conflicts += self.app.writer.submit(rows, [])
            return []
        except Exception as exc:
            if not unstorable(exc):
                raise
            if len(rows) == 1:
                return [(rows[0], exc)]
        mid = len(rows) // 2
        return self._store_spans(rows[:mid], conflicts) + self._store_spans(rows[mid:], conflicts)

    def _feedback(self, data: bytes) -> None:
        """All or nothing: every item is checked (shape here, each name's kind/scale and earlier
        ids in the store's write transaction); one bad item refuses the whole request with 400
        (409 for a re-sent id with another value) listing every bad item by index and field, and
        nothing is stored, so a client never has to guess which items landed."""
        try:
            payload = json.loads(data)
        except ValueError as exc:
            return self._error(400, f"body is not JSON: {exc}")
        items = payload if isinstance(payload, list) else [payload]
        if not items or len(items) > MAX_FEEDBACK_ITEMS:
            return self._error(400, f"send 1..{MAX_FEEDBACK_ITEMS} feedback objects")
        rows, problems = [], []
        for i, it in enumerate(items):
            row = _feedback_row(i, it, problems)
            if row is not None:
                rows.append(row)
        if problems:
            return self._refused(400, problems)
        try:
            self.app.writer.submit([], rows)
        except FeedbackRejected as exc:
            return self._refused(exc.status, exc.problems)
        self.app.counters.add("feedback_acknowledged", len(rows))
        self.app.forward_feedback(rows)
        body = {"accepted": len(rows), "ids": [r["id"] for r in rows]}
        cut = [i for i, r in enumerate(rows) if r.get("truncated")]
        if cut:  # stored, but not whole: said, counted, and marked in the stored text
            self.app.counters.add("fields_truncated", len(cut))
            body["truncated"] = len(cut)
            body["warnings"] = [f"item {i} comment longer than {MAX_COMMENT_CHARS:,} characters: stored cut, with a marker at "
                                "its end" for i in cut[:20]]
        self._json(200, body)

    def _refused(self, code: int, problems: list[dict]) -> None:
        self.app.counters.add(f"http_{code}")
        self.app.counters.add("feedback_conflict" if code == 409 else "feedback_invalid", len(problems))
        what = "conflicting feedback id(s)" if code == 409 else "invalid feedback item(s)"
        head = "; ".join(f"item {p['index']} {p['field']}: {p['error']}" for p in problems[:5])
        more = f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
        self._json(code, {"error": f"{len(problems)} {what}, nothing stored: {head}{more}", "accepted": 0, "errors": problems})


def body_length(headers, max_body: int) -> int:
    """A POST body's announced length; BodyError 411 without one Content-Length (chunked bodies
    are not accepted), 413 over ``max_body`` (refused before a byte of it is read)."""
    if headers.get("Transfer-Encoding") is not None:
        raise BodyError(411, "send a Content-Length (chunked bodies are not accepted)")
    try:
        n = int(headers.get("Content-Length", ""))
    except ValueError:
        raise BodyError(411, "Content-Length required") from None
    if n < 0 or n > max_body:
        raise BodyError(413, f"body of {n} bytes exceeds the limit of {max_body} bytes (AUTOMETRICS_COLLECTOR_MAX_BODY)")
    return n


_FEEDBACK_FIELDS = {"trace_id", "name", "value", "comment", "kind", "span_id", "source", "metadata", "id", "timestamp", "project",
                    "schema"}


def _feedback_row(i: int, it, problems: list[dict]) -> dict | None:
    """The row of request item ``i``, or None with its problem appended (index, id, field, code, error)."""

    def bad(field: str, code: str, error: str) -> None:
        problems.append({"index": i, "id": it.get("id") if isinstance(it, dict) else None, "field": field, "code": code,
                         "error": error})

    if not isinstance(it, dict):
        return bad("item", "not_object", "expected an object")
    unknown = set(it) - _FEEDBACK_FIELDS
    if unknown:
        return bad(sorted(unknown)[0], "unknown_field", f"unknown field(s) {sorted(unknown)}; allowed: {sorted(_FEEDBACK_FIELDS)}")
    if "value" not in it:
        return bad("value", "missing", "'value' is required")
    project = it.get("project")
    if project is not None and (not isinstance(project, str) or not project.strip() or len(project) > 200):
        return bad("project", "bad_project", f"project must be a non-empty string of at most 200 characters, not {project!r}")
    try:
        declared = None
        if it.get("schema") is not None:
            sch = it["schema"]
            if not isinstance(sch, dict) or "kind" not in sch or set(sch) - {"kind", "scale"}:
                raise FeedbackValueError('schema must be {"kind": ..., "scale": [low, high]} (scale optional)', field="schema",
                                         code="bad_schema")
            declared = make_schema(sch["kind"], sch.get("scale"))
        return make_feedback_row(it.get("trace_id"), it.get("name"), it["value"], it.get("comment"), it.get("kind"), it.get("span_id"),
                                 it.get("source") or "collector", it.get("metadata"), it.get("id"), timestamp=it.get("timestamp"),
                                 project=project.strip() if project else None, schema=declared)
    except FeedbackValueError as exc:
        return bad(exc.field, exc.code, str(exc))


def _key_ok(keys: list[bytes], headers) -> bool:
    """``Authorization: Bearer KEY`` or ``X-API-Key: KEY`` is one of ``keys`` (constant time)."""
    if not keys:
        return True
    given = headers.get("X-API-Key")
    auth = headers.get("Authorization", "")
    if given is None and auth[:7].lower() == "bearer ":
        given = auth[7:].strip()
    if not given:
        return False
    g = given.encode()
    ok = False
    for k in keys:  # check every key: timing does not reveal which one matched
        ok |= hmac.compare_digest(g, k)
    return ok


class CollectorServer:
    """The collector: HTTP front, group-commit writer, optional Langfuse forwarding."""

    def __init__(self, store: TraceStore | str | None = None, *, host: str = "127.0.0.1", port: int = 4318,
                 api_keys: list[str] | tuple = (), allow_no_auth: bool = False, max_body: int | None = None,
                 max_decompressed: int | None = None, langfuse: str = "auto", limits: CollectorLimits | None = None,
                 cors_origins=(), front: str = "builtin"):
        """``front``: ``builtin`` (this module's bounded HTTP server, bound here) or ``asgi`` (no
        socket: :mod:`autometrics.collectors.asgi` serves the endpoints on granian or uvicorn)."""
        keys = [k for k in (api_keys or []) if k]
        self.cors_origins = {_origin(o) for o in (cors_origins or ())}
        if not keys and not allow_no_auth:
            raise UserError("no API key configured: pass --api-key / set AUTOMETRICS_COLLECTOR_API_KEYS, or --no-auth for local testing")
        self.api_keys = [k.encode() for k in keys]
        self.store = store if isinstance(store, TraceStore) else TraceStore(store)
        self.limits = lim = limits or CollectorLimits.from_env()
        self.max_body = max_body or lim.max_body
        self.max_decompressed = max_decompressed or lim.max_decompressed
        self.max_field_chars = lim.max_field_chars
        self.decode_budget = ByteBudget(lim.memory_budget - lim.memory_budget // 4)
        self.counters = Counters()
        self.errors = RateLimitedLog(log, 30.0)

        self.sink = StoreSink(store=self.store)  # checks a SQLite file's identity around every commit, as the SDK does
        self.sink.attach(self.counters, self.errors)
        try:
            self.sink.checked(lambda store: None)  # records the file's identity now, before any write
        except Exception as exc:  # a store that is down at start: the writes and /health say so later
            self.errors.warning("store-open", "collector: store not opened at start: %s", type(exc).__name__)
        self.writer = GroupCommitWriter(self.store, self.counters, sink=self.sink)
        self.langfuse = None

        if langfuse != "off" and (langfuse == "on" or langfuse_configured()):
            from .langfuse_client import LangfuseForwarder

            self.langfuse = LangfuseForwarder(counters=self.counters, errors=self.errors)
        self.address = (host, port)
        self.httpd = None
        if front == "builtin":
            self.httpd = BoundedHTTPServer((host, port), _Handler, lim, ByteBudget(lim.memory_budget // 4), early=self._early,
                                           body_limit=lambda: self.max_body, event=self.counters.add)
            self.httpd.app = self  # type: ignore[attr-defined]
        elif front != "asgi":
            raise UserError(f"front must be builtin or asgi, not {front!r}")
        self._thread: threading.Thread | None = None
        self.started = time.time()

    def _early(self, method: str, path: str, headers):
        """Refuse a POST without a valid API key before its body is read (an unauthenticated
        client cannot make the collector buffer bodies)."""
        if method == "POST" and path.split("?")[0] in ("/v1/traces", "/v1/feedback") and not _key_ok(self.api_keys, headers):
            self.counters.add("http_401")
            return 401, b'{"error": "missing or invalid API key (Authorization: Bearer KEY or X-API-Key)"}', {
                "WWW-Authenticate": 'Bearer realm="autometrics"', **self.cors_headers(headers.get("Origin"))}
        return None

    def cors_headers(self, origin: str | None, preflight: bool = False) -> dict:
        """CORS response headers for a browser request from ``origin``: none unless the origin is
        configured (``cors_origins``; ``*`` = any).  The origin is echoed, never ``*``, so a page
        may send the API key in an ``Authorization`` header."""
        if not origin or not self.cors_origins or ("*" not in self.cors_origins and _origin(origin) not in self.cors_origins):
            return {}
        out = {"Access-Control-Allow-Origin": origin.strip(), "Vary": "Origin"}
        if preflight:
            out |= {"Access-Control-Allow-Methods": "POST, OPTIONS",
                    "Access-Control-Allow-Headers": "Authorization, X-API-Key, Content-Type, Content-Encoding",
                    "Access-Control-Max-Age": "600"}
        return out

    @property
    def url(self) -> str:
        host, port = (self.httpd.server_address if self.httpd is not None else self.address)[:2]
        return f"http://{host}:{port}"

    def health(self) -> tuple[int, dict]:
        """200 with ``store: ok`` only while the store answers and (SQLite) its file is the one the
        collector opened.  A file deleted or replaced since is reopened here (rows stored before
        are not in the new file): ``store: reopened`` and ``status: degraded`` from then on, with
        the count in ``counters.store_reopened``, so an operator learns that rows were lost."""
        state = "ok"
        try:
            self.sink.checked(lambda store: None)  # a deleted or replaced file is reopened here (and said in the log)
            version = self.store.version()
            if self.counters.snapshot().get("store_reopened"):
                state = "reopened"
        except Exception as exc:
            version, state = None, "unreachable"
            self.errors.warning("health", "collector: store check failed: %s", type(exc).__name__)
        store_ok = state != "unreachable"
        body = {"status": "ok" if state == "ok" else "degraded", "store": state, "schema_version": version,
                "uptime_s": round(time.time() - self.started, 1), "counters": self.counters.snapshot(),
                "langfuse": self.langfuse.stats() if self.langfuse is not None else None,
                "connections": ({"open": len(self.httpd.conns), "workers": len(self.httpd._workers),
                                 "client_addresses": len(self.httpd.per_client),
                                 "most_from_one_address": max(list(self.httpd.per_client.values()), default=0),
                                 "buffered_bytes": self.httpd.budget.used} if self.httpd is not None else {})
                | {"decoding_bytes": self.decode_budget.used, "decoding_peak_bytes": self.decode_budget.peak}}
        return (200 if store_ok else 503), body

    def forward_spans(self, request) -> None:
        if self.langfuse is not None:
            self.langfuse.forward_spans(request)

    def forward_feedback(self, rows: list[dict]) -> None:
        if self.langfuse is not None:  # scores only for traces the store holds (sampled-out traces' feedback is orphaned)
            self.langfuse.forward_feedback(rows, recorded=self.store.recorded_traces)

    def start(self) -> CollectorServer:
        """Serve in a background thread (tests, embedding)."""
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2}, name="collector-http", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever(poll_interval=0.2)

    def stop(self) -> None:
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
        self.writer.stop()
        if self.langfuse is not None:
            self.langfuse.shutdown()
        self.store.dispose()


def serve_settings(api_keys, max_body, cors_origins, **limits) -> tuple[list[str], CollectorLimits, list[str]]:
    """(API keys, limits, CORS origins) from the flags and the ``AUTOMETRICS_COLLECTOR_*`` variables."""
    keys = list(api_keys or [])
    keys += [k.strip() for k in os.environ.get("AUTOMETRICS_COLLECTOR_API_KEYS", "").split(",") if k.strip()]
    lim = CollectorLimits.from_env(max_body=max_body, **limits)
    origins = list(cors_origins or [])
    origins += [o.strip() for o in os.environ.get("AUTOMETRICS_COLLECTOR_CORS_ORIGINS", "").split(",") if o.strip()]
    return keys, lim, origins


def serve(store_url: str | None = None, *, host: str = "127.0.0.1", port: int = 4318, api_keys: list[str] | None = None,
          allow_no_auth: bool = False, max_body: int | None = None, langfuse: str = "auto", cors_origins=None,
          **limits) -> int:
    """Run the collector until SIGINT/SIGTERM (the ``autometrics collector serve`` command);
    ``limits``: :class:`CollectorLimits` fields (None: ``AUTOMETRICS_COLLECTOR_*`` or the default)."""
    keys, lim, origins = serve_settings(api_keys, max_body, cors_origins, **limits)
    app = CollectorServer(store_url, host=host, port=port, api_keys=keys, allow_no_auth=allow_no_auth, langfuse=langfuse, limits=lim,
                          cors_origins=origins)
    stopping = threading.Event()

    def _term(signum, frame):
        if not stopping.is_set():
            stopping.set()
            threading.Thread(target=app.httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, _term)
    signal.signal(signal.SIGINT, _term)
    auth = f"{len(keys)} API key(s)" if keys else "NO AUTHENTICATION (--no-auth)"
    print(f"autometrics collector listening on {app.url} (store: {app.store.shown_url}; {auth}; "
          f"langfuse: {'on' if app.langfuse else 'off'}; limits: {lim.describe()})", flush=True)
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

