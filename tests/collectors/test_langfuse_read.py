"""Round trips with Langfuse through its public read API (``GET /api/public/v2/observations`` and
``/api/public/v3/scores``), with the official ``langfuse`` SDK against the spec-checked test server
(tests/langfuse_server.py + tests/langfuse_reads.py; no Langfuse server runs here).

A support bot captured by the SDK exports its spans to Langfuse and its users' ratings as scores;
people add their own labels in Langfuse with its client.  ``autometrics fit langfuse+http://…``
learns from Langfuse alone and gives the same evaluator as the fit from the app's own store; the
worker reading only Langfuse fits, scores and writes the scores back, read back with the client."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pandas as pd
import pytest

SHARED = Path(os.environ.get("AUTOMETRICS_SHARED", Path(__file__).resolve().parents[3] / "shared")) / "datasets"
N = 60
COMMON = ["--no-llm", "--metrics", "LengthRatio,OutputLength,BLEU,FKGL,LevenshteinRatio", "--n-boot", "50", "--permutations", "0",
          "--no-progress"]


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autometrics._cli.main", *args], capture_output=True, text=True, timeout=600)


@pytest.fixture
def bot_in_langfuse(capture, langfuse_server, sqlite_url, datasets_dir):
    """60 simpeval rows through the bot; its users' 1-5 ratings as feedback (to the store and, as
    scores, to Langfuse); returns (rows, trace ids, store url)."""
    from waiting import wait_until

    capture.configure(store_url=sqlite_url, project="bot", langfuse="auto")
    rows = pd.read_csv(datasets_dir / "simpeval.csv").drop_duplicates("input").head(N).reset_index(drop=True)

    @capture.observe(model="gpt-4o-mini", operation="chat")
    def llm(messages):
        return answers[messages[-1]["content"]]

    @capture.observe
    def simplify(text):
        tids.append(capture.current_trace_id())
        return llm([{"role": "system", "content": "Simplify the text."}, {"role": "user", "content": text}])

    answers = dict(zip(rows["input"], rows["output"], strict=True))
    tids = []
    for i, r in enumerate(rows.itertuples()):
        with capture.trace_attributes(session_id=f"conv-{i // 3}", user_id=f"user-{i // 3 % 7}", tags=["simplifier"]):
            simplify(r.input)
        time.sleep(0.002)  # distinct milliseconds: Langfuse keeps times to the ms, the frame reads traces in start order
    for tid, v in zip(tids, rows["score"], strict=True):
        capture.feedback(tid, "score", float(v))
    assert capture.flush(20)
    assert wait_until(lambda: len(langfuse_server.spans) >= 2 * N and len(langfuse_server.scores) >= N, 20), langfuse_server.errors
    return rows, tids, sqlite_url


def test_fit_from_langfuse_equals_the_fit_from_the_apps_store(bot_in_langfuse, langfuse_server, tmp_path):
    rows, tids, store = bot_in_langfuse
    lf = _cli("fit", f"langfuse+{langfuse_server.url}", "--target", "score", *COMMON, "--out", str(tmp_path / "lf"))
    assert lf.returncode == 0, lf.stderr[-3000:]
    assert f"read {2 * N} span(s) of {N} trace(s) and {N} score(s) from Langfuse" in lf.stdout + lf.stderr
    own = _cli("fit", store, "--project", "bot", "--target", "score", *COMMON, "--out", str(tmp_path / "own"))
    assert own.returncode == 0, own.stderr[-3000:]
    a, b = (json.loads((tmp_path / d / "evaluator.json").read_text()) for d in ("lf", "own"))
    assert a["dataset"]["fingerprint"] == b["dataset"]["fingerprint"]  # same ids, inputs, outputs and labels
    assert a["dataset"]["n_groups"] == b["dataset"]["n_groups"] == N // 3  # conversations kept whole
    assert [f["feature"] for f in a["features"]] == [f["feature"] for f in b["features"]]
    assert [f["weight"] for f in a["features"]] == pytest.approx([f["weight"] for f in b["features"]])
    assert a["statistics"]["test"]["tau"] == pytest.approx(b["statistics"]["test"]["tau"])
    assert not langfuse_server.errors, langfuse_server.errors[:3]


def test_langfuse_labels_of_every_kind(bot_in_langfuse, langfuse_server, tmp_path):
    """Labels people give in Langfuse (its client's create_score): a BOOLEAN on the LLM observation
    is a thumb on that span, a CATEGORICAL ``good``/``bad`` a thumb, an edit is read as the newer
    label; TEXT scores and session scores are counted as skipped, with the reason; the app's own
    feedback keeps its id and kind (a store that holds it gets nothing twice)."""
    from autometrics.collectors.langfuse_source import import_langfuse, langfuse_api
    from autometrics.collectors.store import TraceStore
    from langfuse import Langfuse

    rows, tids, store_url = bot_in_langfuse
    llm_span = {s["trace_id"]: s["span_id"] for s in langfuse_server.spans if s["parent_span_id"]}
    lf = Langfuse(public_key=langfuse_server.public_key, secret_key=langfuse_server.secret_key, base_url=langfuse_server.url)
    lf.create_score(name="helpful", value=True, trace_id=tids[0], observation_id=llm_span[tids[0]], data_type="BOOLEAN")
    edited = str(uuid.uuid4())  # a UUID as Langfuse's UI gives: the versioned feedback id is hashed to fit 64 characters
    first_time = dt.datetime.now(dt.timezone.utc)
    lf.create_score(name="helpful", value=False, trace_id=tids[1], data_type="BOOLEAN", score_id=edited, timestamp=first_time)
    lf.create_score(name="helpful", value="good", trace_id=tids[2], data_type="CATEGORICAL")
    lf.create_score(name="helpful", value="a fine answer", trace_id=tids[3], data_type="TEXT")
    lf.create_score(name="helpful", value=True, session_id="conv-0", data_type="BOOLEAN")
    lf.flush()
    fresh = TraceStore(f"sqlite:///{tmp_path / 'fresh.db'}")
    counts = import_langfuse(langfuse_api(), fresh, project="bot", names=["helpful", "score"])
    assert (counts["spans"], counts["traces"], counts["feedback"]) == (2 * N, N, N + 3)
    assert counts["scores_skipped"] == {"helpful: text_score": 1, "helpful: session_subject": 1}
    time.sleep(0.01)
    lf.create_score(name="helpful", value=True, trace_id=tids[1], data_type="BOOLEAN", score_id=edited,
                    timestamp=first_time)  # changed mind: an edit keeps the score's first timestamp
    lf.flush()
    import_langfuse(langfuse_api(), fresh, project="bot", names=["helpful", "score"])
    f = fresh.training_frame(["helpful"], project="bot").set_index("id")
    assert f.loc[tids[0], "helpful"] == 1 and f.loc[tids[1], "helpful"] == 1 and f.loc[tids[2], "helpful"] == 1
    fb = fresh.feedback_frame(names=["helpful"])
    assert list(fb[fb["trace_id"] == tids[0]]["span_id"]) == [llm_span[tids[0]]]
    assert set(fb["kind"]) == {"thumbs"} and len(fb[fb["trace_id"] == tids[1]]) == 2  # the edit is a newer item
    # the app's store already holds the bot's spans and its users' ratings: reading Langfuse into it adds none
    own = TraceStore(store_url)
    before = own.training_frame(["score"], project="bot")
    again = import_langfuse(langfuse_api(), own, project="bot", names=["score"])
    assert again["feedback"] == N
    after = own.training_frame(["score"], project="bot")
    pd.testing.assert_frame_equal(before.drop(columns=["feedback_ns"]), after.drop(columns=["feedback_ns"]))
    assert len(own.spans_frame()) == 2 * N


def test_worker_learns_from_langfuse_and_writes_scores_back(bot_in_langfuse, langfuse_server, tmp_path):
    """``autometrics worker --once --read-langfuse`` with an empty store: Langfuse's traces and
    scores are read in, an evaluator is fitted and scores every trace, and the scores are in
    Langfuse, read back with its client, equal to the stored online scores."""
    from autometrics.collectors.langfuse_source import langfuse_api
    from autometrics.collectors.store import TraceStore

    db = f"sqlite:///{tmp_path / 'w.db'}"
    res = _cli("worker", "--once", "--store", db, "--project", "bot", "--target", "score", "--no-llm", "--min-feedback", "30",
               "--n-boot", "50", "--settle-seconds", "0", "--langfuse", "on", "--read-langfuse", f"langfuse+{langfuse_server.url}",
               "--metrics", "LengthRatio,OutputLength,FKGL,InputSimilarity", "--promote-unvalidated")
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    assert f"read {2 * N} span(s) and {N} label(s) from Langfuse" in out, out[-3000:]
    store = TraceStore(db)
    champ = store.champion("bot", "score")
    online = store.scores_frame(champ["id"], columns=["trace_id", "score"])
    assert len(online) == N, out[-3000:]
    api = langfuse_api()
    back, cursor = [], None
    while True:
        page = api.scores.get_many(name="autometrics score", limit=100, cursor=cursor, fields="details,subject")
        back += page.data
        cursor = page.meta.cursor
        if not cursor:
            break
    got = {s.subject.id: s.value for s in back}
    assert got == pytest.approx(dict(zip(online["trace_id"], online["score"], strict=True)))
    assert all(s.comment for s in back)  # rationales / validity warnings ride along
    assert not langfuse_server.errors, langfuse_server.errors[:3]
