"""``autometrics worker``: the continuous-evaluation service (APScheduler 3.x).

Jobs live in an APScheduler ``SQLAlchemyJobStore`` in the trace store's own database (table
``apscheduler_jobs``), so schedules survive restarts and need no extra service:

- ``refit`` on an interval (``refit_interval`` seconds): refit when there is new feedback;
- ``refit-check`` every ``poll`` seconds: refit as soon as ``min_new_feedback`` new feedback
  points arrived (the "at least N new feedback points" trigger);
- ``score`` every ``score_interval`` seconds: score new traces with the champion, check drift.
  Any number of workers may score one store at once: each claims disjoint batches with a lease
  (``WorkerOptions.scoring``, :mod:`~autometrics.evaluators.continuous.online`).

After every job the worker calls its *publishers* (``publish(monitor, job_result)``): the
dashboard writer and the Langfuse push live in ``autometrics.dashboards.publish`` and are wired
by the CLI (``autometrics worker``), so this module imports no later stage.  Each job logs one
line saying what it refit, scored, pushed and alerted.

APScheduler 3.x cannot share a job store between processes safely (two schedulers may fire the
same job), so the refit itself runs under :class:`~autometrics.collectors.store.locks.RefitLock`: a
second worker finds the lock taken and skips.  Jobs are stored as a function reference plus
``(project, target)``; the store URL and any key stay in the process (never pickled into the
database).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ...collectors.files import data_dir
from ...collectors.store import TraceStore
from .monitor import Monitor, MonitorConfig
from .online import ScoringOptions

__all__ = ["Worker", "WorkerOptions", "Publisher", "run_job", "dashboard_default"]

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
    jobstore: bool = True  # APScheduler jobs in the trace store's database
    scoring: ScoringOptions = field(default_factory=ScoringOptions)  # claims' lease, judge sampling, budget, endpoint


class Publisher(Protocol):
    """Called after every job with the monitor and the job's result (a dict the publisher may
    add its own counts to, e.g. ``langfuse``); must not raise.  ``close`` at worker stop."""

    def publish(self, monitor: Monitor, result: dict) -> None: ...

    def close(self) -> None: ...


class Worker:
    """Runs a :class:`Monitor`'s jobs on a schedule (or once with :meth:`run_once`)."""

    def __init__(self, store: TraceStore | str | None, config: MonitorConfig, options: WorkerOptions | None = None,
                 publishers: Sequence[Publisher] = (), sources: Sequence = ()):
        self.monitor = Monitor(store, config)
        self.store = self.monitor.store
        self.opts = options or WorkerOptions()
        self.publishers = list(publishers)
        # pulled into the store before every job (``pull(store) -> dict``), e.g. a Phoenix project's
        # spans and annotations; a failing source is logged and the job runs on what the store has
        self.sources = list(sources)
        self.key = _key(config.project, config.target)
        self.scheduler = None
        self._job_lock = threading.Lock()  # one job at a time inside this process
        self.last: dict = {}

    # ---- jobs
    def _pull(self, out: dict) -> None:
        """Read every source into the store (a failing one is logged; the job goes on)."""
        for src in self.sources:
            try:
                out.setdefault("pulled", []).append(src.pull(self.store))
            except Exception as exc:
                log.warning("source %s not read: %s: %s", src, type(exc).__name__, exc)
                out.setdefault("pulled", []).append({"error": f"{type(exc).__name__}: {exc}"})

    def run(self, kind: str, *, alerts: list | None = None, pull: bool = True) -> dict:
        """One job: ``refit`` (interval), ``refit-check`` (feedback count), ``score``; never raises.
        ``alerts``: alerts raised just before this job (e.g. by a refit), published and counted with its own."""
        with self._job_lock:
            out: dict = {"job": kind}
            if pull:
                self._pull(out)
            try:
                if kind == "refit":
                    out["refit"] = self.monitor.refit()
                    out["alerts"] = list(out["refit"].alerts)
                elif kind == "refit-check":
                    need = self.opts.min_new_feedback or 0
                    if need and self.monitor.new_feedback_count() >= need:
                        out["refit"] = self.monitor.refit(min_new_feedback=need)
                        out["alerts"] = list(out["refit"].alerts)
                elif kind == "score":
                    res = self.monitor.score_online(options=self.opts.scoring)
                    out["scored"], out["scoring"] = res.written, res
                    out["alerts"] = list(alerts or []) + self.monitor.check_drift()
                self._publish(out)
            except Exception as exc:
                log.exception("job %s failed", kind)
                out["error"] = f"{type(exc).__name__}: {exc}"
            log.info("%s", job_line(self.key, out))
            self.last = out
            return out

    def _publish(self, out: dict) -> None:
        for pub in self.publishers:
            try:
                pub.publish(self.monitor, out)
            except Exception as exc:  # a publisher must never stop the worker
                log.warning("%s failed: %s: %s", type(pub).__name__, type(exc).__name__, exc)

    def run_once(self, *, force_refit: bool = False) -> dict:
        """Refit (if due, or ``force_refit``), score, check drift, then the publishers."""
        pulled: dict = {}
        self._pull(pulled)
        refit = self.monitor.refit(force=force_refit, min_new_feedback=self.opts.min_new_feedback or 1)
        log.info("%s", job_line(self.key, {"job": "refit", "refit": refit, **pulled}))
        out = {"refit": refit, **pulled}
        # the refit's alerts go out with the scoring job's: the count the CLI prints is what was logged and pushed
        out.update({k: v for k, v in self.run("score", alerts=list(refit.alerts), pull=False).items() if k != "job"})
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
        for pub in self.publishers:
            try:
                pub.close()
            except Exception as exc:
                log.warning("%s did not close: %s", type(pub).__name__, exc)


def job_line(key: str, out: dict) -> str:
    """One log line per job: what it refit, scored, pushed and alerted."""
    parts = [f"worker {key} job {out.get('job')}:"]
    for src in out.get("pulled", []):
        parts.append(f"read {src.get('spans', 0)} span(s) and {src.get('feedback', 0)} label(s) from {src.get('source')}"
                     if "error" not in src else f"source not read: {src['error']}")
    if "refit" in out:
        parts.append(str(out["refit"]))
    if "scored" in out:
        res = out.get("scoring")
        detail = f" ({res})" if res is not None and (res.written != res.scored or res.judge_calls or res.notes) else ""
        parts.append(f"scored {out['scored']} trace(s){detail}")
    if out.get("alerts"):
        parts.append("alerts: " + "; ".join(a.get("kind", "?") for a in out["alerts"]))
    elif "alerts" in out:
        parts.append("no new alert")
    if "langfuse" in out:
        lf = out["langfuse"]
        parts.append(f"Langfuse: {lf.get('scores', 0)} trace(s) scored, {lf.get('alerts', 0)} alert(s) pushed, "
                     f"{lf.get('failed', 0)} failed")
    if "phoenix" in out:
        px = out["phoenix"]
        parts.append(f"Phoenix: {px.get('annotations', 0)} annotation(s)" + (f", failed: {px['error']}" if px.get("error") else ""))
    if "dashboard" in out:
        parts.append(f"dashboard {out['dashboard']}")
    if "error" in out:
        parts.append(f"error: {out['error']}")
    return " ".join(parts)


def _soon(seconds: float):
    import datetime as dt

    return dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=seconds)


def dashboard_default(store: TraceStore, project: str = "default", target: str | None = None) -> Path:
    """Default static dashboard path, one file per project and target
    (``dashboard-<project>-<target>.html``): beside a SQLite database, else in the user data
    directory.  Two workers of one store never write the same page."""
    import hashlib
    import re

    import sqlalchemy as sa

    parts = [x for x in (project, target) if x is not None]
    slug = "-".join(re.sub(r"[^A-Za-z0-9_.]+", "_", x).strip("_.") or "_" for x in parts)
    if slug != "-".join(parts):  # names changed by the slug ("thumbs up", "thumbs/up"): a hash keeps them apart
        slug += "-" + hashlib.sha256("\0".join(parts).encode()).hexdigest()[:8]
    name = f"dashboard-{slug}.html"
    db = sa.engine.make_url(store.url).database
    if store.dialect == "sqlite" and db and db != ":memory:":
        return Path(db).expanduser().resolve().parent / name
    return data_dir() / name
