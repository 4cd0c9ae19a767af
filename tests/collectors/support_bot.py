"""The support bot of the convention tests: three requests to an OpenAI-compatible server through
the real ``openai`` client, instrumented by one of the ecosystem's OpenTelemetry
instrumentations, exported over OTLP/HTTP to a collector.  Run as a script (``python
support_bot.py WHICH COLLECTOR_URL LLM_URL``) it prints the trace ids as JSON: the old OpenLLMetry
release runs in its own process, with its package directory first on ``PYTHONPATH``."""

from __future__ import annotations

import json
import os
import sys

SYSTEM = "You are the support bot of a bike shop. Answer in one line."
QUESTIONS = ["My chain keeps slipping, what should I check?", "Do you fix hydraulic brakes?",
             "How long does a wheel truing take?"]


def instrumentor(which: str):
    if which == "genai":
        from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor
    elif which == "openinference":
        from openinference.instrumentation.openai import OpenAIInstrumentor
    else:  # OpenLLMetry (the new release, or the old one in a subprocess)
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor
    return OpenAIInstrumentor()


def run_bot(which: str, collector_url: str, llm_url: str, service: str | None = None) -> list[str]:
    """The bot under one instrumentation, as service ``service`` (default ``bot-<which>``);
    returns its trace ids (one request each)."""
    import openai
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    tp = TracerProvider(resource=Resource.create({"service.name": service or f"bot-{which}"}))
    exporter = OTLPSpanExporter(endpoint=f"{collector_url}/v1/traces", headers={"Authorization": "Bearer k"})
    tp.add_span_processor(BatchSpanProcessor(exporter))
    inst = instrumentor(which)
    switches = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY" if which == "genai" else "true",
                "TRACELOOP_TRACE_CONTENT": "true"}  # OpenLLMetry's own switch (on by default)
    old = {k: os.environ.get(k) for k in switches}
    os.environ.update(switches)
    inst.instrument(tracer_provider=tp)
    tracer = tp.get_tracer("bike-shop")
    tids = []
    try:
        client = openai.OpenAI(base_url=llm_url, api_key="sk-test", max_retries=0)
        for q in QUESTIONS:
            with tracer.start_as_current_span("handle") as span:
                client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "system", "content": SYSTEM},
                                                                              {"role": "user", "content": q}])
                tids.append(format(span.get_span_context().trace_id, "032x"))
    finally:
        inst.uninstrument()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        assert tp.force_flush(10_000)
        tp.shutdown()
    return tids



if __name__ == "__main__":
    print(json.dumps(run_bot(*sys.argv[1:5])))
