"""Continuous evaluation on top of the trace store: refit, champion/challenger versions, online
scoring, drift alerts.

One :class:`Monitor` per (store, project, target feedback name).  Each job is one method that a
scheduler (``autometrics worker``), the demo, a cron job or a test can call:

- :meth:`Monitor.refit` — under the store's refit lock (one runner across processes), build the
  training set (traces joined with the target feedback), fit a challenger on the older part,
  judge it against the champion on the newest held-out feedback (paired bootstrap of the tau
  difference), store it as the new champion or as a rejected candidate with the reason.  Each
  attempt is a ``refit_runs`` record; one left ``running`` by a worker that died mid-refit is
  marked ``interrupted`` (with the reason) by the next refit, since holding the lock proves that
  nobody else is running.
- :meth:`Monitor.score_new` — score traces the champion has not scored yet, in batches; store
  the overall score, each metric's value and contribution, and rationales per trace.
- :meth:`Monitor.check_drift` — score-distribution drift (KS + PSI against the champion's
  fit-time scores) and validity decay (tau of online scores on feedback newer than the fit),
  with the thresholds of ``MonitorConfig.drift`` (:class:`~autometrics.evaluators.drift.DriftThresholds`);
  alerts are stored (and shown in the dashboard, pushed to Langfuse).

Nothing here stores or logs a secret: versions hold the evaluator artifact and statistics,
runs hold host:pid, the store URL is only ever shown with the password hidden.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import time
import uuid
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import sqlalchemy as sa

from ..evaluators.drift import DriftThresholds
from .locks import RefitLock
from .store import TraceStore, evaluator_versions, feedback, monitor_alerts, refit_runs, spans, trace_scores, traces

__all__ = ["MonitorConfig", "Monitor", "RefitOutcome"]

log = logging.getLogger("autometrics.continuous")

MIN_SIGNIFICANT_N = 30  # held-out n below this: "small n" warning


def _now_ns() -> int:
    return time.time_ns()


def _json(v) -> str:
    from ..evaluators.fit import _clean

    return json.dumps(_clean(v), ensure_ascii=False, default=str)


def _worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class MonitorConfig:
    """What to fit and how.  ``llm_config=None`` = LLM-free fit (MetricBank + PLS)."""

    target: str
    project: str = "default"
    task: str | None = None
    llm_config: object = None
    holdout_fraction: float = 0.3  # newest feedback kept out of the fit for champion/challenger
    min_feedback: int = 30  # no fit below this many labelled traces
    min_new_feedback: int = 1  # a refit needs at least this many feedback points since the last version
    n_boot: int = 1000
    seed: int = 0
    top_n: int = 5
    metrics: list | None = None  # MetricBank names (None: every reference-free metric that runs)
    batch_size: int = 256  # traces per scoring batch
    max_batches: int = 20  # batches per scoring run (bounded work per tick)
    settle_seconds: float = 5.0  # don't score traces younger than this (their root span may still be open)
    drift_window: int = 200  # newest online scores compared with the fit-time scores
    validity_window: int = 200  # newest feedback (after the fit) used for validity decay
    drift: DriftThresholds = field(default_factory=DriftThresholds)  # when drift/validity statistics alert
    aggregate: str = "latest"


@dataclass
class RefitOutcome:
    outcome: str  # promoted | rejected | skipped | locked | error
    message: str
    version: int | None = None
    evaluator_id: str | None = None
    statistics: dict = field(default_factory=dict)

    def __str__(self) -> str:
        v = f" v{self.version}" if self.version is not None else ""
        return f"refit {self.outcome}{v}: {self.message}"


class Monitor:
    """Continuous evaluation of one target (feedback name) in one project of a trace store."""

    def __init__(self, store: TraceStore | str | None, config: MonitorConfig):
        self.store = store if isinstance(store, TraceStore) else TraceStore(store)
        self.cfg = config

    # ------------------------------------------------------------------ versions
    def _versions_query(self):
        v = evaluator_versions
        return sa.select(v).where(v.c.project == self.cfg.project, v.c.target == self.cfg.target).order_by(v.c.version)

    def versions(self, *, with_artifact: bool = False) -> list[dict]:
        """Every stored version (oldest first) with its parsed statistics."""
        with self.store.engine.connect() as conn:
            rows = [dict(r) for r in conn.execute(self._versions_query()).mappings().all()]
        for r in rows:
            r["statistics"] = json.loads(r["statistics"] or "{}")
            if with_artifact:
                r["artifact"] = json.loads(r["artifact"])
            else:
                r.pop("artifact", None)
                r.pop("report", None)
        return rows

    def version(self, number: int) -> dict:
        with self.store.engine.connect() as conn:
            row = conn.execute(self._versions_query().where(evaluator_versions.c.version == int(number))).mappings().first()
        if row is None:
            raise KeyError(f"no evaluator version {number} for target {self.cfg.target!r} in project {self.cfg.project!r}")
        r = dict(row)
        r["statistics"] = json.loads(r["statistics"] or "{}")
        r["artifact"] = json.loads(r["artifact"])
        return r

    def champion(self) -> dict | None:
        """The current champion (with artifact), or None."""
        with self.store.engine.connect() as conn:
            row = conn.execute(self._versions_query().where(evaluator_versions.c.status == "champion")).mappings().first()
        if row is None:
            return None
        r = dict(row)
        r["statistics"] = json.loads(r["statistics"] or "{}")
        r["artifact"] = json.loads(r["artifact"])
        return r

    def champion_evaluator(self):
        from ..evaluators.fit import Evaluator

        ch = self.champion()
        return (ch, Evaluator(ch["artifact"])) if ch else (None, None)

    def rollback(self, number: int, *, reason: str | None = None) -> dict:
        """Make version ``number`` the champion again (the current one becomes ``retired``)."""
        target = self.version(number)
        v = evaluator_versions
        with self.store.engine.begin() as conn:
            scope = (v.c.project == self.cfg.project) & (v.c.target == self.cfg.target)
            conn.execute(v.update().where(scope & (v.c.status == "champion")).values(status="retired"))
            conn.execute(v.update().where(v.c.id == target["id"]).values(
                status="champion", reason=(reason or f"rolled back to v{number} by hand") + f" (was {target['status']}: {target['reason']})"))
        return self.version(number)

    def _last_feedback_mark(self) -> int:
        with self.store.engine.connect() as conn:
            v = evaluator_versions
            q = sa.select(sa.func.max(v.c.feedback_max_ns)).where(v.c.project == self.cfg.project, v.c.target == self.cfg.target)
            return int(conn.execute(q).scalar() or 0)

    def new_feedback_count(self) -> int:
        """Feedback points for the target newer than anything the last fitted version saw."""
        mark = self._last_feedback_mark()
        with self.store.engine.connect() as conn:
            q = sa.select(sa.func.count()).select_from(feedback).where(feedback.c.name == self.cfg.target,
                                                                        feedback.c.created_at_ns > mark)
            return int(conn.execute(q).scalar() or 0)

    # ------------------------------------------------------------------ data
    def labelled_frame(self, since_ns: int | None = None) -> pd.DataFrame:
        """Training frame for the target plus ``feedback_ns`` (newest feedback time per trace)."""
        frame = self.store.training_frame(self.cfg.target, project=self.cfg.project, aggregate=self.cfg.aggregate)
        if frame.empty:
            return frame.assign(feedback_ns=pd.Series(dtype="int64"))
        fb = self.store.feedback_frame(names=[self.cfg.target])
        last = fb.groupby("trace_id")["created_at_ns"].max()
        frame["feedback_ns"] = frame["id"].map(last).fillna(0).astype("int64")
        frame[self.cfg.target] = pd.to_numeric(frame[self.cfg.target], errors="coerce")
        frame = frame[frame[self.cfg.target].notna() & frame["output"].notna()]
        if since_ns is not None:
            frame = frame[frame["feedback_ns"] > since_ns]
        return frame.reset_index(drop=True)

    # ------------------------------------------------------------------ refit
    def _record_run(self, run_id: str, **values) -> None:
        try:
            with self.store.engine.begin() as conn:
                if conn.execute(sa.select(refit_runs.c.id).where(refit_runs.c.id == run_id)).first() is None:
                    conn.execute(refit_runs.insert().values(id=run_id, project=self.cfg.project, target=self.cfg.target,
                                                            worker=_worker_id(), **values))
                else:
                    conn.execute(refit_runs.update().where(refit_runs.c.id == run_id).values(**values))
        except Exception as exc:  # bookkeeping must not fail the refit
            log.warning("could not record refit run: %s", exc)

    def _close_stale_runs(self) -> int:
        """Mark every refit run still ``running`` as ``interrupted`` (call only while holding the refit lock).

        The lock is one per store and its holder is the only runner, so a ``running`` record
        seen while holding it belongs to a worker that died mid-refit (killed, crashed, machine
        lost): the kernel / Postgres dropped its lock, its record stayed.  Returns how many were closed.
        """
        r = refit_runs
        try:
            with self.store.engine.begin() as conn:
                stale = conn.execute(sa.select(r.c.id, r.c.worker, r.c.started_ns, r.c.project, r.c.target)
                                     .where(r.c.outcome == "running")).mappings().all()
                now = _now_ns()
                for x in stale:
                    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime((x["started_ns"] or 0) / 1e9))
                    msg = (f"interrupted: worker {x['worker'] or '?'} started this refit at {when} and never finished it "
                           f"(process killed or crashed); found by {_worker_id()}, which holds the refit lock, so no other "
                           "refit can still be running")
                    conn.execute(r.update().where(r.c.id == x["id"], r.c.outcome == "running")
                                 .values(outcome="interrupted", ended_ns=now, message=msg))
        except Exception as exc:  # bookkeeping must not fail the refit
            log.warning("could not close stale refit runs: %s", exc)
            return 0
        for x in stale:
            log.warning("refit run %s (%s/%s) by %s was left 'running' by a dead worker; marked interrupted",
                        x["id"], x["project"], x["target"], x["worker"])
        return len(stale)

    def refit(self, *, force: bool = False, min_new_feedback: int | None = None) -> RefitOutcome:
        """One refit attempt (see the module docstring); never raises, the outcome says what happened."""
        run_id = uuid.uuid4().hex
        lock = RefitLock(self.store)
        started = _now_ns()
        try:
            got = lock.acquire()
        except Exception as exc:
            self._record_run(run_id, started_ns=started, ended_ns=_now_ns(), outcome="error", message=f"lock: {exc}")
            return RefitOutcome("error", f"could not take the refit lock: {type(exc).__name__}: {exc}")
        if not got:
            self._record_run(run_id, started_ns=started, ended_ns=_now_ns(), outcome="locked",
                             message="another worker holds the refit lock")
            return RefitOutcome("locked", "another worker is refitting; skipped")
        try:
            self._close_stale_runs()
            self._record_run(run_id, started_ns=_now_ns(), outcome="running")
            try:
                out = self._refit_locked(force, self.cfg.min_new_feedback if min_new_feedback is None else min_new_feedback)
            except Exception as exc:
                log.exception("refit failed")
                out = RefitOutcome("error", f"{type(exc).__name__}: {exc}")
                self.add_alert("refit_error", "warning", f"refit failed: {type(exc).__name__}: {exc}")
            self._record_run(run_id, ended_ns=_now_ns(), outcome=out.outcome, message=out.message[:2000], evaluator_id=out.evaluator_id)
            return out
        finally:
            lock.release()

    def _refit_locked(self, force: bool, min_new: int) -> RefitOutcome:
        from ..evaluators.refit import compare, decide, fit_for_refit, holdout_predictions, newest_holdout
        from ..evaluators.report import render_markdown

        cfg = self.cfg
        new = self.new_feedback_count()
        if not force and new < max(1, min_new):
            return RefitOutcome("skipped", f"{new} new feedback point(s) since the last version (need {max(1, min_new)})")
        frame = self.labelled_frame()
        if len(frame) < cfg.min_feedback:
            return RefitOutcome("skipped", f"only {len(frame)} labelled traces for {cfg.target!r} (need {cfg.min_feedback})")
        train_pos, hold_pos = newest_holdout(frame, cfg.holdout_fraction)
        train, hold = frame.iloc[train_pos].reset_index(drop=True), frame.iloc[hold_pos].reset_index(drop=True)
        fit = fit_for_refit(train, cfg.target, cfg.task, cfg.llm_config, seed=cfg.seed, n_boot=cfg.n_boot, top_n=cfg.top_n,
                            metrics=cfg.metrics)
        challenger = fit.evaluator
        y_hold = hold[cfg.target].to_numpy(dtype=float)
        pred_c = holdout_predictions(challenger, hold)
        champ_row, champ = self.champion_evaluator()
        pred_p, champ_note = None, None
        if champ is not None:
            try:
                pred_p = holdout_predictions(champ, hold)
            except Exception as exc:  # e.g. a metric the champion needs no longer runs here
                champ_note = f"the champion could not score the held-out feedback ({type(exc).__name__}: {exc})"
        cmp = compare(pred_c, pred_p, y_hold, n_boot=cfg.n_boot, seed=cfg.seed)
        promote, reason = decide(cmp, has_champion=champ is not None and pred_p is not None)
        if champ_note:
            reason = f"{champ_note}; {reason}"
        all_pred = np.concatenate([fit.result.train["predicted"].to_numpy(dtype=float),
                                   fit.result.test["predicted"].to_numpy(dtype=float), pred_c])
        warnings = list(challenger.artifact.get("warnings", [])) + fit.notes
        hp = cmp.challenger.get("p_value")
        if hp is None or hp > 0.05:
            warnings.append(f"held-out agreement on the newest feedback is not significant (p={hp if hp is None else f'{hp:.3g}'} > 0.05, n={cmp.n})")
        if cmp.n < MIN_SIGNIFICANT_N:
            warnings.append(f"small held-out set (n={cmp.n} < {MIN_SIGNIFICANT_N}): the comparison is noisy")
        stats = {
            "fit": challenger.statistics,
            "holdout": cmp.to_dict(),
            "n_train": int(len(train)),
            "n_holdout": int(len(hold)),
            "new_feedback": int(new),
            "reference_scores": [round(float(x), 5) for x in all_pred[np.isfinite(all_pred)]][:2000],
            "warnings": warnings,
            "notes": fit.notes,
            "champion_version": champ_row["version"] if champ_row else None,
        }
        evaluator_id = uuid.uuid4().hex
        v = evaluator_versions
        scope = (v.c.project == cfg.project) & (v.c.target == cfg.target)
        with self.store.engine.begin() as conn:
            number = int(conn.execute(sa.select(sa.func.max(v.c.version)).where(scope)).scalar() or 0) + 1
            if promote:
                conn.execute(v.update().where(scope & (v.c.status == "champion")).values(status="retired"))
            conn.execute(v.insert().values(
                id=evaluator_id, project=cfg.project, target=cfg.target, version=number,
                status="champion" if promote else "rejected", reason=reason, method=fit.method, created_at_ns=_now_ns(),
                feedback_max_ns=int(frame["feedback_ns"].max()), n_feedback=int(len(frame)),
                artifact=_json(challenger.artifact), report=render_markdown(fit.result), statistics=_json(stats)))
        if promote:
            self._significance_alerts(evaluator_id, cmp)
        return RefitOutcome("promoted" if promote else "rejected", reason, number, evaluator_id, stats)

    def _significance_alerts(self, evaluator_id: str, cmp) -> None:
        p = cmp.challenger.get("p_value")
        if p is None or p > 0.05:
            self.add_alert("low_significance", "warning",
                           f"new champion's held-out agreement is not significant (p={p if p is None else f'{p:.3g}'} > 0.05, n={cmp.n}); "
                           "treat its scores as unvalidated and collect more feedback", evaluator_id=evaluator_id,
                           details=cmp.challenger)
        if cmp.n < MIN_SIGNIFICANT_N:
            self.add_alert("small_n", "warning", f"new champion was validated on only {cmp.n} held-out feedback points",
                           evaluator_id=evaluator_id, details={"n": cmp.n})

    # ------------------------------------------------------------------ alerts
    def add_alert(self, kind: str, severity: str, message: str, *, evaluator_id: str | None = None, details=None) -> str:
        aid = uuid.uuid4().hex
        try:
            with self.store.engine.begin() as conn:
                conn.execute(monitor_alerts.insert().values(id=aid, project=self.cfg.project, target=self.cfg.target,
                                                            evaluator_id=evaluator_id, kind=kind, severity=severity, message=message,
                                                            details=_json(details) if details is not None else None,
                                                            created_at_ns=_now_ns()))
        except Exception as exc:
            log.warning("could not store alert: %s", exc)
        return aid

    def alerts(self, limit: int = 100) -> list[dict]:
        a = monitor_alerts
        q = (sa.select(a).where(a.c.project == self.cfg.project, a.c.target == self.cfg.target)
             .order_by(a.c.created_at_ns.desc()).limit(limit))
        with self.store.engine.connect() as conn:
            rows = [dict(r) for r in conn.execute(q).mappings().all()]
        for r in rows:
            r["details"] = json.loads(r["details"]) if r["details"] else None
        return rows

    def runs(self, limit: int = 50) -> list[dict]:
        r = refit_runs
        q = sa.select(r).where(r.c.project == self.cfg.project, r.c.target == self.cfg.target).order_by(r.c.started_ns.desc()).limit(limit)
        with self.store.engine.connect() as conn:
            return [dict(x) for x in conn.execute(q).mappings().all()]

    # ------------------------------------------------------------------ online scoring
    def _unscored(self, evaluator_id: str, limit: int) -> list[tuple[str, int]]:
        s = trace_scores
        j = traces.outerjoin(s, (s.c.trace_id == traces.c.trace_id) & (s.c.evaluator_id == evaluator_id))
        q = sa.select(traces.c.trace_id, traces.c.first_seen_ns).select_from(j).where(s.c.trace_id.is_(None))
        q = q.where(traces.c.project == self.cfg.project)
        if self.cfg.settle_seconds > 0:
            q = q.where(traces.c.first_seen_ns <= _now_ns() - int(self.cfg.settle_seconds * 1e9))
        q = q.order_by(traces.c.first_seen_ns.desc()).limit(limit)
        with self.store.engine.connect() as conn:
            return [(r[0], r[1]) for r in conn.execute(q).all()]

    def _trace_texts(self, trace_ids: list[str]) -> pd.DataFrame:
        """input/output of each trace: its outermost span that captured content (as the training frame)."""
        cols = [spans.c.trace_id, spans.c.start_time_ns, spans.c.end_time_ns, spans.c.input, spans.c.output]
        with self.store.engine.connect() as conn:
            sp = pd.DataFrame(conn.execute(sa.select(*cols).where(spans.c.trace_id.in_(trace_ids))).all(),
                              columns=["trace_id", "start", "end", "input", "output"])
        if sp.empty:
            return pd.DataFrame(columns=["trace_id", "input", "output", "start"])
        start = sp.groupby("trace_id")["start"].min()
        sp = sp[sp["input"].notna() | sp["output"].notna()]
        sp = sp.sort_values(["trace_id", "start", "end"], ascending=[True, True, False], kind="stable")
        first = sp.groupby("trace_id", sort=False).head(1).set_index("trace_id")[["input", "output"]]
        out = first.reindex(start.index)
        out["start"] = start
        return out.reset_index()

    def score_new(self, *, limit_batches: int | None = None) -> int:
        """Score traces the champion has not scored yet (newest first); returns how many were scored."""
        from ..evaluators.fit import SCORE_COLUMN
        from ..evaluators.refit import explain_scores

        champ_row, ev = self.champion_evaluator()
        if ev is None:
            return 0
        total = 0
        for _ in range(limit_batches or self.cfg.max_batches):
            todo = self._unscored(champ_row["id"], self.cfg.batch_size)
            if not todo:
                break
            texts = self._trace_texts([t for t, _ in todo]).set_index("trace_id")
            rows = []
            now = _now_ns()
            ok = texts[texts["output"].notna()] if not texts.empty else texts
            if len(ok):
                scored = ev.score_texts(ok["output"].astype(str).tolist(), inputs=ok["input"].fillna("").astype(str).tolist())
                contrib, rats = explain_scores(ev, scored)
                for i, tid in enumerate(ok.index):
                    val = float(scored[SCORE_COLUMN].iloc[i])
                    rows.append({"trace_id": tid, "score": val if math.isfinite(val) else None,
                                 "metrics": _json({f["feature"]: scored[f["feature"]].iloc[i] for f in ev.features}),
                                 "contributions": _json(contrib.iloc[i].to_dict()), "rationales": _json(rats[i]),
                                 "error": None, "trace_start_ns": int(ok["start"].iloc[i])})
            for tid, first_seen in todo:
                if tid not in ok.index:
                    rows.append({"trace_id": tid, "score": None, "metrics": None, "contributions": None, "rationales": None,
                                 "error": "no output captured for this trace", "trace_start_ns": first_seen})
            for r in rows:
                r.update(evaluator_id=champ_row["id"], project=self.cfg.project, target=self.cfg.target, scored_at_ns=now)
            with self.store.engine.begin() as conn:
                conn.execute(self.store._insert(trace_scores, ["trace_id", "evaluator_id"]), rows)
            total += len(rows)
            if len(todo) < self.cfg.batch_size:
                break
        return total

    def scores_frame(self, evaluator_id: str | None = None, *, limit: int | None = None) -> pd.DataFrame:
        """Online scores (newest trace first) of one version, default the champion."""
        if evaluator_id is None:
            ch = self.champion()
            if ch is None:
                return pd.DataFrame(columns=[c.name for c in trace_scores.columns])
            evaluator_id = ch["id"]
        s = trace_scores
        q = sa.select(s).where(s.c.evaluator_id == evaluator_id).order_by(s.c.trace_start_ns.desc())
        if limit:
            q = q.limit(limit)
        with self.store.engine.connect() as conn:
            return pd.DataFrame(conn.execute(q).mappings().all(), columns=[c.name for c in s.columns])

    # ------------------------------------------------------------------ drift
    def check_drift(self) -> list[dict]:
        """Score drift and validity decay of the champion; stores and returns new alerts."""
        from ..evaluators.drift import score_drift, validity_decay

        ch = self.champion()
        if ch is None:
            return []
        new_alerts = []
        scores = self.scores_frame(ch["id"], limit=self.cfg.drift_window)
        cur = pd.to_numeric(scores["score"], errors="coerce").dropna().to_numpy()
        th = self.cfg.drift or DriftThresholds()
        d = score_drift(ch["statistics"].get("reference_scores", []), cur, thresholds=th)
        if d["alert"]:
            msg = (f"score drift: the newest {d['n_current']} scores differ from fit-time scores (KS={d['ks']:.2f}, p={d['p_value']:.2g}, "
                   f"PSI={d['psi']:.2f}; mean {d['mean_reference']:.3g} -> {d['mean_current']:.3g})")
            new_alerts.append(self._alert_once("score_drift", "alert", msg, ch["id"], d))
        # validity: online scores of traces whose feedback arrived after the champion's fit
        fresh = self.labelled_frame(since_ns=ch["feedback_max_ns"] or 0)
        if len(fresh):
            fresh = fresh.sort_values("feedback_ns").tail(self.cfg.validity_window)
            all_scores = self.scores_frame(ch["id"])
            online = all_scores[["trace_id", "score"]].rename(columns={"score": "_online"})
            m = fresh.merge(online, left_on="id", right_on="trace_id", how="inner")
            m = m[m["_online"].notna()]
            fit_tau = (ch["statistics"].get("holdout") or {}).get("challenger", {}).get("tau")
            vd = validity_decay(m["_online"].to_numpy(dtype=float), m[self.cfg.target].to_numpy(dtype=float), fit_tau,
                                n_boot=min(self.cfg.n_boot, 500), seed=self.cfg.seed, thresholds=th)
            self._set_validity(ch["id"], vd)
            w = vd["window"]
            if vd["level"] == "alert":
                msg = (f"validity decay: on the newest {w['n']} feedback points tau = {w['tau']:.3f} "
                       f"[95% CI {w['ci_low']:.3f}, {w['ci_high']:.3f}], below the fit-time {fit_tau:.3f}")
                new_alerts.append(self._alert_once("validity_decay", "alert", msg, ch["id"], vd))
            elif vd["level"] == "warning":
                p_txt = "undefined" if w["p_value"] is None else f"{w['p_value']:.2g}"
                msg = f"low significance: on the newest {w['n']} feedback points tau = {w['tau']:.3f}, p = {p_txt} > {th.validity_p:g}"
                new_alerts.append(self._alert_once("low_significance", "warning", msg, ch["id"], vd))
        return [a for a in new_alerts if a]

    def _alert_once(self, kind, severity, message, evaluator_id, details) -> dict | None:
        """One open alert per (kind, evaluator version): a condition that persists is not re-alerted."""
        a = monitor_alerts
        with self.store.engine.connect() as conn:
            seen = conn.execute(sa.select(a.c.id).where(a.c.kind == kind, a.c.evaluator_id == evaluator_id)).first()
        if seen:
            return None
        aid = self.add_alert(kind, severity, message, evaluator_id=evaluator_id, details=details)
        return {"id": aid, "kind": kind, "severity": severity, "message": message}

    def _set_validity(self, evaluator_id: str, vd: dict) -> None:
        """Keep the latest live-validity figures in the version's statistics (for the dashboard)."""
        v = evaluator_versions
        with self.store.engine.begin() as conn:
            raw = conn.execute(sa.select(v.c.statistics).where(v.c.id == evaluator_id)).scalar()
            stats = json.loads(raw or "{}")
            stats["live_validity"] = {**vd, "checked_at_ns": _now_ns()}
            conn.execute(v.update().where(v.c.id == evaluator_id).values(statistics=_json(stats)))

    # ------------------------------------------------------------------ one tick
    def tick(self, *, refit: bool = True, force_refit: bool = False) -> dict:
        """Refit (if due), score new traces, check drift: what a worker does each period."""
        out: dict = {}
        if refit:
            out["refit"] = self.refit(force=force_refit)
        out["scored"] = self.score_new()
        out["alerts"] = self.check_drift()
        return out
