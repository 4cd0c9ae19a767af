"""The worker: APScheduler jobs in the store's database, and the refit lock between two real
worker processes (they must never refit at once)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import sqlalchemy as sa
from monitor_data import add_feedback, simpeval, write_traces


def _lock_holder(url, q, hold):
    from autometrics.collectors.store import TraceStore
    from autometrics.collectors.store.locks import RefitLock

    lock = RefitLock(TraceStore(url, migrate=False))
    got = lock.acquire()
    q.put(got)
    if got:
        time.sleep(hold)
        lock.release()


def test_refit_lock_excludes_other_processes(store_url):
    import multiprocessing as mp

    from autometrics.collectors.store import TraceStore
    from autometrics.collectors.store.locks import RefitLock

    store = TraceStore(store_url)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    mine = RefitLock(store)
    assert mine.acquire()
    p = ctx.Process(target=_lock_holder, args=(store_url, q, 0))
    p.start()
    assert q.get(timeout=60) is False  # held here: the other process is refused
    p.join(30)
    mine.release()
    p = ctx.Process(target=_lock_holder, args=(store_url, q, 0))
    p.start()
    assert q.get(timeout=60) is True  # released: now it gets it
    p.join(30)
    store.dispose()


def _overlaps(intervals):
    s = sorted(intervals)
    return [(a, b) for a, b in zip(s, s[1:], strict=False) if b[0] < a[1]]


def test_two_worker_processes_never_refit_at_once(tmp_path, store_url):
    """Two `autometrics worker` processes on one store, both with a 0.5 s refit interval, while
    new feedback keeps arriving: refits happen, some attempts find the lock taken, and no two
    refit runs overlap in time."""
    from autometrics.collectors.store import TraceStore
    from autometrics.collectors.store.schema import refit_runs

    store = TraceStore(store_url)
    df = simpeval()
    ids = write_traces(store, df.iloc[:120], project="w")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANGFUSE_")}
    cmd = [sys.executable, "-m", "autometrics._cli.main", "worker", "--store", store_url, "--project", "w", "--target", "score",
           "--no-llm", "--n-boot", "100", "--refit-interval", "0.5", "--min-new-feedback", "1", "--poll", "0.3",
           "--score-interval", "30", "--langfuse", "off", "--run-for", "120", "--settle-seconds", "0"]
    procs = [subprocess.Popen(cmd + ["--dashboard", str(tmp_path / f"dash{i}.html")], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT) for i in range(2)]

    def runs():
        with store.engine.connect() as c:
            return [dict(r) for r in c.execute(sa.select(refit_runs)).mappings().all()]

    def enough(rs):
        return (sum(r["outcome"] in ("promoted", "rejected") for r in rs) >= 2 and any(r["outcome"] == "locked" for r in rs)
                and len({r["worker"] for r in rs}) == 2)

    try:
        deadline = time.monotonic() + 60  # bounded; on an idle 2-core machine this takes ~10 s
        k = 0
        while time.monotonic() < deadline and all(p.poll() is None for p in procs) and not enough(runs()):
            # a trickle of new ratings so every attempt has something to refit on
            add_feedback(store, ids[k % len(ids): k % len(ids) + 3], df.score.iloc[k % 120: k % 120 + 3], t0_ns=time.time_ns(),
                         prefix=f"t{k}")
            k += 3
            time.sleep(0.3)
        for p in procs:
            p.send_signal(signal.SIGTERM)  # graceful stop: the scheduler finishes the running job
        outs = [p.communicate(timeout=90)[0].decode(errors="replace") for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == 0 for p in procs), outs
    runs = runs()
    with store.engine.connect() as c:
        jobs = c.execute(sa.text("SELECT id FROM apscheduler_jobs")).scalars().all()
    held = [(r["started_ns"], r["ended_ns"]) for r in runs if r["outcome"] not in ("locked",)]
    assert all(e is not None for _, e in held), runs
    assert not _overlaps(held), _overlaps(held)
    done = [r for r in runs if r["outcome"] in ("promoted", "rejected")]
    assert len(done) >= 2, (runs, outs)
    assert any(r["outcome"] == "locked" for r in runs), "the workers never contended for the lock"
    assert len({r["worker"] for r in runs}) == 2  # both processes ran refit jobs
    assert any("refit" in j for j in jobs)  # APScheduler's job store lives in the trace store's database
    with store.engine.connect() as c:
        blobs = c.execute(sa.text("SELECT job_state FROM apscheduler_jobs")).scalars().all()
    assert not any(str(tmp_path).encode() in bytes(b) for b in blobs)  # no store URL (or secret) pickled into jobs
    store.dispose()


def test_worker_once_scores_and_writes_dashboard(tmp_path, sqlite_url):
    from autometrics._cli.main import main
    from autometrics.collectors.store import TraceStore

    store = TraceStore(sqlite_url)
    df = simpeval()
    write_traces(store, df.iloc[:100], project="p")
    write_traces(store, df.iloc[100:160], project="p", t0_ns=7_000_000_000, feedback=False)
    dash = tmp_path / "d.html"
    rc = main(["worker", "--store", sqlite_url, "--project", "p", "--target", "score", "--no-llm", "--n-boot", "100", "--once",
               "--min-new-feedback", "1", "--settle-seconds", "0", "--langfuse", "off", "--dashboard", str(dash)])
    assert rc == 0 and dash.exists()
    with store.engine.connect() as c:
        assert c.execute(sa.text("SELECT COUNT(*) FROM trace_scores")).scalar() == 160
    store.dispose()


def test_scheduled_jobs_run_in_process(sqlite_url):
    """BackgroundScheduler with the SQLAlchemy job store runs the jobs (short intervals)."""
    from autometrics.collectors.store import TraceStore
    from autometrics.evaluators.continuous.monitor import MonitorConfig
    from autometrics.evaluators.continuous.worker import Worker, WorkerOptions
    from waiting import wait_until

    store = TraceStore(sqlite_url)
    write_traces(store, simpeval(80), project="p")
    w = Worker(store, MonitorConfig(target="score", project="p", n_boot=50, settle_seconds=0),
               WorkerOptions(refit_interval=None, min_new_feedback=1, poll=0.2, score_interval=0.3))
    w.start()
    try:
        assert wait_until(lambda: w.monitor.champion() is not None, 40)
        assert wait_until(lambda: len(w.monitor.scores_frame()) == 80, 40)
    finally:
        w.stop()
    store.dispose()


_SLOW_REFIT = """
import sys, time
import autometrics.evaluators.continuous.monitor as monitor
from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig

def slow_fit(*a, **k):  # the fit of a worker that is about to be killed
    print("fitting", flush=True)
    time.sleep(120)

monitor.fit_for_refit = slow_fit  # the name the Monitor calls
Monitor(sys.argv[1], MonitorConfig(target="score", project="p", n_boot=50)).refit()
"""


def test_refit_left_running_by_a_killed_worker_is_marked_interrupted(store_url):
    """A worker killed mid-refit leaves its run 'running'.  While it lives (and holds the lock)
    nobody touches that record; once it is dead, the next refit, which holds the lock and so
    proves nobody else is running, marks it interrupted with the reason."""
    from autometrics.collectors.store import TraceStore
    from autometrics.collectors.store.schema import refit_runs
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig

    store = TraceStore(store_url)
    write_traces(store, simpeval(60), project="p")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANGFUSE_")}
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_REFIT, store_url], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        line = proc.stdout.readline().decode()
        assert line.strip() == "fitting", line
        mon = Monitor(store, MonitorConfig(target="score", project="p", n_boot=50, settle_seconds=0))
        (dead,) = [r for r in mon.runs() if r["outcome"] == "running"]
        assert dead["worker"].endswith(f":{proc.pid}")
        assert mon.refit().outcome == "locked"  # alive and holding the lock: its record is left alone
        assert [r["outcome"] for r in mon.runs() if r["id"] == dead["id"]] == ["running"]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        proc.stdout.close()
    out = mon.refit()
    assert out.outcome == "promoted", out
    with store.engine.connect() as c:
        rows = {r["id"]: dict(r) for r in c.execute(sa.select(refit_runs)).mappings().all()}
    old = rows[dead["id"]]
    assert old["outcome"] == "interrupted" and old["ended_ns"] >= old["started_ns"]
    assert f":{proc.pid} started this refit" in old["message"] and "holds the refit lock" in old["message"]
    assert not [r for r in rows.values() if r["outcome"] == "running"]
    assert mon.runs()[0]["outcome"] == "promoted"
    store.dispose()
