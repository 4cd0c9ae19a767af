"""Validity from every labelled row: is the evaluator's agreement with human judgment real?

Under ~100 labels a single train/test split spends a third of the labels on a test set that is
too small to tell signal from luck (a seed-0 split can show τ 0.4 where the mean over 50 splits
is 0.13), and the shipped evaluator loses the labels the test set took.  This module measures
agreement the other way round:

- **Repeated grouped K-fold cross-fitting.**  The rows are cut into K folds of whole groups
  (inputs), ``repeats`` times with different seeds.  For each fold the *whole* fitting procedure
  (the caller's ``fit_predict``: selection, screening, weighting) runs on the other folds and
  predicts the fold, so every labelled row gets an out-of-fold prediction from a model that never
  saw its label.  The figure is Kendall's τ-b of those predictions with the labels, averaged over
  the repeats.
- **A confidence interval** from a cluster bootstrap: whole groups are resampled, and every
  repeat's out-of-fold predictions are scored on the same resamples.
- **A permutation p-value under a null that keeps input groups together.**  Labels move between
  groups of the same size as whole blocks (rows of one input stay together, so the dependence
  inside a group is kept), and the whole cross-fit is rerun on the permuted labels.  One-sided
  (agreement above chance), with sequential stopping (Besag & Clifford, 1991): a fit far from
  significance stops after ``stop_after`` permutations at least as extreme, and one far above
  every permutation stops after 39 (:func:`permutation_p`).
- **Validated or not.**  ``validated`` is true only when p <= ``alpha``, τ > 0, the CI's lower
  bound is above 0 (the permutation statistic is computed on ``permutation_repeats`` fold
  assignments, the reported τ on all of them: both must agree), and there are at least
  :data:`MIN_GROUPS` groups; ``reason`` says why in one line and what would help.

Everything here works on arrays and a callable, so the LLM-free fit, the fit with judges (whose
fold procedure also re-screens the judges) and the continuous loop share it.

Example::

    plan = fold_plan(groups, CrossFit())
    v, oof = crossfit_validity(lambda tr, te, y: model.fit(X[tr], y[tr]).predict(X[te]), y, groups, plan)
    v.validated, v.tau, v.ci, v.p_value, v.reason
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from ..metricbank.errors import UserError
from .stats import bootstrap_taus, kendall_tau

__all__ = ["CrossFit", "Validity", "fold_plan", "crossfit", "crossfit_validity", "holdout_validity",
           "group_permutation", "movable_groups", "nested_choice", "inner_taus", "choose", "crossfit_agreement", "data_label", "artifact_validity", "legacy_validity", "split_line", "ALPHA", "MIN_GROUPS", "unvalidated_hint"]

ALPHA = 0.05
#: fewer distinct groups than this cannot validate anything (a fold would hold one or two inputs)
MIN_GROUPS = 5

FitPredict = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class CrossFit:
    """How validity is estimated: ``folds`` grouped folds, ``repeats`` fold assignments, up to
    ``permutations`` label permutations (each reruns the cross-fit on ``permutation_repeats`` of
    the fold assignments), stopping early after ``stop_after`` permutations at least as extreme as
    the observed figure, or after 39 with none when the figure is far above them
    (:func:`permutation_p`); ``alpha`` is the significance level of "validated"."""

    folds: int = 5
    repeats: int = 5
    permutations: int = 99
    permutation_repeats: int = 1
    stop_after: int = 10
    alpha: float = ALPHA
    n_boot: int = 1000
    max_seconds: float | None = 120.0  # the permutation test stops here (a time limit does not bias p)

    def __post_init__(self):
        if self.folds < 2:
            raise UserError(f"folds must be at least 2, got {self.folds}")
        if self.repeats < 1:
            raise UserError(f"repeats must be at least 1, got {self.repeats}")
        if self.permutations < 0:
            raise UserError(f"permutations must be >= 0, got {self.permutations}")
        if not 0 < self.alpha < 1:
            raise UserError(f"alpha must be between 0 and 1, got {self.alpha}")


@dataclass
class Validity:
    """The verdict recorded in ``evaluator.json`` under ``validity`` (see the module docstring)."""

    validated: bool
    method: str  # "cross-fit" | "holdout"
    tau: float | None
    ci: list
    p_value: float | None
    n_labels: int
    n_groups: int
    reason: str
    folds: int | None = None
    repeats: int | None = None
    permutations: int = 0
    alpha: float = ALPHA
    taus: list = field(default_factory=list)  # per repeat (cross-fit)
    null: dict | None = None  # the permutation taus: mean and 95th percentile
    labels_needed: int | None = None  # about how many labels would make this τ significant
    scope: str = ""  # what ran inside the folds, and what did not

    def to_dict(self) -> dict:
        out = asdict(self)
        return {k: _clean(v) for k, v in out.items()}

    def line(self) -> str:
        """One line for the CLI and logs."""
        return ("validated: " if self.validated else "NOT validated: ") + self.reason


def _clean(v):
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, list):
        return [_clean(x) for x in v]
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    return v


# ------------------------------------------------------------------------------ folds


def _group_index(groups) -> tuple[np.ndarray, int]:
    _, inv = np.unique(np.asarray(groups).astype(str), return_inverse=True)
    return inv, int(inv.max()) + 1 if len(inv) else 0


def grouped_folds(groups, n_splits: int, seed: int) -> np.ndarray:
    """Fold id per row: whole groups, shuffled (seeded), each placed (largest first) in the fold
    with the fewest rows so far, so folds are balanced in rows."""
    inv, g = _group_index(groups)
    rng = np.random.default_rng(seed)
    sizes = np.bincount(inv, minlength=g)
    order = rng.permutation(g)
    order = order[np.argsort(-sizes[order], kind="stable")]
    load = np.zeros(n_splits)
    fold_of = np.empty(g, dtype=int)
    for k in order:
        f = int(np.argmin(load + rng.random(n_splits) * 1e-9))
        fold_of[k] = f
        load[f] += sizes[k]
    return fold_of[inv]


def fold_plan(groups, cf: CrossFit, seed: int = 0) -> list[np.ndarray]:
    """``cf.repeats`` fold assignments (fold id per row); K is lowered to the number of groups."""
    _, g = _group_index(groups)
    k = max(2, min(cf.folds, g))
    return [grouped_folds(groups, k, seed * 7919 + r) for r in range(cf.repeats)]


def crossfit(fit_predict: FitPredict, y, plan: list[np.ndarray]) -> np.ndarray:
    """Out-of-fold predictions ``(len(plan), n)``: for each assignment and fold, ``fit_predict(train
    positions, test positions, y)`` fitted without the fold.  A fold whose procedure finds nothing
    to fit (ValueError) predicts a constant there: no information, never a made-up ranking."""
    y = np.asarray(y, dtype=float)
    out = np.full((len(plan), len(y)), np.nan)
    for r, fid in enumerate(plan):
        for k in np.unique(fid):
            te = np.flatnonzero(fid == k)
            tr = np.flatnonzero(fid != k)
            try:
                out[r, te] = np.asarray(fit_predict(tr, te, y), dtype=float)
            except ValueError:
                out[r, te] = float(np.mean(y[tr]))
    return out


def crossfit_agreement(oof: np.ndarray, y, groups, n_boot: int, seed: int = 0) -> tuple[float, list[float], list]:
    """(mean τ over the fold assignments, τ per assignment, 95 % CI) of out-of-fold predictions
    ``(repeats, n)``: the CI from a cluster bootstrap (whole groups), every assignment scored on
    the same resamples and averaged."""
    y = np.asarray(y, dtype=float)
    tau, taus = _mean_tau(oof, y)
    if not n_boot:
        return tau, taus, [None, None]
    boots = bootstrap_taus(list(oof), y, n_boot, seed, groups=np.asarray(groups).astype(str))
    return tau, taus, _ci(np.nanmean(np.where(np.isfinite(boots), boots, 0.0), axis=1))


def _mean_tau(oof: np.ndarray, y: np.ndarray) -> tuple[float, list[float]]:
    taus = [kendall_tau(p, y)[0] for p in oof]
    taus = [0.0 if not math.isfinite(t) else float(t) for t in taus]  # a constant prediction ranks nothing
    return float(np.mean(taus)) if taus else float("nan"), taus


# ------------------------------------------------------------------------------ the null


def group_permutation(groups, rng: np.random.Generator) -> np.ndarray:
    """Source positions ``src`` so that ``y[src]`` moves labels between groups of equal size as
    whole blocks (shuffled within the block): the null keeps every group's labels together."""
    inv, g = _group_index(groups)
    members = [np.flatnonzero(inv == k) for k in range(g)]
    src = np.arange(len(inv))
    by_size: dict[int, list[int]] = {}
    for k, m in enumerate(members):
        by_size.setdefault(len(m), []).append(k)
    for ks in by_size.values():
        perm = rng.permutation(len(ks))
        for a, b in zip(ks, perm, strict=True):
            src[members[a]] = rng.permutation(members[ks[b]])
    return src


def movable_groups(groups) -> int:
    """How many groups share their size with at least one other group: the ones a group-block
    permutation can move (a group of a unique size keeps its labels under the null)."""
    inv, g = _group_index(groups)
    per_size = np.bincount(np.bincount(inv, minlength=g))
    return int(sum(c for c in per_size[1:] if c > 1))


def permutation_p(statistic: Callable[[np.ndarray], float], observed: float, y, groups, *, permutations: int,
                  stop_after: int, seed: int, accept_after: int = 39, accept_z: float = 4.0,
                  max_seconds: float | None = None) -> tuple[float, list[float]]:
    """One-sided permutation p-value of ``observed`` (larger = more agreement).

    ``statistic(y_perm)`` is recomputed for each group-block permutation.  Two early stops save
    refits: after ``stop_after`` values at least as large the test stops with p = hits /
    permutations done (Besag & Clifford's sequential p-value: far from significance); after
    ``accept_after`` permutations with none as large, when ``observed`` is also more than
    ``accept_z`` standard deviations above the null's mean, it stops with p = 1 / (accept_after
    + 1) (clearly significant; under the null that extra stop happens with probability below
    ``accept_after`` times a normal tail of ``accept_z`` SDs, ~0.1 % at the defaults).
    Otherwise p = (hits + 1) / (permutations done + 1); ``max_seconds`` ends the loop early (a
    stop that does not look at the null values keeps the p-value valid, only coarser)."""
    import time

    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    y = np.asarray(y, dtype=float)
    rng = np.random.default_rng(seed + 104729)
    null, hits = [], 0
    if not math.isfinite(observed):
        return float("nan"), null
    for b in range(permutations):
        t = statistic(y[group_permutation(groups, rng)])
        t = 0.0 if not math.isfinite(t) else t
        null.append(t)
        if t >= observed - 1e-12:
            hits += 1
            if hits >= stop_after:
                return hits / (b + 1), null
        if b + 1 == accept_after and hits == 0 and accept_after < permutations:
            sd = float(np.std(null, ddof=1))
            if sd > 0 and (observed - float(np.mean(null))) / sd > accept_z:
                return 1.0 / (accept_after + 1), null
        if deadline is not None and time.monotonic() > deadline:
            break
    return (hits + 1) / (len(null) + 1), null


# ------------------------------------------------------------------------------ verdicts


def _ci(boots: np.ndarray) -> list:
    ok = boots[np.isfinite(boots)]
    if len(ok) < max(1, len(boots) // 2):
        return [None, None]
    lo, hi = np.percentile(ok, [2.5, 97.5])
    return [float(lo), float(hi)]


def labels_needed(tau: float, ci: list, n: int, alpha: float = ALPHA) -> int | None:
    """About how many labels would make a τ like this one significant: the interval narrows as
    1/√n, so n · (z_alpha · se / τ)² with se from the current interval.  None when τ <= 0 (more
    labels of the same kind would not show agreement that is not there) or no interval."""
    from scipy.stats import norm

    if tau is None or not math.isfinite(tau) or tau <= 0 or ci[0] is None or ci[1] is None:
        return None
    se = (ci[1] - ci[0]) / (2 * 1.96)
    if se <= 0:
        return None
    return int(math.ceil(n * (norm.ppf(1 - alpha) * se / tau) ** 2))


def legacy_validity(test: dict) -> dict:
    """The verdict of an evaluator fitted before validity was recorded, read from its held-out
    statistics (``statistics.test``): validated when that τ was positive with p <= 0.05."""
    tau, p, n = test.get("tau"), test.get("p_value"), test.get("n")
    ok = tau is not None and tau > 0 and p is not None and p <= ALPHA
    fig = "undefined τ" if tau is None else f"held-out τ {tau:.3f}" + (f" (p={p:.3g}, n={n})" if p is not None else "")
    return {"validated": bool(ok), "method": "holdout (recorded before validity)", "tau": tau,
            "ci": [test.get("ci_low"), test.get("ci_high")], "p_value": p, "n_labels": n, "n_groups": None,
            "reason": fig + (" is significant" if ok else " is not significant (p > 0.05)") + " on one held-out split"}


def artifact_validity(artifact: dict) -> dict:
    """The verdict an ``evaluator.json`` records under ``validity``, or :func:`legacy_validity`."""
    v = artifact.get("validity")
    if isinstance(v, dict) and "validated" in v:
        return v
    return legacy_validity((artifact.get("statistics") or {}).get("test") or {})


def split_line(artifact: dict) -> str:
    """How an evaluator used its rows: fitted on all of them with cross-fitted validity, or a
    held-out split (for the report's header)."""
    d, m, v = artifact["dataset"], artifact["method"], artifact_validity(artifact)
    if v.get("method") == "cross-fit":
        return (f"the evaluator is fitted on every labelled row; validity cross-fitted over {v.get('folds')} grouped folds × "
                f"{v.get('repeats')} repeats ({d.get('n_groups', v.get('n_groups'))} groups, {m['split']}), seed {m['seed']}")
    return f"{d['n_train']} train / {d['n_test']} test, {m['split']}, seed {m['seed']}"


def data_label(v: dict) -> str:
    """The data a verdict (``Validity.to_dict()``) was computed on, as the dashboard labels figures."""
    if v.get("method") == "cross-fit":
        return (f"cross-fitted on the fit's feedback (n={v.get('n_labels')}, {v.get('folds')} grouped folds × "
                f"{v.get('repeats')} repeats; every row predicted by a fit without it)")
    return f"fit-time test split (n={v.get('n_labels')})"


def unvalidated_hint(v: Validity) -> str:
    """What would help an evaluator that is not validated."""
    if v.n_groups < MIN_GROUPS:
        return f"label outputs of at least {MIN_GROUPS} different inputs"
    stronger = "judges from a stronger model (--llm MODEL, or --judge-llm MODEL on a fit with judges)"
    if v.labels_needed and v.labels_needed > v.n_labels:
        return (f"about {v.labels_needed} labels (≈{v.labels_needed - v.n_labels} more) would make a τ of {v.tau:.2f} "
                f"significant; {stronger} may also help")
    return (f"more labels of this kind are unlikely to help on their own: try {stronger}, or check that the label "
            "measures what the task grades")


def _verdict(method: str, tau: float, ci: list, p: float | None, n: int, n_groups: int, alpha: float, movable: int,
             **extra) -> Validity:
    v = Validity(False, method, tau if math.isfinite(tau) else None, ci, p, n, n_groups, "", alpha=alpha, **extra)
    v.labels_needed = labels_needed(tau, ci, n, alpha)
    where = (f"{n} labels, {n_groups} groups, " + (f"{v.folds} folds × {v.repeats} repeats" if method == "cross-fit"
                                                  else "one held-out split"))
    fig = "undefined τ" if v.tau is None else f"τ {v.tau:.3f}" + (
        f" [95% CI {ci[0]:.3f}, {ci[1]:.3f}]" if ci[0] is not None and ci[1] is not None else "")
    what = ("cross-fitted" if method == "cross-fit" else "held-out") + " " + fig
    pstr = "" if p is None or not math.isfinite(p) else f"permutation p={p:.3g} over {v.permutations} permutations"
    if n_groups < MIN_GROUPS:
        v.reason = f"{what}; only {n_groups} distinct inputs (< {MIN_GROUPS}) ({where}); {unvalidated_hint(v)}"
    elif v.tau is None or v.tau <= 0:
        v.reason = f"{what}: no agreement above 0 ({where}); {unvalidated_hint(v)}"
    elif not pstr and extra.get("permutations", 0) == 0 and movable < MIN_GROUPS:
        v.reason = (f"{what}: cannot be tested against chance: fewer than {MIN_GROUPS} inputs share their number of "
                    f"labelled outputs with another input, so labels cannot be permuted between inputs ({where})")
    elif not pstr:
        v.reason = f"{what}: not tested against chance (--permutations 0), so not validated ({where})"
    elif p > alpha:
        v.reason = f"{what} is not above chance ({pstr}, > {alpha:g}; {where}); {unvalidated_hint(v)}"
    elif ci[0] is not None and ci[0] <= 0:
        v.reason = (f"{what}: its 95% CI includes 0 although the {pstr} is <= {alpha:g} (both must agree; {where}); "
                    f"{unvalidated_hint(v)}")
    else:
        v.validated = True
        v.reason = f"{what} is above chance ({pstr}, <= {alpha:g}; {where})"
    return v


def crossfit_validity(fit_predict: FitPredict, y, groups, plan: list[np.ndarray], cf: CrossFit = CrossFit(), *,
                      seed: int = 0, scope: str = "") -> tuple[Validity, np.ndarray]:
    """(verdict, out-of-fold predictions ``(repeats, n)``) for the procedure ``fit_predict`` on the
    fold ``plan`` (module docstring).  The permutation statistic is the mean τ over the first
    ``cf.permutation_repeats`` assignments, compared with the same statistic on the real labels."""
    y = np.asarray(y, dtype=float)
    groups = np.asarray(groups).astype(str)
    oof = crossfit(fit_predict, y, plan)
    tau, taus, ci = crossfit_agreement(oof, y, groups, cf.n_boot, seed)
    _, n_groups = _group_index(groups)
    rp = max(1, min(cf.permutation_repeats, len(plan)))
    p, null = None, []
    movable = movable_groups(groups)
    if cf.permutations and n_groups >= MIN_GROUPS and movable >= MIN_GROUPS and math.isfinite(tau) and tau > 0:
        observed = float(np.mean(taus[:rp]))
        p, null = permutation_p(lambda yp: _mean_tau(crossfit(fit_predict, yp, plan[:rp]), yp)[0], observed, y, groups,
                                permutations=cf.permutations, stop_after=cf.stop_after, seed=seed,
                                max_seconds=cf.max_seconds)
    elif cf.permutations and math.isfinite(tau) and tau <= 0:
        p = 1.0  # no agreement above chance to test: a one-sided p of 1 needs no permutation
    v = _verdict("cross-fit", tau, ci, p, len(y), n_groups, cf.alpha, movable, folds=int(len(np.unique(plan[0]))),
                 repeats=len(plan), permutations=len(null), taus=taus, scope=scope,
                 null={"mean": float(np.mean(null)), "p95": float(np.percentile(null, 95)), "n": len(null)} if null else None)
    return v, oof


#: grouped folds of the inner cross-fit a nested choice is made with (one assignment: it runs in
#: every outer fold of every permutation)
INNER_FOLDS = 3


def inner_taus(procedures: list[FitPredict], tr: np.ndarray, y, groups, *, folds: int = INNER_FOLDS,
               seed: int = 0) -> list[float]:
    """Cross-fitted τ of each procedure on the rows ``tr`` alone (grouped ``folds``-fold, one
    assignment, the same folds for every procedure); rows outside ``tr`` are never seen."""
    y = np.asarray(y, dtype=float)
    groups = np.asarray(groups).astype(str)
    plan = [grouped_folds(groups[tr], max(2, min(folds, _group_index(groups[tr])[1])), seed)]
    # the cross-fit of the rows tr alone: local positions mapped back to the caller's rows
    return [_mean_tau(crossfit(lambda a, b, _yy, f=f: f(tr[a], tr[b], y), y[tr], plan), y[tr])[0] for f in procedures]


def choose(taus: list[float]) -> int:
    """The procedure a nested choice takes: the highest τ, the first (the simplest, by the
    caller's order) unless another is strictly higher."""
    return int(max(range(len(taus)), key=lambda i: (taus[i], -i)))


def nested_choice(procedures: list[FitPredict], groups, *, folds: int = INNER_FOLDS, seed: int = 0,
                  record: list | None = None) -> FitPredict:
    """One fold procedure out of several: on the fold's training rows only, each procedure is
    cross-fitted (:func:`inner_taus`), the best (:func:`choose`) is fitted on all of them and
    predicts the fold.  Cross-fitting this procedure measures the whole fit, the choice included:
    a fit that returns "the evaluator with judges when it beats the LLM-free one" reports the τ,
    CI and p of that rule, never the better of two figures on the rows they were chosen on.
    ``record`` (a list) receives the index chosen in each call, in call order."""
    groups = np.asarray(groups).astype(str)

    def fit_predict(tr, te, y):
        k = 0 if len(procedures) == 1 else choose(inner_taus(procedures, tr, y, groups, folds=folds, seed=seed))
        if record is not None:
            record.append(k)
        return procedures[k](tr, te, y)

    return fit_predict


def holdout_validity(pred, y, groups, cf: CrossFit = CrossFit(), *, seed: int = 0, scope: str = "") -> Validity:
    """The verdict of a fixed held-out split: τ of ``pred`` (made without these labels) with a
    cluster-bootstrap CI and a group-block permutation p-value (the predictions stay fixed, so
    no refit is needed)."""
    pred, y = np.asarray(pred, dtype=float), np.asarray(y, dtype=float)
    ok = np.isfinite(pred) & np.isfinite(y)
    pred, y, groups = pred[ok], y[ok], np.asarray(groups).astype(str)[ok]
    tau = kendall_tau(pred, y)[0]
    boots = bootstrap_taus([pred], y, cf.n_boot, seed, groups=groups)[:, 0] if cf.n_boot else np.array([])
    ci = _ci(boots) if len(boots) else [None, None]
    _, n_groups = _group_index(groups)
    p, null = None, []
    movable = movable_groups(groups)
    if math.isfinite(tau) and tau > 0 and movable >= MIN_GROUPS and cf.permutations:
        p, null = permutation_p(lambda yp: kendall_tau(pred, yp)[0], tau, y, groups, permutations=cf.permutations,
                                stop_after=cf.stop_after, seed=seed)
    elif math.isfinite(tau) and tau <= 0:
        p = 1.0
    return _verdict("holdout", tau, ci, p, len(y), n_groups, cf.alpha, movable, permutations=len(null), scope=scope,
                    null={"mean": float(np.mean(null)), "p95": float(np.percentile(null, 95)), "n": len(null)} if null else None)
