"""Push online scores, rationales, warnings and drift alerts to Langfuse (real ``langfuse`` SDK).

What appears in Langfuse, per scored trace:

- one NUMERIC score named after the evaluator (``autometrics <target>``), comment = the top
  rationales plus any warning about the evaluator (low significance, small n, validity drop);
- one NUMERIC score per selected metric (``am <feature>``: its raw value, comment = its
  contribution);
- a CATEGORICAL ``autometrics warning`` score (``low-significance``, ``small-n``,
  ``validity-decay``, ``score-drift``, ``refit-error``) with the message as comment, for
  warnings about the evaluator version that scored it and for each new drift alert (attached
  to the newest scored trace, since Langfuse scores must hang on a trace).

Score configs (``POST /api/public/score-configs``) are created once per name (existing ones are
found with ``GET``), and every score references its config, so Langfuse shows ranges,
descriptions and categories.  Score ids are deterministic (trace, version, name), so pushing
twice updates rather than duplicates.  Names follow Langfuse's config-name rule (<= 35 chars,
letters, digits, ``_ .()-`` and spaces).

Never raises into the worker: failures are counted in ``errors`` and logged without secrets.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import threading
import time
import uuid

__all__ = ["LangfusePush", "config_name", "WARNING_CATEGORIES", "langfuse_configured"]

log = logging.getLogger("autometrics.langfuse")

WARNING_CATEGORIES = ["low-significance", "small-n", "validity-decay", "score-drift", "refit-error"]
_KIND_TO_CATEGORY = {"low_significance": "low-significance", "small_n": "small-n", "validity_decay": "validity-decay",
                     "score_drift": "score-drift", "refit_error": "refit-error"}
WARNING_NAME = "autometrics warning"
_NS = uuid.UUID("5b0e6f1e-8d7c-4c1a-9a59-6a8f4f0a7c11")


def langfuse_configured() -> bool:
    import os

    return bool(os.environ.get("LANGFUSE_PUBLIC_KEY") and os.environ.get("LANGFUSE_SECRET_KEY"))


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


class LangfusePush:
    """Langfuse client wrapper for the worker (its own tracer provider: installs nothing global)."""

    def __init__(self, *, public_key: str | None = None, secret_key: str | None = None, base_url: str | None = None,
                 client=None, timeout: int = 10):
        self.errors = 0
        self.sent = 0
        self._configs: dict[str, str] = {}
        if client is not None:
            self.client = client
            return
        from langfuse import Langfuse
        from opentelemetry.sdk.trace import TracerProvider

        self.client = Langfuse(public_key=public_key, secret_key=secret_key, base_url=base_url, timeout=timeout,
                               tracer_provider=TracerProvider())

    # ---- configs
    def _load_configs(self) -> None:
        page = 1
        while page <= 20:  # bounded: 20 pages x 100 configs
            res = self.client.api.score_configs.get(page=page, limit=100)
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
            cfg = self.client.api.score_configs.create(**kwargs)
            self._configs[name] = cfg.id
            return cfg.id
        except Exception as exc:
            self.errors += 1
            log.warning("Langfuse score config %r not created: %s: %s", name, type(exc).__name__, str(exc)[:200])
            return None

    # ---- scores
    def _score(self, **kw) -> None:
        try:
            self.client.create_score(**kw)
            self.sent += 1
        except Exception as exc:
            self.errors += 1
            log.warning("Langfuse score not queued: %s: %s", type(exc).__name__, str(exc)[:200])

    def version_warnings(self, version: dict, alerts: list[dict] | None = None) -> list[tuple[str, str]]:
        """(category, message) warnings about an evaluator version: low significance, small n,
        validity dropping (from its statistics and its stored alerts)."""
        out: list[tuple[str, str]] = []
        st = version.get("statistics") or {}
        h = (st.get("holdout") or {}).get("challenger") or {}
        p, n = h.get("p_value"), h.get("n")
        if p is None or p > 0.05:
            out.append(("low-significance", f"evaluator v{version['version']}: held-out p = {p if p is None else f'{p:.2g}'} > 0.05 (n = {n})"))
        if n is not None and n < 30:
            out.append(("small-n", f"evaluator v{version['version']}: validated on only {n} held-out feedback points"))
        lv = st.get("live_validity") or {}
        if lv.get("level") == "alert":
            w = lv.get("window") or {}
            out.append(("validity-decay", f"evaluator v{version['version']}: tau on newest feedback {w.get('tau', float('nan')):.3f} "
                                          f"< fit-time {lv.get('fit_tau') or float('nan'):.3f}"))
        for a in alerts or []:
            cat = _KIND_TO_CATEGORY.get(a["kind"])
            if cat and a.get("evaluator_id") == version.get("id") and cat not in {c for c, _ in out}:
                out.append((cat, a["message"]))
        return out

    def push_scores(self, version: dict, rows, *, alerts: list[dict] | None = None, max_rationales: int = 3) -> int:
        """Queue scores for scored-trace rows (dicts or a DataFrame of ``trace_scores``); returns rows pushed."""
        records = rows.to_dict("records") if hasattr(rows, "to_dict") else list(rows)
        if not records:
            return 0
        target = version["target"]
        art = version["artifact"]
        lab = art.get("label") or {}
        st = version.get("statistics") or {}
        h = (st.get("holdout") or {}).get("challenger") or {}
        main = config_name(f"autometrics {target}")
        main_id = self.ensure_config(
            main, "NUMERIC",
            description=f"AutoMetrics evaluator predicting human '{target}' feedback (interpretable PLS over MetricBank metrics). "
                        f"Held-out Kendall tau of the current version: {h.get('tau')}, p={h.get('p_value')}, n={h.get('n')}.")
        feat_ids = {}
        for f in art["features"]:
            feat_ids[f["feature"]] = self.ensure_config(
                f"am {f['feature']}", "NUMERIC",
                description=f"MetricBank metric {f['feature']} (weight {f['weight']:+.3f} in the '{target}' evaluator; "
                            f"{'higher' if f['higher_is_better'] else 'lower'} is better).")
        warn_id = self.ensure_config(WARNING_NAME, "CATEGORICAL", categories=WARNING_CATEGORIES,
                                     description="Warnings and drift alerts about the AutoMetrics evaluator that scored this trace.")
        warnings = self.version_warnings(version, alerts)
        meta = {"evaluator_version": version["version"], "evaluator_id": version["id"], "method": version.get("method"),
                "heldout_tau": h.get("tau"), "heldout_p_value": h.get("p_value"), "heldout_n": h.get("n"),
                "label_range": [lab.get("min"), lab.get("max")]}
        pushed = 0
        for r in records:
            if r.get("score") is None or (isinstance(r["score"], float) and not math.isfinite(r["score"])):
                continue
            tid = r["trace_id"]
            rats = json.loads(r["rationales"]) if isinstance(r.get("rationales"), str) else (r.get("rationales") or [])
            lines = [x["text"] for x in rats[:max_rationales]]
            lines += [f"⚠ {msg}" for _, msg in warnings]
            self._score(name=main, value=float(r["score"]), trace_id=tid, score_id=_score_id(tid, version["id"], main),
                        data_type="NUMERIC", config_id=main_id, comment="\n".join(lines)[:4000] or None, metadata=meta)
            metrics = json.loads(r["metrics"]) if isinstance(r.get("metrics"), str) else (r.get("metrics") or {})
            contrib = json.loads(r["contributions"]) if isinstance(r.get("contributions"), str) else (r.get("contributions") or {})
            for feat, val in metrics.items():
                if val is None or (isinstance(val, float) and not math.isfinite(val)):
                    continue
                name = config_name(f"am {feat}")
                c = contrib.get(feat)
                self._score(name=name, value=float(val), trace_id=tid, score_id=_score_id(tid, version["id"], name),
                            data_type="NUMERIC", config_id=feat_ids.get(feat),
                            comment=f"contribution to '{target}': {c:+.3f}" if isinstance(c, int | float) else None)
            for cat, msg in warnings:
                self._score(name=WARNING_NAME, value=cat, trace_id=tid, score_id=_score_id(tid, version["id"], WARNING_NAME, cat),
                            data_type="CATEGORICAL", config_id=warn_id, comment=msg[:4000])
            pushed += 1
        return pushed

    def push_alert(self, alert: dict, trace_id: str) -> None:
        """A drift/validity alert as a warning score on ``trace_id`` (the newest scored trace)."""
        cat = _KIND_TO_CATEGORY.get(alert["kind"], "refit-error")
        warn_id = self.ensure_config(WARNING_NAME, "CATEGORICAL", categories=WARNING_CATEGORIES,
                                     description="Warnings and drift alerts about the AutoMetrics evaluator that scored this trace.")
        self._score(name=WARNING_NAME, value=cat, trace_id=trace_id, score_id=_score_id(trace_id, alert["id"], WARNING_NAME),
                    data_type="CATEGORICAL", config_id=warn_id, comment=alert["message"][:4000],
                    metadata={"alert_id": alert["id"], "severity": alert["severity"], "kind": alert["kind"]})

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


def push_pending(monitor, pusher: LangfusePush, *, limit: int = 2000) -> dict:
    """Push the champion's not-yet-pushed scores and the not-yet-pushed alerts; mark them pushed."""
    import sqlalchemy as sa

    from ..collectors.store import monitor_alerts, trace_scores

    out = {"scores": 0, "alerts": 0}
    ch = monitor.champion()
    if ch is None:
        return out
    s = trace_scores
    with monitor.store.engine.connect() as conn:
        rows = [dict(r) for r in conn.execute(sa.select(s).where(s.c.evaluator_id == ch["id"], s.c.pushed_at_ns.is_(None))
                                              .order_by(s.c.trace_start_ns.desc()).limit(limit)).mappings().all()]
    alerts = monitor.alerts()
    if rows:
        out["scores"] = pusher.push_scores(ch, rows, alerts=alerts)
        now = time.time_ns()
        with monitor.store.engine.begin() as conn:
            ids = [r["trace_id"] for r in rows]
            for i in range(0, len(ids), 500):
                conn.execute(s.update().where(s.c.evaluator_id == ch["id"], s.c.trace_id.in_(ids[i:i + 500])).values(pushed_at_ns=now))
    pending = [a for a in alerts if a.get("pushed_at_ns") is None]
    if pending:
        newest = monitor.scores_frame(ch["id"], limit=1)
        if len(newest):
            tid = newest["trace_id"].iloc[0]
            for a in pending:
                pusher.push_alert(a, tid)
            with monitor.store.engine.begin() as conn:
                conn.execute(monitor_alerts.update().where(monitor_alerts.c.id.in_([a["id"] for a in pending]))
                             .values(pushed_at_ns=time.time_ns()))
            out["alerts"] = len(pending)
    return out
