"""Nothing the SDK does may raise into the application: every backend failing at once, disk
full, a full queue, bounded flush/shutdown."""

from __future__ import annotations

import logging
import socket
import time

import pytest


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there any more: connection refused
    return port


def _hammer(capture, n: int = 10_000) -> int:
    """n decorated calls (sync, generator) + feedback; returns how many raised into the app."""

    @capture.observe(model="m")
    def work(i):
        return i * 2

    @capture.observe
    def stream(i):
        yield i

    exceptions = 0
    for i in range(n):
        try:
            assert work(i) == 2 * i
            if i % 10 == 0:
                assert list(stream(i)) == [i]
                capture.feedback(capture.current_trace_id() or f"{i + 1:032x}", "thumbs", i % 2 == 0)
        except Exception:
            exceptions += 1
    return exceptions


@pytest.mark.parametrize("backend", ["postgres-down+langfuse-down", "collector-down+langfuse-503"])
def test_10000_calls_with_every_backend_failing(capture, langfuse_server, monkeypatch, caplog, backend):
    monkeypatch.setenv("LANGFUSE_TIMEOUT", "1")
    if backend.startswith("postgres"):
        monkeypatch.setenv("LANGFUSE_BASE_URL", f"http://127.0.0.1:{_closed_port()}")
        capture.configure(store_url=f"postgresql+psycopg://u:secret-pw@127.0.0.1:{_closed_port()}/db", langfuse="on",
                          queue_size=2_000, flush_interval=0.05)
    else:
        langfuse_server.fail_with(503)
        capture.configure(collector_url=f"http://127.0.0.1:{_closed_port()}", api_key="sk-never-logged", langfuse="on",
                          queue_size=2_000, flush_interval=0.05)
    caplog.set_level(logging.WARNING, logger="autometrics")
    t0 = time.perf_counter()
    assert _hammer(capture) == 0
    elapsed = time.perf_counter() - t0
    capture.flush(1)
    st = capture.stats()
    assert st.get("write_errors", 0) >= 1
    assert st.get("span_spooled", 0) + st.get("span_failed", 0) + st.get("span_dropped", 0) > 0
    assert st.get("span_written", 0) == 0
    assert elapsed < 30, f"10,000 calls took {elapsed:.1f}s with backends down"
    ours = [r for r in caplog.records if r.name.startswith("autometrics")]
    assert len(ours) <= 10, f"{len(ours)} log lines: failure logging is not rate-limited"
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "secret-pw" not in text and "sk-never-logged" not in text and langfuse_server.secret_key not in text
    t0 = time.perf_counter()
    capture.shutdown(1.0)
    assert time.perf_counter() - t0 < 3  # bounded even with every backend down


def test_disk_full_is_counted_not_raised(capture, tmp_path, caplog):
    import sqlalchemy as sa
    from autometrics.collectors.store import TraceStore

    store = TraceStore(f"sqlite:///{tmp_path / 'full.db'}")
    pages = store.engine.connect().exec_driver_sql("PRAGMA page_count").scalar()

    @sa.event.listens_for(store.engine, "connect")
    def _tiny(dbapi_conn, _):  # the database may not grow: SQLite answers SQLITE_FULL, as on a full disk
        dbapi_conn.execute(f"PRAGMA max_page_count={pages + 2}")

    store.engine.dispose()
    capture.configure(store=store, langfuse=False, flush_interval=0.05)
    caplog.set_level(logging.WARNING, logger="autometrics")

    @capture.observe
    def f(i):
        return "x" * 2000 + str(i)

    for i in range(300):
        assert f(i).endswith(str(i))
    capture.flush(10)
    st = capture.stats()
    assert st.get("span_spooled", 0) == 300 and st.get("write_errors", 0) > 0 and st.get("span_written", 0) == 0
    assert any("full" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("spool", [False, True])
def test_full_queue_drops_and_counts(capture, sqlite_url, spool, tmp_path):
    """A backend slower than the app: without a spool, what does not fit the queue is dropped and
    counted; with one, it goes to the spool and every span is written."""
    capture.configure(store_url=sqlite_url, langfuse=False, queue_size=10, flush_interval=5,
                      spool=str(tmp_path / "spool.db") if spool else False)
    rt = capture._runtime
    gate = __import__("threading").Event()
    real = rt.writer.sink.write

    def slow_write(spans, fb):
        gate.wait(5)
        real(spans, fb)

    rt.writer.sink.write = slow_write

    @capture.observe
    def f(i):
        return i

    assert [f(i) for i in range(500)] == list(range(500))
    st = capture.stats()
    if spool:
        assert st.get("span_dropped", 0) == 0 and st["span_overflow_spooled"] >= 400
    else:
        assert st["span_dropped"] >= 400 and st["span_queued"] <= 10 + 512
    gate.set()
    assert capture.flush(30)
    st = capture.stats()
    assert st["span_written"] == (500 if spool else st["span_queued"])


def test_decorator_survives_broken_internals(capture, sqlite_url, monkeypatch):
    capture.configure(store_url=sqlite_url, langfuse=False)

    def boom(*a, **k):
        raise RuntimeError("internal bug")

    monkeypatch.setattr(capture.decorator, "_start", boom)  # the wrappers look _start up there

    @capture.observe
    def f(x):
        return x + 1

    @capture.observe
    def g(n):
        yield from range(n)

    assert f(1) == 2 and list(g(3)) == [0, 1, 2]
    assert capture.stats()["internal_errors"] == 2


def test_disabled_and_unconfigured(capture, sqlite_url, monkeypatch):
    monkeypatch.setenv("AUTOMETRICS_DISABLED", "1")

    @capture.observe
    def f(x):
        return x

    assert f(3) == 3 and capture.feedback("ab" * 16, "t", 1) is None and capture.flush() is True
