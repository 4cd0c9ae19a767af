"""A Langfuse-compatible TEST SERVER (loopback only) — not Langfuse.

No Langfuse server can run on this project's machines (its v3/v4 server needs ClickHouse >=
24.3 and Prisma engine downloads; see ../shared/langfuse/README.md), so everything that talks
to Langfuse is tested with the real ``langfuse`` 5.x SDK against this one server, used by both
the capture tests (tests/sdk, tests/collectors) and the continuous-evaluation tests (tests/evaluators/continuous).  It
answers the endpoints the SDK calls and checks every request the way Langfuse would:

- Basic auth with the configured key pair on every request (401 otherwise).
- ``POST /api/public/otel/v1/traces``: ``application/x-protobuf`` (gzip allowed), the
  ``x-langfuse-ingestion-version`` header, the body decoded as an OTLP
  ``ExportTraceServiceRequest``; the spans are kept (name, ids, attributes, resource) and the
  answer is an ``ExportTraceServiceResponse``.
- ``POST /api/public/scores``: a JSON array (the SDK 5.x batch form); every item is checked
  three ways: against the spec's ``CreateScoreRequest`` schema (plus ``timestamp``, which the
  SDK's own model has and the spec snapshot lacks), by the SDK's own generated model
  (``langfuse.api.scores.types.CreateScoreRequest``), and by the value/dataType and
  score-config rules Langfuse enforces (a score with ``configId`` must match the config's name
  and data type; a CATEGORICAL value must be one of its categories; NUMERIC within min/max).
  Answers 202 ``{"message": "Accepted"}`` or 207 ``{accepted, rejected, errors}``.
- ``POST /api/public/score-configs`` (checked against ``CreateScoreConfigRequest`` and the
  documented name rule: <= 35 chars of letters, digits, ``_ .()-`` and spaces; a duplicate name
  is refused) and ``GET /api/public/score-configs?page=&limit=``.

Responses are validated against the spec's response schemas too (a mismatch is recorded in
``errors`` as a server bug), so the server cannot drift from what the SDK parses.

Failures, for the tests of what happens when Langfuse misbehaves:

- ``fail_with(status, paths=None)``: answer ``status`` (e.g. 500, 503) to every request, or only
  to the given paths; ``recover()`` ends it.  Refused requests are counted in ``failed_requests``.
- ``go_down()``: stop listening and cut open keep-alive connections (connection refused, as a
  crashed server); ``come_up()``: listen again on the same port.

Everything received is kept in memory for assertions (``spans``, ``scores``, ``configs``,
``requests``, ``errors``); ``score_id_counts()`` shows whether a score id arrived twice.
"""

from __future__ import annotations

import base64
import collections
import datetime as dt
import gzip
import json
import os
import re
import socket
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

__all__ = ["LangfuseTestServer", "OpenAPIValidator", "SpecError", "load_spec", "spec_path"]

OTLP_PATH = "/api/public/otel/v1/traces"
SCORES_PATH = "/api/public/scores"
CONFIGS_PATH = "/api/public/score-configs"
READ_PATHS = ("/api/public/v2/observations", "/api/public/v3/scores")  # answered by tests/langfuse_reads.py


def spec_path() -> Path:
    """Langfuse's OpenAPI spec in the shared folder ($AUTOMETRICS_SHARED, else ../shared)."""
    shared = os.environ.get("AUTOMETRICS_SHARED") or Path(__file__).resolve().parents[2] / "shared"
    return Path(shared) / "langfuse" / "openapi.yml"


def load_spec(path: Path | None = None) -> dict:
    import yaml

    return yaml.safe_load((path or spec_path()).read_text(encoding="utf-8"))


class SpecError(ValueError):
    """A body that breaks Langfuse's API spec or its documented rules."""


class OpenAPIValidator:
    """The subset of OpenAPI 3 schema validation the Langfuse spec uses: $ref, type, nullable,
    enum, required, properties, additionalProperties, items, oneOf/anyOf/allOf."""

    _TYPES = {
        "string": lambda v: isinstance(v, str),
        "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        "array": lambda v: isinstance(v, list),
        "object": lambda v: isinstance(v, dict),
    }

    def __init__(self, spec: dict):
        self.spec = spec

    def schema(self, name: str) -> dict:
        return self.spec["components"]["schemas"][name]

    def request_schema(self, path: str, method: str) -> dict:
        return self.spec["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]

    def resolve(self, s: dict) -> dict:
        while "$ref" in s:
            s = self.schema(s["$ref"].rsplit("/", 1)[-1])
        return s

    def _all_props(self, s: dict) -> dict:
        """Properties of a schema and of everything it composes with allOf."""
        props = dict(s.get("properties", {}))
        for sub in s.get("allOf", []):
            props.update(self._all_props(self.resolve(sub)))
        return props

    def validate(self, value, schema: dict, where: str = "$", _part: bool = False) -> None:
        """``_part``: ``schema`` is one member of an allOf, whose own properties need not cover the
        object's (the composition's union is checked once, by the composing schema)."""
        s = self.resolve(schema)
        if value is None:
            if schema.get("nullable") or s.get("nullable"):
                return
            raise SpecError(f"{where}: null not allowed")
        for key in ("oneOf", "anyOf"):
            if key not in s:
                continue
            problems = []
            for sub in s[key]:
                try:
                    self.validate(value, sub, where)
                    break
                except SpecError as exc:
                    problems.append(str(exc))
            else:
                raise SpecError(f"{where}: matches none of {key}: {problems}")
        for sub in s.get("allOf", []):
            self.validate(value, sub, where, _part=True)
        t = s.get("type")
        if t and not self._TYPES[t](value):
            raise SpecError(f"{where}: expected {t}, got {type(value).__name__}")
        if "enum" in s and value not in s["enum"]:
            raise SpecError(f"{where}: {value!r} not in {s['enum']}")
        if t == "object" or "properties" in s:
            for req in s.get("required", []):
                if req not in value:
                    raise SpecError(f"{where}: missing required {req!r}")
            props = s.get("properties", {})
            known = self._all_props(s)
            for k, v in value.items():
                if k in props:
                    self.validate(v, props[k], f"{where}.{k}")
                elif s.get("additionalProperties") is False:
                    raise SpecError(f"{where}: unknown property {k!r}")
                elif known and s.get("additionalProperties") is None and not _part and k not in known:
                    raise SpecError(f"{where}: property {k!r} is not in the spec's schema")
        if t == "array" and "items" in s:
            for i, item in enumerate(value):
                self.validate(item, s["items"], f"{where}[{i}]")


# Where SDK 5.2 and the spec snapshot differ, follow the SDK's own model (see
# ../shared/langfuse/README.md): its CreateScoreRequest also sends ``timestamp``.
SDK_EXTRA_SCORE_FIELDS = {"timestamp"}

_CONFIG_NAME = re.compile(r"^[A-Za-z0-9_ .()\-]{1,35}$")


def _otlp_value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_otlp_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _otlp_value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind) if kind else None


def _now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat().replace("+00:00", "Z")


class LangfuseTestServer:
    """See the module docstring.  ``with LangfuseTestServer(...) as srv: ... srv.url``."""

    def __init__(self, public_key: str = "pk-lf-test", secret_key: str = "sk-lf-test"):
        self.public_key, self.secret_key = public_key, secret_key
        self.validator = OpenAPIValidator(load_spec())
        self.spans: list[dict] = []
        self.scores: list[dict] = []
        self.score_records: list[dict] = []  # what the read API serves: each accepted score with its id and times
        self.configs: dict[str, dict] = {}
        self.errors: list[str] = []
        self.requests: list[tuple[str, str]] = []
        self.otel_requests = 0
        self.failed_requests = 0
        self.fail_status: int | None = None
        self.fail_paths: set[str] | None = None
        self.lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._handler = self._make_handler()
        self.port = 0
        self.httpd: ThreadingHTTPServer | None = None
        self.thread: threading.Thread | None = None

    # ---- lifecycle
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _listen(self) -> None:
        httpd = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler)  # allow_reuse_address: same port again
        httpd.daemon_threads = True
        self.port = httpd.server_address[1]
        self.httpd = httpd
        self.thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True,
                                       name="langfuse-test-server")
        self.thread.start()

    def _close(self) -> None:
        if self.httpd is None:
            return
        self.httpd.shutdown()
        self.httpd.server_close()
        self.httpd = None
        with self.lock:
            conns, self._conns = list(self._conns), set()
        for c in conns:  # keep-alive connections would otherwise still be served
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def go_down(self) -> None:
        """Stop listening and cut every open connection: clients get connection refused/reset."""
        self._close()

    def come_up(self) -> None:
        """Listen again on the same port (after :meth:`go_down`)."""
        if self.httpd is None:
            self._listen()

    def fail_with(self, status: int = 503, paths=None) -> None:
        """Answer ``status`` to every request (or only to ``paths``) until :meth:`recover`."""
        self.fail_status, self.fail_paths = int(status), (set(paths) if paths else None)

    def recover(self) -> None:
        self.fail_status, self.fail_paths = None, None

    def __enter__(self):
        self._listen()
        return self

    def __exit__(self, *exc):
        self._close()

    # ---- assertions helpers
    def config_by_name(self, name: str) -> dict | None:
        return next((c for c in self.configs.values() if c["name"] == name), None)

    def score_id_counts(self) -> collections.Counter:
        """How many times each score id was accepted (Langfuse upserts by id; >1 = sent twice)."""
        with self.lock:
            return collections.Counter(s.get("id") for s in self.scores)

    # ---- request handling
    def _make_handler(self):
        srv = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def setup(self):
                super().setup()
                with srv.lock:
                    srv._conns.add(self.connection)

            def finish(self):
                with srv.lock:
                    srv._conns.discard(self.connection)
                try:
                    super().finish()
                except OSError:
                    pass

            def _send(self, code: int, body: bytes, ctype: str = "application/json"):
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _reply(self, code: int, obj, schema: str | None = None):
                if schema:
                    try:
                        srv.validator.validate(obj, {"$ref": f"#/components/schemas/{schema}"}, f"response {schema}")
                    except SpecError as exc:
                        with srv.lock:
                            srv.errors.append(f"server bug: {exc}")
                self._send(code, json.dumps(obj).encode())

            def _bad(self, code: int, msg: str):
                with srv.lock:
                    srv.errors.append(f"{self.command} {self.path}: {msg}")
                self._reply(code, {"message": msg})

            def _admit(self, path: str) -> bool:
                """Auth, then the injected failure; False when the request was answered already."""
                expected = "Basic " + base64.b64encode(f"{srv.public_key}:{srv.secret_key}".encode()).decode()
                if self.headers.get("Authorization") != expected:
                    self._bad(401, "invalid credentials")
                    return False
                status = srv.fail_status
                if status is not None and (srv.fail_paths is None or path in srv.fail_paths):
                    with srv.lock:
                        srv.failed_requests += 1
                    self._send(status, json.dumps({"message": f"test server failing with {status}"}).encode())
                    return False
                return True

            def do_GET(self):
                with srv.lock:
                    srv.requests.append(("GET", self.path))
                u = urlparse(self.path)
                if not self._admit(u.path):
                    return
                if u.path in READ_PATHS:
                    from langfuse_reads import read_page

                    with srv.lock:
                        spans, records = list(srv.spans), list(srv.score_records)
                    try:
                        body, schema = read_page(u.path, parse_qs(u.query), spans, records)
                    except SpecError as exc:
                        return self._bad(400, str(exc))
                    return self._reply(200, body, schema)
                if u.path == CONFIGS_PATH:
                    q = parse_qs(u.query)
                    page, limit = int(q.get("page", ["1"])[0]), int(q.get("limit", ["50"])[0])
                    with srv.lock:
                        items = list(srv.configs.values())
                    chunk = items[(page - 1) * limit: page * limit]
                    pages = max(1, -(-len(items) // limit))
                    meta = {"page": page, "limit": limit, "totalItems": len(items), "totalPages": pages}
                    return self._reply(200, {"data": chunk, "meta": meta}, "ScoreConfigs")
                self._bad(404, "not found")

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with srv.lock:
                    srv.requests.append(("POST", self.path))
                path = urlparse(self.path).path
                if not self._admit(path):
                    return
                if self.headers.get("Content-Encoding") == "gzip":
                    try:
                        body = gzip.decompress(body)
                    except OSError:
                        return self._bad(400, "bad gzip body")
                if path == OTLP_PATH:
                    return self._traces(body)
                try:
                    payload = json.loads(body)
                except ValueError:
                    return self._bad(400, "not JSON")
                if path == CONFIGS_PATH:
                    return self._create_config(payload)
                if path == SCORES_PATH:
                    return self._scores(payload)
                self._bad(404, "not found")

            # -- OTLP spans
            def _traces(self, body: bytes):
                from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
                    ExportTraceServiceRequest,
                    ExportTraceServiceResponse,
                )

                with srv.lock:
                    srv.otel_requests += 1
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
                    resource = {kv.key: _otlp_value(kv.value) for kv in rs.resource.attributes}
                    for ss in rs.scope_spans:
                        for sp in ss.spans:
                            if len(sp.trace_id) != 16 or len(sp.span_id) != 8:
                                return self._bad(400, "bad trace/span ids")
                            got.append({"name": sp.name, "scope": ss.scope.name, "trace_id": sp.trace_id.hex(),
                                        "span_id": sp.span_id.hex(), "parent_span_id": sp.parent_span_id.hex() or None,
                                        "resource": resource, "attributes": {kv.key: _otlp_value(kv.value) for kv in sp.attributes},
                                        "start_ns": sp.start_time_unix_nano, "end_ns": sp.end_time_unix_nano,
                                        "status_code": sp.status.code, "status_message": sp.status.message or None})
                with srv.lock:
                    srv.spans.extend(got)
                self._send(200, ExportTraceServiceResponse().SerializeToString(), "application/x-protobuf")

            # -- score configs
            def _create_config(self, payload):
                try:
                    srv.validator.validate(payload, srv.validator.request_schema(CONFIGS_PATH, "post"), "config")
                    if not _CONFIG_NAME.match(payload["name"]):
                        raise SpecError(f"config name {payload['name']!r} breaks the 35-char/charset rule")
                    if payload["dataType"] == "CATEGORICAL" and not payload.get("categories"):
                        raise SpecError("CATEGORICAL config needs categories")
                    with srv.lock:
                        if any(c["name"] == payload["name"] for c in srv.configs.values()):
                            raise SpecError(f"config {payload['name']!r} already exists (duplicate create)")
                except SpecError as exc:
                    return self._bad(400, str(exc))
                now = _now_iso()
                cfg = {"id": uuid.uuid4().hex, "name": payload["name"], "createdAt": now, "updatedAt": now, "projectId": "test-project",
                       "dataType": payload["dataType"], "isArchived": False, "minValue": payload.get("minValue"),
                       "maxValue": payload.get("maxValue"), "categories": payload.get("categories"),
                       "description": payload.get("description")}
                with srv.lock:
                    srv.configs[cfg["id"]] = cfg
                self._reply(200, cfg, "ScoreConfig")

            # -- scores
            def _scores(self, items):
                if not isinstance(items, list) or not items:
                    return self._bad(400, "expected a non-empty JSON array of scores (SDK 5.x batch form)")
                schema = srv.validator.request_schema(SCORES_PATH, "post")
                known = set(srv.validator.resolve(schema)["properties"])
                accepted, problems = [], []
                for i, item in enumerate(items):
                    try:
                        if not isinstance(item, dict):
                            raise SpecError(f"score[{i}]: not an object")
                        extra = set(item) - known - SDK_EXTRA_SCORE_FIELDS
                        if extra:
                            raise SpecError(f"score[{i}]: properties {sorted(extra)} are in neither the spec nor the SDK's model")
                        if "timestamp" in item:
                            dt.datetime.fromisoformat(str(item["timestamp"]).replace("Z", "+00:00"))  # SDK field: ISO 8601
                        srv.validator.validate({k: v for k, v in item.items() if k not in SDK_EXTRA_SCORE_FIELDS}, schema, f"score[{i}]")
                        _sdk_model(item)
                        self._score_rules(item)
                        accepted.append(item)
                    except (SpecError, ValueError) as exc:
                        problems.append({"message": str(exc)[:300]})
                now = _now_iso()
                records = [{**item, "id": item.get("id") or uuid.uuid4().hex, "_received": now,
                            "_data_type": item.get("dataType") or (srv.configs[item["configId"]]["dataType"] if item.get("configId")
                                                                   else None)} for item in accepted]
                with srv.lock:
                    srv.scores.extend(accepted)
                    srv.score_records.extend(records)
                    srv.errors.extend(p["message"] for p in problems)
                if problems:
                    return self._reply(207, {"accepted": len(accepted), "rejected": len(problems), "errors": problems})
                self._reply(202, {"message": "Accepted"})

            def _score_rules(self, item):
                data_type = item.get("dataType")
                v = item["value"]
                if not (item.get("traceId") or item.get("sessionId") or item.get("datasetRunId")):
                    raise SpecError("score needs traceId, sessionId or datasetRunId")
                cfg = srv.configs.get(item.get("configId")) if item.get("configId") else None
                if item.get("configId") and cfg is None:
                    raise SpecError(f"unknown configId {item['configId']}")
                if cfg:
                    if cfg["name"] != item["name"]:
                        raise SpecError(f"score name {item['name']!r} does not match config {cfg['name']!r}")
                    if data_type and data_type != cfg["dataType"]:
                        raise SpecError(f"dataType {data_type} does not match config {cfg['dataType']}")
                    data_type = cfg["dataType"]
                    if data_type == "CATEGORICAL" and v not in [c["label"] for c in cfg["categories"] or []]:
                        raise SpecError(f"value {v!r} is not a category of {cfg['name']!r}")
                    if data_type == "NUMERIC" and ((cfg.get("minValue") is not None and v < cfg["minValue"])
                                                   or (cfg.get("maxValue") is not None and v > cfg["maxValue"])):
                        raise SpecError(f"value {v} outside the config's range")
                if data_type in ("NUMERIC", "BOOLEAN", None) and not isinstance(v, int | float):
                    raise SpecError(f"{data_type or 'NUMERIC'} score needs a numeric value")
                if data_type == "BOOLEAN" and v not in (0, 1):
                    raise SpecError("BOOLEAN score must be 0 or 1")
                if data_type in ("CATEGORICAL", "TEXT", "CORRECTION") and not isinstance(v, str):
                    raise SpecError(f"{data_type} score needs a string value")

        return Handler


def _sdk_model(item: dict) -> None:
    """Parse a score with the SDK's own generated model (what a real server's client contract is)."""
    from langfuse.api.core.pydantic_utilities import parse_obj_as
    from langfuse.api.scores.types.create_score_request import CreateScoreRequest

    try:
        parse_obj_as(CreateScoreRequest, item)
    except Exception as exc:
        raise SpecError(f"the SDK's CreateScoreRequest model refuses it: {str(exc)[:200]}") from exc
