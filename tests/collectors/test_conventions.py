"""Any OpenTelemetry LLM instrumentation in, correctly: the same support-bot calls instrumented by
the official GenAI instrumentation (what ``autometrics.instrument("openai")`` enables), by Arize's
OpenInference and by OpenLLMetry, each exported over OTLP/HTTP by the OpenTelemetry SDK's own
exporter to a real collector, give the same training rows (input text, output text, model,
tokens).  The real ``openai`` client calls a loopback OpenAI-compatible server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fake_llm_server import FakeLLMServer
from support_bot import QUESTIONS, SYSTEM, run_bot

#: the old OpenLLMetry release (flattened gen_ai.prompt.N.* attributes) lives in its own package
#: directory, installed by .ci/run with ``pip install --no-deps --target``: it cannot share an
#: environment with the new release
OLD_OPENLLMETRY = os.environ.get("AUTOMETRICS_TEST_OPENLLMETRY_OLD", "")
INSTRUMENTATIONS = ("genai", "openinference", "openllmetry", "openllmetry-old")


def _bot(which, collector_url, llm_url):
    if which != "openllmetry-old":
        pytest.importorskip({"genai": "opentelemetry.instrumentation.genai.openai", "openinference":
                             "openinference.instrumentation.openai", "openllmetry": "opentelemetry.instrumentation.openai"}[which])
        return run_bot(which, collector_url, llm_url)
    if not OLD_OPENLLMETRY or not Path(OLD_OPENLLMETRY).is_dir():
        pytest.skip("AUTOMETRICS_TEST_OPENLLMETRY_OLD not set: .ci/run installs opentelemetry-instrumentation-openai==0.40.14 there")
    here = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([OLD_OPENLLMETRY, str(here), str(here.parent)])}
    res = subprocess.run([sys.executable, str(here / "support_bot.py"), "openllmetry", collector_url, llm_url, "bot-openllmetry-old"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1])

@pytest.mark.parametrize("which", INSTRUMENTATIONS[1:])
def test_instrumentation_gives_the_same_training_rows(tmp_path, which):
    """``which`` and the official GenAI instrumentation, on the same calls, give equal rows."""
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    from autometrics.collectors.server import CollectorServer
    from autometrics.collectors.store import TraceStore
    from otlp_client import post

    db = f"sqlite:///{tmp_path / 'c.db'}"
    srv = CollectorServer(db, port=0, api_keys=["k"], langfuse="off").start()
    frames = {}
    try:
        with FakeLLMServer() as llm:
            runs = {w: _bot(w, srv.url, llm.url) for w in ("genai", which)}
        for tids in runs.values():
            for i, tid in enumerate(tids):
                body = json.dumps({"trace_id": tid, "name": "thumbs", "value": i % 2 == 0}).encode()
                assert post(srv.url, "/v1/feedback", body, {"Authorization": "Bearer k"})[0] == 200
        store = TraceStore(db)
        for w in runs:
            f = store.training_frame("thumbs", project=f"bot-{w}")
            assert len(f) == len(QUESTIONS), (w, f)
            frames[w] = f[["input", "output", "model", "input_tokens", "output_tokens", "thumbs"]].reset_index(drop=True)
    finally:
        srv.stop()
    ref = frames["genai"]
    assert ref["input"].tolist() == [f"{SYSTEM}\n{q}" for q in QUESTIONS]
    assert ref["model"].tolist() == ["gpt-4o-mini"] * 3 and ref["input_tokens"].notna().all() and ref["output_tokens"].notna().all()
    assert ref["output"].str.len().gt(0).all()
    assert frames[which].to_dict("records") == ref.to_dict("records")
