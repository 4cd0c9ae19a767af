"""The collector's group-commit writer: one thread commits the rows of many concurrent requests
in one transaction and only then wakes each request to answer it.

Why: an acknowledged span or feedback must be durable (SQLite WAL with ``synchronous=FULL``),
and one commit per request would cap throughput at the disk's fsync rate; one commit per many
requests gives both.  A request whose rows the store refuses is retried alone, so it cannot fail
the other requests of its batch.
"""

from __future__ import annotations

import collections
import logging
import threading

from .exporter import Counters, RateLimitedLog
from .store import TraceStore

log = logging.getLogger("autometrics.collectors.server")

__all__ = ["GroupCommitWriter", "Overloaded"]


class Overloaded(Exception):
    """Too many rows waiting for the writer: the client should retry later (HTTP 503)."""


class _Job:
    __slots__ = ("spans", "feedback", "event", "ok", "error", "conflicts")

    def __init__(self, spans, feedback):
        self.spans = spans
        self.feedback = feedback
        self.conflicts: list = []  # (span row, differing fields): ids stored before with other content
        self.event = threading.Event()
        self.ok = False
        self.error = None


class GroupCommitWriter:
    """One thread commits the rows of many concurrent requests per transaction, then wakes them."""

    def __init__(self, store: TraceStore, counters: Counters, *, max_pending_rows: int = 200_000, max_batch_rows: int = 20_000,
                 sink=None):
        self.store = store
        #: a StoreSink over ``store``: each commit counts only when it landed in the file at the
        #: store's path (a deleted or replaced SQLite file is reopened and the batch written again)
        self.sink = sink
        self.counters = counters
        self.max_pending_rows = max_pending_rows
        self.max_batch_rows = max_batch_rows
        self.errors = RateLimitedLog(log, 30.0)
        self._jobs: collections.deque[_Job] = collections.deque()
        self._pending = 0
        self._cv = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="collector-writer", daemon=True)
        self._thread.start()

    def submit(self, spans: list[dict], feedback: list[dict], timeout: float = 30.0) -> list:
        """Block until the rows are committed; returns the spans the store kept other content for
        (``(row, differing fields)``, not stored); raises Overloaded, TimeoutError or the store's error."""
        n = len(spans) + len(feedback)
        job = _Job(spans, feedback)
        with self._cv:
            if self._stop:
                raise Overloaded("collector is shutting down")
            if self._pending + n > self.max_pending_rows and self._pending:
                raise Overloaded(f"{self._pending} rows waiting to be written")
            self._jobs.append(job)
            self._pending += n
            self._cv.notify()
        if not job.event.wait(timeout):
            raise TimeoutError("the trace store did not commit in time")
        if not job.ok:
            raise job.error or RuntimeError("write failed")
        return job.conflicts

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._jobs and not self._stop:
                    self._cv.wait()
                if not self._jobs and self._stop:
                    return
                jobs, rows = [], 0
                while self._jobs and (not jobs or rows + len(self._jobs[0].spans) + len(self._jobs[0].feedback) <= self.max_batch_rows):
                    j = self._jobs.popleft()
                    jobs.append(j)
                    rows += len(j.spans) + len(j.feedback)
            self._commit(jobs)
            with self._cv:
                self._pending -= rows

    def _write(self, jobs: list[_Job]) -> None:
        spans, feedback, found = [r for j in jobs for r in j.spans], [r for j in jobs for r in j.feedback], []

        def write(store):
            found.clear()  # a write made again (the file was replaced) finds them again
            store.write(spans, feedback, conflicts=found)

        write(self.store) if self.sink is None else self.sink.checked(write)
        mine = {id(r): j for j in jobs for r in j.spans}
        for row, diff in found:
            mine[id(row)].conflicts.append((row, diff))

    def _commit(self, jobs: list[_Job]) -> None:
        try:
            self._write(jobs)
            done = jobs
        except Exception as exc:
            self.errors.warning("batch", "collector: batch write of %d request(s) failed, retrying one by one: %s: %s",
                                len(jobs), type(exc).__name__, str(exc)[:300])
            done = []
            for j in jobs:  # isolate a bad request so it cannot fail the others
                try:
                    j.conflicts = []
                    self._write([j])
                    done.append(j)
                except Exception as exc1:
                    j.error = exc1
                    self.counters.add("write_errors")
                    j.event.set()
        for j in done:
            j.ok = True
            self.counters.add("spans_stored", len(j.spans))
            self.counters.add("feedback_stored", len(j.feedback))
            j.event.set()

    def stop(self, timeout: float = 10.0) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        self._thread.join(timeout)
