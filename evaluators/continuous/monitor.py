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
- :meth:`Monitor.check_drift` — score drift (the champion's online scores in consecutive
  windows after a reference window of its first out-of-sample online scores, KS + PSI with
  permutation nulls, an alert after ``persistence`` significant windows in a row) and validity
  decay (tau of online scores on feedback newer than the fit vs the fit's held-out tau, both
  with their CIs), with the thresholds of ``MonitorConfig.drift``
  (:class:`~autometrics.evaluators.continuous.drift.DriftThresholds`; the design and its measured
  calibration are in that module); the state is kept in the version's statistics (``drift``,
  ``live_validity``), alerts are stored (and shown in the dashboard, pushed to Langfuse).

Nothing here stores or logs a secret: versions hold the evaluator artifact and statistics,
runs hold host:pid, the store URL is only ever shown with the password hidden.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...collectors.store import TraceStore
from ...collectors.store.locks import RefitLock
from ..evaluator import Evaluator
from ..report import render_markdown
from ..validity import data_label
from . import online
from .drift import (
    DriftThresholds,
    drift_windows,
    fit_agreement,
    score_drift_message,
    validity_decay,
    validity_message,
)
from .refit import compare, decide, fit_for_refit, holdout_predictions, newest_holdout
from .sequential import (
    SequentialSettings,
    concordance,
    sequential_message,
    start_state,
    update_state,
    validity_change_message,
    validity_step,
)

__all__ = ["MonitorConfig", "Monitor", "RefitOutcome"]

log = logging.getLogger("autometrics.continuous")

MIN_SIGNIFICANT_N = 30  # held-out n below this: "small n" warning


def _now_ns() -> int:
    return time.time_ns()


def _worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _max_start_ns(frame: pd.DataFrame) -> int:
    """Start (ns) of the newest trace in a training frame (0 when empty or unknown)."""
    if not len(frame) or "start_time" not in frame.columns:
        return 0
    t = pd.to_datetime(frame["start_time"], utc=True, errors="coerce").dropna()
    return int(t.max().value) if len(t) else 0


@dataclass
class MonitorConfig:
    """What to fit and how.  ``llm_config=None`` = LLM-free fit (MetricBank + NNLS)."""

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
    reference_window: int = 200  # drift reference: the first online scores of traces after the fit's data
    drift_window: int = 200  # scores per drift window (consecutive, non-overlapping, after the reference)
    validity_window: int = 200  # newest feedback (after the fit) used for validity decay
    drift: DriftThresholds = field(default_factory=DriftThresholds)  # when drift/validity statistics alert
    # sequential change detection (CUSUM) on the score, each metric and the failed/empty rate; None: off
    sequential: SequentialSettings | None = field(default_factory=SequentialSettings)
    max_reference: int = 1600  # the sequential reference doubles from reference_window up to this while nothing alarms
    validity_reference: int = 60  # sequential live validity: the first labels after the fit are its reference
    aggregate: str = "latest"
    promote_unvalidated: bool = False  # make an evaluator champion even when its validity is not above chance
    crossfit: object = None  # validity options (autometrics.evaluators.validity.CrossFit); None: the defaults
    fit_test_size: float | None = None  # None: each fit cross-fits its validity; a share: the older split-and-test protocol


@dataclass
class RefitOutcome:
    outcome: str  # promoted | rejected | skipped | locked | error
    message: str
    version: int | None = None
    evaluator_id: str | None = None
    statistics: dict = field(default_factory=dict)
    alerts: list = field(default_factory=list)  # alerts this refit stored (counted with the run's other alerts)

    def __str__(self) -> str:
        v = f" v{self.version}" if self.version is not None else ""
        return f"refit {self.outcome}{v}: {self.message}"


class Monitor:
    """Continuous evaluation of one target (feedback name) in one project of a trace store."""

    def __init__(self, store: TraceStore | str | None, config: MonitorConfig):
        self.store = store if isinstance(store, TraceStore) else TraceStore(store)
        self.cfg = config

    # ------------------------------------------------------------------ versions
    def versions(self, *, with_artifact: bool = False) -> list[dict]:
        """Every stored version (oldest first) with its parsed statistics."""
        return self.store.evaluator_versions(self.cfg.project, self.cfg.target, with_artifact=with_artifact)

    def version(self, number: int) -> dict:
        return self.store.evaluator_version(self.cfg.project, self.cfg.target, number)

    def champion(self) -> dict | None:
        """The current champion (with artifact), or None."""
        return self.store.champion(self.cfg.project, self.cfg.target)

    def champion_evaluator(self):
        ch = self.champion()
        return (ch, Evaluator(ch["artifact"])) if ch else (None, None)

    def rollback(self, number: int, *, reason: str | None = None) -> dict:
        """Make version ``number`` the champion again (the current one becomes ``retired``)."""
        target = self.version(number)
        why = (reason or f"rolled back to v{number} by hand") + f" (was {target['status']}: {target['reason']})"
        self.store.make_champion(self.cfg.project, self.cfg.target, target["id"], why)
        return self.version(number)

    def compare_versions(self, a: int, b: int, *, holdout: float = 0.3, n_boot: int = 1000):
        """Versions ``a`` (as champion) and ``b`` (as challenger) on the newest held-out feedback
        now in the store: a :class:`~autometrics.evaluators.continuous.refit.Comparison`."""
        va, vb = self.version(a), self.version(b)
        frame = self.labelled_frame()
        _, hold_pos = newest_holdout(frame, holdout)
        hold = frame.iloc[hold_pos]
        y = hold[self.cfg.target].to_numpy(dtype=float)
        return va, vb, compare(holdout_predictions(Evaluator(vb["artifact"]), hold),
                               holdout_predictions(Evaluator(va["artifact"]), hold), y, n_boot=n_boot)

    def new_feedback_count(self) -> int:
        """Feedback points for the target newer than anything the last fitted version saw."""
        return self.store.count_feedback(self.cfg.target, since_ns=self.store.feedback_mark(self.cfg.project, self.cfg.target),
                                         project=self.cfg.project)

    # ------------------------------------------------------------------ data
    def labelled_frame(self, since_ns: int | None = None) -> pd.DataFrame:
        """The store's training frame for the target (numeric labels, as ``autometrics fit`` reads
        it), only feedback newer than ``since_ns`` when given."""
        frame = self.store.training_frame(self.cfg.target, project=self.cfg.project, aggregate=self.cfg.aggregate, numeric=True)
        if since_ns is not None:
            frame = frame[frame["feedback_ns"] > since_ns]
        return frame.reset_index(drop=True)

    # ------------------------------------------------------------------ refit
    def _record_run(self, run_id: str, **values) -> None:
        try:
            self.store.record_run(run_id, self.cfg.project, self.cfg.target, _worker_id(), **values)
        except Exception as exc:  # bookkeeping must not fail the refit
            log.warning("could not record refit run: %s", exc)

    def _close_stale_runs(self) -> int:
        """Mark every refit run still ``running`` as ``interrupted`` (call only while holding the refit lock).

        The lock is one per store and its holder is the only runner, so a ``running`` record
        seen while holding it belongs to a worker that died mid-refit (killed, crashed, machine
        lost): the kernel / Postgres dropped its lock, its record stayed.  Returns how many were closed.
        """
        def message(x: dict) -> str:
            when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime((x["started_ns"] or 0) / 1e9))
            return (f"interrupted: worker {x['worker'] or '?'} started this refit at {when} and never finished it "
                    f"(process killed or crashed); found by {_worker_id()}, which holds the refit lock, so no other "
                    "refit can still be running")

        try:
            stale = self.store.close_running_runs(message)
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
                msg = f"refit failed: {type(exc).__name__}: {exc}"
                out.alerts.append({"id": self.add_alert("refit_error", "warning", msg), "kind": "refit_error",
                                   "severity": "warning", "message": msg})
            self._record_run(run_id, ended_ns=_now_ns(), outcome=out.outcome, message=out.message[:2000], evaluator_id=out.evaluator_id)
            return out
        finally:
            lock.release()

    def _refit_locked(self, force: bool, min_new: int) -> RefitOutcome:
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
                            metrics=cfg.metrics, crossfit=cfg.crossfit, test_size=cfg.fit_test_size)
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
        validity = challenger.validity
        promote, reason = decide(cmp, has_champion=champ is not None and pred_p is not None, validity=validity,
                                 champion_validated=champ is None or champ.validated,
                                 promote_unvalidated=cfg.promote_unvalidated)
        if champ_note:
            reason = f"{champ_note}; {reason}"
        # display only: the fit's held-out (or out-of-fold) scores and the newest held-out feedback's
        all_pred = np.concatenate([fit.result.test["score"].to_numpy(dtype=float), pred_c])
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
            "reference_scores": [round(float(x), 5) for x in all_pred[np.isfinite(all_pred)]][:2000],  # display only
            # the drift reference starts after the newest trace the fit used (out-of-sample from there on)
            "fit_traces_until_ns": _max_start_ns(frame),
            "warnings": warnings,
            "notes": fit.notes,
            "champion_version": champ_row["version"] if champ_row else None,
            "validity": validity,
        }
        evaluator_id = uuid.uuid4().hex
        number = self.store.add_version(
            cfg.project, cfg.target, evaluator_id=evaluator_id, promote=promote, reason=reason, method=fit.method,
            feedback_max_ns=int(frame["feedback_ns"].max()), n_feedback=int(len(frame)), artifact=challenger.artifact,
            report=render_markdown(fit.result), statistics=stats)
        alerts = []
        if promote:
            alerts = self._significance_alerts(evaluator_id, cmp, validity)
        elif not validity.get("validated"):
            alerts = [self._alert("unvalidated", "warning", f"v{number} was not promoted, on the {data_label(validity)}: "
                                  f"{reason}", evaluator_id, validity)]
        return RefitOutcome("promoted" if promote else "rejected", reason, number, evaluator_id, stats, alerts)

    def _alert(self, kind: str, severity: str, message: str, evaluator_id: str | None, details=None) -> dict:
        aid = self.add_alert(kind, severity, message, evaluator_id=evaluator_id, details=details)
        return {"id": aid, "kind": kind, "severity": severity, "message": message}

    def _significance_alerts(self, evaluator_id: str, cmp, validity: dict) -> list[dict]:
        out = []
        if not validity.get("validated"):
            out.append(self._alert("unvalidated", "warning", "new champion is NOT validated (promoted by --promote-unvalidated), "
                                   f"on the {data_label(validity)}: {validity.get('reason', '')}; its scores are marked "
                                   "unvalidated", evaluator_id, validity))
        p = cmp.challenger.get("p_value")
        if p is None or p > 0.05:
            out.append(self._alert("low_significance", "warning",
                                   f"new champion's agreement on the newest held-out feedback is not significant "
                                   f"(p={p if p is None else f'{p:.3g}'} > 0.05, n={cmp.n})", evaluator_id, cmp.challenger))
        if cmp.n < MIN_SIGNIFICANT_N:
            out.append(self._alert("small_n", "warning", f"new champion was compared on only {cmp.n} held-out feedback points",
                                   evaluator_id, {"n": cmp.n}))
        return out

    # ------------------------------------------------------------------ alerts
    def add_alert(self, kind: str, severity: str, message: str, *, evaluator_id: str | None = None, details=None) -> str:
        aid = uuid.uuid4().hex
        try:
            self.store.add_alert(self.cfg.project, self.cfg.target, alert_id=aid, kind=kind, severity=severity, message=message,
                                 evaluator_id=evaluator_id, details=details)
        except Exception as exc:
            log.warning("could not store alert: %s", exc)
        return aid

    def alerts(self, limit: int = 100) -> list[dict]:
        return self.store.alerts(self.cfg.project, self.cfg.target, limit)

    def runs(self, limit: int = 50) -> list[dict]:
        return self.store.runs(self.cfg.project, self.cfg.target, limit)

    # ------------------------------------------------------------------ online scoring
    def _unscored(self, evaluator_id: str, limit: int, *, unclaimed: bool = False) -> list[tuple[str, int]]:
        """Settled traces the version has not scored (newest first); a read that claims nothing
        (``score_new`` claims its batches), with ``unclaimed`` only those no worker holds."""
        settled = _now_ns() - int(self.cfg.settle_seconds * 1e9) if self.cfg.settle_seconds > 0 else None
        return self.store.unscored_traces(self.cfg.project, evaluator_id, limit, seen_before_ns=settled, unclaimed=unclaimed)

    def score_new(self, *, limit_batches: int | None = None, options=None) -> int:
        """Score traces the champion has not scored yet (newest first); returns how many records
        were stored (:meth:`score_online` for the whole account)."""
        return self.score_online(limit_batches=limit_batches, options=options).written

    def score_online(self, *, limit_batches: int | None = None, options=None):
        """The one online scoring path: the champion scores its unscored traces.  Any number of
        workers may run this at once on one store: each claims disjoint batches
        (:mod:`~autometrics.evaluators.continuous.online`, which also applies ``options``, a
        :class:`~autometrics.evaluators.continuous.online.ScoringOptions`: lease, judge sampling,
        budget, endpoint).  Returns its :class:`~autometrics.evaluators.continuous.online.ScoringResult`."""
        champ = self.champion()
        if champ is None:
            return online.ScoringResult()
        return online.score_new(self.store, self.cfg, champ, limit_batches=limit_batches, options=options)

    def scores_frame(self, evaluator_id: str | None = None, *, limit: int | None = None) -> pd.DataFrame:
        """Online scores (newest trace first) of one version, default the champion."""
        if evaluator_id is None:
            ch = self.champion()
            if ch is None:
                return self.store.empty_scores_frame()
            evaluator_id = ch["id"]
        return self.store.scores_frame(evaluator_id, limit=limit)

    # ------------------------------------------------------------------ drift
    def check_drift(self) -> list[dict]:
        """Score drift and validity decay of the champion; stores and returns new alerts."""
        ch = self.champion()
        if ch is None:
            return []
        th = self.cfg.drift or DriftThresholds()
        labelled = self.labelled_frame()
        new_alerts = [self._check_score_drift(ch, th, labelled)]
        if self.cfg.sequential is not None:
            for check in (self._check_sequential, self._check_sequential_validity):
                try:
                    new_alerts.append(check(ch, labelled))
                except Exception as exc:  # one detector's bookkeeping must not stop the other checks
                    log.warning("sequential check %s failed: %s: %s", check.__name__, type(exc).__name__, exc)
        # validity: online scores of traces whose feedback arrived after the champion's fit
        fresh = labelled[labelled["feedback_ns"] > (ch["feedback_max_ns"] or 0)] if len(labelled) else labelled
        if len(fresh):
            fresh = fresh.sort_values("feedback_ns").tail(self.cfg.validity_window)
            online = self.store.scores_frame(ch["id"], columns=["trace_id", "score"], trace_ids=fresh["id"].tolist())
            online = online.rename(columns={"score": "_online"})
            m = fresh.merge(online, left_on="id", right_on="trace_id", how="inner")
            m = m[pd.to_numeric(m["_online"], errors="coerce").notna()]
            st = ch["statistics"]
            fit = fit_agreement(("newest held-out feedback", (st.get("holdout") or {}).get("challenger")),
                                ("the fit's test split", (st.get("fit") or {}).get("test")))
            vd = validity_decay(m["_online"].to_numpy(dtype=float), m[self.cfg.target].to_numpy(dtype=float), fit.get("tau"),
                                fit=fit, n_boot=min(self.cfg.n_boot, 500), seed=self.cfg.seed, thresholds=th)
            times = (int(m["feedback_ns"].min()), int(m["feedback_ns"].max())) if len(m) else None
            vd["feedback_first_ns"], vd["feedback_last_ns"] = times or (None, None)
            self._set_validity(ch["id"], vd)
            w = vd["window"]
            if vd["level"] == "alert":
                new_alerts.append(self._alert_once("validity_decay", "alert", validity_message(vd, times), ch["id"], vd))
            elif vd["level"] == "warning":
                p_txt = "undefined" if w["p_value"] is None else f"{w['p_value']:.2g}"
                msg = (f"low significance: on the newest {w['n']} feedback points after the fit, tau = {w['tau']:.3f}, "
                       f"p = {p_txt} > {th.validity_p:g}: the evaluator's agreement with current feedback is not "
                       "established; collect more feedback before trusting its scores")
                new_alerts.append(self._alert_once("low_significance", "warning", msg, ch["id"], vd))
        return [a for a in new_alerts if a]

    def _check_score_drift(self, ch: dict, th: DriftThresholds, labelled: pd.DataFrame) -> dict | None:
        """Test the champion's complete, not yet tested score windows (see :func:`.drift.drift_windows`);
        the state (frozen reference, tested windows) lives in the version's statistics under ``drift``."""
        st = ch["statistics"]
        since = self._fit_data_until(ch, labelled)
        scores = self.store.scores_frame(ch["id"], columns=["trace_start_ns", "score"], since_ns=int(since))
        sc = pd.to_numeric(scores["score"], errors="coerce")
        state = drift_windows(scores["trace_start_ns"].to_numpy(dtype=float), sc.to_numpy(dtype=float), since_ns=int(since),
                              reference_window=self.cfg.reference_window, window=self.cfg.drift_window, thresholds=th,
                              seed=self.cfg.seed, previous=st.get("drift"))
        try:
            self.store.update_version_statistics(ch["id"], "drift", {**state, "checked_at_ns": _now_ns()})
        except Exception as exc:  # bookkeeping must not stop the check
            log.warning("could not store the drift state: %s", exc)
        if not state["alert"]:
            return None
        last = state["windows"][-1]
        details = {**state, **{k: last[k] for k in ("ks", "p_value", "psi", "psi_null", "psi_excess")},
                   "mean_reference": state["reference"]["mean"], "mean_current": last["mean"]}
        details["reference"] = {k: v for k, v in state["reference"].items() if k != "scores"}
        return self._alert_once("score_drift", "alert", score_drift_message(state), ch["id"], details)

    def _fit_data_until(self, ch: dict, labelled: pd.DataFrame) -> int:
        """Start of the newest trace the version's fit used (drift references begin after it)."""
        since = ch["statistics"].get("fit_traces_until_ns")
        if since is None:  # a version stored before this field: the newest trace with feedback the fit saw
            seen = labelled[labelled["feedback_ns"] <= (ch["feedback_max_ns"] or 0)] if len(labelled) else labelled
            since = _max_start_ns(seen)
        return int(since)

    def _sequential_rows(self, evaluator_id: str, since_ns: int) -> pd.DataFrame:
        """Online scores after ``since_ns`` in start order: score, metric values, failed-or-empty flag."""
        import json

        f = self.store.scores_frame(evaluator_id, columns=["trace_id", "trace_start_ns", "score", "metrics", "error"],
                                    since_ns=since_ns)
        f = f.sort_values(["trace_start_ns", "trace_id"], kind="stable").reset_index(drop=True)
        score = pd.to_numeric(f["score"], errors="coerce")
        ids = f["trace_id"].tolist()
        texts = pd.concat([self.store.trace_texts(ids[i:i + 500]) for i in range(0, len(ids), 500)] or [pd.DataFrame()])
        out = texts.set_index("trace_id")["output"] if len(texts) else pd.Series(dtype=object)
        empty = f["trace_id"].map(out).map(lambda o: not isinstance(o, str) or not o.strip())
        metrics = pd.DataFrame([json.loads(m) if isinstance(m, str) and m else {} for m in f["metrics"]], index=f.index)
        metrics = metrics.apply(pd.to_numeric, errors="coerce") if len(metrics.columns) else metrics
        return pd.concat([f[["trace_start_ns"]], score.rename("score"),
                          (f["error"].notna() | score.isna() | empty).astype(float).rename("failed"),
                          metrics.add_prefix("m:")], axis=1)

    def _check_sequential(self, ch: dict, labelled: pd.DataFrame) -> dict | None:
        """Advance the champion's sequential detectors (:mod:`.sequential`) over its new online
        scores; the state lives in the version's statistics under ``sequential``.  The reference is
        the first ``reference_window`` scores after the fit's data, doubled (up to ``max_reference``)
        while nothing alarms, each time with thresholds calibrated afresh."""
        settings = self.cfg.sequential
        since = self._fit_data_until(ch, labelled)
        prev = ch["statistics"].get("sequential") or {}
        same = prev.get("since_ns") == since and prev.get("settings") == settings.to_dict() and prev.get("detectors")
        grow = False
        if same:
            state = prev
            ref_n = state["reference"]["n"]
            # a longer reference is a better one (less estimation error, lower thresholds), but only traffic with no
            # sign of a change may join it: every sum below half its threshold
            quiet = all(max(d["s_up"], d.get("s_down", 0.0)) < d["h"] / 2 for d in state["detectors"].values())
            grow = state["alarm"] is None and quiet and ref_n * 2 <= self.cfg.max_reference and ref_n + state["n"] >= ref_n * 2
        if not same or grow:
            want = (prev["reference"]["n"] * 2) if same else self.cfg.reference_window
            # counted on one column first: the texts and metric values are read once there are enough
            have = len(self.store.scores_frame(ch["id"], columns=["trace_start_ns"], since_ns=since))
            if have < want:
                state = {"since_ns": since, "settings": settings.to_dict(),
                         "state": f"collecting reference ({have}/{want} scores after the fit's data)"}
                self.store.update_version_statistics(ch["id"], "sequential", state)
                return None
            rows = self._sequential_rows(ch["id"], since)
            while want * 2 <= min(len(rows), self.cfg.max_reference):
                want *= 2
            ref, rest = rows.iloc[:want], rows.iloc[want:]
            metric_cols = [c for c in rows.columns if c.startswith("m:")]
            state = start_state({"score": ref["score"].to_numpy(float), "failed": ref["failed"].tolist(),
                                 "metrics": {c[2:]: ref[c].to_numpy(float) for c in metric_cols}}, settings, seed=self.cfg.seed)
            state.update(since_ns=since, reference={"n": int(want), "first_ns": int(ref["trace_start_ns"].iloc[0]),
                                                    "last_ns": int(ref["trace_start_ns"].iloc[-1])},
                         until_ns=int(ref["trace_start_ns"].iloc[-1]))
        else:
            rest = self._sequential_rows(ch["id"], int(state["until_ns"]))
        if len(rest):
            metric_cols = [c for c in rest.columns if c.startswith("m:")]
            update_state(state, rest["trace_start_ns"].to_numpy("int64"), rest["score"].to_numpy(float),
                         {c[2:]: rest[c].to_numpy(float) for c in metric_cols}, rest["failed"].to_numpy(float))
        state["state"] = (f"watching {state['n']} trace(s) after a reference of {state['reference']['n']}"
                          if state["alarm"] is None else "alarm")
        self.store.update_version_statistics(ch["id"], "sequential", {**state, "checked_at_ns": _now_ns()})
        if state["alarm"] is None:
            return None
        return self._alert_once("traffic_change", "alert", sequential_message(state), ch["id"],
                                {"alarm": state["alarm"], "reference": state["reference"], "settings": state["settings"],
                                 "detectors": {n: {k: v for k, v in d.items() if k in ("kind", "mean", "sd", "p0", "h", "alarm")}
                                               for n, d in state["detectors"].items() if d.get("alarm")}})

    def _check_sequential_validity(self, ch: dict, labelled: pd.DataFrame) -> dict | None:
        """Advance the live-validity CUSUM over feedback that arrived since the last check
        (:func:`.sequential.validity_step`): each new label's concordance with the (newest 500)
        labels before the fit, on the champion's online scores.  State: ``sequential_validity``."""
        if not len(labelled):
            return None
        settings, fit_ns = self.cfg.sequential, int(ch["feedback_max_ns"] or 0)
        prev = ch["statistics"].get("sequential_validity") or {}
        fresh_state = prev.get("fit_feedback_ns") != fit_ns or prev.get("settings") != settings.to_dict()
        state = {"fit_feedback_ns": fit_ns, "settings": settings.to_dict(), "until_ns": fit_ns} if fresh_state else prev
        target = self.cfg.target

        def scored(frame: pd.DataFrame) -> pd.DataFrame:
            """The labels whose trace the champion has scored (a score or an error stored), with the score."""
            on = self.store.scores_frame(ch["id"], columns=["trace_id", "score"], trace_ids=frame["id"].tolist())
            m = frame.merge(on.rename(columns={"score": "_online"}), left_on="id", right_on="trace_id", how="inner")
            return m.sort_values("feedback_ns", kind="stable")

        if fresh_state:
            pool = scored(labelled[labelled["feedback_ns"] <= fit_ns].sort_values("feedback_ns").tail(500))
            pool = pool[pd.to_numeric(pool["_online"], errors="coerce").notna()]
            state["pool"] = {"score": pool["_online"].astype(float).tolist(), "label": pool[target].astype(float).tolist()}
        new = labelled[labelled["feedback_ns"] > int(state["until_ns"])]
        if len(new) and len(state["pool"]["score"]) >= 10:
            done = scored(new)
            waiting = new[~new["id"].isin(done["id"])]  # traces not scored yet: their labels wait, in feedback order
            if len(waiting):
                done = done[done["feedback_ns"] < waiting["feedback_ns"].min()]
            ok = done[pd.to_numeric(done["_online"], errors="coerce").notna()]  # a trace that failed to score counts for nothing
            if len(ok):
                values = concordance(ok["_online"].astype(float), ok[target].astype(float), state["pool"]["score"],
                                     state["pool"]["label"])
                validity_step(state, values, ok["feedback_ns"].to_numpy("int64"), reference_n=self.cfg.validity_reference,
                              settings=settings, seed=self.cfg.seed)
            if len(done):
                state["until_ns"] = int(done["feedback_ns"].max())
        self.store.update_version_statistics(ch["id"], "sequential_validity", {**state, "checked_at_ns": _now_ns()})
        if not state.get("alarm"):
            return None
        return self._alert_once("validity_change", "alert", validity_change_message(state), ch["id"],
                                {"alarm": state["alarm"], "reference": {"n": state["detector"]["n"], "mean": state["detector"]["mean"],
                                                                        "sd": state["detector"]["sd"]},
                                 "settings": state["settings"], "pool_n": len(state["pool"]["score"])})

    def _alert_once(self, kind, severity, message, evaluator_id, details) -> dict | None:
        """One open alert per (kind, evaluator version): a condition that persists is not re-alerted."""
        if self.store.has_alert(kind, evaluator_id):
            return None
        aid = self.add_alert(kind, severity, message, evaluator_id=evaluator_id, details=details)
        return {"id": aid, "kind": kind, "severity": severity, "message": message}

    def _set_validity(self, evaluator_id: str, vd: dict) -> None:
        """Keep the latest live-validity figures in the version's statistics (for the dashboard)."""
        self.store.update_version_statistics(evaluator_id, "live_validity", {**vd, "checked_at_ns": _now_ns()})

    # ------------------------------------------------------------------ one tick
    def tick(self, *, refit: bool = True, force_refit: bool = False) -> dict:
        """Refit (if due), score new traces, check drift: what a worker does each period."""
        out: dict = {}
        if refit:
            out["refit"] = self.refit(force=force_refit)
        out["scored"] = self.score_new()
        out["alerts"] = (out["refit"].alerts if refit else []) + self.check_drift()
        return out
