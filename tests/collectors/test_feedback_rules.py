"""Feedback cannot corrupt labels: one kind and scale per feedback name and project, values that
do not fit refused with the reason, re-sent ids with another value refused as conflicts.

Every rule is exercised three ways on a real store (SQLite, and Postgres when
AUTOMETRICS_TEST_POSTGRES_URL is set): in-process through ``autometrics.capture.feedback``
(``feedback_errors="raise"``: a ValueError with the reason and field), over HTTP through the real
collector (400 naming the item index and field, nothing of the request stored), and, where the
SDK or the collector cannot know the rule, by the store's write path."""

from __future__ import annotations

import json
import logging
import math
import threading
from dataclasses import dataclass

import pytest
from otlp_client import post as _post
from waiting import wait_until

KEY = {"Authorization": "Bearer test-key", "Content-Type": "application/json"}
T_HTTP, T_SDK = "a" * 32, "b" * 32


@pytest.fixture(autouse=True)
def _forget_declarations():
    """Declarations are process-wide (as in an application); each test starts without them."""
    yield
    from autometrics.capture import rule_cache

    with rule_cache._lock:
        rule_cache._declared.clear()


@pytest.fixture
def store_collector(store_url):
    from autometrics.collectors.server import CollectorServer

    srv = CollectorServer(store_url, port=0, api_keys=["test-key"], langfuse="off").start()
    yield srv
    srv.stop()


def _send(url: str, items) -> tuple[int, dict]:
    code, data, _ = _post(url, "/v1/feedback", json.dumps(items).encode(), KEY)
    return code, json.loads(data)


def _item(name, value, kind=None, trace=T_HTTP, **kw) -> dict:
    it = {"trace_id": trace, "name": name, "value": value, "project": "http", **kw}
    if kind is not None:
        it["kind"] = kind
    return it


def _stored(store, name: str, trace: str) -> list:
    fb = store.feedback_frame(trace_id=trace, names=[name])
    return [t if v is None or (isinstance(v, float) and math.isnan(v)) else v for v, t in zip(fb["value"], fb["value_text"], strict=True)]


@dataclass
class Case:
    id: str
    send: tuple  # (name, value, kind)
    code: str
    field: str = "value"
    prior: tuple | None = None  # (name, value, kind) stored first: fixes the first-seen kind
    declare: tuple | None = None  # (name, kind, scale)
    http_code: str | None = None  # the collector sees only the item's shape where the SDK knows the stored rule
    good: tuple | None = None  # a valid item for the same name (sent in the same HTTP request)


NAN, INF = float("nan"), float("inf")
CASES = [
    Case("null", ("thumbs", None, None), "null"),
    Case("null-with-kind", ("stars", None, "likert"), "null", good=(3, "likert")),
    Case("nan", ("score", NAN, None), "not_finite"),
    Case("inf-numeric", ("score", INF, "numeric"), "not_finite"),
    Case("dict-numeric", ("score", {"a": 1}, "numeric"), "wrong_type"),
    Case("list-likert", ("stars", [4], "likert"), "wrong_type", good=(3, "likert")),
    Case("dict-under-thumbs", ("thumbs", {"a": 1}, None), "not_thumbs", prior=("thumbs", True, None), http_code="wrong_type"),
    Case("likert-above-default-scale", ("stars", 99, "likert"), "out_of_scale", good=(3, "likert")),
    Case("likert-below-default-scale", ("stars", -1, "likert"), "out_of_scale", good=(3, "likert")),
    Case("likert-fraction", ("stars", 4.5, "likert"), "not_integer", good=(3, "likert")),
    Case("likert-bool", ("stars", True, "likert"), "wrong_type", good=(3, "likert")),
    Case("likert-declared-scale", ("stars", 11, None), "out_of_scale", declare=("stars", "likert", (0, 10))),
    Case("numeric-declared-bounds", ("score", 1.5, None), "out_of_scale", declare=("score", "numeric", (0, 1))),
    Case("thumbs-fraction", ("thumbs", 0.5, "thumbs"), "not_thumbs", good=(True, "thumbs")),
    Case("thumbs-two-under-thumbs", ("thumbs", 2, None), "not_thumbs", prior=("thumbs", True, None)),
    Case("thumbs-minus-one", ("thumbs", -1, "thumbs"), "not_thumbs", good=(False, "thumbs")),
    Case("thumbs-unknown-word", ("thumbs", "maybe", "thumbs"), "not_thumbs", good=("down", "thumbs")),
    Case("kind-vs-first-seen", ("thumbs", 3, "numeric"), "kind_mismatch", field="kind", prior=("thumbs", True, None)),
    Case("kind-vs-declared", ("stars", 0.5, "numeric"), "kind_mismatch", field="kind", declare=("stars", "likert", None)),
    Case("categorical-blank", ("topic", " ", "categorical"), "wrong_type", good=("billing", "categorical")),
    Case("unknown-kind", ("x", 1, "weird"), "unknown_kind", field="kind"),
]
GOOD = {"thumbs": True, "stars": 3, "score": 0.5, "topic": "billing", "x": 1}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_rule_over_http(case: Case, store_collector):
    """400 naming the item and field; the good item sent with it is not stored either (all or
    nothing), and is accepted alone afterwards."""
    store = store_collector.store
    name, value, kind = case.send
    if case.declare:
        store.declare_feedback_schema(case.declare[0], case.declare[1], case.declare[2], project="http")
    if case.prior:
        assert _send(store_collector.url, _item(*case.prior))[0] == 200
    before = _stored(store, name, T_HTTP)
    good = _item(name, *(case.good or (GOOD[name], None)), id="good-1")
    code, body = _send(store_collector.url, [good, _item(name, value, kind)])
    assert code == 400, body
    (err,) = body["errors"]
    assert (err["index"], err["field"], err["code"]) == (1, case.field, case.http_code or case.code), err
    assert body["accepted"] == 0 and f"item 1 {case.field}" in body["error"]
    assert _stored(store, name, T_HTTP) == before  # nothing of the request
    assert _send(store_collector.url, [good])[0] == 200
    assert len(_stored(store, name, T_HTTP)) == len(before) + 1


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_rule_in_process(case: Case, capture, store_url):
    """The call itself refuses the value: ValueError with the reason (feedback_errors="raise"),
    counted per reason; nothing stored."""
    from autometrics.capture import rule_cache
    from autometrics.collectors.store import TraceStore

    capture.configure(store_url=store_url, project="sdk", langfuse=False, feedback_errors="raise")
    name, value, kind = case.send
    if case.declare:
        capture.feedback_schema(*case.declare)
    if case.prior:
        assert capture.feedback(T_SDK, *case.prior)
        assert capture.flush(10)
        assert rule_cache.wait_loaded(capture._runtime, "sdk")  # the rules the store now holds
    with pytest.raises(ValueError) as ei:
        capture.feedback(T_SDK, name, value, kind=kind)
    assert (ei.value.code, ei.value.field) == (case.code, case.field), str(ei.value)
    assert capture.stats()[f"feedback_invalid_{case.code}"] == 1
    assert capture.flush(10)
    assert _stored(TraceStore(store_url), name, T_SDK) == ([1.0] if case.prior else [])


def test_default_mode_never_raises_and_logs_each_reason(capture, store_url, caplog):
    """Default: None returned, every reason logged (the rate limit is per reason and name, so
    ten different mistakes give ten lines), counted in total and per reason."""
    capture.configure(store_url=store_url, project="sdk", langfuse=False)
    bad = [(c.send, c.code) for c in CASES if not c.prior and not c.declare]
    with caplog.at_level(logging.WARNING, logger="autometrics.capture"):
        for (name, value, kind), _code in bad:
            assert capture.feedback(T_SDK, name, value, kind=kind) is None
        for (name, value, kind), _code in bad:  # repeats within the minute: counted, not logged again
            assert capture.feedback(T_SDK, name, value, kind=kind) is None
    lines = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    distinct = {(s[0], code) for s, code in bad}
    assert len(lines) == len(distinct), lines
    st = capture.stats()
    assert st["feedback_invalid"] == 2 * len(bad)
    for code in {code for _s, code in bad}:
        assert st[f"feedback_invalid_{code}"] == 2 * sum(1 for _s, c in bad if c == code)
    assert capture.feedback(T_SDK, "thumbs", True) is not None and capture.flush(10)


# --------------------------------------------------------------------------- the scenario


def test_null_or_dict_never_replaces_a_good_label(capture, store_url, store_collector):
    """``{"value": null}`` over HTTP and ``feedback(t, "thumbs", {"a": 1})``
    in-process replaced thumbs=True in the training frame; Likert 99/-1/4.5 made a mean of 22.3."""
    store = store_collector.store
    t = "c" * 32
    store.write([{"trace_id": t, "span_id": "1" * 16, "name": "answer", "project": "http", "start_time_ns": 1, "end_time_ns": 2,
                  "input": "q", "output": "a"}], [])
    assert _send(store_collector.url, {"trace_id": t, "name": "thumbs", "value": True})[0] == 200
    assert _send(store_collector.url, {"trace_id": t, "name": "thumbs", "value": None})[0] == 400
    capture.configure(store_url=store_url, project="http", langfuse=False)
    assert capture.feedback(t, "thumbs", {"a": 1}) is None
    for v in (4, 99, -1, 4.5):
        capture.feedback(t, "stars", v, kind="likert")
    assert capture.flush(10)
    df = store.training_frame(["thumbs", "stars"], project="http", aggregate={"stars": "mean"})
    assert df[["thumbs", "stars"]].values.tolist() == [[1.0, 4.0]]


# --------------------------------------------------------------------------- one kind per name


def test_zero_one_without_kind_follow_the_stored_thumbs_kind(capture, store_url, store_collector):
    """``0``/``1`` without a kind under a name stored as thumbs are thumbs, not numeric, even when
    the sender does not know the rule (a new process, a collector item)."""
    store = store_collector.store
    assert _send(store_collector.url, _item("thumbs", "up"))[0] == 200
    assert _send(store_collector.url, [_item("thumbs", 0), _item("thumbs", 1.0)])[0] == 200
    capture.configure(store_url=store_url, project="http", langfuse=False)  # knows nothing yet
    assert capture.feedback(T_HTTP, "thumbs", 0) is not None
    assert capture.flush(10)
    fb = store.feedback_frame(names=["thumbs"])
    assert set(fb["kind"]) == {"thumbs"} and fb["value"].tolist() == [1.0, 0.0, 1.0, 0.0]
    assert store.feedback_schemas("http")["thumbs"].kind == "thumbs"


def test_first_seen_kind_is_per_project_and_inferred_by_the_documented_rule(store_url):
    from autometrics.collectors.feedback import make_feedback_row
    from autometrics.collectors.store import FeedbackInvalid, TraceStore

    store = TraceStore(store_url)
    rows = [make_feedback_row(T_HTTP, "a", True, project="p1"), make_feedback_row(T_HTTP, "b", "👎", project="p1"),
            make_feedback_row(T_HTTP, "c", 0.25, project="p1"), make_feedback_row(T_HTTP, "d", "billing", project="p1"),
            make_feedback_row(T_HTTP, "e", 4, kind="rating", project="p1"), make_feedback_row(T_HTTP, "a", 0.7, project="p2")]
    store.write([], rows)
    got = {n: s.describe() for n, s in store.feedback_schemas("p1").items()}
    assert got == {"a": "thumbs", "b": "thumbs", "c": "numeric", "d": "categorical", "e": "likert 1..5"}
    assert store.feedback_schemas("p2")["a"].kind == "numeric"  # another project, another rule
    with pytest.raises(FeedbackInvalid) as ei:  # the SDK/collector did not know: the store refuses
        store.write([], [make_feedback_row(T_HTTP, "c", True, project="p1"), make_feedback_row(T_HTTP, "d", 3, kind="numeric",
                                                                                                  project="p1")])
    assert [(p["index"], p["code"]) for p in ei.value.problems] == [(0, "wrong_type"), (1, "kind_mismatch")]
    assert store.count("feedback") == 6


def test_old_store_names_keep_their_kind_after_the_upgrade(store_url):
    """Migration 6 takes each existing name's kind from its oldest row, so ``1`` under an old
    thumbs name stays thumbs; an old likert name's scale covers its stored values."""
    import sqlalchemy as sa
    from autometrics.collectors.feedback import make_feedback_row
    from autometrics.collectors.store import TraceStore

    old = TraceStore(store_url, migrate=False)
    old.migrate(target=5)
    with old.engine.begin() as c:
        c.execute(sa.text("INSERT INTO traces (trace_id, project) VALUES (:t, 'legacy')"), {"t": T_HTTP})
        for i, (name, kind, v) in enumerate([("thumbs", "thumbs", 1.0), ("thumbs", "numeric", 1.0), ("stars", "likert", 7.0)]):
            c.execute(sa.text("INSERT INTO feedback (id, trace_id, name, kind, value, created_at_ns) VALUES (:i, :t, :n, :k, :v, :c)"),
                      {"i": f"old{i}", "t": T_HTTP, "n": name, "k": kind, "v": v, "c": 10 + i})
    old.dispose()
    store = TraceStore(store_url)
    rules = store.feedback_schemas("legacy")
    assert rules["thumbs"].kind == "thumbs" and rules["stars"].describe() == "likert 1..7"
    store.write([], [make_feedback_row(T_HTTP, "thumbs", 1, id="new")])  # project from the trace
    assert store.feedback_frame(names=["thumbs"]).set_index("id").loc["new", "kind"] == "thumbs"


def test_concurrent_first_writers_agree_on_one_kind(store_url):
    """Two writers race to fix a new name's kind (True vs 0.25): exactly one kind wins, and the
    other writer's items are refused, never stored under the same name."""
    from autometrics.collectors.feedback import make_feedback_row
    from autometrics.collectors.store import FeedbackInvalid, TraceStore

    TraceStore(store_url).dispose()  # created and migrated once
    outcomes: list = []
    go = threading.Barrier(8)

    def writer(k: int) -> None:
        store = TraceStore(store_url)
        value = True if k % 2 else 0.25
        go.wait()
        try:
            for j in range(5):
                store.write([], [make_feedback_row(T_HTTP, f"race{j}", value, project="p")])
            outcomes.append("ok")
        except FeedbackInvalid:
            outcomes.append("refused")
        finally:
            store.dispose()

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    store = TraceStore(store_url)
    fb = store.feedback_frame()
    for j in range(5):
        kinds = set(fb[fb["name"] == f"race{j}"]["kind"])
        assert len(kinds) == 1 and kinds == {store.feedback_schemas("p")[f"race{j}"].kind}
    assert len(outcomes) == 8 and "refused" in outcomes


# --------------------------------------------------------------------------- declared schemas, shared


def test_declaration_in_the_sdk_holds_for_the_collector(capture, store_url, store_collector):
    """``autometrics.feedback_schema`` reaches the store, so the collector (another writer) holds
    items under the name to it; without the declaration 7 would be refused (default 1..5)."""
    capture.configure(store_url=store_url, project="http", langfuse=False)
    capture.feedback_schema("stars", kind="likert", scale=(1, 10))
    assert capture.feedback(T_HTTP, "stars", 7) is not None and capture.flush(10)
    store = store_collector.store
    assert wait_until(lambda: store.feedback_schemas("http").get("stars") is not None
                      and store.feedback_schemas("http")["stars"].source == "declared", 10)
    assert store.feedback_schemas("http")["stars"].describe() == "likert 1..10"
    assert _send(store_collector.url, _item("stars", 9))[0] == 200
    code, body = _send(store_collector.url, _item("stars", 12))
    assert code == 400 and body["errors"][0]["code"] == "out_of_scale" and "1..10 (declared)" in body["errors"][0]["error"]
    code, body = _send(store_collector.url, _item("stars", 0.5, "numeric"))
    assert code == 400 and body["errors"][0]["code"] == "kind_mismatch"


def test_declaration_in_the_store_holds_for_every_sdk(capture, store_url):
    from autometrics.capture import rule_cache
    from autometrics.collectors.store import TraceStore

    store = TraceStore(store_url)
    store.declare_feedback_schema("quality", "numeric", (0, 1), project="sdk")
    with pytest.raises(ValueError, match="already numeric 0..1"):
        store.declare_feedback_schema("quality", "thumbs", project="sdk")
    capture.configure(store=store, project="sdk", langfuse=False)
    assert rule_cache.wait_loaded(capture._runtime, "sdk")
    assert capture.feedback(T_SDK, "quality", 1.5) is None  # refused at the call: the SDK read the rule
    assert capture.stats()["feedback_invalid_out_of_scale"] == 1
    assert capture.feedback(T_SDK, "quality", 0.5) and capture.flush(10)
    assert _stored(store, "quality", T_SDK) == [0.5]


def test_declaring_another_kind_in_process_is_refused_by_the_store(capture, store_url):
    """A process that declares a rule the store does not hold: its items are refused by the
    store (counted as rejected), the conflict is logged and counted, nothing mixes."""
    from autometrics.collectors.store import TraceStore

    store = TraceStore(store_url)
    store.declare_feedback_schema("stars", "likert", (1, 5), project="sdk")
    capture.configure(store_url=store_url, project="sdk", langfuse=False)
    capture.feedback_schema("stars", kind="numeric")
    assert capture.feedback(T_SDK, "stars", 50) is not None  # this process believes its declaration
    capture.flush(10)
    assert wait_until(lambda: capture.stats().get("feedback_schema_conflicts") == 1, 10)
    st = capture.stats()
    assert st["feedback_rejected"] == 1 and not st.get("feedback_written")
    assert store.count("feedback") == 0 and store.feedback_schemas("sdk")["stars"].describe() == "likert 1..5"


def test_feedback_schema_rejects_bad_arguments(capture):
    for args, kw, match in [(("s", "likert"), {"scale": (1, 4.5)}, "integer ends"), (("s", "thumbs"), {"scale": (0, 1)}, "no scale"),
                            (("s", "nope"), {}, "unknown feedback kind"), (("", "likert"), {}, "name"),
                            (("s", "numeric"), {"scale": (2, 1)}, "low < high")]:
        with pytest.raises(ValueError, match=match):
            capture.feedback_schema(*args, **kw)


def test_item_schema_over_http_declares_for_other_writers(store_collector):
    code, _ = _send(store_collector.url, _item("effort", 3, schema={"kind": "likert", "scale": [0, 3]}))
    assert code == 200 and store_collector.store.feedback_schemas("http")["effort"].describe() == "likert 0..3"
    code, body = _send(store_collector.url, _item("effort", 2, schema={"kind": "likert", "scale": [1, 10]}))
    assert code == 400 and body["errors"][0]["field"] == "schema" and body["errors"][0]["code"] == "schema_mismatch"
    code, body = _send(store_collector.url, _item("effort", 2, schema={"kind": "likert", "scale": "big"}))
    assert code == 400 and body["errors"][0]["field"] == "scale"


def test_project_of_an_http_item_is_its_traces(store_collector):
    store = store_collector.store
    t = "d" * 32
    store.write([{"trace_id": t, "span_id": "2" * 16, "name": "x", "project": "shop", "start_time_ns": 1, "end_time_ns": 2}], [])
    store.declare_feedback_schema("stars", "likert", (1, 3), project="shop")
    code, body = _send(store_collector.url, {"trace_id": t, "name": "stars", "value": 4})
    assert code == 400 and "1..3 (declared)" in body["errors"][0]["error"]
    assert _send(store_collector.url, {"trace_id": "e" * 32, "name": "stars", "value": 4})[0] == 200  # unknown trace: 'default'


# --------------------------------------------------------------------------- ids: idempotent or a conflict


def test_resent_id_over_http_same_value_is_idempotent_another_is_409(store_collector):
    store = store_collector.store
    url = store_collector.url
    assert _send(url, _item("thumbs", True, id="fb-1", comment="first"))[0] == 200
    code, body = _send(url, _item("thumbs", "up", id="fb-1", comment="a retry may differ in comment"))
    assert code == 200 and body["ids"] == ["fb-1"]
    code, body = _send(url, [_item("thumbs", True, id="fb-2"), _item("thumbs", False, id="fb-1")])
    assert code == 409, body
    (err,) = body["errors"]
    assert (err["index"], err["id"], err["field"], err["code"]) == (1, "fb-1", "id", "conflict") and "'fb-1'" in body["error"]
    code, body = _send(url, [_item("thumbs", True, id="fb-3"), _item("thumbs", False, id="fb-3")])  # within one request
    assert code == 409 and body["errors"][0]["index"] == 1
    code, body = _send(url, _item("other", True, id="fb-1"))  # another name under the same id
    assert code == 409
    fb = store.feedback_frame()
    assert fb["id"].tolist() == ["fb-1"] and fb["value"].tolist() == [1.0] and fb["comment"].tolist() == ["first"]
    health = json.loads(__import__("urllib.request").request.urlopen(f"{url}/health").read())
    assert health["counters"]["http_409"] == 3 and health["counters"]["feedback_conflict"] == 3


def test_resent_id_in_process_is_a_counted_conflict(capture, store_url):
    from autometrics.collectors.store import TraceStore

    capture.configure(store_url=store_url, project="sdk", langfuse=False)
    assert capture.feedback(T_SDK, "thumbs", True, id="k1") == "k1"
    assert capture.feedback(T_SDK, "thumbs", True, id="k1") == "k1"  # a retry
    assert capture.feedback(T_SDK, "thumbs", False, id="k1") is None  # caught in this process
    assert capture.stats()["feedback_conflict"] == 1
    assert capture.flush(10)
    # another process (a fresh runtime: no memory of k1) re-sends it with another value: the store refuses it
    capture.configure(store_url=store_url, project="sdk", langfuse=False, feedback_errors="raise")
    assert capture.feedback(T_SDK, "thumbs", False, id="k1") == "k1"
    assert capture.feedback(T_SDK, "thumbs", True, id="k2") == "k2"
    capture.flush(10)
    st = capture.stats()
    assert st["feedback_rejected"] == 1 and st["feedback_written"] == 1
    assert _stored(TraceStore(store_url), "thumbs", T_SDK) == [1.0, 1.0]
    with pytest.raises(ValueError, match="'k2' was already sent with another value"):
        capture.feedback(T_SDK, "thumbs", False, id="k2")


def test_store_conflict_keeps_the_stored_row_for_every_writer(store_url):
    from autometrics.collectors.feedback import make_feedback_row
    from autometrics.collectors.store import FeedbackConflict, TraceStore

    store = TraceStore(store_url)
    store.write([], [make_feedback_row(T_HTTP, "score", 0.5, id="s1"), make_feedback_row(T_HTTP, "score", 0.7, id="s2")])
    store.write([], [make_feedback_row(T_HTTP, "score", 0.5, id="s1", comment="retry")])  # idempotent
    with pytest.raises(FeedbackConflict) as ei:
        store.write([], [make_feedback_row(T_HTTP, "score", 0.9, id="s3"), make_feedback_row(T_HTTP, "score", 0.6, id="s1")])
    assert ei.value.status == 409 and [(p["index"], p["id"]) for p in ei.value.problems] == [(1, "s1")]
    assert isinstance(ei.value, ValueError) and "s1" in str(ei.value)
    assert sorted(store.feedback_frame()["id"]) == ["s1", "s2"]  # s3 was in the refused write


# --------------------------------------------------------------------------- the SDK through a collector


def test_sdk_through_the_collector_refused_item_counted_others_stored(capture, store_collector):
    """The SDK cannot know a rule that only the collector's store holds: the collector answers
    400 for the batch, the SDK's sink resends item by item, so only the bad item is lost, counted."""
    store = store_collector.store
    store.declare_feedback_schema("quality", "numeric", (0, 1), project="remote")
    capture.configure(collector_url=store_collector.url, api_key="test-key", project="remote", langfuse=False)

    @capture.observe
    def answer(q):
        return capture.current_trace_id()

    tids = [answer(i) for i in range(3)]  # the traces (project "remote") reach the collector before their feedback
    for t, v in zip(tids, [0.1, 1.5, 0.9], strict=True):
        assert capture.feedback(t, "quality", v, kind="numeric") is not None
    capture.flush(10)
    st = capture.stats()
    assert st["span_written"] == 3 and st["feedback_written"] == 2 and st["feedback_rejected"] == 1
    assert sorted(store.feedback_frame()["value"]) == [0.1, 0.9]
    assert not any(math.isnan(v) for v in store.feedback_frame()["value"])


def test_feedback_never_waits_for_a_hung_store(capture):
    """The rules are read in the background: with a store that accepts connections and never
    answers, feedback() and feedback_schema() still return at once (and check what they know)."""
    import socket
    import time

    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(16)  # connections complete in the kernel; nobody ever answers
    try:
        port = hung.getsockname()[1]
        capture.configure(store_url=f"postgresql+psycopg://u@127.0.0.1:{port}/db", project="sdk", langfuse=False, spool=False)
        capture.feedback_schema("stars", kind="likert", scale=(1, 10))
        worst = 0.0
        for i in range(200):
            t0 = time.perf_counter()
            got = capture.feedback(f"{i + 1:032x}", "stars", 1 + i % 10)
            worst = max(worst, time.perf_counter() - t0)
            assert got is not None
        assert capture.feedback(T_SDK, "stars", 11) is None  # the declaration is known without the store
        assert worst < 0.05, f"a feedback() call took {worst * 1e3:.1f} ms"
    finally:
        capture.shutdown(1.0)
        hung.close()


def test_sdk_through_the_collector_keeps_the_names_stored_kind_and_declared_scale(capture, store_collector):
    """An SDK sending via the collector does not know the store's rules: it sends a value without a
    kind as given, and its own declarations, so the collector's store reads them correctly."""
    store = store_collector.store
    assert _send(store_collector.url, _item("thumbs", True, project="remote"))[0] == 200  # the store's rule: thumbs
    capture.configure(collector_url=store_collector.url, api_key="test-key", project="remote", langfuse=False)
    capture.feedback_schema("stars", kind="likert", scale=(1, 10))

    @capture.observe
    def answer(q):
        return capture.current_trace_id()

    t = answer("q")
    assert capture.feedback(t, "thumbs", 0) is not None
    assert capture.feedback(t, "stars", 8) is not None
    assert capture.flush(10)
    st = capture.stats()
    assert st.get("feedback_written") == 2 and not st.get("feedback_rejected"), st
    fb = store.feedback_frame(trace_id=t)
    assert dict(zip(fb["name"], fb["kind"], strict=True)) == {"thumbs": "thumbs", "stars": "likert"}
    assert dict(zip(fb["name"], fb["value"], strict=True)) == {"thumbs": 0.0, "stars": 8.0}


def test_feedback_not_queued_is_not_acknowledged(capture, sqlite_url):
    """Without a spool, feedback waits in the in-memory queue: when it is full, the caller is told
    (None, or ValueError with feedback_errors="raise")."""
    capture.configure(store_url=sqlite_url, langfuse=False, queue_size=1, flush_interval=60, spool=False)

    @capture.observe
    def answer(q):
        return capture.current_trace_id()

    t = answer("q")  # its span takes the only queue slot
    assert capture.feedback(t, "thumbs", True) is None  # not accepted: the caller is told
    capture.configure(store_url=sqlite_url, langfuse=False, queue_size=1, flush_interval=60, feedback_errors="raise",
                      spool=False)
    t = answer("q")
    with pytest.raises(ValueError, match="queue is full"):
        capture.feedback(t, "thumbs", True)


def test_feedback_is_on_disk_before_its_id_is_returned(capture, sqlite_url, tmp_path):
    """With the spool (the default), feedback is written to it before feedback() returns, so a full
    in-memory queue does not refuse it, and it reaches the store."""
    capture.configure(store_url=sqlite_url, langfuse=False, queue_size=1, flush_interval=60, spool=str(tmp_path / "s.db"))

    @capture.observe
    def answer(q):
        return capture.current_trace_id()

    t = answer("q")  # its span takes the only queue slot
    fid = capture.feedback(t, "thumbs", True)
    assert fid is not None and capture.stats()["feedback_spooled"] == 1
    assert capture.flush(10)
    from autometrics.collectors.store import TraceStore

    assert fid in set(TraceStore(sqlite_url).feedback_frame()["id"])


def test_oversized_feedback_fields_are_refused_over_http_and_in_process(capture, store_collector, sqlite_url):
    big = "x" * (10 << 20)  # 10 MB
    for item, field in [(_item("label", big, kind="categorical"), "value"), (_item("fix", big, kind="correction"), "value"),
                        (_item("thumbs2", True, metadata={"blob": big}), "metadata")]:
        code, body = _send(store_collector.url, [item])
        assert code == 400 and body["errors"][0]["field"] == field and "too_long" in body["errors"][0]["code"], body
    assert store_collector.store.count("feedback") == 0
    capture.configure(store_url=sqlite_url, langfuse=False)
    assert capture.feedback(T_HTTP, "fix", "short fix", kind="correction") is not None
    assert capture.feedback(T_HTTP, "fix", big, kind="correction") is None
    assert capture.stats().get("feedback_invalid_too_long") == 1
