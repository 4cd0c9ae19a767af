"""A Langfuse-compatible TEST SERVER (loopback only) — not Langfuse.

No Langfuse server can run on this project's machines (see ../shared/langfuse/README.md), so
the push of online scores is tested with the real ``langfuse`` SDK against this server.  It
implements the endpoints the SDK calls for it and validates every request body against
Langfuse's published OpenAPI spec (``../shared/langfuse/openapi.yml``):

- ``POST /api/public/scores``: the SDK 5.x sends a JSON array; each item is validated against
  the spec's ``CreateScoreRequest`` schema (plus ``timestamp``, which the SDK's own model has
  and the spec snapshot lacks) plus the value/dataType rules in its description and
  the config rules Langfuse enforces (a score with ``configId`` must match the config's name and
  data type; a CATEGORICAL value must be one of its categories; NUMERIC within min/max).
  Answers 202 ``{"message": "Accepted"}`` or 207 ``{accepted, rejected, errors}`` (the SDK's
  ``CreateScoresResponse``).
- ``POST /api/public/score-configs``: validated against ``CreateScoreConfigRequest`` (and the
  documented name rule: <= 35 chars of letters, digits, ``_ .()-`` and spaces); answers a
  ``ScoreConfig``.  ``GET /api/public/score-configs?page=&limit=`` answers ``ScoreConfigs``.
- ``POST /api/public/otel/v1/traces``: accepted and counted (spans are tested elsewhere).

Responses are validated against the spec's response schemas too, so the server cannot drift
from what the SDK parses.  Basic auth with the configured key pair on every request.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

SPEC_PATH = Path(__file__).resolve().parents[3] / "shared" / "langfuse" / "openapi.yml"


def load_spec(path: Path | None = None) -> dict:
    import os

    import yaml

    p = path or Path(os.environ.get("AUTOMETRICS_SHARED", SPEC_PATH.parents[1])) / "langfuse" / "openapi.yml"
    return yaml.safe_load(p.read_text(encoding="utf-8"))


class SpecError(ValueError):
    pass


class OpenAPIValidator:
    """The subset of OpenAPI 3 schema validation the Langfuse spec uses: $ref, type, nullable,
    enum, required, properties, additionalProperties, items, oneOf/anyOf/allOf."""

    def __init__(self, spec: dict):
        self.spec = spec

    def schema(self, name: str) -> dict:
        return self.spec["components"]["schemas"][name]

    def request_schema(self, path: str, method: str) -> dict:
        op = self.spec["paths"][path][method]
        return op["requestBody"]["content"]["application/json"]["schema"]

    def _resolve(self, s: dict) -> dict:
        while "$ref" in s:
            s = self.schema(s["$ref"].rsplit("/", 1)[-1])
        return s

    def validate(self, value, schema: dict, where: str = "$") -> None:
        nullable = schema.get("nullable", False)
        s = self._resolve(schema)
        nullable = nullable or s.get("nullable", False)
        if value is None:
            if nullable:
                return
            raise SpecError(f"{where}: null not allowed")
        for key in ("oneOf", "anyOf"):
            if key in s:
                errs = []
                for sub in s[key]:
                    try:
                        self.validate(value, sub, where)
                        break
                    except SpecError as exc:
                        errs.append(str(exc))
                else:
                    raise SpecError(f"{where}: matches none of {key}: {errs}")
        for sub in s.get("allOf", []):
            self.validate(value, sub, where)
        t = s.get("type")
        checks = {"string": lambda v: isinstance(v, str), "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
                  "integer": lambda v: isinstance(v, int) and not isinstance(v, bool), "boolean": lambda v: isinstance(v, bool),
                  "array": lambda v: isinstance(v, list), "object": lambda v: isinstance(v, dict)}
        if t and not checks[t](value):
            raise SpecError(f"{where}: expected {t}, got {type(value).__name__}")
        if "enum" in s and value not in s["enum"]:
            raise SpecError(f"{where}: {value!r} not in {s['enum']}")
        if t == "object" or "properties" in s:
            for req in s.get("required", []):
                if req not in value:
                    raise SpecError(f"{where}: missing required {req!r}")
            props = s.get("properties", {})
            for k, v in value.items():
                if k in props:
                    self.validate(v, props[k], f"{where}.{k}")
                elif s.get("additionalProperties") is False:
                    raise SpecError(f"{where}: unknown property {k!r}")
                elif props and s.get("additionalProperties") is None and not s.get("allOf"):
                    raise SpecError(f"{where}: property {k!r} is not in the spec's schema")
        if t == "array" and "items" in s:
            for i, it in enumerate(value):
                self.validate(it, s["items"], f"{where}[{i}]")


# Where SDK 5.2 and the spec snapshot differ, follow the SDK's own model (see
# ../shared/langfuse/README.md): its CreateScoreRequest also sends ``timestamp``.
SDK_EXTRA_SCORE_FIELDS = {"timestamp"}

_CONFIG_NAME = re.compile(r"^[A-Za-z0-9_ .()\-]{1,35}$")


class LangfuseSpecServer:
    def __init__(self, public_key: str = "pk-lf-test", secret_key: str = "sk-lf-test"):
        self.public_key, self.secret_key = public_key, secret_key
        self.validator = OpenAPIValidator(load_spec())
        self.scores: list[dict] = []
        self.configs: dict[str, dict] = {}
        self.errors: list[str] = []
        self.requests: list[tuple[str, str]] = []
        self.otel_requests = 0
        self.lock = threading.Lock()
        srv = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _reply(self, code, obj, schema: str | None = None):
                if schema:
                    try:
                        srv.validator.validate(obj, {"$ref": f"#/components/schemas/{schema}"}, f"response {schema}")
                    except SpecError as exc:
                        srv.errors.append(f"server bug: {exc}")
                body = json.dumps(obj).encode() if not isinstance(obj, bytes) else obj
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _bad(self, code, msg):
                with srv.lock:
                    srv.errors.append(f"{self.command} {self.path}: {msg}")
                self._reply(code, {"message": msg})

            def _auth(self) -> bool:
                expected = "Basic " + base64.b64encode(f"{srv.public_key}:{srv.secret_key}".encode()).decode()
                if self.headers.get("Authorization") != expected:
                    self._bad(401, "invalid credentials")
                    return False
                return True

            def do_GET(self):
                with srv.lock:
                    srv.requests.append(("GET", self.path))
                if not self._auth():
                    return
                u = urlparse(self.path)
                if u.path == "/api/public/score-configs":
                    q = parse_qs(u.query)
                    page, limit = int(q.get("page", ["1"])[0]), int(q.get("limit", ["50"])[0])
                    items = list(srv.configs.values())
                    chunk = items[(page - 1) * limit: page * limit]
                    pages = max(1, -(-len(items) // limit))
                    return self._reply(200, {"data": chunk, "meta": {"page": page, "limit": limit, "totalItems": len(items),
                                                                      "totalPages": pages}}, "ScoreConfigs")
                self._bad(404, "not found")

            def do_POST(self):
                import gzip

                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with srv.lock:
                    srv.requests.append(("POST", self.path))
                if not self._auth():
                    return
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path == "/api/public/otel/v1/traces":
                    with srv.lock:
                        srv.otel_requests += 1
                    self.send_response(200)
                    self.send_header("Content-Type", "application/x-protobuf")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                try:
                    payload = json.loads(body)
                except ValueError:
                    return self._bad(400, "not JSON")
                if self.path == "/api/public/score-configs":
                    return self._create_config(payload)
                if self.path == "/api/public/scores":
                    return self._scores(payload)
                self._bad(404, "not found")

            def _create_config(self, payload):
                try:
                    srv.validator.validate(payload, srv.validator.request_schema("/api/public/score-configs", "post"), "config")
                    if not _CONFIG_NAME.match(payload["name"]):
                        raise SpecError(f"config name {payload['name']!r} breaks the 35-char/charset rule")
                    if payload["dataType"] == "CATEGORICAL" and not payload.get("categories"):
                        raise SpecError("CATEGORICAL config needs categories")
                    with srv.lock:
                        if any(c["name"] == payload["name"] for c in srv.configs.values()):
                            raise SpecError(f"config {payload['name']!r} already exists (duplicate create)")
                except SpecError as exc:
                    return self._bad(400, str(exc))
                now = dt.datetime.now(dt.timezone.utc).isoformat().replace("+00:00", "Z")
                cfg = {"id": uuid.uuid4().hex, "name": payload["name"], "createdAt": now, "updatedAt": now, "projectId": "test-project",
                       "dataType": payload["dataType"], "isArchived": False, "minValue": payload.get("minValue"),
                       "maxValue": payload.get("maxValue"), "categories": payload.get("categories"),
                       "description": payload.get("description")}
                with srv.lock:
                    srv.configs[cfg["id"]] = cfg
                self._reply(200, cfg, "ScoreConfig")

            def _scores(self, items):
                if not isinstance(items, list) or not items:
                    return self._bad(400, "expected a non-empty JSON array of scores (SDK 5.x batch form)")
                schema = srv.validator.request_schema("/api/public/scores", "post")
                accepted, errs = [], []
                for i, it in enumerate(items):
                    try:
                        extra = set(it) - set(srv.validator._resolve(schema)["properties"])
                        if extra - SDK_EXTRA_SCORE_FIELDS:
                            raise SpecError(f"score[{i}]: properties {sorted(extra)} are in neither the spec nor the SDK's model")
                        if "timestamp" in it:
                            dt.datetime.fromisoformat(it["timestamp"].replace("Z", "+00:00"))  # SDK field: ISO 8601
                        srv.validator.validate({k: v for k, v in it.items() if k not in SDK_EXTRA_SCORE_FIELDS}, schema, f"score[{i}]")
                        self._score_rules(it)
                        accepted.append(it)
                    except SpecError as exc:
                        errs.append({"message": str(exc)[:300]})
                with srv.lock:
                    srv.scores.extend(accepted)
                    srv.errors.extend(e["message"] for e in errs)
                if errs:
                    return self._reply(207, {"accepted": len(accepted), "rejected": len(errs), "errors": errs})
                self._reply(202, {"message": "Accepted"})

            def _score_rules(self, it):
                dt_ = it.get("dataType")
                v = it["value"]
                if not (it.get("traceId") or it.get("sessionId") or it.get("datasetRunId")):
                    raise SpecError("score needs traceId, sessionId or datasetRunId")
                cfg = srv.configs.get(it.get("configId")) if it.get("configId") else None
                if it.get("configId") and cfg is None:
                    raise SpecError(f"unknown configId {it['configId']}")
                if cfg:
                    if cfg["name"] != it["name"]:
                        raise SpecError(f"score name {it['name']!r} does not match config {cfg['name']!r}")
                    if dt_ and dt_ != cfg["dataType"]:
                        raise SpecError(f"dataType {dt_} does not match config {cfg['dataType']}")
                    dt_ = cfg["dataType"]
                    if dt_ == "CATEGORICAL" and v not in [c["label"] for c in cfg["categories"] or []]:
                        raise SpecError(f"value {v!r} is not a category of {cfg['name']!r}")
                    if dt_ == "NUMERIC" and ((cfg.get("minValue") is not None and v < cfg["minValue"])
                                            or (cfg.get("maxValue") is not None and v > cfg["maxValue"])):
                        raise SpecError(f"value {v} outside the config's range")
                if dt_ in ("NUMERIC", "BOOLEAN", None) and not isinstance(v, int | float):
                    raise SpecError(f"{dt_ or 'NUMERIC'} score needs a numeric value")
                if dt_ == "BOOLEAN" and v not in (0, 1):
                    raise SpecError("BOOLEAN score must be 0 or 1")
                if dt_ in ("CATEGORICAL", "TEXT", "CORRECTION") and not isinstance(v, str):
                    raise SpecError(f"{dt_} score needs a string value")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def config_by_name(self, name: str) -> dict | None:
        return next((c for c in self.configs.values() if c["name"] == name), None)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
