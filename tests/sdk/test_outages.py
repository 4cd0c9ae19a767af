"""Outages with real processes: a collector (``autometrics collector serve`` in a subprocess)
killed and restarted, an application killed with SIGKILL while its items wait in the spool, the
SQLite store's folder deleted and its file replaced under a running writer, a spool too small,
Langfuse answering 503.  What is checked is what the application was told: every span recorded
and every feedback id returned appears in the store exactly once, and ``stats()`` counts only
what the backend committed.

``AUTOMETRICS_TEST_OUTAGE_S`` sets the collector's down-time of the fast outage test (default
4 s); ``test_collector_down_30s_then_back`` (marked slow) keeps a real 30 s outage."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from autometrics.collectors.store import TraceStore  # noqa: E402
from waiting import wait_until

OUTAGE_S = float(os.environ.get("AUTOMETRICS_TEST_OUTAGE_S", "4"))
# read before the `capture` fixture clears AUTOMETRICS_* from the environment
PG_DIR = os.environ.get("AUTOMETRICS_TEST_POSTGRES_DIR")
PG_URL = os.environ.get("AUTOMETRICS_TEST_POSTGRES_URL")


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _collector(db, port: int) -> subprocess.Popen:
    """``autometrics collector serve`` on ``port`` (a real process), once it listens."""
    p = subprocess.Popen([sys.executable, "-m", "autometrics._cli.main", "collector", "serve", "--store", f"sqlite:///{db}",
                          "--port", str(port), "--no-auth", "--langfuse", "off"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env={**os.environ, "LANGFUSE_PUBLIC_KEY": ""})
    line = p.stdout.readline()
    assert "listening on" in line, (line, p.stderr.read() if p.poll() is not None else "")
    return p


def _kill(p: subprocess.Popen) -> None:
    if p.poll() is None:
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)


class _App:
    """The application: a thread calling an observed function and sending feedback at a steady
    rate, keeping what it was told (span recorded, feedback id returned)."""

    def __init__(self, capture, period: float = 0.01):
        self.capture = capture
        self.period = period
        self.trace_ids: list[str] = []
        self.feedback_ids: list[str] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()

        @capture.observe(model="m")
        def answer(i):
            self.trace_ids.append(capture.current_trace_id())
            return f"answer {i}"

        self.answer = answer
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        i = 0
        while not self._stop.is_set():
            try:
                self.answer(i)
                if i % 3 == 0:
                    fid = self.capture.feedback(self.trace_ids[-1], "thumbs", i % 2 == 0)
                    if fid is not None:
                        self.feedback_ids.append(fid)
            except BaseException as exc:  # noqa: BLE001 - anything raised into the app is a failure
                self.errors.append(exc)
            i += 1
            time.sleep(self.period)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join(10)


def _assert_exactly_once(store: TraceStore, trace_ids: list[str], feedback_ids: list[str]) -> None:
    sp = store.spans_frame()
    fb = store.feedback_frame()
    assert len(sp) == len(trace_ids) and sorted(sp["trace_id"]) == sorted(trace_ids), \
        f"{len(trace_ids)} spans recorded, {len(sp)} stored, {len(set(trace_ids) - set(sp['trace_id']))} missing"
    assert len(fb) == len(feedback_ids) and sorted(fb["id"]) == sorted(feedback_ids), \
        f"{len(feedback_ids)} feedback ids returned, {len(fb)} stored"


def _outage(capture, tmp_path, down_s: float) -> None:
    db, port = tmp_path / "collector.db", _free_port()
    col = _collector(db, port)
    capture.configure(collector_url=f"http://127.0.0.1:{port}", project="outage", langfuse=False, flush_interval=0.1)
    try:
        with _App(capture) as app:
            time.sleep(1.0)
            _kill(col)  # the collector crashes ...
            t0 = time.monotonic()
            assert wait_until(lambda: capture.stats().get("span_spooled", 0) > 0, 10)
            time.sleep(max(0.0, down_s - (time.monotonic() - t0)))
            col = _collector(db, port)  # ... and comes back on the same port and store
            time.sleep(1.0)
        assert not app.errors
        assert capture.flush(30), capture.stats()
        st = capture.stats()
        n_spans, n_fb = len(app.trace_ids), len(app.feedback_ids)
        assert st["span_queued"] == st["span_written"] == n_spans and st["feedback_written"] == n_fb, st
        assert st["span_spooled"] > 0 and st["span_replayed"] == st["span_spooled"], st
        assert st["feedback_replayed"] == st.get("feedback_spooled", 0) and st["spool_pending"] == 0, st
        assert not any(st.get(k) for k in ("span_dropped", "span_failed", "span_lost_spool_full", "feedback_failed")), st
        _kill(col)
        _assert_exactly_once(TraceStore(f"sqlite:///{db}"), app.trace_ids, app.feedback_ids)
    finally:
        _kill(col)


def test_collector_down_then_back_every_acknowledged_item_is_stored_once(capture, tmp_path):
    _outage(capture, tmp_path, OUTAGE_S)


@pytest.mark.slow
def test_collector_down_30s_then_back(capture, tmp_path):
    _outage(capture, tmp_path, 30.0)


def _app_env(tmp_path) -> dict:
    """The environment of an application process: no AUTOMETRICS_/LANGFUSE_ settings of ours, its
    own data folder."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith(("AUTOMETRICS_", "LANGFUSE_"))},
            "AUTOMETRICS_HOME": str(tmp_path / "home")}


def _app(tmp_path, code: str):
    """(path of an application script holding ``code``, its environment)."""
    script = tmp_path / "app.py"
    script.write_text(code)
    return script, _app_env(tmp_path)


def _app_script(tmp_path) -> str:
    code = textwrap.dedent("""
        import json, sys, time
        import autometrics.capture as cap

        mode, target, spool, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
        kw = {"collector_url": target} if mode == "collector" else {"store_url": target}
        cap.configure(**kw, spool=spool, langfuse=False, flush_interval=0.05)

        @cap.observe
        def answer(i):
            return cap.current_trace_id()

        tids = [answer(i) for i in range(n)]
        fids = [cap.feedback(t, "thumbs", True) for t in tids[: n // 2]]
        done = cap.flush(float(sys.argv[5]))
        print(json.dumps({"flushed": done, "tids": tids, "fids": fids, "stats": cap.stats()}), flush=True)
        if sys.argv[6] == "hang":
            time.sleep(3600)  # killed with SIGKILL by the test
        cap.shutdown(5)
    """)
    path = tmp_path / "app.py"
    path.write_text(code)
    return str(path)


@pytest.mark.parametrize("backend", ["collector", "store"])
def test_app_killed_while_items_are_spooled_replays_them_after_restart(tmp_path, backend):
    """kill -9 of the application while its items wait in the spool; the restarted application
    (same store/collector, same spool) replays them: all stored once, counted as replayed."""
    script, spool = _app_script(tmp_path), str(tmp_path / "home" / "spool.db")
    env = _app_env(tmp_path)
    db = tmp_path / "store" / "traces.db"
    if backend == "collector":
        port = _free_port()
        target = f"http://127.0.0.1:{port}"  # nothing listens yet
    else:
        (tmp_path / "store").write_text("a file where the store's folder should be")  # the store cannot be opened
        target = f"sqlite:///{db}"
    first = subprocess.Popen([sys.executable, script, backend, target, spool, "200", "2", "hang"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
    out = json.loads(first.stdout.readline())
    assert out["flushed"] is False and out["stats"]["span_spooled"] == 200 and out["stats"]["feedback_spooled"] == 100, out
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    assert first.returncode == -signal.SIGKILL

    col = None
    if backend == "collector":
        col = _collector(db, port)
    else:
        (tmp_path / "store").unlink()  # the store is usable again
    try:
        second = subprocess.run([sys.executable, script, backend, target, spool, "0", "30", "exit"], capture_output=True,
                                text=True, env=env, timeout=120)
        out2 = json.loads(second.stdout.strip().splitlines()[-1])
        assert out2["flushed"] is True, (out2, second.stderr[-2000:])
        assert out2["stats"]["span_replayed"] == 200 and out2["stats"]["feedback_replayed"] == 100, out2
    finally:
        if col is not None:
            _kill(col)
    _assert_exactly_once(TraceStore(f"sqlite:///{db}"), out["tids"], out["fids"])


def test_store_folder_deleted_then_file_replaced_mid_run(capture, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="autometrics")
    folder = tmp_path / "store"
    path = folder / "traces.db"
    url = f"sqlite:///{path}"
    capture.configure(store_url=url, langfuse=False, flush_interval=0.05)

    @capture.observe
    def answer(i):
        return capture.current_trace_id()

    def phase(n):
        tids = [answer(i) for i in range(n)]
        fids = [capture.feedback(t, "thumbs", True) for t in tids[::2]]
        assert capture.flush(10)
        return tids, fids

    phase(50)
    shutil.rmtree(folder)  # the whole folder, while the writer holds the file open
    tids2, fids2 = phase(40)
    st = capture.stats()
    assert st["store_reopened"] == 1 and st["span_written"] == 90 and st["feedback_written"] == 45, st
    _assert_exactly_once(TraceStore(url), tids2, fids2)  # the recreated file has exactly what came after
    assert any("deleted while open" in r.getMessage() for r in caplog.records)

    os.rename(path, tmp_path / "old.db")  # a new file moved over the open one
    TraceStore(f"sqlite:///{tmp_path / 'fresh.db'}").dispose()
    os.replace(tmp_path / "fresh.db", path)
    tids3, fids3 = phase(30)
    st = capture.stats()
    assert st["store_reopened"] == 2 and st["span_written"] == 120 and st["feedback_written"] == 60, st
    assert any("replaced while open" in r.getMessage() for r in caplog.records)
    _assert_exactly_once(TraceStore(url), tids3, fids3)
    with sqlite3.connect(path) as c:  # the old file's write-ahead log was not read into the new file
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    # nothing was lost either: the old file plus its write-ahead log (moved aside) hold phase 2
    stale = [p for p in folder.iterdir() if ".stale-" in p.name]
    assert len(stale) == 1
    shutil.move(stale[0], tmp_path / "old.db-wal")
    _assert_exactly_once(TraceStore(f"sqlite:///{tmp_path / 'old.db'}"), tids2, fids2)


def test_store_file_replaced_under_a_busy_writer(capture, tmp_path):
    """The swap lands while the application keeps recording: every span is in the old or the
    new file, the new file is sound, and ``span_written`` equals what was recorded."""
    folder = tmp_path / "store"
    path = folder / "traces.db"
    capture.configure(store_url=f"sqlite:///{path}", langfuse=False, flush_interval=0.01)
    with _App(capture, period=0.001) as app:
        assert wait_until(lambda: capture.stats().get("span_written", 0) > 200, 20)
        TraceStore(f"sqlite:///{tmp_path / 'fresh.db'}").dispose()
        os.link(path, tmp_path / "old.db")  # (to read the old file afterwards)
        os.replace(tmp_path / "fresh.db", path)  # one atomic swap under the busy writer
        before = len(app.trace_ids)
        assert wait_until(lambda: len(app.trace_ids) > before + 200, 20)
    assert not app.errors and capture.flush(10)
    st = capture.stats()
    assert st["store_reopened"] == 1 and st["span_written"] == len(app.trace_ids), st
    for p in folder.iterdir():
        if ".stale-" in p.name:
            shutil.move(p, tmp_path / "old.db-wal")
    new = set(TraceStore(f"sqlite:///{path}").spans_frame()["trace_id"])
    old = set(TraceStore(f"sqlite:///{tmp_path / 'old.db'}").spans_frame()["trace_id"])
    assert new and old and (new | old) == set(app.trace_ids)
    with sqlite3.connect(path) as c:
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_spool_full_loss_is_counted_per_backend(capture, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="autometrics")
    db, port = tmp_path / "collector.db", _free_port()
    capture.configure(collector_url=f"http://127.0.0.1:{port}", langfuse=False, flush_interval=0.02, spool_max_mb=0.25)

    @capture.observe
    def answer(i):
        return os.urandom(2000).hex()  # incompressible content: ~2 kB per span in the spool

    for i in range(400):
        answer(i)
        if i % 50 == 0:
            capture.flush(2)
    assert capture.flush(5) is False
    st = capture.stats()
    assert st["span_lost_spool_full"] > 0 and st["span_spooled"] > 0, st
    assert st["span_spooled"] + st["span_lost_spool_full"] == st["span_queued"] == 400, st
    assert any("spool" in r.getMessage() and "full" in r.getMessage() for r in caplog.records)
    col = _collector(db, port)
    try:
        assert capture.flush(30)
        st = capture.stats()
        assert st["span_written"] == st["span_spooled"] == TraceStore(f"sqlite:///{db}").count("spans"), st
    finally:
        _kill(col)


def test_langfuse_down_losses_are_counted(capture, langfuse_server, tmp_path, monkeypatch):
    monkeypatch.setenv("LANGFUSE_TIMEOUT", "1")
    langfuse_server.fail_with(503)
    capture.configure(store_url=f"sqlite:///{tmp_path / 't.db'}", langfuse="on", flush_interval=0.05)

    @capture.observe
    def answer(i):
        return capture.current_trace_id()

    tids = [answer(i) for i in range(10)]
    for t in tids[:4]:
        capture.feedback(t, "thumbs", True)
    capture.flush(5)
    assert wait_until(lambda: capture.stats().get("langfuse_spans_lost", 0) >= 10
                      and capture.stats().get("langfuse_scores_lost", 0) >= 4, 30), capture.stats()
    st = capture.stats()
    assert st["langfuse_span_batches_lost"] >= 1 and st["span_written"] == 10, st  # the store is not affected
    langfuse_server.recover()
    tids = [answer(i) for i in range(5)]
    capture.feedback(tids[0], "thumbs", False)
    capture.flush(5)
    assert wait_until(lambda: capture.stats().get("langfuse_spans_exported", 0) >= 5
                      and capture.stats().get("langfuse_scores_sent", 0) >= 1, 30), capture.stats()
    assert capture.stats()["langfuse_spans_lost"] == st["langfuse_spans_lost"]


def _pg_ctl(*args: str) -> None:
    """pg_ctl on the throwaway cluster of ``.ci/postgres.sh`` (as its owner when run as root)."""
    d = PG_DIR
    cmd = [os.path.join(open(os.path.join(d, "bindir")).read().strip(), "pg_ctl"), "-D", os.path.join(d, "data"), *args]
    if os.getuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)


def test_postgres_store_down_then_back(capture, monkeypatch):
    """The store itself (Postgres) crashes and restarts under a busy application: every span and
    feedback item it was told about is stored once."""
    if not PG_URL or not PG_DIR:
        pytest.skip("needs the throwaway cluster of .ci/postgres.sh (eval \"$(.ci/postgres.sh)\")")
    import sqlalchemy as sa
    from pg_databases import fresh_pg_database

    url = fresh_pg_database()
    u = sa.engine.make_url(url)
    opts = f"-c listen_addresses=127.0.0.1 -p {u.port} -k {PG_DIR}"
    capture.configure(store_url=url, langfuse=False, flush_interval=0.1)
    try:
        with _App(capture) as app:
            time.sleep(1.0)
            _pg_ctl("-m", "immediate", "stop")  # a crash: no shutdown checkpoint
            assert wait_until(lambda: capture.stats().get("span_spooled", 0) > 0, 15)
            time.sleep(max(0.0, OUTAGE_S - 1))
            _pg_ctl("-w", "-t", "60", "-o", opts, "-l", os.path.join(PG_DIR, "server.log"),
                    "start")
            time.sleep(1.0)
    finally:
        try:  # the cluster serves the rest of the suite: make sure it runs
            _pg_ctl("status")
        except subprocess.CalledProcessError:
            _pg_ctl("-w", "-t", "60", "-o", opts, "-l", os.path.join(PG_DIR, "server.log"),
                    "start")
    assert not app.errors
    assert capture.flush(60), capture.stats()
    st = capture.stats()
    assert st["span_written"] == len(app.trace_ids) and st["span_spooled"] > 0 and st["span_replayed"] == st["span_spooled"], st
    _assert_exactly_once(TraceStore(url), app.trace_ids, app.feedback_ids)


def test_feedback_ids_survive_kill_9_right_after_they_are_returned(tmp_path):
    """kill -9 of the application the instant ``feedback()`` returned its ids (the store is up): the
    ids are on disk (spool) already, and the restarted application delivers every one."""
    code = textwrap.dedent("""
        import json, os, signal, sys
        import autometrics.capture as cap

        cap.configure(store_url=sys.argv[1], spool=sys.argv[2], langfuse=False, flush_interval=5.0)

        @cap.observe
        def answer(i):
            return cap.current_trace_id()

        tids = [answer(i) for i in range(int(sys.argv[3]))]
        if tids:
            fids = [cap.feedback(t, "thumbs", i % 2 == 0) for i, t in enumerate(tids)]
            print(json.dumps({"fids": fids}), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)  # no flush, no atexit: the last moment of work
        print(json.dumps({"flushed": cap.flush(30), "stats": cap.stats()}), flush=True)
        cap.shutdown(5)
    """)
    script, env = _app(tmp_path, code)
    store, spool = f"sqlite:///{tmp_path / 'traces.db'}", str(tmp_path / "home" / "spool.db")
    fids = []
    for _ in range(3):
        p = subprocess.run([sys.executable, str(script), store, spool, "40"], capture_output=True, text=True, env=env,
                           timeout=120)
        assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
        fids += json.loads(p.stdout.strip().splitlines()[-1])["fids"]
    after = subprocess.run([sys.executable, str(script), store, spool, "0"], capture_output=True, text=True, env=env, timeout=120)
    out = json.loads(after.stdout.strip().splitlines()[-1])
    assert out["flushed"] is True, (out, after.stderr[-2000:])
    stored = set(TraceStore(store).feedback_frame()["id"])
    assert len(fids) == 120 and set(fids) <= stored, f"{len(set(fids) - stored)} of {len(fids)} returned ids lost"


def test_a_burst_beyond_the_queue_goes_to_the_spool_not_the_floor(capture, tmp_path):
    """20x the in-memory queue in one burst: what does not fit the queue is spooled (counted as
    such), nothing is dropped, and every span reaches the store."""
    db = tmp_path / "traces.db"
    capture.configure(store_url=f"sqlite:///{db}", langfuse=False, queue_size=100, flush_interval=0.2)

    @capture.observe
    def answer(i):
        return capture.current_trace_id()

    tids = [answer(i) for i in range(2000)]
    fids = [capture.feedback(t, "thumbs", True) for t in tids[:500]]
    assert capture.flush(60)
    st = capture.stats()
    assert st.get("span_dropped", 0) == 0 and st.get("feedback_dropped", 0) == 0, st
    assert st["span_overflow_spooled"] > 0, st
    _assert_exactly_once(TraceStore(f"sqlite:///{db}"), tids, fids)


def test_a_full_disk_under_the_spool_is_counted_as_documented_and_replay_goes_on(capture, tmp_path, monkeypatch):
    """The collector is down and the disk under the spool fills up (SQLite's "database or disk is
    full", injected on appends 6 to 15): what cannot be spooled is counted as ``*_lost_spool_full``,
    the spool stays in use, and what it holds is replayed once the collector is back; flush() is
    False until then."""
    from autometrics.collectors.spool import Spool

    db, port = tmp_path / "collector.db", _free_port()
    real, calls = Spool.append, {"n": 0}

    def append(self, target, records):
        calls["n"] += 1
        if 5 < calls["n"] <= 15:
            raise sqlite3.OperationalError("database or disk is full")
        return real(self, target, records)

    monkeypatch.setattr(Spool, "append", append)
    capture.configure(collector_url=f"http://127.0.0.1:{port}", langfuse=False, flush_interval=0.02)

    @capture.observe
    def answer(i):
        return capture.current_trace_id()

    tids = []
    for i in range(300):
        tids.append(answer(i))
        if i % 10 == 0:
            capture.flush(1)
    assert capture.flush(2) is False
    st = capture.stats()
    assert st["span_lost_spool_full"] > 0 and st.get("span_failed", 0) == 0, st
    assert st["span_spooled"] + st["span_lost_spool_full"] == 300, st
    assert calls["n"] > 15  # the spool was used again after the disk had room
    col = _collector(db, port)
    try:
        assert capture.flush(30)
        assert capture.stats()["span_written"] == st["span_spooled"] == TraceStore(f"sqlite:///{db}").count("spans")
    finally:
        _kill(col)


def test_spans_held_in_memory_by_a_killed_app_are_counted_on_restart(tmp_path):
    """kill -9 of an application producing spans as fast as it can: what it held only in memory
    (its last heartbeat in the spool, at most `flush_interval` old) is counted by the next process
    as `span_lost_crash`, with a warning; stored plus counted is what was produced, within the
    documented window."""
    code = textwrap.dedent("""
        import json, sys
        import autometrics.capture as cap

        cap.configure(store_url=sys.argv[1], spool=sys.argv[2], langfuse=False, flush_interval=0.2)

        @cap.observe
        def answer(i):
            return "x" * 200

        if sys.argv[3] == "run":
            i = 0
            while True:
                answer(i)
                i += 1
                if i % 200 == 0:
                    print(i, flush=True)
        print(json.dumps({"flushed": cap.flush(30), "stats": cap.stats()}), flush=True)
        cap.shutdown(5)
    """)
    script, env = _app(tmp_path, code)
    store, spool = f"sqlite:///{tmp_path / 'traces.db'}", str(tmp_path / "spool.db")
    p = subprocess.Popen([sys.executable, str(script), store, spool, "run"], stdout=subprocess.PIPE, text=True, env=env)
    last, started = 0, None
    for line in p.stdout:
        last = int(line)
        started = started or time.monotonic()
        if time.monotonic() - started > 3:
            os.kill(p.pid, signal.SIGKILL)
            break
    p.wait(10)
    after = subprocess.run([sys.executable, str(script), store, spool, "count"], capture_output=True, text=True, env=env,
                           timeout=120)
    out = json.loads(after.stdout.strip().splitlines()[-1])
    assert out["flushed"] is True, (out, after.stderr[-2000:])
    lost = out["stats"].get("span_lost_crash", 0)
    stored = TraceStore(store).count("spans")
    assert lost > 0 and "span_lost_crash" in after.stderr, (lost, after.stderr[-2000:])
    assert abs(stored + lost - last) <= 0.25 * last, (stored, lost, last)
