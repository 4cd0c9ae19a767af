"""Getting spans and feedback out of the application without ever slowing or breaking it, and
without losing them when the backend is down.

:class:`BatchWriter` is a bounded in-memory queue drained by one daemon thread that hands
batches to a *sink* (the trace store, or a remote collector).  The application thread only
appends to the queue; when the queue is full the item is dropped and counted.  When the sink
fails, the batch goes to the durable local :class:`~autometrics.collectors.spool.Spool` and is
replayed, oldest first, once the sink accepts writes again; while anything waits in the spool
new batches queue behind it (order is kept).  Items are lost only when the spool is full (counted
as ``span_lost_spool_full`` / ``feedback_lost_spool_full`` and logged), or, without a spool,
after a few retries (``*_failed``).  ``*_written`` counts only what the sink committed.  Failures
are logged at most once a minute per kind.  Nothing here raises into the caller.

:class:`StoreSpanProcessor` is the OpenTelemetry ``SpanProcessor`` that feeds a BatchWriter; the
sinks (:class:`StoreSink`, :class:`CollectorSink`) live in :mod:`autometrics.collectors.sinks`
and are re-exported here.
"""

from __future__ import annotations

import collections
import logging
import threading
import time

from opentelemetry.sdk.trace import SpanProcessor

from .conventions import stamp
from .sinks import CollectorSink, StoreFileChanged, StoreSink, short_error
from .spool import Spool

log = logging.getLogger("autometrics.collectors")

__all__ = ["BatchWriter", "StoreSpanProcessor", "StoreSink", "CollectorSink", "RateLimitedLog", "Counters",
           "StoreFileChanged"]


class RateLimitedLog:
    """Log a recurring failure at most once per ``interval`` seconds per key, with a count of
    the suppressed repeats (a dead backend must not flood the application's logs)."""

    def __init__(self, logger: logging.Logger = log, interval: float = 60.0):
        self.logger = logger
        self.interval = interval
        self._last: dict[str, float] = {}
        self._suppressed: collections.Counter = collections.Counter()
        self._lock = threading.Lock()

    def warning(self, key: str, msg: str, *args) -> None:
        try:
            now = time.monotonic()
            with self._lock:
                last = self._last.get(key)
                if last is not None and now - last < self.interval:
                    self._suppressed[key] += 1
                    return
                self._last[key] = now
                n = self._suppressed.pop(key, 0)
            if n:
                msg += f" ({n} similar messages suppressed)"
            self.logger.warning(msg, *args)
        except Exception:  # logging itself must not raise into the app either
            pass


class Counters:
    """Thread-safe counters, read by ``autometrics.stats()`` and the collector's /health."""

    def __init__(self):
        self._c: collections.Counter = collections.Counter()
        self._lock = threading.Lock()

    def add(self, key: str, n: int = 1) -> None:
        if n:
            with self._lock:
                self._c[key] += n

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._c)


def disk_full(exc: BaseException) -> bool:
    """A write failed because the disk (or the user's quota) is full: ENOSPC/EDQUOT, or SQLite's
    SQLITE_FULL ("database or disk is full")."""
    import errno

    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", -1)):
        return True
    return "database or disk is full" in str(exc) or getattr(exc, "sqlite_errorname", "") == "SQLITE_FULL"


class BatchWriter:
    """Bounded queue of ``("span", ReadableSpan)`` / ``("feedback", dict)`` items, written in
    batches by a background thread; failed batches go to ``spool`` (when given and the sink can
    serialise, i.e. has ``encode``/``send``/``target``) and are replayed from it.

    ``max_queue`` bounds memory; without a spool, ``retries`` bounds how long one batch may hold
    the writer when the sink is down.  Replays of a down sink back off up to ``max_backoff`` s.
    """

    def __init__(self, sink, *, max_queue: int = 10_000, batch_size: int = 512, interval: float = 0.5,
                 retries: int = 2, retry_delay: float = 0.5, counters: Counters | None = None,
                 errors: RateLimitedLog | None = None, name: str = "autometrics-writer", spool: Spool | None = None,
                 max_backoff: float = 5.0):
        self.sink = sink
        self.max_queue = max_queue
        self.batch_size = batch_size
        self.interval = interval
        self.retries = retries
        self.retry_delay = retry_delay
        self.counters = counters or Counters()
        self.errors = errors or RateLimitedLog()
        self.spool = spool if spool is not None and hasattr(sink, "encode") else None
        if self.spool is not None:
            self.spool.on_reopen = self._spool_reopened
        if hasattr(sink, "attach"):
            sink.attach(self.counters, self.errors)
        self.max_backoff = max_backoff
        self._q: collections.deque = collections.deque()
        self._cv = threading.Condition()
        self._enqueued = 0  # sequence numbers: flush() waits for _done to reach _enqueued
        self._done = 0
        self._stop = False
        self._inflight: list | None = None
        self._backlog = False  # records of this sink wait in the spool: new batches go behind them
        self._backoff = 0.5
        self._next_replay = 0.0
        self._outage_logged = False
        self._pending_items = 0  # items of this sink in the spool (as of the last spool operation)
        self._flush_gen = 0  # flush requests; _handled_gen: the last one the writer answered
        self._handled_gen = 0
        self._losses = 0  # items failed, rejected or lost so far: flush() reports any during its wait
        self._spool_lock = threading.Lock()  # the app's threads spool too (overflow, durable items)
        self._beat: tuple[int, int] = (0, 0)  # what the last heartbeat recorded (see _heartbeat)
        self._next_beat = 0.0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def put(self, kind: str, item, *, durable: bool = False) -> bool:
        """Queue one item; False (and a drop counted) when it could not be kept.

        With a spool, an item that does not fit the full queue goes to the spool instead of the
        floor (``{kind}_overflow_spooled``), and a ``durable`` item (feedback, whose id the caller
        hands out) is written to the spool before this returns: it survives ``kill -9`` of the app
        from that moment on, and the writer delivers it from there."""
        if self.spool is not None and not self._stop and (durable or len(self._q) >= self.max_queue):
            with self._spool_lock:
                kept = self._to_spool(*(([item], []) if kind == "span" else ([], [item])), outage=False)
            if kept:
                if not durable:
                    self.counters.add(f"{kind}_overflow_spooled")
                with self._cv:
                    self._next_replay = time.monotonic()  # deliver it now, not at the next backoff
                    self._cv.notify()
                return True
        with self._cv:
            if self._stop or len(self._q) >= self.max_queue:
                self.counters.add(f"{kind}_dropped")
                self.errors.warning(f"drop-{kind}", "autometrics: %s queue full or closed, dropping (see autometrics.stats())", kind)
                return False
            self._q.append((kind, item))
            self._enqueued += 1
            self.counters.add(f"{kind}_queued")
            if len(self._q) >= self.batch_size:
                self._cv.notify()
        return True

    def qsize(self) -> int:
        return len(self._q)

    def spool_pending(self) -> int:
        """Items of this writer's backend waiting in the spool (as of the last spool operation)."""
        return self._pending_items

    # ---- the writer thread
    def _take(self) -> tuple[list, int]:
        # Wait until a full batch, a flush/stop request, a replay being due, or `interval` has
        # passed: a burst of calls then lands in one transaction instead of one commit per span.
        with self._cv:
            deadline = time.monotonic() + self.interval
            if self._backlog:
                deadline = min(deadline, self._next_replay)
            while len(self._q) < self.batch_size and not self._stop and self._flush_gen <= self._handled_gen:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cv.wait(left)
            n = min(len(self._q), self.batch_size)
            return [self._q.popleft() for _ in range(n)], self._flush_gen

    def _in_memory(self) -> tuple[int, int]:
        """(spans, feedback) held only in memory: queued or being written."""
        with self._cv:
            items = list(self._q) + list(self._inflight or [])
        n_spans = sum(1 for k, _ in items if k == "span")
        return n_spans, len(items) - n_spans

    def _heartbeat(self, force: bool = False) -> None:
        """Record in the spool what only memory holds (at most once per ``interval``), so that a
        process started after this one is killed with -9 can count it as lost."""
        if self.spool is None or (not force and time.monotonic() < self._next_beat):
            return
        self._next_beat = time.monotonic() + self.interval
        held = self._in_memory()
        if held == self._beat:
            return
        try:
            self.spool.note_memory(self.sink.target, *held)
            self._beat = held
        except Exception as exc:
            if not disk_full(exc):
                self._spool_unusable(exc)

    def _run(self) -> None:
        self._start_spool()
        while True:
            batch, gen = self._take()
            if batch:
                with self._cv:
                    self._inflight = batch
                self._heartbeat()  # what memory holds now: this batch and the queue behind it
                self._write(batch)
                with self._cv:
                    self._inflight = None
                    self._done += len(batch)
                    self._cv.notify_all()
            self._heartbeat(force=not self._q)  # drained: record that nothing is held any more
            failed = False
            if self._backlog and (gen > self._handled_gen or time.monotonic() >= self._next_replay):
                failed = not self._replay_once()
            with self._cv:
                if not self._backlog or failed:
                    self._handled_gen = max(self._handled_gen, gen)
                self._cv.notify_all()
                if self._stop and not self._q and not batch:
                    self._handled_gen = self._flush_gen
                    self._cv.notify_all()
                    return

    def _start_spool(self) -> None:
        """An earlier process (crashed, or stopped during an outage) may have left records for
        this backend: replay them first.  The file is only opened here if it already exists."""
        if self.spool is None:
            return
        try:
            for owner, n_spans, n_fb, at in self.spool.lost_in_memory(self.sink.target):
                self.counters.add("span_lost_crash", n_spans)  # an earlier process's loss: not this one's flush()
                self.counters.add("feedback_lost_crash", n_fb)
                self.errors.warning(f"crash-{owner}", "autometrics: an earlier process (%s) stopped without writing about %d "
                                    "span(s) and %d feedback item(s) it held in memory (its record of them is %.1f s old); "
                                    "counted as span_lost_crash / feedback_lost_crash", owner, n_spans,
                                    n_fb, max(0.0, (time.time_ns() - at) / 1e9))
            self._pending_items = self.spool.pending(self.sink.target)[1]
            self._backlog = self._pending_items > 0
        except Exception as exc:
            self._spool_unusable(exc)

    def _spool_unusable(self, exc: Exception) -> None:
        self.counters.add("spool_errors")
        self.errors.warning("spool-error", "autometrics: the spool %s is unusable, continuing without it (failed batches "
                            "are retried, then dropped): %s: %s", self.spool, type(exc).__name__, short_error(exc))
        self.spool = None
        self._backlog = False

    def _spool_reopened(self, why: str, moved: int) -> None:
        self.counters.add("spool_reopened")
        self.errors.warning("spool-reopen", "autometrics: the spool file %s was %s while open; reopened it and moved its %d "
                            "waiting record(s) into the new file", self.spool.path if self.spool else "?", why, moved)

    def _write(self, batch: list) -> None:
        spans = [x for k, x in batch if k == "span"]
        fb = [x for k, x in batch if k == "feedback"]
        if self.spool is not None and self._backlog:
            with self._spool_lock:
                self._to_spool(spans, fb, outage=False)  # behind what already waits: order is kept
            return
        attempts = 1 if self.spool is not None else self.retries + 1
        for attempt in range(attempts):
            try:
                rejected = self.sink.write(spans, fb)
                self._count_written(len(spans), len(fb), rejected)
                return
            except Exception as exc:  # any sink failure: store down, disk full, network
                self.counters.add("write_errors")
                self.errors.warning(
                    f"sink-{type(self.sink).__name__}", "autometrics: writing %d span(s) and %d feedback item(s) to %s failed "
                    "(attempt %d%s): %s: %s", len(spans), len(fb), self.sink, attempt + 1,
                    "; spooling them" if self.spool is not None else "", type(exc).__name__, short_error(exc))
                if attempt + 1 < attempts and not self._stop:
                    time.sleep(self.retry_delay * (attempt + 1))
        if self.spool is not None:
            with self._spool_lock:
                self._to_spool(spans, fb)
            self._next_replay = time.monotonic() + self._backoff
        else:
            self._lost("failed", len(spans), len(fb))

    def _lost(self, what: str, n_spans: int, n_fb: int) -> None:
        self.counters.add(f"span_{what}", n_spans)
        self.counters.add(f"feedback_{what}", n_fb)
        self._losses += n_spans + n_fb

    def _count_written(self, n_spans: int, n_fb: int, rejected, replayed: bool = False) -> None:
        rs, rf, reason = rejected if rejected else (0, 0, None)
        self.counters.add("span_written", n_spans - rs)
        self.counters.add("feedback_written", n_fb - rf)
        if replayed:
            self.counters.add("span_replayed", n_spans - rs)
            self.counters.add("feedback_replayed", n_fb - rf)
        if rs or rf:
            self._lost("rejected", rs, rf)
            self.errors.warning("rejected", "autometrics: %s refused %d span(s) and %d feedback item(s), not retried: %s",
                                self.sink, rs, rf, reason)

    def _to_spool(self, spans: list, fb: list, outage: bool = True) -> bool:
        """Durably keep a batch the sink could not take; loss only when the spool (or its disk) is
        full.  True when every item was kept."""
        try:
            records = self.sink.encode(spans, fb)
        except Exception as exc:  # an item that cannot be serialised: not the spool's fault
            self._lost("failed", len(spans), len(fb))
            self.errors.warning("spool-encode", "autometrics: a batch could not be serialised for the spool, dropped: %s: %s",
                                type(exc).__name__, short_error(exc))
            return False
        spool = self.spool
        if spool is None:
            self._lost("failed", len(spans), len(fb))
            return False
        full = f"full (spool_max_mb={spool.max_bytes / 2**20:.0f})"
        try:
            stored = spool.append(self.sink.target, [(r.kind, r.encoding, r.items, r.payload) for r in records])
        except Exception as exc:
            if not disk_full(exc):
                self._lost("failed", len(spans), len(fb))
                self._spool_unusable(exc)
                return False
            # the disk is full, not the spool broken: these items are lost like those of a full
            # spool; the spool stays, what it holds is replayed, and later items are tried again
            stored, full = [False] * len(records), f"on a full disk ({short_error(exc)}; free space there)"
        for r, ok in zip(records, stored, strict=True):
            if ok:
                self.counters.add(f"{r.kind}_spooled", r.items)
                self._pending_items += r.items
                self._backlog = True
            else:
                self.counters.add(f"{r.kind}_lost_spool_full", r.items)
                self._losses += r.items
                self.errors.warning(f"spool-full-{r.kind}", "autometrics: the spool %s is %s: %d %s item(s) lost (see "
                                    "autometrics.stats())", spool.path, full, r.items, r.kind)
        if outage and self._backlog and not self._outage_logged:
            self._outage_logged = True
            self.errors.warning("spool-outage", "autometrics: %s unreachable; keeping spans and feedback in the spool %s "
                                "until it is back", self.sink, spool.path)
        return all(stored)

    def _replay_once(self) -> bool:
        """Send the oldest spooled records of this sink; False when the sink still fails."""
        try:
            recs = self.spool.claim(self.sink.target)
        except Exception as exc:
            self._spool_unusable(exc)
            return False
        if not recs:
            self._backlog = False
            self._pending_items = 0
            return True
        try:
            rejected = self.sink.send(recs)
        except Exception as exc:
            self.counters.add("write_errors")
            self.errors.warning(f"sink-{type(self.sink).__name__}", "autometrics: replaying %d spooled item(s) to %s failed: "
                                "%s: %s", sum(r.items for r in recs), self.sink, type(exc).__name__, short_error(exc))
            try:
                self.spool.release([r.seq for r in recs])
            except Exception:
                pass
            self._backoff = min(self._backoff * 2, self.max_backoff)
            self._next_replay = time.monotonic() + self._backoff
            return False
        try:
            done = set(self.spool.ack([r.seq for r in recs]))
        except Exception as exc:  # delivered but still spooled: replayed again later (idempotent, not counted twice)
            self._spool_unusable(exc)
            return False
        n_spans = sum(r.items for r in recs if r.seq in done and r.kind == "span")
        n_fb = sum(r.items for r in recs if r.seq in done and r.kind == "feedback")
        self._count_written(n_spans, n_fb, rejected, replayed=True)
        self._pending_items = max(0, self._pending_items - n_spans - n_fb)
        if self._outage_logged:
            self._outage_logged = False
            log.info("autometrics: %s reachable again; replaying the spool", self.sink)
        self._backoff = 0.5
        self._next_replay = time.monotonic()
        return True

    # ---- the application's side
    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything queued before this call was handled and the spool was replayed
        (bounded by ``timeout``); True only if all of it reached the sink, False when items wait
        in the spool (the backend is down), were lost or refused meanwhile, or time ran out."""
        deadline = time.monotonic() + timeout
        with self._cv:
            target = self._enqueued
            losses = self._losses
            self._flush_gen += 1
            gen = self._flush_gen
            self._cv.notify_all()
            while self._done < target or self._handled_gen < gen:
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    return False
                self._cv.wait(min(left, 0.1))
            return not self._backlog and self._losses == losses

    def shutdown(self, timeout: float = 5.0) -> bool:
        """Flush (bounded by ``timeout``) and stop the thread; later puts are dropped.  Whatever
        is still in memory then (a hung backend) goes to the spool so the next process sends it."""
        ok = self.flush(timeout)
        with self._cv:
            self._stop = True
            left = list(self._q)
            self._q.clear()
            inflight = list(self._inflight or [])
            self._cv.notify_all()
        if self.spool is not None and (left or inflight):
            # the in-flight batch may still reach the sink too: idempotent writes keep it once
            items = inflight + left
            self._to_spool([x for k, x in items if k == "span"], [x for k, x in items if k == "feedback"])
        elif left:
            n_spans = sum(1 for k, _ in left if k == "span")
            self._lost("failed", n_spans, len(left) - n_spans)
        self._thread.join(max(0.0, min(timeout, 1.0)))
        if self.spool is not None and self._beat != (0, 0):
            try:  # nothing is held in memory any more: a later process must not count it as lost
                self.spool.note_memory(self.sink.target, 0, 0)
            except Exception:
                pass
        for res in (self.sink, self.spool):
            try:
                close = getattr(res, "close", None)
                if close:
                    close()
            except Exception:
                pass
        return ok


class StoreSpanProcessor(SpanProcessor):
    """OpenTelemetry SpanProcessor: finished, sampled spans go to a :class:`BatchWriter`.

    It also remembers the ids of the last ``remember`` traces it saw start (a sampled span's
    trace is being recorded), so feedback can tell a recorded trace from one the sampler dropped."""

    def __init__(self, writer: BatchWriter, remember: int = 100_000):
        self.writer = writer
        self.remember = remember
        self._seen: dict[int, None] = {}  # insertion-ordered: the oldest id is dropped first
        self._lock = threading.Lock()

    def on_start(self, span, parent_context=None) -> None:
        try:
            stamp(span)
            if span.parent is None or span.parent.is_remote:  # a trace's first span here (its children add nothing)
                ctx = span.context
                if ctx is not None and ctx.trace_flags.sampled and ctx.trace_id not in self._seen:
                    with self._lock:
                        self._seen[ctx.trace_id] = None
                        if len(self._seen) > self.remember:
                            del self._seen[next(iter(self._seen))]
        except Exception:  # pragma: no cover - defensive: nothing raises into the app
            pass

    def saw_trace(self, trace_id: int) -> bool:
        """Whether a sampled span of this trace started here (among the last ``remember`` traces)."""
        return trace_id in self._seen

    def on_end(self, span) -> None:
        try:
            if span.context is not None and span.context.trace_flags.sampled:
                self.writer.put("span", span)
        except Exception:  # pragma: no cover - defensive: nothing raises into the app
            pass

    def shutdown(self) -> None:
        self.writer.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.writer.flush(timeout_millis / 1000)
