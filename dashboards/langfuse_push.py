"""Push online scores, rationales, warnings and drift alerts to Langfuse (real ``langfuse`` SDK).

What appears in Langfuse, per scored trace:

- one NUMERIC score named after the evaluator (``autometrics <target>``), comment = the top
  rationales plus any warning about the evaluator (low significance, small n, validity drop);
- one NUMERIC score per selected metric (``am <feature>``: its raw value, comment = its
  contribution);
- a CATEGORICAL ``autometrics validity`` score (``validated`` / ``unvalidated``: whether the
  evaluator's cross-fitted agreement with human feedback is above chance), also in the main
  score's metadata (``validated``, ``validity``) and, when unvalidated, first in its comment;
- a CATEGORICAL ``autometrics warning`` score (``low-significance``, ``small-n``,
  ``validity-decay``, ``score-drift``, ``refit-error``) with the message as comment, for
  warnings about the evaluator version that scored it and for each new drift alert (attached
  to the newest scored trace, since Langfuse scores must hang on a trace).

Score configs (``POST /api/public/score-configs``) are created once per name (existing ones are
found with ``GET``), and every score references its config, so Langfuse shows ranges,
descriptions and categories.  Score ids are deterministic (trace, version, name), so pushing
twice updates rather than duplicates.  Names follow Langfuse's config-name rule (<= 35 chars,
letters, digits, ``_ .()-`` and spaces).

Delivery is tracked, not assumed.  The SDK's ``create_score`` only queues a score: its
background consumer drops a batch the server refused (after its own retries) and ``flush()``
cannot tell whether anything arrived.  So scores go through the same SDK's API client
(``client.api.scores.create``, i.e. ``POST /api/public/scores``) synchronously, in batches of
whole traces, and :func:`push_pending` marks a trace's scores pushed (``pushed_at_ns``) only
after Langfuse answered 2xx for the batch holding them.  A failed delivery (server down, 5xx,
429, timeout) leaves them unpushed and records the attempt (``push_attempts``, ``push_error``);
the next cycle retries them, up to ``max_attempts`` times, after which they are given up with an
error log line.  A 207 (some scores rejected as invalid) counts as delivered: Langfuse asks
clients not to retry such a batch, so the rejection is logged and kept in ``push_error``.

Never raises into the worker: failures are counted in ``errors`` and logged without secrets.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import math
import re
import threading
import uuid
from dataclasses import dataclass

from autometrics.collectors.langfuse_export import langfuse_configured  # noqa: F401  (one check, re-exported)
from autometrics.dashboards import figures as fig

__all__ = ["LangfusePush", "Delivery", "config_name", "push_pending", "WARNING_CATEGORIES", "langfuse_configured",
           "DEFAULT_MAX_PUSH_ATTEMPTS"]

log = logging.getLogger("autometrics.langfuse")

WARNING_CATEGORIES = ["low-significance", "small-n", "validity-decay", "score-drift", "refit-error"]
_KIND_TO_CATEGORY = {"low_significance": "low-significance", "small_n": "small-n", "validity_decay": "validity-decay",
                     "score_drift": "score-drift", "refit_error": "refit-error"}
WARNING_NAME = "autometrics warning"
VALIDITY_NAME = "autometrics validity"
VALIDITY_CATEGORIES = ["validated", "unvalidated"]
VALIDITY_DESCRIPTION = ("Whether the AutoMetrics evaluator that scored this trace is validated: its cross-fitted agreement "
                        "with human feedback is above chance (permutation p <= 0.05). Unvalidated scores may be noise.")
_NS = uuid.UUID("5b0e6f1e-8d7c-4c1a-9a59-6a8f4f0a7c11")
WARNING_DESCRIPTION = "Warnings and drift alerts about the AutoMetrics evaluator that scored this trace."
DEFAULT_MAX_PUSH_ATTEMPTS = 10  # delivery attempts per trace's scores (and per alert) before giving up
_MAX_BODY_BYTES = 900_000  # Langfuse's POST /api/public/scores takes at most 1 MiB


def config_name(name: str) -> str:
    """A valid Langfuse score-config name: allowed characters only, at most 35 characters
    (a short hash keeps truncated names distinct)."""
    clean = re.sub(r"[^A-Za-z0-9_ .()\-]", "_", name).strip() or "score"
    if len(clean) <= 35:
        return clean
    h = hashlib.sha1(name.encode()).hexdigest()[:6]
    return clean[:28].rstrip() + "-" + h


def _score_id(*parts) -> str:
    return str(uuid.uuid5(_NS, "|".join(str(p) for p in parts)))


def _finite(v):
    """JSON-safe metadata: NaN/inf become null (Langfuse rejects a body with NaN in it)."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_finite(x) for x in v]
    return v


def _describe(exc: BaseException) -> str:
    """A short reason for a failed request (status and the server's message; never headers or keys)."""
    status = getattr(exc, "status_code", None)
    if status is not None:
        body = getattr(exc, "body", None)
        msg = body.get("message") if isinstance(body, dict) else body
        return f"HTTP {status}" + (f": {str(msg)[:200]}" if msg else "")
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def _retryable(exc: BaseException) -> bool:
    """Worth trying again later: no answer (transport error, timeout), 429 or 5xx."""
    status = getattr(exc, "status_code", None)
    if status is None:
        return True
    return status == 429 or status >= 500


@dataclass
class Delivery:
    """What happened to one ``POST /api/public/scores`` request."""

    ok: bool  # Langfuse answered 2xx: the batch was delivered
    n: int = 0  # scores in the request
    rejected: int = 0  # of those, rejected as invalid (a 207 answer)
    error: str | None = None  # why it failed, or what was rejected
    retryable: bool = False  # a failure worth retrying (down, 5xx, 429, timeout)


class LangfusePush:
    """Langfuse client wrapper for the worker (its own tracer provider: installs nothing global)."""

    def __init__(self, *, public_key: str | None = None, secret_key: str | None = None, base_url: str | None = None,
                 client=None, timeout: int = 10, batch_size: int = 200):
        self.errors = 0  # failed requests (configs and score deliveries)
        self.sent = 0  # scores Langfuse acknowledged
        self.rejected = 0  # scores Langfuse acknowledged but rejected as invalid (207)
        self.last_error: str | None = None
        self.timeout = int(timeout)
        self.batch_size = max(1, int(batch_size))
        self._configs: dict[str, str] = {}
        if client is not None:
            self.client = client
            return
        from langfuse import Langfuse
        from opentelemetry.sdk.trace import TracerProvider

        self.client = Langfuse(public_key=public_key, secret_key=secret_key, base_url=base_url, timeout=timeout,
                               tracer_provider=TracerProvider())

    def _request_options(self) -> dict:
        # no retries inside a cycle (the next cycle is the retry), and a bounded wait
        return {"max_retries": 0, "timeout_in_seconds": self.timeout}

    # ---- configs
    def _load_configs(self) -> None:
        page = 1
        while page <= 20:  # bounded: 20 pages x 100 configs
            res = self.client.api.score_configs.get(page=page, limit=100, request_options=self._request_options())
            for c in res.data:
                self._configs.setdefault(c.name, c.id)
            total_pages = getattr(res.meta, "total_pages", 1) or 1
            if page >= total_pages:
                break
            page += 1

    def ensure_config(self, name: str, data_type: str, *, description: str | None = None, min_value=None, max_value=None,
                      categories: list[str] | None = None) -> str | None:
        """The id of the score config ``name`` (created when missing); None when Langfuse is unreachable."""
        from langfuse.api.commons.types.config_category import ConfigCategory

        name = config_name(name)
        if name in self._configs:
            return self._configs[name]
        try:
            if not self._configs:
                self._load_configs()
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
            cfg = self.client.api.score_configs.create(**kwargs, request_options=self._request_options())
            self._configs[name] = cfg.id
            return cfg.id
        except Exception as exc:
            self.errors += 1
            self.last_error = f"score config {name!r} not available: {_describe(exc)}"
            log.warning("Langfuse score config %r not created: %s", name, _describe(exc))
            return None

    # ---- score bodies (the API's JSON form, as the SDK's own consumer sends them)
    def _body(self, *, name: str, value, trace_id: str, score_id: str, data_type: str, config_id: str | None = None,
              comment: str | None = None, metadata: dict | None = None) -> dict:
        body = {"id": score_id, "traceId": trace_id, "name": name, "value": value, "dataType": data_type, "configId": config_id,
                "comment": comment, "metadata": _finite(metadata) if metadata is not None else None,
                "environment": getattr(self.client, "_environment", None),
                "timestamp": dt.datetime.now(dt.timezone.utc).isoformat().replace("+00:00", "Z")}
        return {k: v for k, v in body.items() if v is not None}

    def version_warnings(self, version: dict, alerts: list[dict] | None = None) -> list[tuple[str, str]]:
        """(category, message) warnings about an evaluator version: low significance, small n,
        validity dropping (from its statistics and its stored alerts)."""
        out: list[tuple[str, str]] = []
        st = version.get("statistics") or {}
        h, on = fig.holdout(version)  # each message names the data its figure was computed on
        p, n = h.get("p_value"), h.get("n")
        if p is None or p > 0.05:
            out.append(("low-significance", f"evaluator v{version['version']}: p = {p if p is None else f'{p:.2g}'} > 0.05 on the {on}"))
        if n is not None and n < 30:
            out.append(("small-n", f"evaluator v{version['version']}: validated on only {n} feedback points, the {on}"))
        lv = st.get("live_validity") or {}
        if lv.get("level") == "alert":
            w, live_on = fig.live(version)
            out.append(("validity-decay", f"evaluator v{version['version']}: tau {w.get('tau', float('nan')):.3f} on the {live_on} "
                                          f"< {lv.get('fit_tau') or float('nan'):.3f} on the {on}"))
        for a in alerts or []:
            cat = _KIND_TO_CATEGORY.get(a["kind"])
            if cat and a.get("evaluator_id") == version.get("id") and cat not in {c for c, _ in out}:
                out.append((cat, f"{fig.alert_figure(a, version)}: {a['message']}"))
        return out

    def score_bodies(self, version: dict, rows, *, alerts: list[dict] | None = None,
                     max_rationales: int = 3) -> tuple[dict[str, list[dict]], list[str], str | None]:
        """Score bodies per trace for scored-trace rows (dicts or a DataFrame of ``trace_scores``).

        Returns ``(bodies by trace id, trace ids with nothing to send, config error)``; the config
        error is set when a score config could not be found or created (Langfuse unreachable):
        the bodies then lack some ``configId`` and must not be sent (the scores would lack their
        config for good).
        """
        records = rows.to_dict("records") if hasattr(rows, "to_dict") else list(rows)
        if not records:
            return {}, [], None
        target = version["target"]
        art = version["artifact"]
        lab = art.get("label") or {}
        st = version.get("statistics") or {}
        h = (st.get("holdout") or {}).get("challenger") or {}
        main = config_name(f"autometrics {target}")
        needed = [(main, "NUMERIC", {"description": f"AutoMetrics evaluator predicting human '{target}' feedback (interpretable "
                                                    f"PLS over MetricBank metrics). Held-out Kendall tau of the current version: "
                                                    f"{h.get('tau')}, p={h.get('p_value')}, n={h.get('n')}."})]
        needed += [(f"am {f['feature']}", "NUMERIC", {"description": f"MetricBank metric {f['feature']} (weight {f['weight']:+.3f} in the "
                                                                     f"'{target}' evaluator; {'higher' if f['higher_is_better'] else 'lower'} is better)."})
                   for f in art["features"]]
        needed.append((WARNING_NAME, "CATEGORICAL", {"categories": WARNING_CATEGORIES, "description": WARNING_DESCRIPTION}))
        needed.append((VALIDITY_NAME, "CATEGORICAL", {"categories": VALIDITY_CATEGORIES, "description": VALIDITY_DESCRIPTION}))
        ids: dict[str, str | None] = {}
        cfg_error = None
        for name, data_type, kw in needed:
            cid = self.ensure_config(name, data_type, **kw) if cfg_error is None else None
            if cid is None and cfg_error is None:  # Langfuse unreachable: ask no more, the next cycle tries again
                cfg_error = self.last_error or "score configs not available"
            ids[config_name(name)] = cid
        main_id, warn_id, valid_id = ids[main], ids[WARNING_NAME], ids[VALIDITY_NAME]
        validity = fig.validity(version)
        validated = bool(validity.get("validated"))
        feat_ids = {f["feature"]: ids[config_name(f"am {f['feature']}")] for f in art["features"]}
        warnings = self.version_warnings(version, alerts)
        meta = {"evaluator_version": version["version"], "evaluator_id": version["id"], "method": version.get("method"),
                "heldout_tau": h.get("tau"), "heldout_p_value": h.get("p_value"), "heldout_n": h.get("n"),
                "label_range": [lab.get("min"), lab.get("max")], "validated": validated,
                "validity": {k: validity.get(k) for k in ("method", "tau", "ci", "p_value", "n_labels", "n_groups", "reason")}}
        out: dict[str, list[dict]] = {}
        skipped: list[str] = []
        for r in records:
            tid = r["trace_id"]
            if r.get("score") is None or (isinstance(r["score"], float) and not math.isfinite(r["score"])):
                skipped.append(tid)
                continue
            rats = json.loads(r["rationales"]) if isinstance(r.get("rationales"), str) else (r.get("rationales") or [])
            lines = [] if validated else [f"⚠ UNVALIDATED evaluator: {validity.get('reason', '')}"]
            lines += [x["text"] for x in rats[:max_rationales]]
            lines += [f"⚠ {msg}" for _, msg in warnings]
            bodies = [self._body(name=main, value=float(r["score"]), trace_id=tid, score_id=_score_id(tid, version["id"], main),
                                 data_type="NUMERIC", config_id=main_id, comment="\n".join(lines)[:4000] or None, metadata=meta)]
            metrics = json.loads(r["metrics"]) if isinstance(r.get("metrics"), str) else (r.get("metrics") or {})
            contrib = json.loads(r["contributions"]) if isinstance(r.get("contributions"), str) else (r.get("contributions") or {})
            for feat, val in metrics.items():
                if val is None or (isinstance(val, float) and not math.isfinite(val)):
                    continue
                name = config_name(f"am {feat}")
                c = contrib.get(feat)
                bodies.append(self._body(name=name, value=float(val), trace_id=tid, score_id=_score_id(tid, version["id"], name),
                                         data_type="NUMERIC", config_id=feat_ids.get(feat),
                                         comment=f"contribution to '{target}': {c:+.3f}" if isinstance(c, int | float) else None))
            bodies.append(self._body(name=VALIDITY_NAME, value="validated" if validated else "unvalidated", trace_id=tid,
                                     score_id=_score_id(tid, version["id"], VALIDITY_NAME), data_type="CATEGORICAL",
                                     config_id=valid_id, comment=str(validity.get("reason") or "")[:4000] or None))
            for cat, msg in warnings:
                bodies.append(self._body(name=WARNING_NAME, value=cat, trace_id=tid,
                                         score_id=_score_id(tid, version["id"], WARNING_NAME, cat),
                                         data_type="CATEGORICAL", config_id=warn_id, comment=msg[:4000]))
            out[tid] = bodies
        return out, skipped, cfg_error

    def alert_body(self, alert: dict, trace_id: str) -> dict | None:
        """A drift/validity alert as a warning score on ``trace_id`` (None: its config is unavailable)."""
        cat = _KIND_TO_CATEGORY.get(alert["kind"], "refit-error")
        warn_id = self.ensure_config(WARNING_NAME, "CATEGORICAL", categories=WARNING_CATEGORIES, description=WARNING_DESCRIPTION)
        if warn_id is None:
            return None
        return self._body(name=WARNING_NAME, value=cat, trace_id=trace_id, score_id=_score_id(trace_id, alert["id"], WARNING_NAME),
                          data_type="CATEGORICAL", config_id=warn_id, comment=f"{fig.alert_figure(alert, None)}: {alert['message']}"[:4000],
                          metadata={"alert_id": alert["id"], "severity": alert["severity"], "kind": alert["kind"]})

    # ---- delivery
    def batches(self, groups: dict[str, list[dict]]):
        """``(keys, bodies)`` requests of whole groups (a trace's scores are never split), at most
        ``batch_size`` scores (unless one group alone is larger) and ~900 kB each."""
        keys: list[str] = []
        bodies: list[dict] = []
        size = 2
        for key, group in groups.items():
            gsize = sum(len(json.dumps(b, ensure_ascii=False).encode()) + 1 for b in group)
            if bodies and (len(bodies) + len(group) > self.batch_size or size + gsize > _MAX_BODY_BYTES):
                yield keys, bodies
                keys, bodies, size = [], [], 2
            keys.append(key)
            bodies.extend(group)
            size += gsize
        if bodies:
            yield keys, bodies

    def deliver(self, bodies: list[dict]) -> Delivery:
        """One synchronous ``POST /api/public/scores`` through the SDK's API client; never raises."""
        if not bodies:
            return Delivery(True)
        try:
            res = self.client.api.scores.create(request=bodies, request_options=self._request_options())
        except Exception as exc:
            self.errors += 1
            self.last_error = _describe(exc)
            return Delivery(False, len(bodies), error=self.last_error, retryable=_retryable(exc))
        rejected = int(getattr(res, "rejected", 0) or 0)
        self.sent += len(bodies) - rejected
        if rejected:
            self.rejected += rejected
            msgs = "; ".join(str(getattr(e, "message", e))[:200] for e in (getattr(res, "errors", None) or [])[:5])
            err = f"Langfuse rejected {rejected} of {len(bodies)} scores: {msgs}"
            log.error("%s (not retried: invalid scores stay invalid)", err)
            return Delivery(True, len(bodies), rejected=rejected, error=err[:2000])
        return Delivery(True, len(bodies))

    def push_scores(self, version: dict, rows, *, alerts: list[dict] | None = None, max_rationales: int = 3) -> int:
        """Deliver scores for scored-trace rows now; returns how many traces' scores Langfuse
        acknowledged (no store bookkeeping: :func:`push_pending` does that)."""
        groups, _, cfg_error = self.score_bodies(version, rows, alerts=alerts, max_rationales=max_rationales)
        if cfg_error:
            log.warning("Langfuse scores not sent: %s", cfg_error)
            return 0
        delivered = 0
        for keys, bodies in self.batches(groups):
            d = self.deliver(bodies)
            if not d.ok:
                log.warning("Langfuse did not take the scores of %d trace(s): %s", len(keys), d.error)
                if d.retryable:
                    break
                continue
            delivered += len(keys)
        return delivered

    def push_alert(self, alert: dict, trace_id: str) -> bool:
        """Deliver one alert as a warning score on ``trace_id``; True when Langfuse acknowledged it."""
        body = self.alert_body(alert, trace_id)
        return body is not None and self.deliver([body]).ok

    def flush(self, timeout: float = 10.0) -> bool:
        """Bounded flush (the SDK's own flush has no time limit when Langfuse is down)."""
        def run():
            try:
                self.client.flush()
            except Exception as exc:
                log.warning("Langfuse flush failed: %s", type(exc).__name__)

        t = threading.Thread(target=run, daemon=True, name="autometrics-langfuse-push-flush")
        t.start()
        t.join(timeout)
        return not t.is_alive()

    def shutdown(self, timeout: float = 5.0) -> None:
        t = threading.Thread(target=lambda: self.client.shutdown(), daemon=True)
        t.start()
        t.join(timeout)


# --------------------------------------------------------------------------- store bookkeeping


def _failed(what: str, keys: list[str], attempts: dict[str, int], error: str, max_attempts: int, out: dict) -> None:
    """Log a failed delivery attempt on ``keys`` (one line, plus one for those given up) and count them."""
    retry = [k for k in keys if attempts.get(k, 0) + 1 < max_attempts]
    out["failed"] += len(keys)
    out["given_up"] += len(keys) - len(retry)
    if retry:
        n = max(attempts.get(k, 0) + 1 for k in retry)
        log.warning("Langfuse delivery failed for %d %s (attempt %d of %d): %s; left unpushed, retried next cycle",
                    len(retry), what, n, max_attempts, error)
    if len(retry) < len(keys):
        log.error("Langfuse delivery of %d %s failed %d times (last error: %s); giving up on them "
                  "(set push_attempts to NULL in the store to retry)", len(keys) - len(retry), what, max_attempts, error)


def push_pending(monitor, pusher: LangfusePush, *, limit: int = 2000, max_attempts: int = DEFAULT_MAX_PUSH_ATTEMPTS) -> dict:
    """Deliver the champion's undelivered scores and the undelivered alerts to Langfuse.

    A trace's scores (an alert) are marked pushed only once Langfuse acknowledged the request
    holding them; a failed attempt is recorded and retried on the next call, at most
    ``max_attempts`` times in all.  A retryable failure (down, 5xx, 429, timeout) ends this call:
    what was not tried waits for the next one without using up an attempt.

    Returns counts: ``scores`` / ``alerts`` delivered, ``failed`` (traces and alerts whose
    attempt failed), ``given_up`` (of those, the ones that reached ``max_attempts``), and
    ``error`` when the store itself failed.  Never raises.
    """
    out = {"scores": 0, "alerts": 0, "failed": 0, "given_up": 0}
    try:
        _push_pending(monitor, pusher, limit, max(1, int(max_attempts)), out)
    except Exception as exc:  # a store fault must not stop the worker
        out["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        log.warning("Langfuse push stopped: %s", out["error"])
    return out


def _push_pending(monitor, pusher: LangfusePush, limit: int, max_attempts: int, out: dict) -> None:
    store = monitor.store
    ch = monitor.champion()
    if ch is None:
        return
    rows = store.undelivered_scores(ch["id"], max_attempts=max_attempts, limit=limit)
    alerts = monitor.alerts()
    stopped = False
    if rows:
        attempts = {r["trace_id"]: int(r["push_attempts"] or 0) for r in rows}
        groups, skipped, cfg_error = pusher.score_bodies(ch, rows, alerts=alerts)
        # rows without a score (no output captured): nothing to deliver, never selected again
        store.mark_delivery("scores", skipped, delivered=True, error="no score to deliver", evaluator_id=ch["id"])
        if cfg_error:
            # the first request could not even be prepared: one failed attempt for the traces it
            # would have carried (as for a failed request); the others wait without losing one
            keys = next(iter(pusher.batches(groups)), ([], []))[0]
            store.mark_delivery("scores", keys, delivered=False, error=cfg_error[:2000], evaluator_id=ch["id"])
            _failed("traces' scores", keys, attempts, cfg_error, max_attempts, out)
            stopped = True
        else:
            for keys, bodies in pusher.batches(groups):
                d = pusher.deliver(bodies)
                store.mark_delivery("scores", keys, delivered=d.ok, error=d.error, evaluator_id=ch["id"])
                if d.ok:
                    out["scores"] += len(keys)
                    continue
                _failed("traces' scores", keys, attempts, d.error or "unknown error", max_attempts, out)
                if d.retryable:
                    left = len(groups) - out["scores"] - out["failed"]
                    if left > 0:
                        log.warning("Langfuse unavailable: %d more traces' scores wait for the next cycle", left)
                    stopped = True
                    break
    pending = [x for x in alerts if x.get("pushed_at_ns") is None and int(x.get("push_attempts") or 0) < max_attempts]
    if not pending or stopped:
        return
    newest = monitor.scores_frame(ch["id"], limit=1)
    if not len(newest):
        return
    tid = newest["trace_id"].iloc[0]
    bodies = [pusher.alert_body(x, tid) for x in pending]
    ids = [x["id"] for x in pending]
    attempts = {x["id"]: int(x.get("push_attempts") or 0) for x in pending}
    if any(b is None for b in bodies):
        err = pusher.last_error or "score config not available"
        store.mark_delivery("alerts", ids, delivered=False, error=err[:2000])
        _failed("alerts", ids, attempts, err, max_attempts, out)
        return
    d = pusher.deliver(bodies)
    store.mark_delivery("alerts", ids, delivered=d.ok, error=d.error)
    if d.ok:
        out["alerts"] = len(ids)
    else:
        _failed("alerts", ids, attempts, d.error or "unknown error", max_attempts, out)
