"""From a scored candidate matrix to a validated evaluator (the regression half of AutoMetrics).

:func:`fit_on_features` splits the labelled rows train/test grouped by input, runs two-stage PLS
selection on train, measures held-out agreement (Kendall tau-b with a bootstrap CI, next to the
best single metric chosen on train), and writes the evaluator artifact with its statistics and
warnings.  :func:`autometrics.evaluators.fit.fit_evaluator` is the public entry point that
scores the candidates and calls it.
"""

from __future__ import annotations

import datetime as _dt
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from autometrics.collectors.files import json_safe, package_version
from autometrics.evaluators.blackbox import blackbox_reference
from autometrics.evaluators.data import DataError, Dataset
from autometrics.evaluators.evaluator import ARTIFACT_FORMAT, ARTIFACT_VERSION, Evaluator
from autometrics.evaluators.selection import SELECTORS, choose_regression, make_selector
from autometrics.evaluators.stats import agreement, kendall_tau

__all__ = ["FitResult", "fit_on_features", "candidate_fates", "MIN_LABELS_FOR_CONFIDENCE", "DEFAULT_REGRESSION", "REGRESSIONS"]

#: sign-constrained NNLS with near-duplicate collapsing: measured best on the 16 shared targets
#: (tests/benchmarks/regression_compare.py: mean held-out tau 0.332 vs 0.290 for the paper's PLS)
DEFAULT_REGRESSION = "nnls"
REGRESSIONS = (*SELECTORS, "auto")
AUTO_CANDIDATES = ("nnls", "pls", "enet", "single")

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


def _feature_tau(values: np.ndarray, y: np.ndarray) -> float:
    return kendall_tau(values, y)[0]


def candidate_fates(selector, names: list[str], generated) -> list[str]:
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


def fit_on_features(
    ds: Dataset,
    target: str,
    features: tuple[pd.DataFrame, dict, list[str]],
    *,
    task: str | None = None,
    test_size: float = 0.3,
    seed: int = 0,
    top_n: int = 5,
    n_boot: int = 1000,
    regression: str = DEFAULT_REGRESSION,
    unavailable: dict[str, str] | None = None,
    started: float | None = None,
) -> FitResult:
    """Split, select and regress, validate: the evaluator from a scored candidate matrix.

    ``features`` is ``(X, meta, notes)`` from :func:`~autometrics.evaluators.evaluator.score_metrics`
    over the labelled rows of ``ds`` (same order).  Both fit paths end here: the LLM-free one
    (MetricBank only) and the one with generated judges.
    """
    started = time.perf_counter() if started is None else started
    if target not in ds.targets:
        raise DataError(f"target {target!r} was not loaded; loaded targets: {ds.targets}")
    lab = ds.labelled(target)
    warnings = list(ds.warnings)
    info = ds.labels[target]
    unavailable = unavailable or {}
    X, meta, notes = features
    if len(X) != len(lab):
        raise ValueError(f"features have {len(X)} rows, labelled data has {len(lab)}")
    if X.shape[1] == 0:
        raise DataError("no metric could score this data: " + "; ".join(notes))
    if regression not in REGRESSIONS:
        raise ValueError(f"unknown regression {regression!r}; choose one of {', '.join(REGRESSIONS)}")

    y = lab.y(target)
    train_pos, test_pos = lab.split_positions(test_size, seed)
    names = list(X.columns)
    Xa = X.to_numpy(dtype=float)
    generated = [meta[c]["generated"] for c in names]
    choice = None
    if regression == "auto":
        # chosen on the training rows only (inner grouped CV); the test split is never seen
        groups = lab.frame["group"].astype(str).to_numpy()[train_pos]
        choice = choose_regression(Xa[train_pos], y[train_pos], groups, generated, candidates=AUTO_CANDIDATES, top_n=top_n)
        regression = choice.name
    selector = make_selector(regression, top_n=top_n).fit(Xa[train_pos], y[train_pos], generated=generated)
    represents = getattr(selector, "represents_", {}) or {}

    pred_train = selector.predict(Xa[train_pos])
    pred_test = selector.predict(Xa[test_pos])
    stats_train = agreement(pred_train, y[train_pos], n_boot=n_boot, seed=seed)
    stats_test = agreement(pred_test, y[test_pos], n_boot=n_boot, seed=seed)

    # per-candidate agreement, and the best single existing metric chosen on train (its sign too)
    fates = candidate_fates(selector, names, generated)
    rows = []
    for j, name in enumerate(names):
        t_tr = _feature_tau(Xa[train_pos, j], y[train_pos])
        t_te = _feature_tau(Xa[test_pos, j], y[test_pos])
        rows.append(
            {
                "feature": name,
                "signature": meta[name]["signature"],
                "generated": meta[name]["generated"],
                "higher_is_better": meta[name]["higher_is_better"],
                "tau_train": t_tr,
                "tau_test": t_te,
                "stage1_weight": selector.stage1_coef_[j],
                "usable": bool(selector.usable_[j]),
                "selected": bool(j in set(selector.selected_.tolist())),
                "fate": fates[j],
                "missing": int(np.isnan(Xa[:, j]).sum()),
                "seconds": meta[name]["seconds"],
            }
        )
    candidates = pd.DataFrame(rows)
    best = None
    usable_c = candidates[candidates["usable"] & candidates["tau_train"].notna() & ~candidates["generated"]]
    if len(usable_c):
        b = usable_c.loc[usable_c["tau_train"].abs().idxmax()]
        sign = 1.0 if b["tau_train"] >= 0 else -1.0
        j = names.index(b["feature"])
        best_test = agreement(sign * Xa[test_pos, j], y[test_pos], n_boot=n_boot, seed=seed)
        best = {"feature": b["feature"], "sign": sign, "tau_train": abs(float(b["tau_train"])), "test": best_test.to_dict()}

    # the black-box reference on the same split (what interpretability costs), when xgboost is installed
    blackbox = None
    try:
        ref = blackbox_reference(Xa[train_pos], y[train_pos], Xa[test_pos], seed=seed)
    except Exception as exc:  # the reference must never break a fit
        log.warning("black-box reference failed: %s: %s", type(exc).__name__, exc)
        ref = None
    if ref is not None:
        blackbox = {"model": ref[1], "test": agreement(ref[0], y[test_pos], n_boot=n_boot, seed=seed).to_dict()}

    n_lab = len(lab)
    if not (stats_test.p_value <= 0.05):
        warnings.append(
            f"held-out agreement is not significant (p={stats_test.p_value:.3g} > 0.05, n={stats_test.n}): "
            "treat the evaluator as unvalidated and collect more feedback."
        )
    if n_lab < MIN_LABELS_FOR_CONFIDENCE:
        warnings.append(
            f"only {n_lab} labelled examples (< {MIN_LABELS_FOR_CONFIDENCE}): held-out estimates are noisy; "
            "see the confidence interval."
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

    artifact = {
        "format": ARTIFACT_FORMAT,
        "format_version": ARTIFACT_VERSION,
        "package_version": package_version(),
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "target": target,
        "task": task,
        "label": info.to_dict(),
        "columns": {k: v for k, v in ds.columns.items() if k != "group"},
        "method": {
            "name": f"autometrics-{regression}",
            "regression": regression,
            "regression_choice": choice.to_dict() if choice is not None else None,
            "top_n": top_n,
            "drop_negative_generated": selector.drop_negative_generated,
            "test_size": test_size,
            "seed": seed,
            "split": "grouped by " + (ds.columns.get("group") or ("input" if ds.has_input else "id")),
            "n_boot": n_boot,
        },
        "intercept": float(selector.intercept_),
        "features": feats,
        "statistics": {
            "train": stats_train.to_dict(),
            "test": stats_test.to_dict(),
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
            "n_test": len(test_pos),
        },
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

    return FitResult(evaluator, frame(train_pos, pred_train), frame(test_pos, pred_test), candidates, notes)

