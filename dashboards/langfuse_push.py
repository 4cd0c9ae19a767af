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

Delivery goes through the package's one Langfuse client
(:class:`~autometrics.collectors.langfuse_client.LangfuseClient`, whose docstring states the
rule): one synchronous ``POST /api/public/scores`` per batch of whole traces, a score delivered
only when Langfuse answered 2xx.  Between attempts the scores wait in the trace store:
:func:`push_pending` marks a trace's scores pushed (``pushed_at_ns``) only after the batch holding
them was acknowledged; a failed attempt is recorded (``push_attempts``, ``push_error``) and
retried on the next cycle, up to ``max_attempts`` attempts, after which they are given up with an
error log line.  A 207 (some scores rejected as invalid) counts as delivered and is not retried;
the rejection is logged and kept in ``push_error``.  Outcomes are counted in the client's counters
(``LangfusePush.stats()``) under the same names as feedback scores.

Never raises into the worker: failures are counted in ``errors`` and logged without secrets.
"""

from __future__ import annotations

import json
import logging
import math
import uuid

from ..collectors.langfuse_client import (  # noqa: F401  (re-exported: the one check, rule and name rule)
    DEFAULT_MAX_ATTEMPTS,
    Delivery,
    LangfuseClient,
    config_name,
    langfuse_configured,
)
from . import figures as fig

__all__ = ["LangfusePush", "Delivery", "config_name", "push_pending", "WARNING_CATEGORIES", "langfuse_configured",
           "DEFAULT_MAX_PUSH_ATTEMPTS"]

log = logging.getLogger("autometrics.langfuse")

WARNING_CATEGORIES = ["low-significance", "small-n", "validity-decay", "score-drift", "refit-error"]
_KIND_TO_CATEGORY = {"low_significance": "low-significance", "small_n": "small-n", "validity_decay": "validity-decay",
                     "score_drift": "score-drift", "refit_error": "refit-error",
                     # the sequential detector's alert shares the score-drift category: the categories of a
                     # score config already in a Langfuse project cannot change
                     "traffic_change": "score-drift", "validity_change": "validity-decay"}
WARNING_NAME = "autometrics warning"
VALIDITY_NAME = "autometrics validity"
VALIDITY_CATEGORIES = ["validated", "unvalidated"]
VALIDITY_DESCRIPTION = ("Whether the AutoMetrics evaluator that scored this trace is validated: its cross-fitted agreement "
                        "with human feedback is above chance (permutation p <= 0.05). Unvalidated scores may be noise.")
_NS = uuid.UUID("5b0e6f1e-8d7c-4c1a-9a59-6a8f4f0a7c11")
WARNING_DESCRIPTION = "Warnings and drift alerts about the AutoMetrics evaluator that scored this trace."
DEFAULT_MAX_PUSH_ATTEMPTS = DEFAULT_MAX_ATTEMPTS  # delivery attempts per trace's scores (and per alert) before giving up


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


def version_warnings(version: dict, alerts: list[dict] | None = None) -> list[tuple[str, str]]:
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


class LangfusePush:
    """Builds the dashboard's scores and delivers them through a
    :class:`~autometrics.collectors.langfuse_client.LangfuseClient` (``client``: one already made,
    else one made from the arguments and ``LANGFUSE_*``; it installs nothing global)."""

    def __init__(self, *, public_key: str | None = None, secret_key: str | None = None, base_url: str | None = None,
                 client=None, timeout: int = 10, batch_size: int = 200):
        if isinstance(client, LangfuseClient):
            self.langfuse = client
        else:  # None, or an SDK ``Langfuse`` client made by the caller
            self.langfuse = LangfuseClient(public_key=public_key, secret_key=secret_key, base_url=base_url, timeout=timeout,
                                           batch_size=batch_size, sdk=client)
        self.batch_size = max(1, int(batch_size))

    @property
    def client(self):
        """The ``langfuse`` SDK client (its ``api`` reaches the whole public API)."""
        return self.langfuse.sdk

    @property
    def errors(self) -> int:
        """Failed requests (score configs and score deliveries)."""
        return self.langfuse.counters.snapshot().get("langfuse_errors", 0)

    @property
    def sent(self) -> int:
        """Scores Langfuse acknowledged."""
        return self.langfuse.counters.snapshot().get("langfuse_scores_sent", 0)

    @property
    def rejected(self) -> int:
        """Scores Langfuse acknowledged but rejected as invalid (207)."""
        return self.langfuse.counters.snapshot().get("langfuse_scores_rejected", 0)

    @property
    def last_error(self) -> str | None:
        return self.langfuse.last_error

    def stats(self) -> dict[str, int]:
        """The client's counters (``langfuse_scores_sent``, ``_lost``, ``_retried``, ...)."""
        return self.langfuse.stats()

    def ensure_config(self, name: str, data_type: str, **kwargs) -> str | None:
        """The id of the score config ``name`` (created when missing); None when Langfuse is unreachable."""
        return self.langfuse.score_config(name, data_type, **kwargs)

    def _body(self, *, name: str, value, trace_id: str, score_id: str, data_type: str, config_id: str | None = None,
              comment: str | None = None, metadata: dict | None = None) -> dict:
        return self.langfuse.score_body(id=score_id, traceId=trace_id, name=name, value=value, dataType=data_type,
                                        configId=config_id, comment=comment,
                                        metadata=_finite(metadata) if metadata is not None else None)

    def version_warnings(self, version: dict, alerts: list[dict] | None = None) -> list[tuple[str, str]]:
        return version_warnings(version, alerts)

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

    # ---- delivery (the client's: one attempt per request, see its retry rule)
    def batches(self, groups: dict[str, list[dict]]):
        """``(keys, bodies)`` requests of whole traces (a trace's scores are never split)."""
        return self.langfuse.batches(groups, self.batch_size)

    def deliver(self, bodies: list[dict]) -> Delivery:
        """One synchronous ``POST /api/public/scores``; never raises."""
        return self.langfuse.deliver(bodies)

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
        return self.langfuse.flush(timeout)

    def shutdown(self, timeout: float = 5.0) -> None:
        self.langfuse.shutdown(timeout)


# --------------------------------------------------------------------------- store bookkeeping


def _failed(pusher: LangfusePush, what: str, keys: list[str], sizes: dict[str, int], attempts: dict[str, int], error: str,
            max_attempts: int, out: dict) -> None:
    """A failed delivery attempt on ``keys`` (``sizes``: scores per key) under the client's retry
    rule: counted there (retried or lost) and here, logged in one line (plus one for those given up)."""
    retry = [k for k in keys if pusher.langfuse.after_failure(sizes.get(k, 1), attempts.get(k, 0) + 1, max_attempts)]
    out["failed"] += len(keys)
    out["given_up"] += len(keys) - len(retry)
    if retry:
        n = max(attempts.get(k, 0) + 1 for k in retry)
        log.warning("Langfuse delivery failed for %d %s (attempt %d of %d): %s; left unpushed, retried next cycle",
                    len(retry), what, n, max_attempts, error)
    if len(retry) < len(keys):
        log.error("Langfuse delivery of %d %s failed %d times (last error: %s); giving up on them "
                  "(set push_attempts to NULL in the store to retry)", len(keys) - len(retry), what, max_attempts, error)


def push_pending(monitor, pusher: LangfusePush, *, limit: int = 2000, max_attempts: int | None = None) -> dict:
    """Deliver the champion's undelivered scores and the undelivered alerts to Langfuse.

    A trace's scores (an alert) are marked pushed only once Langfuse acknowledged the request
    holding them; a failed attempt is recorded and retried on the next call, at most
    ``max_attempts`` times in all (default: the client's retry rule, 10).  A retryable failure (down, 5xx, 429, timeout) ends this call:
    what was not tried waits for the next one without using up an attempt.

    Returns counts: ``scores`` / ``alerts`` delivered, ``failed`` (traces and alerts whose
    attempt failed), ``given_up`` (of those, the ones that reached ``max_attempts``), and
    ``error`` when the store itself failed.  Never raises.
    """
    out = {"scores": 0, "alerts": 0, "failed": 0, "given_up": 0}
    try:
        _push_pending(monitor, pusher, limit, max(1, int(max_attempts or pusher.langfuse.retry.max_attempts)), out)
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
        sizes = {t: len(b) for t, b in groups.items()}
        # rows without a score (no output captured): nothing to deliver, never selected again
        store.mark_delivery("scores", skipped, delivered=True, error="no score to deliver", evaluator_id=ch["id"])
        if cfg_error:
            # the first request could not even be prepared: one failed attempt for the traces it
            # would have carried (as for a failed request); the others wait without losing one
            keys = next(iter(pusher.batches(groups)), ([], []))[0]
            store.mark_delivery("scores", keys, delivered=False, error=cfg_error[:2000], evaluator_id=ch["id"])
            pusher.langfuse.failed_before_sending(sum(sizes[k] for k in keys))
            _failed(pusher, "traces' scores", keys, sizes, attempts, cfg_error, max_attempts, out)
            stopped = True
        else:
            for keys, bodies in pusher.batches(groups):
                d = pusher.deliver(bodies)
                store.mark_delivery("scores", keys, delivered=d.ok, error=d.error, evaluator_id=ch["id"])
                if d.ok:
                    out["scores"] += len(keys)
                    continue
                _failed(pusher, "traces' scores", keys, sizes, attempts, d.error or "unknown error", max_attempts, out)
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
        pusher.langfuse.failed_before_sending(len(ids))
        _failed(pusher, "alerts", ids, {}, attempts, err, max_attempts, out)
        return
    d = pusher.deliver(bodies)
    store.mark_delivery("alerts", ids, delivered=d.ok, error=d.error)
    if d.ok:
        out["alerts"] = len(ids)
    else:
        _failed(pusher, "alerts", ids, {}, attempts, d.error or "unknown error", max_attempts, out)
