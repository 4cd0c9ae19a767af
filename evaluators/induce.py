"""From a scored candidate matrix to a validated evaluator (the regression half of AutoMetrics).

:func:`fit_on_features` selects and weights metrics (NNLS by default), fits the shipped evaluator
on every labelled row and cross-fits its validity (:mod:`~autometrics.evaluators.validity`:
repeated grouped K-fold with the whole selection inside each fold, a cluster-bootstrap CI and a
group-preserving permutation p-value, next to the best single metric and a black box on the same
folds), and writes the evaluator artifact with its statistics, ``validity`` and warnings.  With
``test_size`` it keeps the older protocol: fit on a grouped training split, validate on the rest.
:func:`autometrics.evaluators.fit.fit_evaluator` is the public entry point that scores the
candidates and calls it.
"""

from __future__ import annotations

import datetime as _dt
import logging
import time
import warnings as _warnings  # fit_on_features names its warning list `warnings`
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..collectors.files import json_safe, package_version
from ..metricbank.errors import DataError, UserError
from ..metricbank.notices import add_warnings
from .blackbox import blackbox_reference
from .data import Dataset
from .evaluator import ARTIFACT_FORMAT, ARTIFACT_VERSION, LINEAR_ARTIFACT_VERSION, Evaluator
from .selection import (
    SELECTORS,
    NNLSMetricSelector,
    PreparedMetrics,
    choose_regression,
    make_selector,
)
from .stats import agreement, bootstrap_taus, kendall_tau, kendall_taus
from .validity import (
    CrossFit,
    Validity,
    crossfit,
    crossfit_agreement,
    crossfit_validity,
    fold_plan,
    holdout_validity,
)

__all__ = ["FitResult", "fit_on_features", "fold_selector", "feature_fates", "MIN_LABELS_FOR_CONFIDENCE", "DEFAULT_REGRESSION", "REGRESSIONS"]

#: sign-constrained NNLS with near-duplicate collapsing: measured best on the 16 shared targets
#: (tests/benchmarks/regression_compare.py: mean held-out tau 0.332 vs 0.290 for the paper's PLS)
DEFAULT_REGRESSION = "nnls"
REGRESSIONS = (*SELECTORS, "auto")
AUTO_CANDIDATES = ("nnls", "pls", "enet", "single")
#: from this many training labels ``auto`` also tries the shape regression (fewer labels cannot
#: tell a curve from noise: the issue's measurements put the gain to a black box past a few hundred)
SHAPE_MIN_LABELS = 300


def auto_candidates(n_labels: int) -> tuple[str, ...]:
    """What ``auto`` chooses among on ``n_labels`` training rows: NNLS alone below
    :data:`SHAPE_MIN_LABELS` (there the inner-CV choice among linear procedures is noisier than
    useful: on the 16 shared targets with 25 splits it lost 0.065 tau to NNLS on evalgen_product's
    70 training labels and 0.012 on simpeval's 251), every procedure with the shapes from there on."""
    return AUTO_CANDIDATES + ("ebm",) if n_labels >= SHAPE_MIN_LABELS else ("nnls",)

log = logging.getLogger("autometrics")

MIN_LABELS_FOR_CONFIDENCE = 80  # below this the paper's own results become noisy (Section 4.6)


@dataclass
class FitResult:
    """Everything the report needs: the evaluator plus per-row predictions and candidate table."""

    evaluator: Evaluator
    train: pd.DataFrame  # id, label (human judgment), score (the evaluator's prediction), selected metric values
    test: pd.DataFrame
    candidates: pd.DataFrame  # one row per candidate feature
    notes: list[str] = field(default_factory=list)
    shown_warnings: list[str] = field(default_factory=list)  # logged or warned while it was made (already on screen)

    def keep_shown_warnings(self, messages) -> None:
        """Warnings logged or warned while the evaluator was made: kept in the artifact's warnings
        (evaluator.json and the report) and remembered here as already shown."""
        add_warnings(self.evaluator.artifact, messages)
        self.shown_warnings += [m for m in messages if m not in self.shown_warnings]


def _feature_tau(values: np.ndarray, y: np.ndarray) -> float:
    return kendall_tau(values, y)[0]


def feature_fates(selector, names: list[str], generated) -> list[str]:
    """Why each candidate is in the evaluator or not, read from a fitted selector: ``kept``,
    ``constant`` (no variation on the training rows), ``negative weight`` (a generated metric that
    disagrees with the labels: dropped, since a judge is written so that higher is better),
    ``near-duplicate of X`` (collapsed into X by NNLS) or ``not in top n`` (no weight, or a smaller
    one than the selected metrics)."""
    selected = set(selector.selected_.tolist())
    tau = getattr(selector, "tau_", None)
    sign = tau if tau is not None else selector.stage1_coef_
    member_of = {m: rep for rep, ms in (getattr(selector, "clusters_", None) or {}).items() for m in ms}
    drop_negative = getattr(selector, "drop_negative_generated", True)
    out = []
    for j in range(len(names)):
        if j in selected:
            out.append("kept")
        elif not selector.usable_[j]:
            out.append("constant")
        elif drop_negative and generated[j] and np.isfinite(sign[j]) and sign[j] < 0:
            out.append("negative weight")
        elif j in member_of:
            out.append(f"near-duplicate of {names[member_of[j]]}")
        else:
            out.append("not in top n")
    return out


def fold_selector(regression: str, top_n: int, generated, groups, required=()) -> Callable:
    """The regression as a fold procedure for cross-fitting: selection and weighting (and, for
    ``auto``, the choice of procedure by inner grouped CV) run on the fold's training rows only.
    ``required``: columns NNLS always enters (:meth:`NNLSMetricSelector.fit`)."""
    prepared: dict[bytes, PreparedMetrics] = {}  # per fold: the label-free work, reused by every permutation

    def fit_predict(Xa, tr, te, y):
        name = regression
        if regression == "auto":
            name = choose_regression(Xa[tr], y[tr], groups[tr], generated, candidates=auto_candidates(len(tr)), top_n=top_n).name
        sel = make_selector(name, top_n=top_n)
        if isinstance(sel, NNLSMetricSelector):
            key = np.asarray(tr, dtype=np.int64).tobytes()
            if key not in prepared:
                prepared[key] = PreparedMetrics(Xa[tr], generated)
            return sel.fit(Xa[tr], y[tr], generated=generated, prepared=prepared[key], required=required).predict(Xa[te])
        return sel.fit(Xa[tr], y[tr], generated=generated).predict(Xa[te])
    return fit_predict


def _best_single(Xa, y, allowed) -> tuple[int, float] | None:
    """(column, sign) of the existing metric with the largest |Kendall τ| on these rows."""
    taus = np.where(np.asarray(allowed, dtype=bool), kendall_taus(Xa, y), np.nan)
    if not np.isfinite(taus).any():
        return None
    j = int(np.nanargmax(np.abs(taus)))
    return j, (1.0 if taus[j] >= 0 else -1.0)


def _single_fold(allowed) -> Callable:
    """The best single existing metric, chosen (with its sign) on the fold's training rows."""
    def fit_predict(Xa, tr, te, y):
        b = _best_single(Xa[tr], y[tr], allowed)
        if b is None:
            raise UserError("no metric varies on this fold's training rows")
        col = Xa[:, b[0]]
        med = np.nanmedian(col[tr]) if np.isfinite(col[tr]).any() else 0.0
        return b[1] * np.where(np.isnan(col[te]), med, col[te])
    return fit_predict


def paired_difference(preds_a: list, preds_b: list, y, groups, n_boot: int, seed: int) -> dict | None:
    """τ(b) − τ(a) of two sets of predictions of the same rows (each τ the mean over its set,
    e.g. one per fold assignment) with a 95 % cluster-bootstrap CI on shared resamples of whole
    groups; ``beats_beyond_noise``: the CI's lower bound is above 0.  None without resamples."""
    if not n_boot:
        return None
    y = np.asarray(y, dtype=float)
    ta = np.mean([kendall_tau(p, y)[0] for p in preds_a])
    tb = np.mean([kendall_tau(p, y)[0] for p in preds_b])
    boots = bootstrap_taus(list(preds_a) + list(preds_b), y, min(n_boot, 1000), seed, groups=np.asarray(groups).astype(str))
    with _warnings.catch_warnings():  # a resample where τ is undefined for every prediction: NaN, dropped below
        _warnings.simplefilter("ignore", RuntimeWarning)
        diff = np.nanmean(boots[:, len(preds_a):], axis=1) - np.nanmean(boots[:, :len(preds_a)], axis=1)
    diff = diff[np.isfinite(diff)]
    if not len(diff) or not (np.isfinite(ta) and np.isfinite(tb)):
        return None
    lo, hi = (float(v) for v in np.percentile(diff, [2.5, 97.5]))
    return {"difference": float(tb - ta), "ci": [lo, hi], "beats_beyond_noise": bool(lo > 0)}


def _summary(oof: np.ndarray, y, groups, n_boot: int, seed: int) -> dict:
    """Cross-fitted agreement of one procedure's out-of-fold predictions, with the same keys as
    :class:`~.stats.Agreement` (the figure and CI of :func:`~.validity.crossfit_agreement`)."""
    tau, _, ci = crossfit_agreement(oof, y, groups, n_boot, seed)
    return {"n": int(len(y)), "tau": tau, "ci_low": ci[0], "ci_high": ci[1], "p_value": None, "method": "cross-fit"}


@dataclass
class _Validation:
    """What a validation produced for the artifact: positions, predictions, statistics."""

    test_pos: np.ndarray  # the held-out rows; in a cross-fit every labelled row
    pred_test: np.ndarray  # held-out predictions; in a cross-fit the out-of-fold mean over repeats
    stats_test: dict
    validity: Validity
    best: dict | None
    blackbox: dict | None


def fit_on_features(
    ds: Dataset,
    target: str,
    features: tuple[pd.DataFrame, dict, list[str]],
    *,
    task: str | None = None,
    test_size: float | None = None,
    seed: int = 0,
    top_n: int = 5,
    n_boot: int = 1000,
    regression: str = DEFAULT_REGRESSION,
    unavailable: dict[str, str] | None = None,
    started: float | None = None,
    crossfit: CrossFit | None = None,
    fold_fit: Callable | None = None,
    scope: str = "",
) -> FitResult:
    """Select and regress, validate: the evaluator from a scored candidate matrix.

    ``features`` is ``(X, meta, notes)`` from :func:`~autometrics.evaluators.evaluator.score_metrics`
    over the labelled rows of ``ds`` (same order).  Both fit paths end here: the LLM-free one
    (MetricBank only) and the one with generated judges.

    Validation (:mod:`~autometrics.evaluators.validity`): with ``test_size`` None (the default)
    the evaluator is fitted on every labelled row and its validity is cross-fitted
    (``crossfit`` options; the fold procedure is the regression itself, or ``fold_fit(Xa, tr, te,
    y)`` when the caller's procedure does more inside each fold, e.g. re-screening judges;
    ``scope`` says what ran inside the folds).  With ``test_size`` (or a split fixed by
    :meth:`Dataset.with_split`) it is fitted on the training split and validated on the rest.
    """
    started = time.perf_counter() if started is None else started
    if target not in ds.targets:
        raise DataError(f"target {target!r} was not loaded; loaded targets: {ds.targets}")
    lab = ds.labelled(target)
    warnings = list(ds.warnings)
    info = ds.labels[target]
    unavailable = unavailable or {}
    cf = crossfit or CrossFit(n_boot=n_boot)
    X, meta, notes = features
    if len(X) != len(lab):
        raise UserError(f"features have {len(X)} rows, labelled data has {len(lab)}")
    if X.shape[1] == 0:
        raise DataError("no metric could score this data: " + "; ".join(notes))
    if regression not in REGRESSIONS:
        raise UserError(f"unknown regression {regression!r}; choose one of {', '.join(REGRESSIONS)}")

    y = lab.y(target)
    holdout = lab.has_holdout(test_size)
    groups_all = lab.frame["group"].astype(str).to_numpy()
    if len(np.unique(groups_all)) < 2:
        raise DataError("all rows share one input/group, so no grouped validation is possible. "
                        "Pass --group-col with a column that varies, or more distinct inputs.")
    train_pos, test_pos = lab.split_positions(test_size, seed)
    names = list(X.columns)
    Xa = X.to_numpy(dtype=float)
    generated = [meta[c]["generated"] for c in names]
    choice = None
    if regression == "auto":
        # chosen on the training rows only (inner grouped CV); a held-out split is never seen
        choice = choose_regression(Xa[train_pos], y[train_pos], groups_all[train_pos], generated,
                                   candidates=auto_candidates(len(train_pos)), top_n=top_n)
    shipped = choice.name if choice is not None else regression
    # judges that passed screening on their added value (meta "required") always enter NNLS
    required = [j for j, c in enumerate(names) if meta[c].get("required")]
    selector = make_selector(shipped, top_n=top_n)
    selector = (selector.fit(Xa[train_pos], y[train_pos], generated=generated, required=required)
                if isinstance(selector, NNLSMetricSelector) else selector.fit(Xa[train_pos], y[train_pos], generated=generated))
    represents = getattr(selector, "represents_", {}) or {}
    pred_train = selector.predict(Xa[train_pos])
    stats_train = agreement(pred_train, y[train_pos], n_boot=n_boot, seed=seed)
    fold = fold_fit or fold_selector(regression, top_n, generated, groups_all, required)
    if holdout:
        val = _validate_holdout(selector, Xa, y, groups_all, train_pos, test_pos, generated, cf, n_boot, seed, scope)
    else:
        val = _validate_crossfit(fold, Xa, y, groups_all, generated, cf, n_boot, seed, scope)
    stats_test, validity, best, blackbox = val.stats_test, val.validity, val.best, val.blackbox
    if best is not None:
        best = {"feature": names[best.pop("index")], **best}
        beats = best.get("vs_evaluator") or {}
        if beats.get("beats_beyond_noise"):
            lo, hi = beats["ci"]
            warnings.append(
                f"the best single metric, {best['feature']}, agrees with the labels better than the evaluator beyond noise "
                f"({'cross-fitted' if not holdout else 'held-out'} τ {best['test']['tau']:.3f} vs {stats_test['tau']:.3f}; "
                f"difference {beats['difference']:+.3f}, 95% CI {lo:+.3f} to {hi:+.3f} on the same rows): "
                "use it alone (--regression single) or add labels")

    # per-candidate agreement (train: the rows the evaluator was fitted on; test: held-out rows only)
    fates = feature_fates(selector, names, generated)
    rows = []
    for j, name in enumerate(names):
        rows.append(
            {
                "feature": name,
                "signature": meta[name]["signature"],
                "generated": meta[name]["generated"],
                "higher_is_better": meta[name]["higher_is_better"],
                "tau_train": _feature_tau(Xa[train_pos, j], y[train_pos]),
                "tau_test": _feature_tau(Xa[test_pos, j], y[test_pos]) if holdout else float("nan"),
                "stage1_weight": selector.stage1_coef_[j],
                "usable": bool(selector.usable_[j]),
                "selected": bool(j in set(selector.selected_.tolist())),
                "fate": fates[j],
                "missing": int(np.isnan(Xa[:, j]).sum()),
                "seconds": meta[name]["seconds"],
            }
        )
    candidates = pd.DataFrame(rows)

    n_lab = len(lab)
    if not validity.validated:
        warnings.append(f"not validated: {validity.reason}. Treat its scores as unvalidated.")
    if holdout and n_lab < MIN_LABELS_FOR_CONFIDENCE:
        warnings.append(
            f"only {n_lab} labelled examples (< {MIN_LABELS_FOR_CONFIDENCE}): held-out estimates are noisy; "
            "see the confidence interval (without --test-size every row is used for validity)."
        )
    n_usable = int(selector.usable_.sum())
    if n_usable > len(train_pos):
        warnings.append(
            f"more candidate metrics ({n_usable}) than training rows ({len(train_pos)}): metric selection may overfit."
        )
    for note in notes:
        warnings.append(f"metric skipped: {note}")

    feats = []
    importance = selector.importance_
    cand_by_name = candidates.set_index("feature")
    for k, j in enumerate(selector.selected_):
        name = names[j]
        feats.append(
            {
                "feature": name,
                "signature": meta[name]["signature"],
                "metric": meta[name]["metric"],
                "submetric": meta[name]["submetric"],
                "generated": meta[name]["generated"],
                "higher_is_better": meta[name]["higher_is_better"],
                "impute": float(selector.impute_[j]),
                "mean": float(selector.mean_[j]),
                "scale": float(selector.scale_[j]),
                "weight": float(selector.coef_[k]),
                "importance": float(importance[k]),
                "tau_train": cand_by_name.loc[name, "tau_train"],
                "tau_test": cand_by_name.loc[name, "tau_test"],
                # near-duplicate candidates this metric stands for (dropped so the top-n is not spent on copies)
                "represents": [names[i] for i in represents.get(int(j), [])],
            }
        )
        shapes = getattr(selector, "shapes_", None)
        if shapes is not None:  # a shape model: the contribution is this lookup table, not weight * z
            feats[-1]["shape"] = shapes[k]

    artifact = {
        "format": ARTIFACT_FORMAT,
        "format_version": ARTIFACT_VERSION if getattr(selector, "shapes_", None) is not None else LINEAR_ARTIFACT_VERSION,
        "package_version": package_version(),
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "target": target,
        "task": task,
        "label": info.to_dict(),
        "columns": {k: v for k, v in ds.columns.items() if k != "group"},
        "method": {
            "name": f"autometrics-{shipped}",
            "regression": shipped,
            "regression_choice": choice.to_dict() if choice is not None else None,
            "top_n": top_n,
            "drop_negative_generated": selector.drop_negative_generated,
            "test_size": test_size,
            "seed": seed,
            "split": "grouped by " + (ds.columns.get("group") or ("input" if ds.has_input else "id")),
            "n_boot": n_boot,
            "validation": validity.method,
            "fitted_on": "training split" if holdout else "every labelled row",
        },
        "intercept": float(selector.intercept_),
        "features": feats,
        **({"pairs": [{"features": [names[i] for i in t["features"]], "cuts": t["cuts"], "scores": t["scores"]}
                      for t in selector.pairs_]} if getattr(selector, "pairs_", None) else {}),
        "statistics": {
            "train": stats_train.to_dict(),
            "test": stats_test,
            "best_single_metric": best,
            "blackbox_reference": blackbox,
            "n_candidates": len(names),
            "n_usable_candidates": n_usable,
        },
        "dataset": {
            "source": Path(ds.source).name if ds.source != "<DataFrame>" else ds.source,
            "fingerprint": "sha256:" + lab.fingerprint(),
            "n_rows": len(ds),
            "n_labelled": n_lab,
            "n_excluded_missing_target": info.n_missing,
            "n_train": len(train_pos),
            "n_test": len(test_pos) if holdout else 0,
            "n_groups": int(len(np.unique(groups_all))),
        },
        "validity": validity.to_dict(),
        "warnings": warnings,
        # MetricBank metrics that could not run in this environment (e.g. model weights absent)
        "unavailable_metrics": unavailable,
        "fit_seconds": round(time.perf_counter() - started, 2),
    }
    evaluator = Evaluator(json_safe(artifact))

    sel_names = [names[j] for j in selector.selected_]

    def frame(pos, pred):
        f = pd.DataFrame({"id": lab.frame["id"].to_numpy()[pos], "label": y[pos], "score": pred})
        for nm in sel_names:
            f[nm] = Xa[pos, names.index(nm)]
        return f

    return FitResult(evaluator, frame(train_pos, pred_train), frame(val.test_pos, val.pred_test), candidates, notes)


def _validate_holdout(selector, Xa, y, groups, train_pos, test_pos, generated, cf, n_boot, seed, scope) -> _Validation:
    """The fitted evaluator on the held-out rows; the best single metric (chosen on train) and the
    black box (trained on train) on the same rows."""
    pred_test = selector.predict(Xa[test_pos])
    stats_test = agreement(pred_test, y[test_pos], n_boot=n_boot, seed=seed).to_dict()
    validity = holdout_validity(pred_test, y[test_pos], groups[test_pos], cf, seed=seed,
                                scope=scope or "selection and weighting on the training split")
    stats_test["p_value"] = validity.p_value if validity.p_value is not None else stats_test["p_value"]
    if validity.ci[0] is not None:  # one CI per figure: the verdict's (a cluster bootstrap of whole groups)
        stats_test["ci_low"], stats_test["ci_high"] = validity.ci
    stats_test["method"] = "holdout"
    best = None
    allowed = [not g for g in generated]
    b = _best_single(Xa[train_pos], y[train_pos], allowed)
    if b is not None:
        j, sign = b
        best = {"index": j, "sign": sign, "tau_train": abs(_feature_tau(Xa[train_pos, j], y[train_pos])),
                "test": agreement(sign * Xa[test_pos, j], y[test_pos], n_boot=n_boot, seed=seed).to_dict(),
                "vs_evaluator": paired_difference([pred_test], [sign * Xa[test_pos, j]], y[test_pos], groups[test_pos],
                                                  n_boot, seed)}
    blackbox = None
    try:
        ref = blackbox_reference(Xa[train_pos], y[train_pos], Xa[test_pos], seed=seed)
    except Exception as exc:  # the reference must never break a fit
        log.warning("black-box reference failed: %s: %s", type(exc).__name__, exc)
        ref = None
    if ref is not None:
        blackbox = {"model": ref[1], "test": agreement(ref[0], y[test_pos], n_boot=n_boot, seed=seed).to_dict()}
    return _Validation(test_pos, pred_test, stats_test, validity, best, blackbox)


def _validate_crossfit(fold, Xa, y, groups, generated, cf, n_boot, seed, scope) -> _Validation:
    """Every labelled row gets out-of-fold predictions from the fold procedure; the best single
    metric (chosen in each fold) and the black box (first fold assignment, to bound its cost) are
    cross-fitted on the same folds, so all three figures are paired."""
    plan = fold_plan(groups, cf, seed)
    validity, oof = crossfit_validity(lambda tr, te, yy: fold(Xa, tr, te, yy), y, groups, plan, cf, seed=seed,
                                      scope=scope or "selection and weighting ran inside each fold")
    stats_test = {"n": validity.n_labels, "tau": validity.tau, "ci_low": validity.ci[0], "ci_high": validity.ci[1],
                  "p_value": validity.p_value, "method": "cross-fit"}
    everyone = np.arange(len(y))
    best = None
    allowed = [not g for g in generated]
    b = _best_single(Xa, y, allowed)
    if b is not None:
        single = _single_fold(allowed)
        oof_b = crossfit(lambda tr, te, yy: single(Xa, tr, te, yy), y, plan)
        best = {"index": b[0], "sign": b[1], "tau_train": abs(_feature_tau(Xa[:, b[0]], y)),
                "test": _summary(oof_b, y, groups, n_boot, seed),
                "vs_evaluator": paired_difference(list(oof), list(oof_b), y, groups, n_boot, seed),
                "note": "the metric named is the one chosen on every row; the figure is cross-fitted "
                        "(the best metric chosen inside each fold)"}
    blackbox = None
    try:
        preds, model = np.full(len(y), np.nan), None
        for k in np.unique(plan[0]):
            te, tr = np.flatnonzero(plan[0] == k), np.flatnonzero(plan[0] != k)
            ref = blackbox_reference(Xa[tr], y[tr], Xa[te], seed=seed)
            if ref is None:
                break
            preds[te], model = ref
        if model is not None:
            blackbox = {"model": model, "test": _summary(preds[None, :], y, groups, n_boot, seed)}
    except Exception as exc:  # the reference must never break a fit
        log.warning("black-box reference failed: %s: %s", type(exc).__name__, exc)
    oof_mean = np.nanmean(oof, axis=0)
    return _Validation(everyone, oof_mean, stats_test, validity, best, blackbox)

