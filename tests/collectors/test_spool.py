"""The durable spool and the writer's use of it, on real SQLite files and real stores: order,
size bound, leases between processes, a spool file deleted or replaced under it, replayed rows
identical to directly written ones, and honest counters.  Faults are injected by a thin wrapper
around the real sink (it refuses while told to), never by a fake store."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading

import pytest
from autometrics.collectors.exporter import BatchWriter, Counters, StoreSink  # noqa: E402
from autometrics.collectors.spool import Spool  # noqa: E402
from autometrics.collectors.store import TraceStore  # noqa: E402
from waiting import wait_until


def _records(n: int, kind: str = "span", size: int = 10) -> list[tuple[str, str, int, bytes]]:
    return [(kind, "test", 1, json.dumps({"i": i, "pad": "x" * size}).encode()) for i in range(n)]


def test_append_claim_ack_in_order_and_bounded(tmp_path):
    sp = Spool(tmp_path / "s.db", max_bytes=1 << 20)
    assert not sp.exists() and sp.pending("a") == (0, 0) and not (tmp_path / "s.db").exists()  # nothing created early
    assert sp.append("a", _records(5)) == [True] * 5
    assert sp.append("b", _records(2)) == [True] * 2
    assert sp.pending("a") == (5, 5) and sp.pending() == (7, 7)
    got = sp.claim("a", max_records=3)
    assert [json.loads(r.payload)["i"] for r in got] == [0, 1, 2]
    # a second claimer (another process) does not get the leased records, only the rest
    other = Spool(tmp_path / "s.db", max_bytes=1 << 20)
    assert [json.loads(r.payload)["i"] for r in other.claim("a")] == [3, 4]
    assert sp.ack([r.seq for r in got]) == [r.seq for r in got]
    assert sp.ack([got[0].seq]) == []  # already deleted: not counted twice
    assert sp.pending("a") == (2, 2)
    other.release([r.seq for r in other.claim("a")])
    assert [json.loads(r.payload)["i"] for r in sp.claim("a")] == [3, 4]  # released: claimable again
    sp.close()
    other.close()

    small = Spool(tmp_path / "small.db", max_bytes=64 << 10)
    ok = small.append("a", [("span", "test", 1, os.urandom(20_000)) for _ in range(6)])  # incompressible
    assert ok[:2] == [True, True] and ok[-1] is False, ok
    assert small.size_bytes() <= 64 << 10
    assert small.append("a", _records(1)) == [True]  # a small record still fits
    small.close()


def test_claim_of_a_dead_process_is_taken_over(tmp_path):
    sp = Spool(tmp_path / "s.db", max_bytes=1 << 20)
    sp.append("a", _records(3))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    owner = f"{socket.gethostname()}:{int(dead.stdout)}:gone"
    with sqlite3.connect(tmp_path / "s.db") as c:  # fault injection: a claim left by a killed process
        c.execute("UPDATE spool SET owner = ?, lease_until = ?", (owner, 4e9))
    assert len(Spool(tmp_path / "s.db", max_bytes=1 << 20).claim("a")) == 3


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_spool_file_deleted_or_replaced_keeps_its_records(tmp_path, how):
    folder = tmp_path / "data"
    moved = []
    sp = Spool(folder / "spool.db", max_bytes=1 << 20, on_reopen=lambda why, n: moved.append((why, n)))
    sp.append("a", _records(4))
    if how == "deleted":
        import shutil

        shutil.rmtree(folder)
    else:
        os.rename(folder / "spool.db", tmp_path / "elsewhere.db")
        sqlite3.connect(folder / "spool.db").close()  # an empty file swapped in
    assert sp.append("a", _records(1)) == [True]
    assert moved == [(how, 4)]
    # a fresh reader of the file at the path sees all five, in order
    got = Spool(folder / "spool.db", max_bytes=1 << 20).claim("a")
    assert [json.loads(r.payload)["i"] for r in got] == [0, 1, 2, 3, 0]


class Flaky:
    """The real sink, refusing every call while ``down`` is set (fault injection), recording
    the order in which items reached it."""

    def __init__(self, sink):
        self.sink = sink
        self.down = threading.Event()
        self.order: list[str] = []
        self.target = sink.target

    def __repr__(self):
        return f"flaky {self.sink!r}"

    def _check(self):
        if self.down.is_set():
            raise ConnectionError("backend down (injected)")

    def write(self, spans, fb):
        self._check()
        self.order += [f"{s.context.span_id:016x}" for s in spans] + [r["id"] for r in fb]
        return self.sink.write(spans, fb)

    def encode(self, spans, fb):
        return self.sink.encode(spans, fb)

    def send(self, records):
        self._check()
        for r in records:
            if r.encoding.endswith("json"):  # (OTLP protobuf records are not unpacked here)
                self.order += [x.get("span_id") if r.kind == "span" else x["id"] for x in json.loads(r.payload)]
        return self.sink.send(records)

    def close(self):
        self.sink.close()


def _spans(n: int, start: int = 0, pad: int = 0):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exp = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exp))
    tr = tp.get_tracer("autometrics")
    for i in range(start, start + n):
        with tr.start_as_current_span(f"call {i}") as s:
            s.set_attribute("gen_ai.input.messages", json.dumps([{"role": "user", "parts": [{"type": "text", "content": f"q{i} é"}]}]))
            s.set_attribute("gen_ai.usage.input_tokens", i)
            s.set_attribute("gen_ai.request.temperature", 0.1 * i)
            if pad:
                s.set_attribute("gen_ai.output.messages", os.urandom(pad).hex())
    return list(exp.get_finished_spans())


def _feedback(spans, name="thumbs"):
    from autometrics.collectors.feedback import make_feedback_row

    return [make_feedback_row(f"{s.context.trace_id:032x}", name, i % 2 == 0, comment=f"c{i}", metadata={"k": [i]})
            for i, s in enumerate(spans)]


def test_replayed_rows_are_identical_to_direct_rows(tmp_path, store_url):
    from pg_databases import fresh_pg_database

    spans = _spans(40)
    fb = _feedback(spans)
    direct = TraceStore(store_url)
    StoreSink(store=direct).write(spans, fb)
    other = fresh_pg_database() if store_url.startswith("postgresql") else f"sqlite:///{tmp_path / 'replayed.db'}"
    sink = StoreSink(store=TraceStore(other))
    sp = Spool(tmp_path / "s.db", max_bytes=8 << 20)
    sp.append(sink.target, [(r.kind, r.encoding, r.items, r.payload) for r in sink.encode(spans, fb)])
    sink.send(Spool(tmp_path / "s.db", max_bytes=8 << 20).claim(sink.target))
    a, b = direct.spans_frame(), sink.store.spans_frame()
    assert len(a) == 40 and a.equals(b)
    assert direct.feedback_frame().equals(sink.store.feedback_frame())


def test_writer_spools_replays_in_order_and_counts_honestly(tmp_path):
    store = TraceStore(f"sqlite:///{tmp_path / 't.db'}")
    sink = Flaky(StoreSink(store=store))
    counters = Counters()
    w = BatchWriter(sink, batch_size=25, interval=0.02, counters=counters, spool=Spool(tmp_path / "s.db", 8 << 20))
    first, second, third = _spans(30), _spans(30, 30), _spans(30, 60)
    for s in first:
        w.put("span", s)
    assert w.flush(5)
    sink.down.set()
    for s in second:
        w.put("span", s)
    for r in _feedback(second):
        w.put("feedback", r)
    assert w.flush(5) is False  # kept in the spool, not written
    c = counters.snapshot()
    assert c["span_written"] == 30 and c["span_spooled"] == 30 and c["feedback_spooled"] == 30
    assert w.spool_pending() == 60 and store.count("spans") == 30
    sink.down.clear()
    for s in third:  # arrive while the backlog is still there: queued behind it
        w.put("span", s)
    assert w.flush(10)
    c = counters.snapshot()
    # the third batch went behind the backlog (spooled) unless the replay had already drained it
    assert c["span_written"] == 90 and c["feedback_written"] == 30 and c["span_replayed"] in (30, 60)
    assert c["span_replayed"] == c["span_spooled"] and c["feedback_replayed"] == 30
    assert store.count("spans") == 90 and store.count("feedback") == 30 and w.spool_pending() == 0
    ids = [f"{s.context.span_id:016x}" for s in first + second + third]
    got = [x for x in sink.order if len(x) == 16]
    assert got == ids, "items did not reach the store in the order they were recorded"
    w.shutdown(2)


def test_spool_full_loss_is_counted_and_logged(tmp_path, caplog):
    sink = Flaky(StoreSink(store=TraceStore(f"sqlite:///{tmp_path / 't.db'}")))
    sink.down.set()
    counters = Counters()
    w = BatchWriter(sink, batch_size=20, interval=0.02, counters=counters, spool=Spool(tmp_path / "s.db", 200 << 10))
    for k in range(10):  # 200 spans, ~1.6 kB each after compression: the 200 kB spool overflows
        for s in _spans(20, 20 * k, pad=1500):
            w.put("span", s)
        w.flush(5)
    c = counters.snapshot()
    assert c["span_lost_spool_full"] > 0 and c["span_spooled"] > 0
    assert c["span_spooled"] + c["span_lost_spool_full"] == 200
    assert any("spool" in r.getMessage() and "full" in r.getMessage() for r in caplog.records)
    sink.down.clear()
    assert w.flush(10)
    c = counters.snapshot()
    assert c["span_written"] == c["span_spooled"] == sink.sink.store.count("spans")
    w.shutdown(2)


def test_two_processes_replaying_one_spool_write_each_item_once(tmp_path):
    """Two live processes with the same store share the spool: leases and delete-counting keep
    every row stored once and every item counted once."""
    db, spool = tmp_path / "t.db", tmp_path / "s.db"
    sink = StoreSink(store=TraceStore(f"sqlite:///{db}"))
    sp = Spool(spool, 64 << 20)
    for k in range(40):  # 40 records of 25 spans, as a crashed app would have left them
        sp.append(sink.target, [(r.kind, r.encoding, r.items, r.payload) for r in sink.encode(_spans(25, 25 * k), [])])
    sp.close()
    code = (
        "import sys, json\n"
        "from autometrics.collectors.exporter import BatchWriter, Counters, StoreSink\n"
        "from autometrics.collectors.spool import Spool\n"
        "c = Counters()\n"
        f"w = BatchWriter(StoreSink({f'sqlite:///{db}'!r}), counters=c, spool=Spool({str(spool)!r}, 64 << 20))\n"
        "w.flush(60)\n"
        "w.shutdown(5)\n"
        "print(json.dumps(c.snapshot()))\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [json.loads(p.communicate(timeout=120)[0].strip().splitlines()[-1]) for p in procs]
    assert sum(o.get("span_replayed", 0) for o in outs) == 1000, outs
    assert TraceStore(f"sqlite:///{db}").count("spans") == 1000
    assert Spool(spool, 1 << 20).pending() == (0, 0)


def test_unusable_spool_falls_back_to_retries(tmp_path, caplog):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")  # the spool's folder is a file: it cannot be created
    sink = Flaky(StoreSink(store=TraceStore(f"sqlite:///{tmp_path / 't.db'}")))
    sink.down.set()
    counters = Counters()
    w = BatchWriter(sink, interval=0.02, retries=0, counters=counters, spool=Spool(blocker / "spool.db", 1 << 20))
    for s in _spans(5):
        w.put("span", s)
    w.flush(5)
    c = counters.snapshot()
    assert c["spool_errors"] == 1 and c["span_failed"] == 5 and not c.get("span_spooled")
    assert any("spool" in r.getMessage() and "unusable" in r.getMessage() for r in caplog.records)
    w.shutdown(1)


def test_collector_refusing_one_item_keeps_the_others(tmp_path, collector):
    from autometrics.collectors.exporter import CollectorSink

    counters = Counters()
    sink = Flaky(CollectorSink(collector.url, "test-key"))
    sink.down.set()
    w = BatchWriter(sink, interval=0.02, counters=counters, spool=Spool(tmp_path / "s.db", 8 << 20))
    spans = _spans(10)
    rows = _feedback(spans)
    rows[3] = {**rows[3], "kind": "no-such-kind", "kind_inferred": False}  # the collector answers 400 for this one
    for s in spans:
        w.put("span", s)
    for r in rows:
        w.put("feedback", r)
    assert w.flush(5) is False
    sink.down.clear()
    assert w.flush(10) is False  # one item did not reach the store: flush says so
    assert w.spool_pending() == 0 and w.flush(5)
    c = counters.snapshot()
    assert c["span_written"] == 10 and c["feedback_written"] == 9 and c["feedback_rejected"] == 1
    assert collector.store.count("spans") == 10 and collector.store.count("feedback") == 9
    w.shutdown(2)


def test_shutdown_with_a_hung_backend_spools_what_is_in_memory(tmp_path):
    store = TraceStore(f"sqlite:///{tmp_path / 't.db'}")
    gate = threading.Event()

    class Hung(Flaky):
        def write(self, spans, fb):
            gate.wait(30)  # a backend that accepts the connection and never answers
            return super().write(spans, fb)

    sink = Hung(StoreSink(store=store))
    counters = Counters()
    w = BatchWriter(sink, batch_size=10, interval=0.01, counters=counters, spool=Spool(tmp_path / "s.db", 8 << 20))
    for s in _spans(30):
        w.put("span", s)
    assert wait_until(lambda: w._inflight is not None, 5)
    assert w.shutdown(2.0) is False  # (2 s, not less: on a loaded 2-core machine spooling 30 rows takes a while)
    assert counters.snapshot()["span_spooled"] == 30  # the in-flight batch and the queue
    gate.set()
    # the next process (same spool, backend fine) sends them: stored once
    w2 = BatchWriter(StoreSink(store=store), counters=Counters(), spool=Spool(tmp_path / "s.db", 8 << 20))
    assert w2.flush(10)
    assert store.count("spans") == 30
    w2.shutdown(1)


def test_a_record_this_version_cannot_read_is_refused_not_blocking(tmp_path, caplog):
    store = TraceStore(f"sqlite:///{tmp_path / 't.db'}")
    sink = StoreSink(store=store)
    sp = Spool(tmp_path / "s.db", 8 << 20)
    sp.append(sink.target, [("span", "rows-json", 3, b"{not json"), ("span", "rows-v9", 2, b"[]")])
    sp.append(sink.target, [(r.kind, r.encoding, r.items, r.payload) for r in sink.encode(_spans(4), [])])
    sp.close()
    counters = Counters()
    w = BatchWriter(sink, counters=counters, spool=Spool(tmp_path / "s.db", 8 << 20))
    assert w.flush(10) is False and w.flush(5)  # (the first reports the refused records)
    c = counters.snapshot()
    assert c["span_replayed"] == 4 and c["span_rejected"] == 5 and store.count("spans") == 4
    assert any("cannot read" in r.getMessage() for r in caplog.records)
    assert Spool(tmp_path / "s.db", 1 << 20).pending() == (0, 0)
    w.shutdown(1)
