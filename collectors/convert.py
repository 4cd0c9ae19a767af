"""Spans -> trace-store rows, from in-process OpenTelemetry spans or from OTLP requests.

Both paths share :func:`span_row`, so a span recorded by ``@observe`` in this process and one
sent over OTLP by an application in another language are stored identically.  What a fit needs
(plain input/output text, model, token usage, error) is pulled out of the OpenTelemetry GenAI
semantic-convention attributes at ingest; the full attribute set is kept as JSON.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable

__all__ = ["span_row", "rows_from_readable_spans", "rows_from_otlp", "parse_otlp_json", "messages_text"]

_KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
_STATUS = {0: "UNSET", 1: "OK", 2: "ERROR"}
# Where other conventions put content, in order of preference (GenAI semconv first).
_INPUT_KEYS = ("gen_ai.input.messages", "gen_ai.prompt", "langfuse.observation.input", "input.value")
_OUTPUT_KEYS = ("gen_ai.output.messages", "gen_ai.completion", "langfuse.observation.output", "output.value")


def messages_text(value) -> str | None:
    """Plain text of a GenAI-semconv message list (``[{"role", "parts": [{"type": "text", "content"}]}]``).

    Older shapes (``{"role", "content"}``) and plain strings are accepted; a ``tool_call`` part
    (an LLM client span whose answer is a tool call) becomes ``{"tool_call", "arguments"}`` JSON;
    anything else is returned as its JSON text so nothing captured is silently dropped.
    """
    if value is None:
        return None
    if isinstance(value, str):
        s = value.strip()
        if not s or s[0] not in "[{":
            return value
        try:
            value = json.loads(s)
        except ValueError:
            return value
    msgs = value if isinstance(value, list) else [value]
    texts: list[str] = []
    for m in msgs:
        if isinstance(m, str):
            texts.append(m)
            continue
        if not isinstance(m, dict):
            return json.dumps(value, ensure_ascii=False, default=str)
        if isinstance(m.get("parts"), list):
            for p in m["parts"]:
                if isinstance(p, dict) and p.get("type", "text") == "text" and isinstance(p.get("content"), str):
                    texts.append(p["content"])
                elif isinstance(p, dict) and "content" in p:
                    texts.append(json.dumps(p["content"], ensure_ascii=False, default=str))
                elif isinstance(p, dict) and p.get("type") == "tool_call":  # an answer that is a tool call
                    texts.append(json.dumps({"tool_call": p.get("name"), "arguments": p.get("arguments")},
                                            ensure_ascii=False, default=str))
        elif isinstance(m.get("content"), str):
            texts.append(m["content"])
        else:
            return json.dumps(value, ensure_ascii=False, default=str)
    return "\n".join(texts)


def _int(v):
    try:
        return int(v) if v is not None and v != "" else None
    except (TypeError, ValueError):
        return None


def span_row(
    *,
    trace_id: str,
    span_id: str,
    parent_span_id: str | None,
    name: str,
    kind: str,
    start_time_ns: int | None,
    end_time_ns: int | None,
    status: str,
    status_message: str | None,
    attributes: dict,
    resource: dict,
    scope: str | None,
    events: Iterable[tuple[str, dict]] = (),
    resource_json: str | None = None,
) -> dict:
    """One ``spans`` row; GenAI attributes are lifted into columns."""
    a = attributes
    inp = next((a[k] for k in _INPUT_KEYS if a.get(k) is not None), None)
    out = next((a[k] for k in _OUTPUT_KEYS if a.get(k) is not None), None)
    err_type = a.get("error.type")
    err_msg = status_message or None
    for ev_name, ev_attrs in events:
        if ev_name == "exception":
            err_type = err_type or ev_attrs.get("exception.type")
            err_msg = err_msg or ev_attrs.get("exception.message")
    if status == "ERROR" and not err_type:
        err_type = "error"
    project = a.get("autometrics.project") or resource.get("autometrics.project") or resource.get("service.name")
    return {
        "trace_id": trace_id,
        "span_id": span_id,
        "parent_span_id": parent_span_id or None,
        "name": name,
        "kind": kind,
        "project": project,
        "scope": scope,
        "start_time_ns": start_time_ns,
        "end_time_ns": end_time_ns,
        "status": status,
        "error_type": err_type,
        "error_message": err_msg,
        "operation": a.get("gen_ai.operation.name"),
        "model": a.get("gen_ai.request.model") or a.get("gen_ai.response.model") or a.get("langfuse.observation.model.name"),
        "input_tokens": _int(a.get("gen_ai.usage.input_tokens", a.get("gen_ai.usage.prompt_tokens"))),
        "output_tokens": _int(a.get("gen_ai.usage.output_tokens", a.get("gen_ai.usage.completion_tokens"))),
        "input": messages_text(inp),
        "output": messages_text(out),
        "attributes": json.dumps(a, ensure_ascii=False, default=str),
        "resource": resource_json if resource_json is not None else json.dumps(resource, ensure_ascii=False, default=str),
    }


# --------------------------------------------------------------------------- in-process spans


def rows_from_readable_spans(spans) -> list[dict]:
    """Rows from ``opentelemetry.sdk.trace.ReadableSpan`` objects (the SDK's own spans)."""
    rows = []
    res_cache: dict[int, tuple] = {}  # spans of one provider share one Resource: encode it once
    for s in spans:
        ctx = s.context
        res = s.resource
        cached = res_cache.get(id(res))
        if cached is None or cached[0] is not res:
            cached = res_cache[id(res)] = (res, dict(res.attributes) if res is not None else {},
                                           json.dumps(dict(res.attributes), ensure_ascii=False, default=str) if res is not None else "{}")
        parent = s.parent
        st = s.status
        rows.append(
            span_row(
                trace_id=format(ctx.trace_id, "032x"),
                span_id=format(ctx.span_id, "016x"),
                parent_span_id=format(parent.span_id, "016x") if parent is not None else None,
                name=s.name,
                kind=s.kind.name,
                start_time_ns=s.start_time,
                end_time_ns=s.end_time,
                status=st.status_code.name,
                status_message=st.description,
                attributes=dict(s.attributes or {}),
                resource=cached[1],
                scope=s.instrumentation_scope.name if s.instrumentation_scope else None,
                events=[(e.name, dict(e.attributes or {})) for e in s.events],
                resource_json=cached[2],
            )
        )
    return rows


# --------------------------------------------------------------------------- OTLP


def _any_value(v):
    which = v.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_any_value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _any_value(kv.value) for kv in v.kvlist_value.values}
    if which == "bytes_value":
        return base64.b64encode(v.bytes_value).decode("ascii")
    return getattr(v, which)


def _attrs(kvs) -> dict:
    return {kv.key: _any_value(kv.value) for kv in kvs}


def rows_from_otlp(request) -> tuple[list[dict], int, str]:
    """Rows from an ``ExportTraceServiceRequest``; returns (rows, rejected count, reason).

    A span with a malformed id is rejected (reported back in OTLP ``partial_success``) rather
    than failing the whole request.
    """
    rows: list[dict] = []
    rejected = 0
    reason = ""
    for rs in request.resource_spans:
        resource = _attrs(rs.resource.attributes)
        resource_json = json.dumps(resource, ensure_ascii=False, default=str)
        for ss in rs.scope_spans:
            scope = ss.scope.name or None
            for sp in ss.spans:
                if len(sp.trace_id) != 16 or len(sp.span_id) != 8 or not any(sp.trace_id) or not any(sp.span_id):
                    rejected += 1
                    reason = "span with an invalid trace_id/span_id (need 16 and 8 non-zero bytes)"
                    continue
                rows.append(
                    span_row(
                        trace_id=sp.trace_id.hex(),
                        span_id=sp.span_id.hex(),
                        parent_span_id=sp.parent_span_id.hex() if len(sp.parent_span_id) == 8 else None,
                        name=sp.name,
                        kind=_KINDS.get(sp.kind, "UNSPECIFIED"),
                        start_time_ns=sp.start_time_unix_nano or None,
                        end_time_ns=sp.end_time_unix_nano or None,
                        status=_STATUS.get(sp.status.code, "UNSET"),
                        status_message=sp.status.message or None,
                        attributes=_attrs(sp.attributes),
                        resource=resource,
                        scope=scope,
                        events=[(e.name, _attrs(e.attributes)) for e in sp.events],
                        resource_json=resource_json,
                    )
                )
    return rows, rejected, reason


def _hex_ids_to_b64(obj) -> None:
    # OTLP/JSON writes trace/span ids as hex (not protobuf-JSON base64); convert in place.
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k in ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id") and isinstance(v, str):
                try:
                    obj[k] = base64.b64encode(bytes.fromhex(v)).decode("ascii")
                except ValueError:
                    raise ValueError(f"{k} is not hex: {v[:40]!r}") from None
            else:
                _hex_ids_to_b64(v)
    elif isinstance(obj, list):
        for v in obj:
            _hex_ids_to_b64(v)


def parse_otlp_json(body: bytes):
    """OTLP/JSON body -> ``ExportTraceServiceRequest`` (unknown fields ignored, as the spec asks)."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    data = json.loads(body)
    _hex_ids_to_b64(data)
    return json_format.ParseDict(data, ExportTraceServiceRequest(), ignore_unknown_fields=True)


def parse_otlp_protobuf(body: bytes):
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    req = ExportTraceServiceRequest()
    req.ParseFromString(body)
    return req
