"""Round trip with a real Arize Phoenix server (the ``arize-phoenix`` package, started by the test,
offline, on SQLite): an app's OpenInference spans reach Phoenix over OTLP, people label them as
span annotations through Phoenix's client, ``autometrics fit phoenix+http://…`` learns from them
and gives the same evaluator as the same rows fitted from a CSV, and the evaluator's scores go
back to Phoenix as span annotations that Phoenix's client reads back."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from waiting import wait_for_http

pytestmark = pytest.mark.slow
SHARED = Path(os.environ.get("AUTOMETRICS_SHARED", Path(__file__).resolve().parents[3] / "shared")) / "datasets"
N = 60


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory):
    pytest.importorskip("phoenix.server.main", reason="needs arize-phoenix (the dev extra)")

    work = tmp_path_factory.mktemp("phoenix")
    port = _port()
    env = {**os.environ, "PHOENIX_WORKING_DIR": str(work), "PHOENIX_PORT": str(port), "PHOENIX_GRPC_PORT": str(_port()),
           "PHOENIX_HOST": "127.0.0.1", "PHOENIX_TELEMETRY_ENABLED": "false"}
    log = open(work / "server.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "phoenix.server.main", "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    if not wait_for_http(f"{url}/healthz", proc, 120) and proc.poll() is None:
        proc.kill()
        proc.wait(10)
    if proc.poll() is not None:
        pytest.fail("Phoenix did not start: " + (work / "server.log").read_text()[-2000:])
    yield url
    proc.terminate()
    proc.wait(30)
    log.close()


def _send_app_traces(url: str, rows: pd.DataFrame, project: str = "simplifier") -> list[str]:
    """The app's request spans as an OpenInference-instrumented chain records them, exported by
    the OpenTelemetry SDK's OTLP/HTTP exporter to Phoenix; returns the root span ids in row order."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    tp = TracerProvider(resource=Resource.create({"service.name": project, "openinference.project.name": project}))
    tp.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{url}/v1/traces")))
    tracer = tp.get_tracer("app")
    ids = []
    for r in rows.itertuples():
        with tracer.start_as_current_span("simplify", attributes={
                "openinference.span.kind": "CHAIN", "input.value": r.input, "input.mime_type": "text/plain",
                "output.value": r.output, "output.mime_type": "text/plain"}) as span:
            ids.append(format(span.get_span_context().span_id, "016x"))
        time.sleep(0.002)  # distinct start times: the store reads rows in start order
    assert tp.force_flush(30_000)
    tp.shutdown()
    return ids


def test_fit_from_phoenix_equals_the_csv_fit_and_scores_go_back(phoenix, tmp_path):
    import httpx
    from autometrics.collectors.phoenix import annotate_phoenix, phoenix_client
    from autometrics.evaluators.evaluator import Evaluator
    from phoenix.client import Client

    rows = pd.read_csv(SHARED / "simpeval.csv").head(N)
    span_ids = _send_app_traces(phoenix, rows)
    client = Client(base_url=phoenix)

    def stored():
        try:
            return client.spans.get_spans(project_identifier="simplifier", limit=1000)
        except httpx.HTTPStatusError:  # 404 until Phoenix has ingested the project's first span
            return []

    deadline = time.monotonic() + 60
    while len(stored()) < N and time.monotonic() < deadline:
        time.sleep(0.5)
    spans = {s["context"]["span_id"]: s["context"]["trace_id"] for s in stored()}
    assert len(spans) == N
    # people's labels, given through Phoenix's own client as span annotations
    client.spans.log_span_annotations(span_annotations=[
        {"name": "score", "span_id": sid, "annotator_kind": "HUMAN", "result": {"score": float(v)}}
        for sid, v in zip(span_ids, rows["score"], strict=True)], sync=True)

    common = ["--target", "score", "--no-llm", "--metrics", "LengthRatio,OutputLength,BLEU,FKGL,LevenshteinRatio",
              "--n-boot", "50", "--permutations", "0", "--no-progress"]
    px = subprocess.run([sys.executable, "-m", "autometrics._cli.main", "fit", f"phoenix+{phoenix}/simplifier", *common,
                         "--out", str(tmp_path / "px")], capture_output=True, text=True, timeout=600)
    assert px.returncode == 0, px.stderr[-3000:]
    assert f"read {N} span(s) of {N} trace(s) and {N} annotation(s)" in px.stdout + px.stderr
    csv = rows.assign(id=[spans[s] for s in span_ids])[["id", "input", "output", "score"]]
    csv.to_csv(tmp_path / "same.csv", index=False)
    cs = subprocess.run([sys.executable, "-m", "autometrics._cli.main", "fit", str(tmp_path / "same.csv"), *common,
                         "--out", str(tmp_path / "csv")], capture_output=True, text=True, timeout=600)
    assert cs.returncode == 0, cs.stderr[-3000:]
    a, b = (json.loads((tmp_path / d / "evaluator.json").read_text()) for d in ("px", "csv"))
    assert a["dataset"]["fingerprint"] == b["dataset"]["fingerprint"]  # the same rows, ids and labels
    assert a["dataset"]["n_groups"] == b["dataset"]["n_groups"]
    assert [f["feature"] for f in a["features"]] == [f["feature"] for f in b["features"]]
    assert [f["weight"] for f in a["features"]] == pytest.approx([f["weight"] for f in b["features"]])
    assert a["statistics"]["test"]["tau"] == pytest.approx(b["statistics"]["test"]["tau"])
    assert a["validity"]["validated"] == b["validity"]["validated"]

    # scores back to Phoenix as annotations on each trace's root span, read back with its client
    ev = Evaluator.load(tmp_path / "px" / "evaluator.json")
    scored = ev.score(rows[["input", "output"]])
    sent = annotate_phoenix(phoenix_client(phoenix), [
        {"span_id": sid, "score": s, "explanation": "scored by the evaluator fitted on Phoenix annotations"}
        for sid, s in zip(span_ids, scored["autometrics_score"], strict=True)], name="autometrics.score", validated=False)
    assert sent == N
    back = client.spans.get_span_annotations_dataframe(span_ids=span_ids, project_identifier="simplifier",
                                                       include_annotation_names=["autometrics.score"])
    got = dict(zip(back.index, back["result.score"], strict=True))
    assert got == pytest.approx(dict(zip(span_ids, scored["autometrics_score"], strict=True)))
    assert set(back["annotator_kind"]) == {"CODE"} and set(back["result.label"]) == {"unvalidated"}


def test_worker_learns_from_phoenix_and_writes_scores_back(phoenix, tmp_path):
    """``autometrics worker --once --phoenix …``: the project's spans and human annotations are
    read into the worker's store, an evaluator is fitted and scores every trace, and each score
    is in Phoenix as an annotation on the trace's root span, equal to the stored online score."""
    import httpx
    from autometrics.collectors.store import TraceStore
    from phoenix.client import Client

    rows = pd.read_csv(SHARED / "simpeval.csv").iloc[100:100 + N]
    tp_ids = _send_app_traces(phoenix, rows, project="worker-app")
    client = Client(base_url=phoenix)

    def stored():
        try:
            return client.spans.get_spans(project_identifier="worker-app", limit=1000)
        except httpx.HTTPStatusError:
            return []

    deadline = time.monotonic() + 60
    while len(stored()) < N and time.monotonic() < deadline:
        time.sleep(0.5)
    client.spans.log_span_annotations(span_annotations=[
        {"name": "score", "span_id": sid, "annotator_kind": "HUMAN", "result": {"score": float(v)}}
        for sid, v in zip(tp_ids, rows["score"], strict=True)], sync=True)
    db = f"sqlite:///{tmp_path / 'w.db'}"
    res = subprocess.run([sys.executable, "-m", "autometrics._cli.main", "worker", "--once", "--store", db, "--project", "worker-app",
                          "--target", "score", "--no-llm", "--min-feedback", "30", "--n-boot", "50", "--langfuse", "off",
                          "--phoenix", f"phoenix+{phoenix}/worker-app", "--metrics", "LengthRatio,OutputLength,FKGL,InputSimilarity",
                          "--promote-unvalidated"],  # 60 labels may not validate: the round trip is what is tested
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"Phoenix: {N} annotation(s)" in res.stdout + res.stderr, (res.stdout + res.stderr)[-3000:]
    store = TraceStore(db)
    champ = store.champion("worker-app", "score")
    online = store.scores_frame(champ["id"], columns=["trace_id", "score"])
    roots = store.root_spans(online["trace_id"])
    back = client.spans.get_span_annotations_dataframe(span_ids=tp_ids, project_identifier="worker-app",
                                                       include_annotation_names=["autometrics.score"])
    assert len(back) == N and set(back["annotator_kind"]) == {"CODE"}
    got = dict(zip(back.index, back["result.score"], strict=True))
    assert got == pytest.approx({roots[t]: s for t, s in zip(online["trace_id"], online["score"], strict=True)})
    assert back["result.explanation"].str.len().gt(0).all()  # rationales / warnings ride along
