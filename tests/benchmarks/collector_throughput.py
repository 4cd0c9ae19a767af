"""Collector ingest throughput on loopback: spans/s (OTLP/HTTP protobuf, gzip) and feedback/s.

Starts ``autometrics collector serve`` as a separate process (SQLite store in a temp dir, WAL,
synchronous=FULL: every acknowledgement is durable), then a bounded load generator: a few
client threads with keep-alive connections send a fixed number of requests.  It counts what
the collector acknowledged and then what the store holds; the two must be equal.  Client and
server share this machine's CPUs.

    python tests/benchmarks/collector_throughput.py [--spans 40000] [--batch 100] [--feedback 5000] [--clients 4]
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time


def otlp_body(batch: int, seq: int) -> bytes:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.append(KeyValue(key="service.name", value=AnyValue(string_value="loadgen")))
    ss = rs.scope_spans.add()
    ss.scope.name = "loadgen"
    for i in range(batch):
        sp = ss.spans.add()
        sp.trace_id = (seq + 1).to_bytes(8, "big") + i.to_bytes(8, "big")
        sp.span_id = (i + 1).to_bytes(8, "big")
        sp.name = "chat gpt-4o-mini"
        sp.kind = 3
        sp.start_time_unix_nano = 1_700_000_000_000_000_000 + i
        sp.end_time_unix_nano = 1_700_000_000_400_000_000 + i
        q = json.dumps([{"role": "user", "parts": [{"type": "text", "content": f"question number {i} about billing"}]}])
        a = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "a typical answer of a few words " * 3}]}])
        for k, v in (("gen_ai.operation.name", AnyValue(string_value="chat")), ("gen_ai.request.model", AnyValue(string_value="gpt-4o-mini")),
                     ("gen_ai.usage.input_tokens", AnyValue(int_value=42)), ("gen_ai.usage.output_tokens", AnyValue(int_value=17)),
                     ("gen_ai.input.messages", AnyValue(string_value=q)), ("gen_ai.output.messages", AnyValue(string_value=a))):
            sp.attributes.append(KeyValue(key=k, value=v))
    return gzip.compress(req.SerializeToString(), 1)


def rejected(path: str, data: bytes) -> int:
    """Spans the collector refused (OTLP partial_success): not acknowledged."""
    if path != "/v1/traces":
        return 0
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    return ExportTraceServiceResponse.FromString(data).partial_success.rejected_spans


def run_load(port: int | list[int], jobs: list[tuple[str, bytes, dict, int]], clients: int) -> tuple[int, float, int]:
    """Send the jobs over `clients` keep-alive connections (with several ports, client w talks to
    port w mod n); returns (acked items, seconds, errors)."""
    ports = port if isinstance(port, list) else [port]
    acked = [0] * clients
    errors = [0] * clients

    def worker(w: int):
        c = http.client.HTTPConnection("127.0.0.1", ports[w % len(ports)], timeout=60)
        for j in range(w, len(jobs), clients):
            path, body, headers, n = jobs[j]
            c.request("POST", path, body=body, headers=headers)
            r = c.getresponse()
            data = r.read()
            if r.status == 200:
                acked[w] += n - rejected(path, data)
            else:
                errors[w] += 1

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(acked), time.perf_counter() - t0, sum(errors)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spans", type=int, default=40_000)
    ap.add_argument("--batch", type=int, default=100, help="spans per OTLP request")
    ap.add_argument("--feedback", type=int, default=5_000, help="feedback requests (one item each)")
    ap.add_argument("--clients", type=int, default=4, help="concurrent span senders")
    ap.add_argument("--feedback-clients", type=int, default=32, help="concurrent feedback senders (end users)")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="am-collector-")
    db = f"sqlite:///{tmp}/traces.db"
    key = "bench-key"
    proc = subprocess.Popen([sys.executable, "-m", "autometrics._cli.main", "collector", "serve", "--store", db, "--port", "0",
                             "--api-key", key, "--langfuse", "off"], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        port = int(line.split("http://127.0.0.1:")[1].split()[0])
        hdr = {"Authorization": f"Bearer {key}"}
        n_req = args.spans // args.batch
        span_jobs = [("/v1/traces", otlp_body(args.batch, s), {**hdr, "Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"},
                      args.batch) for s in range(n_req)]
        fb_jobs = [("/v1/feedback", json.dumps({"trace_id": f"{i + 1:032x}", "name": "thumbs", "value": i % 2 == 0, "id": f"fb-{i}"}).encode(),
                    {**hdr, "Content-Type": "application/json"}, 1) for i in range(args.feedback)]
        spans_acked, t_spans, e1 = run_load(port, span_jobs, args.clients)
        fb_acked, t_fb, e2 = run_load(port, fb_jobs, args.feedback_clients)
    finally:
        proc.terminate()
        proc.wait(30)
    from autometrics.collectors.store import TraceStore

    store = TraceStore(db)
    spans_stored, fb_stored = store.count("spans"), store.count("feedback")
    print(f"collector ingest on loopback ({os.cpu_count()} CPUs; SQLite WAL synchronous=FULL; keep-alive clients: "
          f"{args.clients} for spans, {args.feedback_clients} for feedback)")
    print(f"spans:    {spans_acked} acknowledged in {t_spans:.2f} s = {spans_acked / t_spans:,.0f} spans/s "
          f"({n_req} OTLP protobuf+gzip requests of {args.batch}); stored {spans_stored}; errors {e1}")
    print(f"feedback: {fb_acked} acknowledged in {t_fb:.2f} s = {fb_acked / t_fb:,.0f} feedback/s "
          f"(one item per request, each durable before its answer); stored {fb_stored}; errors {e2}")
    ok = spans_stored == spans_acked and fb_stored == fb_acked
    print("stored == acknowledged:", "yes" if ok else "NO")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
