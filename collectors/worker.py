"""``autometrics worker``: the continuous-evaluation service (APScheduler 3.x).

Jobs live in an APScheduler ``SQLAlchemyJobStore`` in the trace store's own database (table
``apscheduler_jobs``), so schedules survive restarts and need no extra service:

- ``refit`` on an interval (``refit_interval`` seconds): refit when there is new feedback;
- ``refit-check`` every ``poll`` seconds: refit as soon as ``min_new_feedback`` new feedback
  points arrived (the "at least N new feedback points" trigger);
- ``score`` every ``score_interval`` seconds: score new traces with the champion, check drift,
  push to Langfuse when configured, rewrite the dashboard.

APScheduler 3.x cannot share a job store between processes safely (two schedulers may fire the
same job), so the refit itself runs under :class:`~autometrics.collectors.locks.RefitLock`: a
second worker finds the lock taken and skips.  Jobs are stored as a function reference plus
``(project, target)``; the store URL and any key stay in the process (never pickled into the
database).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .continuous import Monitor, MonitorConfig
from .store import TraceStore

__all__ = ["Worker", "WorkerOptions", "run_job"]

log = logging.getLogger("autometrics.worker")

_WORKERS: dict[str, Worker] = {}
_REG_LOCK = threading.Lock()


def _key(project: str, target: str) -> str:
    return f"{project}/{target}"


def run_job(key: str, kind: str) -> None:
    """The function APScheduler stores (by reference); looks the worker up in this process."""
    w = _WORKERS.get(key)
    if w is None:
        log.warning("no worker for %s in this process; job %s ignored", key, kind)
        return
    w.run(kind)


@dataclass
class WorkerOptions:
    refit_interval: float | None = 3600.0  # seconds; None: no interval refit
    min_new_feedback: int | None = 50  # None: no feedback-count trigger
    poll: float = 30.0  # how often the feedback-count trigger checks
    score_interval: float = 60.0
    dashboard: str | None = None  # path of the dashboard HTML to rewrite after each job
    langfuse: str = "auto"  # auto | on | off
    langfuse_max_attempts: int = 10  # delivery attempts per trace's scores / alert before giving up
    jobstore: bool = True  # APScheduler jobs in the trace store's database


class Worker:
    """Runs a :class:`Monitor`'s jobs on a schedule (or once with :meth:`run_once`)."""

    def __init__(self, store: TraceStore | str | None, config: MonitorConfig, options: WorkerOptions | None = None):
        self.monitor = Monitor(store, config)
        self.store = self.monitor.store
        self.opts = options or WorkerOptions()
        self.key = _key(config.project, config.target)
        self.scheduler = None
        self._pusher = None
        self._pusher_failed = False
        self._job_lock = threading.Lock()  # one job at a time inside this process
        self.last: dict = {}

    # ---- jobs
    def _langfuse(self):
        from ..dashboards.langfuse_push import LangfusePush, langfuse_configured

        mode = (self.opts.langfuse or "auto").lower()
        if mode == "off" or self._pusher_failed:
            return None
        if self._pusher is None:
            if not langfuse_configured():
                if mode == "on":
                    log.warning("langfuse=on but LANGFUSE_PUBLIC_KEY / LANGFUSE_SECRET_KEY are not set; not pushing")
                self._pusher_failed = True
                return None
            try:
                self._pusher = LangfusePush()
            except Exception as exc:
                log.warning("Langfuse push disabled: %s: %s", type(exc).__name__, exc)
                self._pusher_failed = True
                return None
        return self._pusher

    def run(self, kind: str) -> dict:
        """One job: ``refit`` (interval), ``refit-check`` (feedback count), ``score``; never raises."""
        with self._job_lock:
            out: dict = {"job": kind}
            try:
                if kind == "refit":
                    out["refit"] = self.monitor.refit()
                elif kind == "refit-check":
                    need = self.opts.min_new_feedback or 0
                    if need and self.monitor.new_feedback_count() >= need:
                        out["refit"] = self.monitor.refit(min_new_feedback=need)
                elif kind == "score":
                    out["scored"] = self.monitor.score_new()
                    out["alerts"] = self.monitor.check_drift()
                    self._push(out)
                if "refit" in out:
                    log.info("%s", out["refit"])
                self._write_dashboard()
            except Exception as exc:
                log.exception("job %s failed", kind)
                out["error"] = f"{type(exc).__name__}: {exc}"
            self.last = out
            return out

    def _push(self, out: dict) -> None:
        pusher = self._langfuse()
        if pusher is None:
            return
        try:
            from ..dashboards.langfuse_push import push_pending

            # delivered synchronously: a trace's scores are marked pushed only once Langfuse acknowledged them
            out["langfuse"] = push_pending(self.monitor, pusher, max_attempts=self.opts.langfuse_max_attempts)
        except Exception as exc:
            log.warning("Langfuse push failed: %s: %s", type(exc).__name__, exc)

    def _write_dashboard(self) -> None:
        if not self.opts.dashboard:
            return
        try:
            from ..dashboards.render import write_dashboard

            write_dashboard(self.monitor, self.opts.dashboard)
        except Exception as exc:
            log.warning("dashboard not written: %s: %s", type(exc).__name__, exc)

    def run_once(self, *, force_refit: bool = False) -> dict:
        """Refit (if due, or ``force_refit``), score, check drift, push, write the dashboard."""
        out = {"refit": self.monitor.refit(force=force_refit, min_new_feedback=self.opts.min_new_feedback or 1)}
        out.update({k: v for k, v in self.run("score").items() if k != "job"})
        return out

    # ---- scheduling
    def start(self, *, blocking: bool = False, run_for: float | None = None) -> None:
        """Schedule the jobs and run them; ``blocking`` serves until SIGINT/SIGTERM or ``run_for`` seconds."""
        from apscheduler.schedulers.background import BackgroundScheduler

        with _REG_LOCK:
            _WORKERS[self.key] = self
        jobstores = {}
        if self.opts.jobstore:
            from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore

            jobstores["default"] = SQLAlchemyJobStore(engine=self.store.engine, tablename="apscheduler_jobs")
        sched = BackgroundScheduler(jobstores=jobstores, job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 60},
                                    timezone="UTC")
        base = f"autometrics:{self.key}:"
        args = [self.key]
        if self.opts.refit_interval:
            sched.add_job(run_job, "interval", seconds=self.opts.refit_interval, args=args + ["refit"], id=base + "refit",
                          replace_existing=True, next_run_time=_soon(0.5))
        if self.opts.min_new_feedback:
            sched.add_job(run_job, "interval", seconds=self.opts.poll, args=args + ["refit-check"], id=base + "refit-check",
                          replace_existing=True, next_run_time=_soon(0.2))
        sched.add_job(run_job, "interval", seconds=self.opts.score_interval, args=args + ["score"], id=base + "score",
                      replace_existing=True, next_run_time=_soon(1.0))
        self.scheduler = sched
        sched.start()
        if blocking:
            stop = threading.Event()

            def _stop(*_):
                stop.set()

            try:
                signal.signal(signal.SIGTERM, _stop)
                signal.signal(signal.SIGINT, _stop)
            except ValueError:  # not the main thread
                pass
            stop.wait(run_for)
            self.stop()

    def stop(self) -> None:
        if self.scheduler is not None:
            try:
                self.scheduler.shutdown(wait=True)
            except Exception:
                pass
            self.scheduler = None
        with _REG_LOCK:
            if _WORKERS.get(self.key) is self:
                del _WORKERS[self.key]
        if self._pusher is not None:
            self._pusher.shutdown(5.0)


def _soon(seconds: float):
    import datetime as dt

    return dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=seconds)


def dashboard_default(store: TraceStore) -> Path:
    """Default dashboard path: beside a SQLite database, else in the user data directory."""
    import sqlalchemy as sa

    from .store import default_data_dir

    db = sa.engine.make_url(store.url).database
    if store.dialect == "sqlite" and db and db != ":memory:":
        return Path(db).expanduser().resolve().parent / "dashboard.html"
    return default_data_dir() / "dashboard.html"


def wait_until(pred, timeout: float, step: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return False
