"""OTLP/HTTP test client: a raw POST and a protobuf ExportTraceServiceRequest builder, shared by the
collector and Langfuse-export tests."""

from __future__ import annotations

import http.client
import json


def post(url: str, path: str, body: bytes, headers: dict) -> tuple[int, bytes, dict]:
    host, port = url.removeprefix("http://").split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=10)
    c.request("POST", path, body=body, headers=headers)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data, dict(r.getheaders())


def otlp_request(n: int, trace_byte: int = 1, bad: int = 0):
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.append(KeyValue(key="service.name", value=AnyValue(string_value="go-service")))
    ss = rs.scope_spans.add()
    ss.scope.name = "manual"
    for i in range(n + bad):
        sp = ss.spans.add()
        sp.trace_id = bytes([trace_byte]) * 8 + i.to_bytes(8, "big") if i < n else b"\x00" * 16
        sp.span_id = (i + 1).to_bytes(8, "big")
        sp.name = "chat gpt-4o"
        sp.kind = 3
        sp.start_time_unix_nano = 1_700_000_000_000_000_000 + i
        sp.end_time_unix_nano = 1_700_000_000_500_000_000 + i
        msgs = json.dumps([{"role": "user", "parts": [{"type": "text", "content": f"hello {i}"}]}])
        for k, v in (("gen_ai.request.model", AnyValue(string_value="gpt-4o")), ("gen_ai.usage.input_tokens", AnyValue(int_value=12)),
                     ("gen_ai.input.messages", AnyValue(string_value=msgs))):
            sp.attributes.append(KeyValue(key=k, value=v))
    return req
