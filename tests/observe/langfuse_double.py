"""A Langfuse-compatible TEST DOUBLE (loopback only) — not Langfuse.

No Langfuse server can run on this project's machines (its v3/v4 server needs ClickHouse >=
24.3 and Prisma engine downloads; see ../shared/langfuse/README.md), so the Langfuse export is
tested with the real ``langfuse`` 5.x SDK against this small server.  It accepts the two
endpoints SDK 5.2 was captured using (../shared/langfuse/sdk5-captured-requests.jsonl) and
checks requests the way Langfuse would:

- ``POST /api/public/otel/v1/traces``: Basic auth with the configured key pair, the
  ``x-langfuse-ingestion-version`` header, ``application/x-protobuf`` (gzip allowed), body
  decoded as an OTLP ``ExportTraceServiceRequest``; answers an ``ExportTraceServiceResponse``.
- ``POST /api/public/scores``: Basic auth, a JSON array, every item parsed with the SDK's own
  generated model (``langfuse.api.scores.types.CreateScoreRequest``) plus the value/dataType
  rules of the API spec; answers 202 ``{"message": "Accepted"}`` (or 207 with errors), as the
  SDK's ``CreateScoresResponse`` expects.

Everything received is kept in memory for assertions; ``fail=True`` makes it answer 503.
"""

from __future__ import annotations

import base64
import gzip
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _any(v):
    w = v.WhichOneof("value")
    if w == "array_value":
        return [_any(x) for x in v.array_value.values]
    if w == "kvlist_value":
        return {kv.key: _any(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, w) if w else None


class LangfuseDouble:
    def __init__(self, public_key: str = "pk-lf-test", secret_key: str = "sk-lf-test"):
        self.public_key = public_key
        self.secret_key = secret_key
        self.spans: list[dict] = []
        self.scores: list[dict] = []
        self.errors: list[str] = []
        self.requests: list[tuple[str, str]] = []
        self.fail = False
        self.lock = threading.Lock()
        double = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _reply(self, code, body: bytes, ctype="application/json"):
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _bad(self, code, msg):
                with double.lock:
                    double.errors.append(f"{self.path}: {msg}")
                self._reply(code, json.dumps({"message": msg}).encode())

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with double.lock:
                    double.requests.append(("POST", self.path))
                expected = "Basic " + base64.b64encode(f"{double.public_key}:{double.secret_key}".encode()).decode()
                if self.headers.get("Authorization") != expected:
                    return self._bad(401, "invalid credentials")
                if double.fail:
                    return self._reply(503, b'{"message": "unavailable"}')
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path == "/api/public/otel/v1/traces":
                    return self._traces(body)
                if self.path == "/api/public/scores":
                    return self._scores(body)
                return self._bad(404, "not found")

            def _traces(self, body):
                from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
                    ExportTraceServiceRequest,
                    ExportTraceServiceResponse,
                )

                if self.headers.get("Content-Type") != "application/x-protobuf":
                    return self._bad(415, "content-type must be application/x-protobuf")
                if not self.headers.get("x-langfuse-ingestion-version"):
                    return self._bad(400, "missing x-langfuse-ingestion-version")
                req = ExportTraceServiceRequest()
                try:
                    req.ParseFromString(body)
                except Exception as exc:
                    return self._bad(400, f"not OTLP protobuf: {exc}")
                got = []
                for rs in req.resource_spans:
                    res = {kv.key: _any(kv.value) for kv in rs.resource.attributes}
                    for ss in rs.scope_spans:
                        for sp in ss.spans:
                            if len(sp.trace_id) != 16 or len(sp.span_id) != 8:
                                return self._bad(400, "bad ids")
                            got.append({"name": sp.name, "scope": ss.scope.name, "trace_id": sp.trace_id.hex(), "span_id": sp.span_id.hex(),
                                        "parent_span_id": sp.parent_span_id.hex() or None, "resource": res,
                                        "attributes": {kv.key: _any(kv.value) for kv in sp.attributes}})
                with double.lock:
                    double.spans.extend(got)
                self._reply(200, ExportTraceServiceResponse().SerializeToString(), "application/x-protobuf")

            def _scores(self, body):
                from langfuse.api.core.pydantic_utilities import parse_obj_as
                from langfuse.api.scores.types.create_score_request import CreateScoreRequest

                try:
                    items = json.loads(body)
                except ValueError:
                    return self._bad(400, "not JSON")
                if not isinstance(items, list) or not items:
                    return self._bad(400, "expected a non-empty JSON array of scores")
                accepted, errs = [], []
                for it in items:
                    try:
                        model = parse_obj_as(CreateScoreRequest, it)
                        dt = it.get("dataType")
                        v = it["value"]
                        if dt in ("NUMERIC", "BOOLEAN") and not isinstance(v, int | float):
                            raise ValueError(f"{dt} score needs a numeric value")
                        if dt == "BOOLEAN" and v not in (0, 1):
                            raise ValueError("BOOLEAN score must be 0 or 1")
                        if dt in ("CATEGORICAL", "CORRECTION", "TEXT") and not isinstance(v, str):
                            raise ValueError(f"{dt} score needs a string value")
                        if not (model.trace_id or model.session_id or model.dataset_run_id):
                            raise ValueError("score needs traceId, sessionId or datasetRunId")
                        accepted.append(it)
                    except Exception as exc:
                        errs.append({"message": str(exc)[:200]})
                with double.lock:
                    double.scores.extend(accepted)
                    double.errors.extend(e["message"] for e in errs)
                if errs:
                    return self._reply(207, json.dumps({"accepted": len(accepted), "rejected": len(errs), "errors": errs}).encode())
                self._reply(202, json.dumps({"message": "Accepted"}).encode())

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
