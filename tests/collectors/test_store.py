"""The trace store on real SQLite and real Postgres: schema versions, migrations, idempotent
writes, the training frame."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa


def _span(i: int, trace: str | None = None, **kw) -> dict:
    row = {"trace_id": trace or f"{i:032x}", "span_id": f"{i + 1:016x}", "name": "answer", "project": "p",
           "start_time_ns": 1_000 + i, "end_time_ns": 2_000 + i, "input": f"q{i}", "output": f"a{i}", "model": "m",
           "input_tokens": 3, "output_tokens": 4, "attributes": "{}", "status": "UNSET"}
    row.update(kw)
    return row


def _fb(i: int, trace: str, name="thumbs", value=1.0, t=0, kind="thumbs") -> dict:
    return {"id": f"fb{i}", "trace_id": trace, "name": name, "kind": kind, "value": value, "created_at_ns": t}


def test_fresh_store_is_latest_schema_and_writes_are_idempotent(store_url):
    from autometrics.collectors.store import SCHEMA_VERSION, TraceStore

    store = TraceStore(store_url)
    assert store.version() == SCHEMA_VERSION >= 2
    spans = [_span(i) for i in range(50)]
    fb = [_fb(i, f"{i:032x}", value=float(i % 2), t=i) for i in range(50)]
    store.write(spans, fb)
    store.write(spans, fb)  # a retried batch: nothing twice
    assert (store.count("spans"), store.count("feedback"), store.count("traces")) == (50, 50, 50)
    df = store.training_frame("thumbs")
    assert len(df) == 50 and df["thumbs"].sum() == 25 and df["input"].iloc[0] == "q0"
    TraceStore(store_url)  # reopening migrates nothing and keeps data
    assert store.count("spans") == 50
    store.dispose()


def test_migration_from_v1_keeps_data(store_url):
    from autometrics.collectors.store import TraceStore

    old = TraceStore(store_url, migrate=False)
    assert old.version() == 0
    assert old.migrate(target=1) == 1
    with old.engine.begin() as c:  # data written by a v1 release
        c.execute(sa.text("INSERT INTO spans (trace_id, span_id, name, input, output, start_time_ns, end_time_ns) "
                          "VALUES (:t, :s, 'old', 'in', 'out', 1, 2)"), {"t": "ab" * 16, "s": "cd" * 8})
        c.execute(sa.text("INSERT INTO feedback (id, trace_id, name, kind, value, created_at_ns) VALUES ('f', :t, 'thumbs', 'thumbs', 1, 3)"),
                  {"t": "ab" * 16})
    old.dispose()
    new = TraceStore(store_url)  # upgrades to the latest version
    from autometrics.collectors.store import SCHEMA_VERSION

    assert new.version() == SCHEMA_VERSION
    cols = {c["name"] for c in sa.inspect(new.engine).get_columns("spans")}
    assert "resource" in cols
    df = new.training_frame("thumbs")
    assert df[["input", "output", "thumbs"]].values.tolist() == [["in", "out", 1.0]]
    new.write([_span(1, resource=json.dumps({"service.name": "x"}))], [])
    assert new.count("spans") == 2
    new.dispose()


def test_store_from_newer_release_is_refused(store_url):
    from autometrics.collectors.store import StoreError, TraceStore

    s = TraceStore(store_url)
    with s.engine.begin() as c:
        c.execute(sa.text("INSERT INTO schema_version (version, applied_at) VALUES (99, 0)"))
    s.dispose()
    with pytest.raises(StoreError, match="newer"):
        TraceStore(store_url)


def test_training_frame_outermost_content_tokens_and_errors(store_url):
    from autometrics.collectors.store import TraceStore

    store = TraceStore(store_url)
    t = "f" * 32
    store.write(
        [
            _span(0, t, span_id="a" * 16, name="http", input=None, output=None, model=None, input_tokens=None, output_tokens=None,
                  start_time_ns=0, end_time_ns=10_000_000),
            _span(1, t, span_id="b" * 16, parent_span_id="a" * 16, name="pipeline", input="user question", output="final answer",
                  model=None, input_tokens=None, output_tokens=None, start_time_ns=1, end_time_ns=9_000_000),
            _span(2, t, span_id="c" * 16, parent_span_id="b" * 16, name="llm", input="prompt", output="raw", model="gpt",
                  input_tokens=10, output_tokens=5, start_time_ns=2, end_time_ns=5),
            _span(3, t, span_id="d" * 16, parent_span_id="b" * 16, name="llm", input="prompt2", output="raw2", model="gpt",
                  input_tokens=7, output_tokens=1, start_time_ns=6, end_time_ns=8, error_type="RateLimitError", status="ERROR"),
        ],
        [_fb(0, t, "stars", 2.0, 1, "likert"), _fb(1, t, "stars", 4.0, 2, "likert"), _fb(2, t, "stars", 3.0, 3, "likert")],
    )
    row = store.training_frame("stars").iloc[0]
    assert (row["input"], row["output"], row["name"]) == ("user question", "final answer", "http")
    assert (row["input_tokens"], row["output_tokens"], row["model"], row["error"]) == (17, 6, "gpt", "RateLimitError")
    assert row["stars"] == 3.0 and row["latency_ms"] == 10.0
    assert store.training_frame("stars", aggregate="max")["stars"].iloc[0] == 4.0
    assert store.training_frame("stars", aggregate="count")["stars"].iloc[0] == 3
    assert store.training_frame("nothing").empty
    assert len(store.training_frame("nothing", include_unlabelled=True)) == 1
    with pytest.raises(ValueError, match="aggregate"):
        store.training_frame("stars", aggregate="median-ish")
    store.dispose()


def test_repr_hides_password():
    from autometrics.collectors.store import TraceStore

    s = TraceStore("postgresql+psycopg://u:s3cret@127.0.0.1:1/db", migrate=False)
    assert "s3cret" not in repr(s)


def test_training_frame_counts_each_llm_calls_tokens_once(store_url):
    """An observed function that returns a completion records its usage, and the instrumented
    client span inside it records the same usage: the frame counts it once; siblings add up."""
    from autometrics.collectors.store import TraceStore

    store = TraceStore(store_url)
    t = "e" * 32
    store.write(
        [
            _span(0, t, span_id="a" * 16, name="handle", input="q", output="a", input_tokens=None, output_tokens=None,
                  start_time_ns=0, end_time_ns=100),
            _span(1, t, span_id="b" * 16, parent_span_id="a" * 16, name="chat m", input_tokens=12, output_tokens=3,
                  start_time_ns=1, end_time_ns=50),
            _span(2, t, span_id="c" * 16, parent_span_id="b" * 16, name="chat m", input_tokens=12, output_tokens=3,
                  start_time_ns=2, end_time_ns=49),
            _span(3, t, span_id="d" * 16, parent_span_id="a" * 16, name="chat m", input_tokens=5, output_tokens=1,
                  start_time_ns=60, end_time_ns=90),
        ],
        [_fb(9, t, "thumbs", 1.0, 1)],
    )
    row = store.training_frame("thumbs").iloc[0]
    assert (row["input_tokens"], row["output_tokens"]) == (17, 4)


def test_count_feedback_per_project(store_url):
    from autometrics.collectors.store import TraceStore

    store = TraceStore(store_url)
    a, b = "1" * 32, "2" * 32
    store.write([_span(0, a, span_id="a" * 16, project="p1"), _span(1, b, span_id="b" * 16, project="p2")],
                [_fb(10, a, "thumbs", 1.0, 5), _fb(11, b, "thumbs", 0.0, 6), _fb(12, b, "thumbs", 1.0, 7)])
    assert store.count_feedback("thumbs") == 3
    assert store.count_feedback("thumbs", project="p1") == 1 and store.count_feedback("thumbs", project="p2") == 2
