"""The read API of the Langfuse TEST SERVER (tests/langfuse_server.py) — not Langfuse.

``GET /api/public/v2/observations`` and ``GET /api/public/v3/scores`` over what the server received,
as the spec (../shared/langfuse/openapi.yml) describes them; every page the server sends is
validated against the spec's response schema (``ObservationsV2Response``, ``GetScoresV3Response``)
and the tests parse it with the SDK's own generated models, so neither can drift from the
contract.  What the spec leaves to the server is done as Langfuse documents it:

- OTLP span → observation (Langfuse's "OpenTelemetry attribute mapping": ``langfuse.*`` first,
  then the GenAI conventions, then OpenInference): input from ``langfuse.observation.input``,
  ``gen_ai.input.messages``, ``gen_ai.prompt`` or ``input.value`` (sent back as a raw string: the
  v2 API returns input/output as strings); output likewise; ``providedModelName`` from
  ``langfuse.observation.model.name``, ``gen_ai.request.model``, ``gen_ai.response.model`` or
  ``llm.model_name``; ``usageDetails`` from ``gen_ai.usage.*`` (``input``/``output``/``total``);
  type from ``langfuse.observation.type``, else GENERATION when a model is named, else SPAN;
  level ERROR for an error status; ``userId``/``sessionId``/``tags`` are the trace's (from any of
  its spans' ``langfuse.user.id``/``user.id``, ``langfuse.session.id``/``session.id``,
  ``langfuse.trace.tags``), as the v2 API reports them on every observation of the trace.
- Field groups: ``core`` always, the others only when asked; an unknown group → 400; ``limit``
  over 1,000 (observations) or 100 (scores) → 400; ``parseIoAsJson=true`` → 400 (deprecated).
- Order newest first; the cursor is the base64url offset of the next page, absent on the last.
- Scores are read back as accepted (an id posted twice is one score: the later wins); dataType
  missing at creation → its config's, else NUMERIC for a number, CATEGORICAL for a string;
  BOOLEAN values are read back as true/false; the subject is the observation when one was named,
  else the trace (or the session).
- Filters: observations by ``fromStartTime``/``toStartTime``, ``traceId``, ``type``, ``name``,
  ``userId``, ``sessionId``; scores by ``name`` (comma list), ``fromTimestamp``/``toTimestamp``,
  ``traceId``, ``source``, ``dataType``.
"""

from __future__ import annotations

import base64
import datetime as dt
import json

from langfuse_server import SpecError

__all__ = ["read_page"]

_OBS_GROUPS = {"core", "basic", "time", "io", "metadata", "model", "usage", "prompt", "metrics", "trace_context"}
_SCORE_GROUPS = {"details", "subject", "annotation"}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _iso(ns: int | None) -> str | None:
    if not ns:
        return None
    t = _EPOCH + dt.timedelta(microseconds=ns // 1000)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _parse_time(v: str) -> dt.datetime:
    try:
        t = dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError as exc:
        raise SpecError(f"not a date-time: {v!r}") from exc
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


def _first(a: dict, *keys):
    for k in keys:
        if a.get(k) is not None:
            return a[k]
    return None


def _raw(v):
    return v if v is None or isinstance(v, str) else json.dumps(v)


def _int(q: dict, key: str, default: int, most: int) -> int:
    try:
        n = int(q.get(key, [default])[0])
    except ValueError as exc:
        raise SpecError(f"{key} must be an integer") from exc
    if not 1 <= n <= most:
        raise SpecError(f"{key} must be 1..{most}")
    return n


def _groups(q: dict, allowed: set, always: set) -> set:
    asked = {g.strip() for g in q.get("fields", [""])[0].split(",") if g.strip()}
    bad = asked - allowed
    if bad:
        raise SpecError(f"unknown field group(s) {sorted(bad)}")
    return asked | always


def _page(items: list, q: dict, most: int) -> tuple[list, str | None, int]:
    limit = _int(q, "limit", 50, most)
    cursor = q.get("cursor", [None])[0]
    try:
        start = int(base64.urlsafe_b64decode(cursor.encode()).decode()) if cursor else 0
    except (ValueError, UnicodeDecodeError) as exc:
        raise SpecError("bad cursor") from exc
    chunk = items[start:start + limit]
    more = start + limit < len(items)
    return chunk, base64.urlsafe_b64encode(str(start + limit).encode()).decode() if more else None, limit


def _trace_context(spans: list[dict]) -> dict:
    out: dict = {}
    for s in spans:
        a = s["attributes"]
        c = out.setdefault(s["trace_id"], {"userId": None, "sessionId": None, "tags": [], "traceName": None})
        c["userId"] = c["userId"] or _first(a, "langfuse.user.id", "user.id")
        c["sessionId"] = c["sessionId"] or _first(a, "langfuse.session.id", "session.id")
        for t in a.get("langfuse.trace.tags") or []:
            if t not in c["tags"]:
                c["tags"].append(t)
        if s["parent_span_id"] is None:
            c["traceName"] = a.get("langfuse.trace.name") or s["name"]
    return out


def _observation(s: dict, ctx: dict, groups: set) -> dict:
    a = s["attributes"]
    model = _first(a, "langfuse.observation.model.name", "gen_ai.request.model", "gen_ai.response.model", "llm.model_name")
    typ = str(a.get("langfuse.observation.type") or ("generation" if model else "span")).upper()
    o = {"id": s["span_id"], "traceId": s["trace_id"], "startTime": _iso(s.get("start_ns")), "endTime": _iso(s.get("end_ns")),
         "projectId": "test-project", "parentObservationId": s["parent_span_id"], "type": typ,
         # the spec lists these as required (nullable): sent with every observation
         "modelId": None, "inputPrice": None, "outputPrice": None, "totalPrice": None}
    c = ctx[s["trace_id"]]
    if "basic" in groups:
        error = s.get("status_code") == 2  # STATUS_CODE_ERROR
        o.update({"name": s["name"], "level": a.get("langfuse.observation.level") or ("ERROR" if error else "DEFAULT"),
                  "statusMessage": a.get("langfuse.observation.status_message") or s.get("status_message"),
                  "version": a.get("langfuse.version"), "environment": a.get("langfuse.environment") or "default",
                  "bookmarked": False, "public": False, "userId": c["userId"], "sessionId": c["sessionId"],
                  "isRootObservation": s["parent_span_id"] is None})
    if "io" in groups:
        o["input"] = _raw(_first(a, "langfuse.observation.input", "gen_ai.input.messages", "gen_ai.prompt", "input.value"))
        o["output"] = _raw(_first(a, "langfuse.observation.output", "gen_ai.output.messages", "gen_ai.completion", "output.value"))
    if "metadata" in groups:
        meta = {k[len("langfuse.observation.metadata."):]: v for k, v in a.items() if k.startswith("langfuse.observation.metadata.")}
        o["metadata"] = meta or None
    if "model" in groups:
        o.update({"providedModelName": model, "internalModelId": None, "modelParameters": None})
    if "usage" in groups:
        usage = {}
        if isinstance(a.get("gen_ai.usage.input_tokens"), int):
            usage["input"] = a["gen_ai.usage.input_tokens"]
        if isinstance(a.get("gen_ai.usage.output_tokens"), int):
            usage["output"] = a["gen_ai.usage.output_tokens"]
        if usage:
            usage["total"] = sum(usage.values())
        o.update({"usageDetails": usage or None, "costDetails": None, "totalCost": None})
    if "trace_context" in groups:
        o.update({"tags": c["tags"], "traceName": c["traceName"], "release": a.get("langfuse.release")})
    return o


def _observations(q: dict, spans: list[dict]) -> dict:
    if q.get("parseIoAsJson", ["false"])[0].lower() == "true":
        raise SpecError("parseIoAsJson is deprecated: input/output are always raw strings")
    groups = _groups(q, _OBS_GROUPS, {"core"})
    ctx = _trace_context(spans)
    lo = _parse_time(q["fromStartTime"][0]) if "fromStartTime" in q else None
    hi = _parse_time(q["toStartTime"][0]) if "toStartTime" in q else None
    want = {k: q[k][0] for k in ("traceId", "type", "name", "userId", "sessionId") if k in q}
    latest: dict = {}  # a span exported twice is one observation
    for s in spans:
        latest[(s["trace_id"], s["span_id"])] = s
    items = []
    for s in sorted(latest.values(), key=lambda s: (s.get("start_ns") or 0, s["span_id"]), reverse=True):
        start = _EPOCH + dt.timedelta(microseconds=(s.get("start_ns") or 0) // 1000)
        if (lo and start < lo) or (hi and start >= hi):
            continue
        o = _observation(s, ctx, groups | {"basic"})
        if any(str(o.get(k)) != v for k, v in want.items()):
            continue
        items.append(_observation(s, ctx, groups))
    chunk, cursor, _ = _page(items, q, 1000)
    return {"data": chunk, "meta": {"cursor": cursor}}


def _score(r: dict, groups: set) -> dict:
    v = r["value"]
    dtype = r.get("_data_type") or ("CATEGORICAL" if isinstance(v, str) else "NUMERIC")
    if dtype == "BOOLEAN":
        v = bool(v)
    src = r.get("source") or "API"
    out = {"id": r["id"], "projectId": "test-project", "name": r["name"], "source": src,
           "timestamp": r.get("timestamp") or r["_received"], "environment": r.get("environment") or "default",
           "createdAt": r["_received"], "updatedAt": r["_received"], "dataType": dtype, "value": v}
    if "details" in groups:
        out.update({"comment": r.get("comment"), "configId": r.get("configId"), "metadata": r.get("metadata")})
    if "subject" in groups:
        if r.get("observationId"):
            out["subject"] = {"kind": "observation", "id": r["observationId"], "traceId": r.get("traceId")}
        elif r.get("traceId"):
            out["subject"] = {"kind": "trace", "id": r["traceId"]}
        elif r.get("sessionId"):
            out["subject"] = {"kind": "session", "id": r["sessionId"]}
    if "annotation" in groups:
        out.update({"authorUserId": None, "queueId": r.get("queueId")})
    return out


def _scores(q: dict, records: list[dict]) -> dict:
    groups = _groups(q, _SCORE_GROUPS, set())
    latest: dict = {}
    for r in records:  # upsert by id: the later wins
        latest[r["id"]] = r
    names = {n for n in q.get("name", [""])[0].split(",") if n} if "name" in q else None
    lo = _parse_time(q["fromTimestamp"][0]) if "fromTimestamp" in q else None
    hi = _parse_time(q["toTimestamp"][0]) if "toTimestamp" in q else None
    traces = set(q["traceId"][0].split(",")) if "traceId" in q else None
    sources = {x.upper() for x in q["source"][0].split(",")} if "source" in q else None
    types = {x.upper() for x in q["dataType"][0].split(",")} if "dataType" in q else None
    items = []
    for r in sorted(latest.values(), key=lambda r: (r.get("timestamp") or r["_received"], r["id"]), reverse=True):
        s = _score(r, groups | {"subject"})
        t = _parse_time(s["timestamp"])
        if (names is not None and s["name"] not in names) or (lo and t < lo) or (hi and t >= hi):
            continue
        if traces is not None and r.get("traceId") not in traces:
            continue
        if (sources and s["source"] not in sources) or (types and s["dataType"] not in types):
            continue
        items.append(_score(r, groups))
    chunk, cursor, limit = _page(items, q, 100)
    return {"data": chunk, "meta": {"limit": limit, **({"cursor": cursor} if cursor else {})}}


def read_page(path: str, q: dict, spans: list[dict], records: list[dict]) -> tuple[dict, str]:
    """(body, response schema name) of one GET of the read API; SpecError → 400."""
    if path.endswith("/v2/observations"):
        return _observations(q, spans), "ObservationsV2Response"
    return _scores(q, records), "GetScoresV3Response"
