"""The OpenTelemetry Collector configuration shipped in ``collectors/deploy/otelcol.yaml`` checked
against the collector it points at.

No Collector build with an OTLP receiver installs here (see docs/store-collector.md), so the
Collector itself does not run in this test.  What is checked: the file is a well-formed Collector
configuration (every pipeline component defined, the queue's storage an extension in service);
what its ``otlphttp`` exporter sends — protobuf ``ExportTraceServiceRequest`` bodies, gzip, POST
to ``<endpoint>/v1/traces`` with the configured ``Authorization`` header — is stored by a real
``CollectorServer``, at the largest batch the config lets through (``send_batch_max_size`` spans of
real dataset text, encoded by the OpenTelemetry SDK's own OTLP encoder) within the collector's
default body limits; and the collector answers the outcomes the exporter retries (503 with
``Retry-After`` while the store is down) and the ones it must not (400 for a value the store can
never hold) with the codes the exporter reads that way.
"""

from __future__ import annotations

import gzip
import os
import re
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

CONFIG = Path(__file__).resolve().parents[2] / "collectors" / "deploy" / "otelcol.yaml"
# the otlphttp exporter's retry rule (exporter/otlphttpexporter: retryable HTTP statuses)
RETRYABLE = {429, 502, 503, 504}


def _config(url: str, key: str) -> dict:
    text = CONFIG.read_text()
    env = {"AUTOMETRICS_COLLECTOR_URL": url, "AUTOMETRICS_COLLECTOR_KEY": key}
    names = set(re.findall(r"\$\{env:([A-Z_]+)\}", text))
    assert names == set(env), f"the config reads {sorted(names)}; the docs name {sorted(env)}"
    return yaml.safe_load(re.sub(r"\$\{env:([A-Z_]+)\}", lambda m: env[m.group(1)], text))


def test_config_is_a_complete_collector_pipeline():
    cfg = _config("http://autometrics:4318", "k")
    svc = cfg["service"]
    for kind in ("receivers", "processors", "exporters"):
        for name in svc["pipelines"]["traces"][kind]:
            assert name in cfg[kind], f"pipeline uses {kind[:-1]} {name!r} that the config does not define"
    assert set(svc["extensions"]) <= set(cfg["extensions"])
    assert svc["pipelines"]["traces"]["processors"][0] == "memory_limiter"  # the Collector's own guidance: first
    exp = cfg["exporters"]["otlphttp/autometrics"]
    assert exp["sending_queue"]["storage"] in svc["extensions"] and exp["sending_queue"]["storage"].startswith("file_storage")
    assert exp["retry_on_failure"]["enabled"] and exp["retry_on_failure"]["max_elapsed_time"] == 0
    assert exp["encoding"] == "proto" and exp["compression"] == "gzip"


def _dataset_spans(datasets_dir: Path, n: int):
    """``n`` finished SDK spans of GenAI calls carrying real prompts and answers (topical_chat)."""
    import json

    import pandas as pd
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    rows = pd.read_csv(datasets_dir / "topical_chat.csv")
    mem = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(mem))
    tracer = provider.get_tracer("app")
    for i in range(n):
        r = rows.iloc[i % len(rows)]
        with tracer.start_as_current_span("chat gpt-4o-mini", attributes={
                "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": str(r["input"])}]}]),
                "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": str(r["output"])}]}]),
                "gen_ai.usage.input_tokens": 300, "gen_ai.usage.output_tokens": 40}):
            pass
    return mem.get_finished_spans()


def test_what_the_exporter_sends_is_stored_and_its_failures_read_right(tmp_path, datasets_dir):
    from autometrics.collectors.limits import CollectorLimits
    from autometrics.collectors.server import CollectorServer
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from otlp_client import post

    srv = CollectorServer(f"sqlite:///{tmp_path / 't.db'}", port=0, api_keys=["deploy-key"], langfuse="off").start()
    try:
        cfg = _config(srv.url, "deploy-key")
        exp, batch = cfg["exporters"]["otlphttp/autometrics"], cfg["processors"]["batch"]
        limits = CollectorLimits()
        assert exp["sending_queue"]["num_consumers"] <= limits.workers
        # the largest batch the config lets through, as the exporter sends it
        spans = _dataset_spans(datasets_dir, batch["send_batch_max_size"])
        raw = encode_spans(spans).SerializeToString()
        body = gzip.compress(raw)
        assert len(body) <= limits.max_body and len(raw) <= limits.max_decompressed, (len(body), len(raw))
        path = exp.get("traces_endpoint", exp["endpoint"].rstrip("/") + "/v1/traces").removeprefix(srv.url)
        headers = {**exp["headers"], "Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"}
        code, answer, _ = post(srv.url, path, body, headers)
        assert code == 200, answer
        assert srv.store.count("spans") == len(spans)
        # a wrong key is a permanent error for the exporter (not retried), named as such
        code, _, _ = post(srv.url, path, body, {**headers, "Authorization": "Bearer wrong"})
        assert code == 401 and code not in RETRYABLE
        # a value the store can never hold: 400, not retried (it would fail again)
        bad = encode_spans(spans[:1])
        bad.resource_spans[0].scope_spans[0].spans[0].start_time_unix_nano = 2**64 - 1
        code, _, _ = post(srv.url, path, gzip.compress(bad.SerializeToString()), headers)
        assert code == 400 and code not in RETRYABLE
        # the store down: retryable, with the Retry-After the exporter honours
        srv.store.write = lambda spans=(), feedback=(), **kw: (_ for _ in ()).throw(ConnectionError("database down"))
        code, _, hdr = post(srv.url, path, gzip.compress(encode_spans(spans[:5]).SerializeToString()), headers)
        assert code in RETRYABLE and "Retry-After" in hdr
    finally:
        srv.stop()


def test_docs_show_this_config():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "store-collector.md").read_text()
    assert "collectors/deploy/otelcol.yaml" in doc and "AUTOMETRICS_COLLECTOR_URL" in doc and os.path.exists(CONFIG)
