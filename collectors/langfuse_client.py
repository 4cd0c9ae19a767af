"""The package's one Langfuse client: settings, the ``langfuse`` SDK (5.x) client, span export,
and one delivery policy for every score we send (feedback scores and evaluator scores alike).

Settings come from Langfuse's usual environment variables (``LANGFUSE_PUBLIC_KEY``,
``LANGFUSE_SECRET_KEY``, ``LANGFUSE_BASE_URL`` or ``LANGFUSE_HOST``, ``LANGFUSE_TIMEOUT``) unless
passed explicitly.  Keys are never logged: errors are described by status and server message only.

Why through the SDK: it owns Langfuse's OTLP endpoint (gzip protobuf, auth and ingestion headers)
and its typed API client (``POST /api/public/scores``, score configs), so format changes reach us
with the SDK.  Why a private tracer provider: the SDK otherwise attaches its span processor to the
global TracerProvider and would send *all* the application's spans to Langfuse.  It gets the
provider ``@observe`` uses (only our spans, plus GenAI spans by the SDK's own filter), or an empty
one where nothing should be traced (the collector, the worker).  The SDK keeps one state per public
key in a process: when the application already made a client with the same key, spans follow that
client's provider (a warning says so).

Spans go through the SDK's batch span processor (it retries, then drops a batch); a hook on its
exporter counts what it delivered and gave up on (``langfuse_spans_exported``,
``langfuse_spans_lost``, ``langfuse_span_batches_lost``).  The hook reaches into SDK internals;
when a future SDK moves them, counting is off with one warning and export keeps working.

Scores: one policy, synchronous and acknowledged.  The SDK's ``create_score`` only queues a score:
its consumer thread retries a failed batch three times and then drops it with a log line, drops
scores it cannot serialise or that are too big without telling anyone, and ``flush()`` cannot say
whether anything arrived; counting those losses means patching its private uploader.  So every
score is sent through the API client, one request being one attempt (``max_retries=0``: no retry
hidden inside a request), and a score counts as delivered only when Langfuse answered 2xx to the
request carrying it.  That acknowledgement is also what the worker needs before it marks a trace's
scores pushed in the store, so both kinds of score now mean the same thing by "sent".  A request
blocks, so feedback scores are sent from this client's own thread: ``feedback()`` never waits on
Langfuse.  Nothing is lost without a counter and a log line.

The retry rule (:class:`RetryRule`), the same for every score:

- 2xx: delivered (``langfuse_scores_sent``).  Scores a 207 rejects as invalid are counted
  (``langfuse_scores_rejected``) and not retried: Langfuse asks clients not to, an invalid score
  stays invalid.
- any other outcome is a failed attempt for every score in the request: the score is tried again
  (``langfuse_scores_retried``) until it has had ``max_attempts`` attempts (default 10), then it
  is given up (``langfuse_scores_lost``).  A transient failure (no answer, timeout, 429, 5xx) also
  pauses sending: scores not tried yet wait without using an attempt.  Another 4xx (wrong keys, a
  bad URL) is retried the same way: an operator can fix those while the attempts last.
- where a score waits between attempts depends on who holds it: feedback scores wait in this
  client's bounded in-memory queue (0.5 s, doubling, at most 2 s: about 15 s from the first failure
  to the last attempt; the queue lives in the application, so it bridges short outages only, while
  the feedback itself is kept by the trace store whatever Langfuse does; see
  :meth:`LangfuseClient.enqueue`); evaluator scores wait in the trace store until the worker's next
  cycle (``autometrics.dashboards.langfuse_push.push_pending``).  At
  shutdown, queued scores get one last attempt within the shutdown's time while Langfuse answers;
  what that cannot deliver is counted lost.

Counters (in ``autometrics.stats()`` for the SDK, in /health for the collector):
``langfuse_scores_queued`` (feedback scores accepted into the queue), ``langfuse_score_attempts``
(one per score per attempt; an evaluator score whose score configs were unavailable had an attempt
that ended before the request), ``langfuse_scores_sent``, ``langfuse_scores_rejected``,
``langfuse_scores_retried``, ``langfuse_scores_lost`` and ``langfuse_errors`` (failed requests,
score configs included).  Per score, each attempt ends as sent, rejected, retried or lost; a score
lost before any attempt (queue full or closed, not JSON, alone over the request size limit, not
reached at shutdown) counts only as lost.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import hashlib
import json
import logging
import math
import os
import re
import threading
import time

__all__ = ["LangfuseClient", "LangfuseForwarder", "LangfuseSettings", "RetryRule", "Delivery", "langfuse_configured",
           "langfuse_settings", "feedback_score", "config_name", "SCORE_DATA_TYPES", "DEFAULT_MAX_ATTEMPTS",
           "describe_error", "retryable"]

log = logging.getLogger("autometrics.langfuse")

DEFAULT_MAX_ATTEMPTS = 10  # attempts per score before it is given up (feedback and evaluator scores)
MAX_BODY_BYTES = 900_000  # POST /api/public/scores takes at most 1 MiB

# feedback kind -> Langfuse score dataType
SCORE_DATA_TYPES = {
    "thumbs": "BOOLEAN",
    "likert": "NUMERIC",
    "numeric": "NUMERIC",
    "behavioral": "NUMERIC",
    "categorical": "CATEGORICAL",
    "correction": "CORRECTION",
}


# --------------------------------------------------------------------------- settings


def langfuse_configured() -> bool:
    """Both keys are set in the environment (the export is then on in ``auto`` mode)."""
    return bool(os.environ.get("LANGFUSE_PUBLIC_KEY") and os.environ.get("LANGFUSE_SECRET_KEY"))


@dataclasses.dataclass(frozen=True)
class LangfuseSettings:
    public_key: str
    secret_key: str = dataclasses.field(repr=False)  # never in a repr, a log line or an error
    base_url: str = "https://cloud.langfuse.com"
    timeout: int = 5


def langfuse_settings(public_key: str | None = None, secret_key: str | None = None, base_url: str | None = None,
                      timeout: float | None = None) -> LangfuseSettings:
    """Explicit values, else Langfuse's environment variables; ``RuntimeError`` without both keys."""
    public_key = public_key or os.environ.get("LANGFUSE_PUBLIC_KEY")
    secret_key = secret_key or os.environ.get("LANGFUSE_SECRET_KEY")
    if not (public_key and secret_key):
        raise RuntimeError("LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY are required for the Langfuse export")
    base_url = base_url or os.environ.get("LANGFUSE_BASE_URL") or os.environ.get("LANGFUSE_HOST") or "https://cloud.langfuse.com"
    if timeout is None:
        try:
            timeout = float(os.environ.get("LANGFUSE_TIMEOUT") or 5)
        except ValueError:
            timeout = 5
    return LangfuseSettings(public_key, secret_key, base_url.rstrip("/"), max(1, int(math.ceil(timeout))))


def config_name(name: str) -> str:
    """A valid Langfuse score-config name: allowed characters only, at most 35 characters
    (a short hash keeps truncated names distinct)."""
    clean = re.sub(r"[^A-Za-z0-9_ .()\-]", "_", name).strip() or "score"
    if len(clean) <= 35:
        return clean
    h = hashlib.sha1(name.encode()).hexdigest()[:6]
    return clean[:28].rstrip() + "-" + h


# --------------------------------------------------------------------------- the delivery rule


def describe_error(exc: BaseException) -> str:
    """A short reason for a failed request (status and the server's message; never headers or keys)."""
    status = getattr(exc, "status_code", None)
    if status is not None:
        body = getattr(exc, "body", None)
        msg = body.get("message") if isinstance(body, dict) else body
        return f"HTTP {status}" + (f": {str(msg)[:200]}" if msg else "")
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def retryable(exc: BaseException) -> bool:
    """A transient failure: no answer (transport error, timeout), 429 or 5xx."""
    status = getattr(exc, "status_code", None)
    if status is None:
        return True
    return status == 429 or status >= 500


@dataclasses.dataclass
class Delivery:
    """What happened to one ``POST /api/public/scores`` request."""

    ok: bool  # Langfuse answered 2xx: the batch was delivered
    n: int = 0  # scores in the request
    rejected: int = 0  # of those, rejected as invalid (a 207 answer)
    error: str | None = None  # why it failed, or what was rejected
    retryable: bool = False  # a transient failure (down, 5xx, 429, timeout): pause sending


@dataclasses.dataclass(frozen=True)
class RetryRule:
    """See the module docstring.  ``first_delay``/``max_delay``: the in-memory wait before the next
    attempt (the store-backed path waits for the next worker cycle instead)."""

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    first_delay: float = 0.5
    max_delay: float = 2.0

    def retry(self, attempts_done: int, max_attempts: int | None = None) -> bool:
        """Whether a score that failed ``attempts_done`` times gets another attempt."""
        return attempts_done < max(1, int(max_attempts or self.max_attempts))

    def delay(self, attempts_done: int) -> float:
        return min(self.max_delay, self.first_delay * 2 ** max(0, attempts_done - 1))


def feedback_score(row: dict, environment: str | None = None) -> dict:
    """A feedback row as a score body (the API's JSON form; bools and ints become floats as the SDK does)."""
    dtype = SCORE_DATA_TYPES.get(row["kind"], "NUMERIC")
    value = row["value"] if row.get("value") is not None else row.get("value_text")
    if isinstance(value, bool | int):
        value = float(value)
    return _score_body(id=row["id"], traceId=row["trace_id"], observationId=row.get("span_id"), name=row["name"], value=value,
                       dataType=dtype, comment=row.get("comment"), metadata={"source": row.get("source"), "kind": row["kind"]},
                       environment=environment, timestamp=_iso_ns(row.get("created_at_ns")))


def _iso_ns(ns) -> str | None:
    """When the feedback was given (its score's timestamp in Langfuse), to the microsecond."""
    if not ns:
        return None
    t = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=int(ns) // 1000)
    return t.isoformat().replace("+00:00", "Z")


def _score_body(**fields) -> dict:
    fields["timestamp"] = fields.get("timestamp") or dt.datetime.now(dt.timezone.utc).isoformat().replace("+00:00", "Z")
    return {k: v for k, v in fields.items() if v is not None}


def _size(body: dict) -> int:
    return len(json.dumps(body, ensure_ascii=False).encode()) + 1


# --------------------------------------------------------------------------- the client


class LangfuseClient:
    """The SDK client, span export (``export_spans``: count what the SDK's span processor on
    ``tracer_provider`` delivers) and score delivery under one :class:`RetryRule`.

    ``counters``/``errors``: where outcomes are counted and failures logged (rate-limited); the
    caller's (``autometrics.stats()``, the collector's /health) or the client's own.
    """

    def __init__(self, *, tracer_provider=None, export_spans: bool = False, counters=None, errors=None,
                 public_key: str | None = None, secret_key: str | None = None, base_url: str | None = None,
                 timeout: float | None = None, retry: RetryRule | None = None, batch_size: int = 200,
                 max_pending: int = 10_000, sdk=None):
        from .exporter import Counters, RateLimitedLog

        self.counters = counters if counters is not None else Counters()
        self.errors = errors if errors is not None else RateLimitedLog(log)
        self.retry = retry or RetryRule()
        self.batch_size = max(1, int(batch_size))
        self.max_pending = max(1, int(max_pending))
        self.last_error: str | None = None
        self.counting = False
        self._configs: dict[str, str] = {}
        self._q: collections.deque = collections.deque()  # [body, attempts, due] of feedback scores
        self._cv = threading.Condition()
        self._inflight = 0
        self._pause_until = 0.0
        self._closing = False
        self._deadline = 0.0  # of the shutdown, once closing
        self._thread: threading.Thread | None = None
        if sdk is not None:  # an SDK client made by the caller (its settings are its own)
            self.sdk, self.settings, self.timeout = sdk, None, int(timeout or 10)
            return
        from langfuse import Langfuse
        from opentelemetry.sdk.trace import TracerProvider

        self.settings = langfuse_settings(public_key, secret_key, base_url, timeout)
        self.timeout = self.settings.timeout
        provider = tracer_provider if tracer_provider is not None else TracerProvider()
        self.sdk = Langfuse(public_key=self.settings.public_key, secret_key=self.settings.secret_key,
                            base_url=self.settings.base_url, timeout=self.settings.timeout, tracer_provider=provider,
                            should_export_span=_export_filter)
        res = getattr(self.sdk, "_resources", None)
        if res is None:
            raise RuntimeError("langfuse client is disabled (missing LANGFUSE_PUBLIC_KEY / LANGFUSE_SECRET_KEY)")
        if export_spans:
            if getattr(res, "tracer_provider", provider) is not provider:
                # the app made a Langfuse client with this key first: the SDK keeps that client's state
                # (and tracer provider), which never sees our spans; they get an exporter of their own
                _export_own_spans(provider, self.settings, self)
                self.counting = True
                return
            self.counting = _count_span_losses(res, self)
            if not self.counting:
                self.errors.warning("langfuse-counting", "autometrics: this langfuse SDK version hides its span exporter; "
                                    "Langfuse span losses are not counted in autometrics.stats()")

    @property
    def api(self):
        return self.sdk.api

    def stats(self) -> dict[str, int]:
        return {k: v for k, v in self.counters.snapshot().items() if k.startswith("langfuse_")}

    def _options(self, timeout: float | None = None) -> dict:
        # one request is one attempt: retries are ours, counted, under the RetryRule
        return {"max_retries": 0, "timeout_in_seconds": max(1, int(math.ceil(timeout or self.timeout)))}

    # ---- score configs
    def score_config(self, name: str, data_type: str, *, description: str | None = None, min_value=None,
                     max_value=None, categories: list[str] | None = None) -> str | None:
        """The id of the score config ``name`` (found, else created); None when Langfuse is unreachable."""
        from langfuse.api.commons.types.config_category import ConfigCategory

        name = config_name(name)
        if name in self._configs:
            return self._configs[name]
        try:
            if not self._configs:
                for page in range(1, 21):  # bounded: 20 pages x 100 configs
                    res = self.api.score_configs.get(page=page, limit=100, request_options=self._options())
                    for c in res.data:
                        self._configs.setdefault(c.name, c.id)
                    if page >= (getattr(res.meta, "total_pages", 1) or 1):
                        break
            if name in self._configs:
                return self._configs[name]
            kwargs = {"name": name, "data_type": data_type}
            if description:
                kwargs["description"] = description[:1000]
            if min_value is not None and math.isfinite(min_value):
                kwargs["min_value"] = float(min_value)
            if max_value is not None and math.isfinite(max_value):
                kwargs["max_value"] = float(max_value)
            if categories:
                kwargs["categories"] = [ConfigCategory(label=c, value=float(i)) for i, c in enumerate(categories)]
            cfg = self.api.score_configs.create(**kwargs, request_options=self._options())
            self._configs[name] = cfg.id
            return cfg.id
        except Exception as exc:
            self.counters.add("langfuse_errors")
            self.last_error = f"score config {name!r} not available: {describe_error(exc)}"
            self.errors.warning("langfuse-config", "Langfuse score config %r not created: %s", name, describe_error(exc))
            return None

    # ---- one attempt, and the rule after a failed one
    def score_body(self, **fields) -> dict:
        """A score in the API's JSON form, stamped with this client's environment and the time now."""
        fields.setdefault("environment", getattr(self.sdk, "_environment", None))
        return _score_body(**fields)

    def deliver(self, bodies: list[dict], timeout: float | None = None) -> Delivery:
        """One synchronous ``POST /api/public/scores`` (one attempt for each score); never raises."""
        if not bodies:
            return Delivery(True)
        n = len(bodies)
        self.counters.add("langfuse_score_attempts", n)
        try:
            res = self.api.scores.create(request=bodies, request_options=self._options(timeout))
        except Exception as exc:
            self.counters.add("langfuse_errors")
            self.last_error = describe_error(exc)
            return Delivery(False, n, error=self.last_error, retryable=retryable(exc))
        rejected = int(getattr(res, "rejected", 0) or 0)
        self.counters.add("langfuse_scores_sent", n - rejected)
        if not rejected:
            return Delivery(True, n)
        self.counters.add("langfuse_scores_rejected", rejected)
        msgs = "; ".join(str(getattr(e, "message", e))[:200] for e in (getattr(res, "errors", None) or [])[:5])
        err = f"Langfuse rejected {rejected} of {n} scores: {msgs}"
        self.errors.warning("langfuse-rejected", "%s (not retried: invalid scores stay invalid)", err)
        return Delivery(True, n, rejected=rejected, error=err[:2000])

    def failed_before_sending(self, n: int) -> None:
        """An attempt for ``n`` scores that ended before the request (their configs were unavailable)."""
        self.counters.add("langfuse_score_attempts", n)

    def after_failure(self, n: int, attempts_done: int, max_attempts: int | None = None) -> bool:
        """The rule after a failed attempt of ``n`` scores that have now had ``attempts_done``:
        True (counted retried) when they get another one, False (counted lost) when given up."""
        if self.retry.retry(attempts_done, max_attempts):
            self.counters.add("langfuse_scores_retried", n)
            return True
        self.counters.add("langfuse_scores_lost", n)
        return False

    def batches(self, groups: dict, batch_size: int | None = None):
        """``(keys, bodies)`` requests of whole groups (a group is never split), at most
        ``batch_size`` scores (unless one group alone is larger) and ~900 kB each."""
        limit = max(1, int(batch_size or self.batch_size))
        keys: list = []
        bodies: list[dict] = []
        size = 2
        for key, group in groups.items():
            gsize = sum(_size(b) for b in group)
            if bodies and (len(bodies) + len(group) > limit or size + gsize > MAX_BODY_BYTES):
                yield keys, bodies
                keys, bodies, size = [], [], 2
            keys.append(key)
            bodies.extend(group)
            size += gsize
        if bodies:
            yield keys, bodies

    # ---- feedback scores: the in-memory carrier between attempts
    def score(self, row: dict) -> None:
        """Queue one feedback row as a score (sent from this client's thread); never raises."""
        try:
            if getattr(self.sdk, "_tracing_enabled", True) is False:  # LANGFUSE_TRACING_ENABLED=false
                return
            self.enqueue([feedback_score(row, getattr(self.sdk, "_environment", None))])
        except Exception as exc:
            self.counters.add("langfuse_errors")
            self.errors.warning("langfuse-score", "autometrics: Langfuse score not queued: %s: %s", type(exc).__name__, exc)

    def enqueue(self, bodies: list[dict]) -> int:
        """Queue scores for delivery under the retry rule; returns how many were taken.  The others
        are counted lost at once: not JSON, alone over the request size limit (no attempt could
        succeed), the queue full or the client closed."""
        fit = []
        for b in bodies:
            try:
                if _size(b) + 2 <= MAX_BODY_BYTES:
                    fit.append(b)
            except (TypeError, ValueError):
                pass
        with self._cv:
            room = 0 if self._closing else max(0, self.max_pending - len(self._q) - self._inflight)
            taken = fit[:room]
            self._q.extend([b, 0, 0.0] for b in taken)
            if taken and self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True, name="autometrics-langfuse-scores")
                self._thread.start()
            self._cv.notify_all()
        self.counters.add("langfuse_scores_queued", len(taken))
        if len(taken) < len(bodies):
            why = "not JSON or over the request size limit" if len(fit) < len(bodies) else (
                "the score queue is closed" if self._closing else "the score queue is full")
            self.counters.add("langfuse_scores_lost", len(bodies) - len(taken))
            self.errors.warning("langfuse-lost-scores", "autometrics: %d Langfuse score(s) lost: %s; see autometrics.stats()",
                                len(bodies) - len(taken), why)
        return len(taken)

    def _take(self) -> list | None:
        """The next due batch (None: stop).  Called with the lock held."""
        while True:
            now = time.monotonic()
            if self._closing:
                if not self._q:
                    return None
                due = list(self._q)  # one last attempt each, whatever their schedule
            else:
                due = [p for p in self._q if p[2] <= now] if now >= self._pause_until else []
            if due:
                batch, size = [], 2
                for p in due:
                    s = _size(p[0])
                    if batch and (len(batch) >= self.batch_size or size + s > MAX_BODY_BYTES):
                        break
                    batch.append(p)
                    size += s
                ids = {id(p) for p in batch}
                self._q = collections.deque(p for p in self._q if id(p) not in ids)
                self._inflight = len(batch)
                return batch
            if not self._q:
                self._cv.wait()  # enqueue() and shutdown() notify
                continue
            wake = max(min(p[2] for p in self._q), self._pause_until)
            self._cv.wait(max(0.01, min(1.0, wake - now)))

    def _run(self) -> None:
        while True:
            with self._cv:
                batch = self._take()
                if batch is None:
                    return
                closing = self._closing
            # at shutdown the last attempt must end within the shutdown's time
            left = self._deadline - time.monotonic() if closing else None
            d = self.deliver([p[0] for p in batch], None if left is None else min(self.timeout, max(1.0, left)))
            with self._cv:
                try:
                    if not d.ok:
                        self._failed(batch, d, closing)
                except Exception as exc:  # the thread must keep serving the queue
                    self.counters.add("langfuse_scores_lost", len(batch))
                    self.errors.warning("langfuse-lost-scores", "autometrics: %d Langfuse score(s) lost: %s: %s",
                                        len(batch), type(exc).__name__, exc)
                self._inflight = 0
                self._cv.notify_all()

    def _failed(self, batch: list, d: Delivery, closing: bool) -> None:
        """A failed attempt of the queued ``batch`` under the rule (lock held)."""
        now = time.monotonic()
        retry, lost = [], 0
        for p in batch:
            p[1] += 1
            if closing:  # that was its last attempt
                self.counters.add("langfuse_scores_lost")
                lost += 1
            elif self.after_failure(1, p[1]):
                p[2] = now + self.retry.delay(p[1])
                retry.append(p)
            else:
                lost += 1
        self._q.extendleft(reversed(retry))  # ahead of newer scores: order is kept
        if closing and d.retryable and self._q:  # Langfuse is down: the rest cannot go either
            lost += len(self._q)
            self.counters.add("langfuse_scores_lost", len(self._q))
            self._q.clear()
        if d.retryable and retry:
            self._pause_until = min(p[2] for p in retry)
        if retry:
            self.errors.warning("langfuse-score-retry", "autometrics: Langfuse did not take %d score(s) (attempt %d of %d): "
                                "%s; retried in %.1f s", len(retry), max(p[1] for p in retry), self.retry.max_attempts,
                                d.error, self.retry.delay(max(p[1] for p in retry)))
        if lost:
            self.errors.warning("langfuse-lost-scores", "autometrics: %d Langfuse score(s) lost after their last attempt: %s; "
                                "see autometrics.stats()", lost, d.error)

    def pending(self) -> int:
        with self._cv:
            return len(self._q) + self._inflight

    # ---- lifecycle (bounded: a down Langfuse cannot hold the application)
    def flush(self, timeout: float = 10.0) -> bool:
        """Wait (at most ``timeout``) until every queued score was delivered or given up and the
        SDK's spans were exported; True when all of that finished in time and no score was lost
        or rejected meanwhile."""
        deadline = time.monotonic() + timeout
        before = self._losses()
        with self._cv:
            while self._q or self._inflight:
                left = deadline - time.monotonic()
                if left <= 0 or self._thread is None or not self._thread.is_alive():
                    return False
                self._cv.wait(min(left, 0.1))
        done = _bounded(self.sdk.flush, max(0.1, deadline - time.monotonic()), self.errors)
        return done and self._losses() == before

    def _losses(self) -> int:
        c = self.counters.snapshot()
        return c.get("langfuse_scores_lost", 0) + c.get("langfuse_scores_rejected", 0)

    def shutdown(self, timeout: float = 5.0) -> bool:
        """Give queued scores one last attempt, count what is left as lost, stop the SDK."""
        deadline = time.monotonic() + timeout
        with self._cv:
            self._closing = True
            self._deadline = deadline
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))
        with self._cv:
            left = len(self._q)
            self._q.clear()
        if left:  # a hung request held the thread: what it did not reach is lost
            self.counters.add("langfuse_scores_lost", left)
            self.errors.warning("langfuse-lost-scores", "autometrics: %d Langfuse score(s) lost at shutdown", left)
        return _bounded(self.sdk.shutdown, max(0.1, deadline - time.monotonic()), self.errors) and not left

    # span losses, reported by the exporter hook
    def _lost_spans(self, n: int, exc: BaseException | None) -> None:
        self.counters.add("langfuse_spans_lost", n)
        self.counters.add("langfuse_span_batches_lost")
        self.errors.warning("langfuse-lost-spans", "autometrics: Langfuse did not take %d spans (the SDK gave up after its "
                            "retries)%s; see autometrics.stats()", n,
                            f": {type(exc).__name__}: {str(exc)[:200]}" if exc is not None else "")


def _bounded(fn, timeout: float, errors) -> bool:
    """Run ``fn`` in a daemon thread, waiting at most ``timeout`` (the SDK's flush has no limit)."""
    def run():
        try:
            fn()
        except Exception as exc:
            errors.warning("langfuse-flush", "autometrics: Langfuse flush failed: %s: %s", type(exc).__name__, exc)

    t = threading.Thread(target=run, daemon=True, name="autometrics-langfuse-flush")
    t.start()
    t.join(timeout)
    return not t.is_alive()


def _export_filter(span) -> bool:
    """Our spans always; others only by the SDK's own default rule (GenAI/LLM spans)."""
    from langfuse.span_filter import is_default_export_span

    scope = span.instrumentation_scope.name if span.instrumentation_scope else None
    return scope == "autometrics" or is_default_export_span(span)


class _CountingSpanExporter:
    """Wraps the Langfuse span processor's exporter: counts each batch it delivered or gave up on
    (the OTLP exporter returns FAILURE after its own retries; nothing else reports that loss)."""

    def __init__(self, inner, owner: LangfuseClient):
        self.inner = inner
        self.owner = owner  # re-pointed when a later configure() reuses the SDK's state

    def export(self, spans):
        from opentelemetry.sdk.trace.export import SpanExportResult

        n = len(spans)
        try:
            result = self.inner.export(spans)
        except Exception as exc:
            self.owner._lost_spans(n, exc)
            raise
        if result == SpanExportResult.SUCCESS:
            self.owner.counters.add("langfuse_spans_exported", n)
        else:
            self.owner._lost_spans(n, None)
        return result

    def shutdown(self, timeout_millis: float = 30_000):
        import inspect

        if "timeout_millis" in inspect.signature(self.inner.shutdown).parameters:
            return self.inner.shutdown(timeout_millis=timeout_millis)
        return self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)

    def __getattr__(self, name):
        return getattr(self.inner, name)


class _FilteredExporter:
    """Exports only the spans Langfuse would take from us (:func:`_export_filter`)."""

    def __init__(self, inner):
        self.inner = inner

    def export(self, spans):
        from opentelemetry.sdk.trace.export import SpanExportResult

        keep = [s for s in spans if _export_filter(s)]
        return self.inner.export(keep) if keep else SpanExportResult.SUCCESS

    def shutdown(self):
        return self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)


def _export_own_spans(provider, settings: LangfuseSettings, owner: LangfuseClient) -> None:
    """Our provider's spans to Langfuse's OTLP endpoint through an exporter of our own (the
    OpenTelemetry SDK's OTLP/HTTP exporter, Basic auth as Langfuse's SDK sends it), counted like
    the SDK's: ``langfuse_spans_exported`` only for batches Langfuse acknowledged."""
    import base64

    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    token = base64.b64encode(f"{settings.public_key}:{settings.secret_key}".encode()).decode("ascii")
    exporter = OTLPSpanExporter(endpoint=settings.base_url + "/api/public/otel/v1/traces", timeout=settings.timeout,
                                headers={"Authorization": "Basic " + token, "x-langfuse-public-key": settings.public_key,
                                         "x-langfuse-ingestion-version": "4"})
    provider.add_span_processor(BatchSpanProcessor(_FilteredExporter(_CountingSpanExporter(exporter, owner))))


def _count_span_losses(res, owner: LangfuseClient) -> bool:
    """Install the counting hook on the SDK's span exporter (see the module docstring); True when found."""
    found = False
    try:
        tp = getattr(res, "tracer_provider", None)
        for proc in getattr(getattr(tp, "_active_span_processor", None), "_span_processors", ()):
            bp = getattr(proc, "_batch_processor", None)
            if type(proc).__name__ != "LangfuseSpanProcessor" or getattr(bp, "_exporter", None) is None:
                continue
            if isinstance(bp._exporter, _CountingSpanExporter):
                bp._exporter.owner = owner
            else:
                bp._exporter = _CountingSpanExporter(bp._exporter, owner)
            found = True
    except Exception:
        return False
    return found


# --------------------------------------------------------------------------- the collector's forwarder


class _OtlpForwardSink:
    """Posts accepted OTLP requests to Langfuse's OTLP endpoint (gzip protobuf, Basic auth)."""

    def __init__(self, settings: LangfuseSettings):
        import base64

        self.endpoint = settings.base_url + "/api/public/otel/v1/traces"
        token = base64.b64encode(f"{settings.public_key}:{settings.secret_key}".encode()).decode("ascii")
        self._headers = {"Authorization": "Basic " + token, "x-langfuse-public-key": settings.public_key,
                         "x-langfuse-ingestion-version": "4", "Content-Type": "application/x-protobuf",
                         "Content-Encoding": "gzip"}
        self.timeout = settings.timeout

    def __repr__(self) -> str:
        return f"Langfuse {self.endpoint}"

    def write(self, requests, _feedback) -> None:
        import gzip

        import httpx
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        merged = ExportTraceServiceRequest()
        for r in requests:
            merged.resource_spans.extend(r.resource_spans)
        resp = httpx.post(self.endpoint, content=gzip.compress(merged.SerializeToString(), 1), headers=self._headers,
                          timeout=self.timeout)
        if resp.status_code >= 300:
            raise RuntimeError(f"Langfuse answered HTTP {resp.status_code}")


class LangfuseForwarder:
    """Collector side of the Langfuse export: spans received over OTLP are forwarded as they came
    (Langfuse ingests standard OTLP), feedback becomes scores through the client's delivery queue.

    The client gets an empty private TracerProvider, so it installs nothing global in the collector.
    Forwarding runs from bounded queues: Langfuse being down never delays or fails the collector's
    acknowledgements (which only depend on the trace store).
    """

    def __init__(self, *, counters=None, errors=None, public_key: str | None = None, secret_key: str | None = None,
                 base_url: str | None = None, timeout: float = 10.0, orphan_grace: float = 30.0):
        from .exporter import BatchWriter, Counters

        self.client = LangfuseClient(counters=counters, errors=errors, public_key=public_key, secret_key=secret_key,
                                     base_url=base_url, timeout=timeout)
        self.counters = Counters()
        self.writer = BatchWriter(_OtlpForwardSink(self.client.settings), max_queue=2_000, batch_size=50, interval=1.0,
                                  counters=self.counters, errors=errors, name="collector-langfuse")
        self.orphan_grace, self.orphan_poll, self.max_pending = orphan_grace, 1.0, 10_000
        self._pending: list = []
        self._pending_lock = threading.Lock()
        self._checker: threading.Thread | None = None
        self._closed = threading.Event()
        self._recorded = None

    def forward_spans(self, request) -> None:
        self.writer.put("span", request)

    def forward_feedback(self, rows: list[dict], recorded=None) -> None:
        """Score ``rows`` in Langfuse.  With ``recorded`` (trace ids -> the set of them the store
        holds), a row whose trace is not stored yet waits up to ``orphan_grace`` seconds for its
        spans (they travel in other requests, batched by the app's exporter); a trace still absent
        then was not recorded (the app's sampler dropped it): the row is counted as
        ``feedback_orphaned`` and never sent as a score of a trace Langfuse does not have."""
        if recorded is None:
            for r in rows:
                self.client.score(r)
            return
        self._recorded = recorded  # checked off the request thread: the acknowledgement never waits for it
        self._wait([(time.monotonic() + self.orphan_grace, r) for r in rows])

    def _wait(self, items: list) -> None:
        with self._pending_lock:
            for item in items:
                if len(self._pending) < self.max_pending:
                    self._pending.append(item)
                else:  # too many waiting: not sent (a score of a missing trace is worse than none), counted
                    self.counters.add("feedback_orphan_check_overflow")
            if self._pending and self._checker is None:
                self._checker = threading.Thread(target=self._check_pending, name="collector-orphans", daemon=True)
                self._checker.start()

    def _check_pending(self) -> None:
        while not self._closed.wait(self.orphan_poll):
            with self._pending_lock:
                items, self._pending = self._pending, []
                if not items:
                    self._checker = None
                    return
            self._wait(self._settle(items))

    def _settle(self, items: list) -> list:
        """Send the items whose trace is stored, count those past their deadline; returns the rest."""
        try:
            found = self._recorded([r["trace_id"] for _, r in items])
        except Exception as exc:  # the store is down: keep waiting (the deadline still applies)
            found = set()
            self.client.errors.warning("orphan-check", "collector: trace check for feedback failed: %s", type(exc).__name__)
        now, rest = time.monotonic(), []
        for deadline, r in items:
            if r["trace_id"] in found:
                self.client.score(r)
            elif deadline <= now:
                self.counters.add("feedback_orphaned")
            else:
                rest.append((deadline, r))
        return rest

    def stats(self) -> dict:
        c = self.counters.snapshot()
        return {"otlp_requests_forwarded": c.get("span_written", 0), "otlp_requests_dropped": c.get("span_dropped", 0),
                "otlp_requests_failed": c.get("span_failed", 0), "feedback_orphaned": c.get("feedback_orphaned", 0),
                "feedback_waiting_for_trace": len(self._pending), **self.client.stats()}

    def flush(self, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        return self.writer.flush(timeout) and self.client.flush(max(0.1, deadline - time.monotonic()))

    def shutdown(self, timeout: float = 5.0) -> None:
        self._closed.set()
        self.writer.shutdown(timeout)
        self.client.shutdown(timeout)
