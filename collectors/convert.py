"""Spans -> trace-store rows, from in-process OpenTelemetry spans or from OTLP requests.

Both paths share :func:`span_row`, so a span recorded by ``@observe`` in this process and one
sent over OTLP by an application in another language are stored identically.  What a fit needs
(plain input/output text, model, token usage, error) is pulled out of the OpenTelemetry GenAI
semantic-convention attributes at ingest; the full attribute set is kept as JSON.

Limits, the same on both paths (a value the store cannot hold must not fail a whole batch, and
no single field may be huge):

- a string longer than ``max_field_chars`` (default 1 Mi characters, env
  ``AUTOMETRICS_COLLECTOR_MAX_FIELD_CHARS``) in an attribute (nested values and keys included),
  the resource, the span name or status message is cut there and ends with a
  ``…[truncated by autometrics: N characters, limit L]`` marker (the span is kept; the collector
  reports the truncated fields in OTLP ``partial_success.error_message``);
- text columns never hold NUL (Postgres cannot) or unpaired surrogates (not UTF-8): they become
  U+FFFD, while the attributes JSON keeps the exact value (escaped);
- values no column can hold: a time after 2262-04-11 (``start/endTimeUnixNano`` above 2^63-1:
  the store keeps signed 64-bit nanoseconds), a token count that is not a whole number in
  0..2^63-1 (``1e300``, ``-3``, ``"many"``), a project/model/scope/operation longer than its
  column or not a scalar.  Over OTLP (``strict``) such a span is rejected, named with the field
  in ``partial_success``, and the other spans of the request are stored; for the SDK's own spans
  the column is left empty (the attribute JSON still has the value) so the span is never lost.
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Iterable
from typing import NamedTuple

from ..metricbank.errors import DataError, UserError
from .conventions import call_fields, drop_empty, trace_fields

__all__ = ["span_row", "rows_from_readable_spans", "rows_from_otlp", "parse_otlp_json", "messages_text", "SpanRejected",
           "OtlpRows", "MAX_FIELD_CHARS", "field_limit"]

INT64_MAX = 2**63 - 1
MAX_FIELD_CHARS = 1 << 20
_WIDTHS = {"project": 200, "scope": 200, "model": 200, "operation": 64, "session_id": 200, "user_id": 200}  # the spans table's VARCHAR columns
_SURROGATE = re.compile("[\ud800-\udfff]")


class SpanRejected(DataError):
    """A span with a value the store can never hold; ``field`` names it."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


class OtlpRows(NamedTuple):
    rows: list[dict]
    rejected: int
    reason: str  # why spans were rejected (first few, with their ids and fields)
    truncated: list[str]  # fields cut to the field limit, e.g. "attributes['gen_ai.input.messages']"


def field_limit() -> int:
    """The per-field character limit: ``AUTOMETRICS_COLLECTOR_MAX_FIELD_CHARS`` or 1 Mi."""
    text = os.environ.get("AUTOMETRICS_COLLECTOR_MAX_FIELD_CHARS", "").strip()
    try:
        return max(1, int(text)) if text else MAX_FIELD_CHARS
    except ValueError:
        raise UserError(f"AUTOMETRICS_COLLECTOR_MAX_FIELD_CHARS={text!r} is not a whole number") from None

_KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
_STATUS = {0: "UNSET", 1: "OK", 2: "ERROR"}


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
        except (ValueError, RecursionError):  # not JSON (or nested too deep to read): the text as sent
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


def _cap(v, limit: int, where: str, truncated: list):
    """``v`` with every string longer than ``limit`` cut (marker appended); the same object if none was."""
    if isinstance(v, str):
        if len(v) <= limit:
            return v
        truncated.append(where)
        return v[:limit] + f"…[truncated by autometrics: {len(v)} characters, limit {limit}]"
    if isinstance(v, (list, tuple)):
        n = len(truncated)
        new = [_cap(x, limit, where, truncated) for x in v]
        return new if len(truncated) > n else v
    if isinstance(v, dict):
        n = len(truncated)
        new = {_cap(k, limit, where, truncated): _cap(x, limit, where, truncated) for k, x in v.items()}
        return new if len(truncated) > n else v
    return v


def _cap_attrs(attrs: dict, limit: int, prefix: str, truncated: list) -> dict:
    """An attribute dict with long values cut, each reported as ``prefix['key']``."""
    out = None
    for k, v in attrs.items():
        if isinstance(v, str) and len(v) <= limit and len(k) <= limit:
            continue
        n = len(truncated)
        nk, nv = _cap(k, limit, f"{prefix}[{k[:60]!r}]", truncated), _cap(v, limit, f"{prefix}[{k[:60]!r}]", truncated)
        if len(truncated) > n:
            out = dict(attrs) if out is None else out
            del out[k]
            out[nk] = nv
    return attrs if out is None else out


def _clean(s: str) -> str:
    """Text any store can hold: NUL and unpaired surrogates become U+FFFD."""
    if "\x00" in s:
        s = s.replace("\x00", "\ufffd")
    if not s.isascii():
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:
            s = _SURROGATE.sub("\ufffd", s)
    return s


def _text(v) -> str | None:
    if v is None:
        return None
    return _clean(v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str))


def _json(obj) -> str:
    """JSON text any store can hold (an unpaired surrogate is kept escaped, NUL is always escaped)."""
    s = json.dumps(obj, ensure_ascii=False, default=str)
    if not s.isascii():
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:
            s = json.dumps(obj, ensure_ascii=True, default=str)
    return s


def _count(v, field: str, strict: bool) -> int | None:
    """A token count column: a whole number 0..2^63-1, else SpanRejected (strict) or None."""
    if v is None or v == "":
        return None
    n = None
    if isinstance(v, int) and not isinstance(v, bool):
        n = v
    elif isinstance(v, float) and v.is_integer():
        n = int(v)
    elif isinstance(v, str):
        try:
            n = int(v.strip())
        except ValueError:
            n = None
    if n is not None and 0 <= n <= INT64_MAX:
        return n
    if strict:
        raise SpanRejected(field, f"attribute {field} = {str(v)[:40]!r} is not a token count (a whole number from 0 to 2^63-1)")
    return None


def _ns(v, field: str, strict: bool) -> int | None:
    if not v:
        return None
    if 0 < v <= INT64_MAX:
        return v
    if strict:
        raise SpanRejected(field, f"{field} = {v} is not storable: the store keeps signed 64-bit nanoseconds since 1970, so the "
                                  "latest time is 2262-04-11; send nanoseconds (not a larger unit) from a correct clock")
    return None


def _ident(v, field: str, strict: bool) -> str | None:
    """project/model/scope/operation: a scalar that fits its column."""
    if v is None:
        return None
    if isinstance(v, (dict, list, tuple)):
        if strict:
            raise SpanRejected(field, f"{field} must be a string, not {type(v).__name__} {str(v)[:40]}")
        return None
    s = _clean(v if isinstance(v, str) else str(v))
    width = _WIDTHS[field]
    if len(s) > width:
        if strict:
            raise SpanRejected(field, f"{field} is {len(s)} characters long; the store holds at most {width} ({s[:40]!r}...)")
        return s[:width]
    return s


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
    strict: bool = False,
    max_field_chars: int = MAX_FIELD_CHARS,
    truncated: list | None = None,
) -> dict:
    """One ``spans`` row; GenAI attributes are lifted into columns.  ``strict``: raise
    SpanRejected for a value no column can hold (else that column is left empty); ``truncated``
    collects the fields cut to ``max_field_chars`` (see the module docstring)."""
    cut: list = [] if truncated is None else truncated
    lim = max_field_chars
    a = _cap_attrs(drop_empty(attributes), lim, "attributes", cut)
    name = _cap(name, lim, "name", cut)
    status_message = _cap(status_message, lim, "status.message", cut)
    call = call_fields(a)
    inp, out = call["input"], call["output"]
    who = trace_fields(a)
    err_type = a.get("error.type")
    err_msg = status_message or None
    err_stack = None
    for ev_name, ev_attrs in events:
        if ev_name == "exception":
            err_type = err_type or _cap(ev_attrs.get("exception.type"), lim, "events.exception.type", cut)
            err_msg = err_msg or _cap(ev_attrs.get("exception.message"), lim, "events.exception.message", cut)
            err_stack = err_stack or _cap(ev_attrs.get("exception.stacktrace"), lim, "events.exception.stacktrace", cut)
    if status == "ERROR" and not err_type:
        err_type = "error"
    project = a.get("autometrics.project") or resource.get("autometrics.project") or resource.get("service.name")
    return {
        "trace_id": trace_id,
        "span_id": span_id,
        "parent_span_id": parent_span_id or None,
        "name": _clean(name),
        "kind": kind,
        "project": _ident(project, "project", strict),
        "scope": _ident(scope, "scope", strict),
        "start_time_ns": _ns(start_time_ns, "startTimeUnixNano", strict),
        "end_time_ns": _ns(end_time_ns, "endTimeUnixNano", strict),
        "status": status,
        "error_type": _text(err_type),
        "error_message": _text(err_msg),
        "error_stack": _text(err_stack),
        "operation": _ident(call["operation"], "operation", strict),
        "model": _ident(call["model"], "model", strict),
        "input_tokens": _count(call["input_tokens"], "gen_ai.usage.input_tokens", strict),
        "output_tokens": _count(call["output_tokens"], "gen_ai.usage.output_tokens", strict),
        "input": _text(messages_text(inp)),
        "output": _text(messages_text(out)),
        # never a reason to refuse a span: an overlong id is cut (the attribute JSON keeps it whole)
        "session_id": _ident(who["session_id"], "session_id", False),
        "user_id": _ident(who["user_id"], "user_id", False),
        "tags": _json(who["tags"]) if who["tags"] else None,
        "trace_metadata": _json(who["metadata"]) if who["metadata"] else None,
        "attributes": _json(a),
        "resource": resource_json if resource_json is not None else _json(resource),
    }


# --------------------------------------------------------------------------- in-process spans


def rows_from_readable_spans(spans, max_field_chars: int | None = None) -> list[dict]:
    """Rows from ``opentelemetry.sdk.trace.ReadableSpan`` objects (the SDK's own spans); never
    raises for a value: an unstorable column is left empty, a long field truncated."""
    lim = max_field_chars or field_limit()
    rows = []
    res_cache: dict[int, tuple] = {}  # spans of one provider share one Resource: encode it once
    for s in spans:
        ctx = s.context
        res = s.resource
        cached = res_cache.get(id(res))
        if cached is None or cached[0] is not res:
            attrs = _cap_attrs(dict(res.attributes), lim, "resource", []) if res is not None else {}
            cached = res_cache[id(res)] = (res, attrs, _json(attrs))
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
                max_field_chars=lim,
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


def rows_from_otlp(request, max_field_chars: int | None = None) -> OtlpRows:
    """Rows from an ``ExportTraceServiceRequest``.

    Partial acceptance, as OTLP's ``partial_success`` allows: a span with a malformed id or a
    value the store can never hold (see the module docstring) is rejected and counted, with the
    first few reasons naming the span and field; every other span of the request becomes a row.
    Fields cut to ``max_field_chars`` are listed in ``truncated``.
    """
    lim = max_field_chars or field_limit()
    rows: list[dict] = []
    reasons: list[str] = []
    truncated: list[str] = []
    rejected = 0
    index = -1
    for rs in request.resource_spans:
        resource = _cap_attrs(_attrs(rs.resource.attributes), lim, "resource", truncated)
        resource_json = _json(resource)
        for ss in rs.scope_spans:
            scope = ss.scope.name or None
            for sp in ss.spans:
                index += 1
                if len(sp.trace_id) != 16 or len(sp.span_id) != 8 or not any(sp.trace_id) or not any(sp.span_id):
                    rejected += 1
                    reasons.append(f"span #{index}: invalid traceId/spanId (need 16 and 8 non-zero bytes)")
                    continue
                try:
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
                            strict=True,
                            max_field_chars=lim,
                            truncated=truncated,
                        )
                    )
                except SpanRejected as exc:
                    rejected += 1
                    reasons.append(f"span #{index} (traceId {sp.trace_id.hex()}, spanId {sp.span_id.hex()}): {exc}")
    more = f"; and {len(reasons) - 5} more" if len(reasons) > 5 else ""
    reason = f"{rejected} span(s) rejected, the others stored: " + "; ".join(reasons[:5]) + more if reasons else ""
    return OtlpRows(rows, rejected, reason, truncated)


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
