"""Metric selection and weighting beyond one-component PLS.

One-component PLS (:class:`~autometrics.evaluators.regression.PLSMetricSelector`) weights each
standardised metric by its covariance with the labels, i.e. by its Pearson r: the top-n are the
n most-correlated metrics, which on MetricBank are near-duplicates (ROUGE-1/ROUGE-L/METEOR...),
and the weights ignore that they carry the same signal.  This module holds estimators with the
same interface that fit the weights jointly:

- :class:`NNLSMetricSelector` — sign-constrained least squares.  Every metric is oriented by the
  sign of its own train Kendall tau with the labels, near-duplicates are collapsed to one
  representative, non-negative least squares (``scipy.optimize.nnls``) fits the oriented
  columns, the top-n weights are kept and refitted.  The final weight of a metric therefore
  always agrees in sign with its train tau (no suppressor effects that flip a metric's meaning),
  and an LLM judge never enters with a negative weight.
- :class:`ElasticNetMetricSelector` — elastic net (penalty by 5-fold CV), top-n by |weight|,
  refitted with the chosen penalty.  Unconstrained signs except for judges.
- :func:`choose_regression` — picks one of these (or PLS, or the best single metric) by grouped
  cross-validation inside the training rows only.

Measured on the 16 shared targets (tests/benchmarks/regression_compare.py, 25 grouped splits,
CPU MetricBank): mean held-out tau 0.290 for PLS, 0.332 for NNLS, which is better than PLS
beyond noise on 13 targets and worse on none.  NNLS is the recommended default.

All estimators expose the attributes the evaluator artifact needs (``impute_``, ``mean_``,
``scale_``, ``selected_``, ``coef_``, ``intercept_``): prediction is
``intercept_ + z(X)[:, selected_] @ coef_`` with ``z`` the train median-imputed, standardised
metric values.

Example::

    sel = NNLSMetricSelector(top_n=5).fit(X_train, y_train, generated=generated)
    sel.selected_, sel.coef_, sel.represents_, sel.predict(X_test)
    choice = choose_regression(X_train, y_train, groups_train, generated)
    choice.name, choice.tau, choice.note
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np

from ..metricbank.errors import UserError
from .regression import LinearSelector, prepare
from .stats import kendall_tau, kendall_taus

__all__ = [
    "NNLSMetricSelector",
    "PreparedMetrics",
    "ElasticNetMetricSelector",
    "SingleMetricSelector",
    "RegressionChoice",
    "choose_regression",
    "make_selector",
    "SELECTORS",
    "DEDUP_THRESHOLD",
    "SMALL_DATA_LABELS",
    "COMPLEXITY",
]

#: |Spearman rho| at or above which two metrics count as near-duplicates (measured on the 16
#: shared targets with tests/benchmarks/regression_compare.py; see its results JSON)
DEDUP_THRESHOLD = 0.9
#: nested F-test level at which a collapsed near-duplicate whose added value given the selected
#: metrics is measured joins the evaluator anyway (0 = never)
RESTORE_ALPHA = 0.01
#: below this many training labels, :func:`choose_regression` prefers the simpler procedure
SMALL_DATA_LABELS = 80
#: rank of free parameters per procedure (lower = fewer): a single signed metric; one PLS
#: component (weights fixed by the covariances, one fitted scale); top-n sign-constrained NNLS
#: weights; top-n unconstrained elastic-net weights plus two penalties
COMPLEXITY = {"single": 0, "pls": 1, "nnls": 2, "nnls_nodedup": 2, "enet": 3, "ebm": 4, "ebm_pairs": 5}


def train_taus(X, y, cols) -> np.ndarray:
    """Kendall tau-b of each raw metric column with y (NaN rows dropped), NaN where undefined or
    not in ``cols``: the same "train tau" the fit report shows per candidate."""
    out = np.full(X.shape[1], np.nan)
    cols = np.asarray(list(cols), dtype=int)
    if len(cols):
        out[cols] = kendall_taus(np.asarray(X, dtype=float)[:, cols], y)
    return out


def abs_spearman(Z: np.ndarray) -> np.ndarray:
    """|Spearman rho| between the columns of Z (average ranks; a constant column gives 0)."""
    from scipy.stats import rankdata

    R = rankdata(Z, axis=0)
    R = R - R.mean(axis=0)
    norm = np.sqrt((R**2).sum(axis=0))
    norm = np.where(norm > 0, norm, np.inf)
    C = (R.T @ R) / np.outer(norm, norm)
    return np.abs(np.clip(C, -1.0, 1.0))


def leader_clusters(order: list[int], rho: np.ndarray, threshold: float | None) -> dict[int, list[int]]:
    """Greedy near-duplicate grouping: walk ``order`` (best metric first); a metric whose |rho|
    with an existing representative is >= threshold joins the most similar one, else it becomes
    a representative.  Returns representative -> the metrics it stands for.  ``rho`` is indexed
    by position in ``order``; ``threshold`` None keeps every metric."""
    reps: dict[int, list[int]] = {}
    rep_pos: list[int] = []
    for k, j in enumerate(order):
        if threshold is not None and rep_pos:
            sims = rho[k, rep_pos]
            best = int(np.argmax(sims))
            if sims[best] >= threshold:
                reps[order[rep_pos[best]]].append(j)
                continue
        reps[j] = []
        rep_pos.append(k)
    return reps


class PreparedMetrics:
    """What NNLS selection computes from the metric matrix alone, before it sees a label: the
    imputation and standardisation (:func:`~.regression.prepare`), |Spearman ρ| between the
    metrics, and each metric's pairwise order signs, so that Kendall's τ with any label vector is
    one matrix-vector product (:meth:`taus`).  A cross-fitted permutation test refits on the same
    training rows once per permutation of the labels; preparing each fold's rows once makes
    those refits several times cheaper.  Pairwise signs are kept only while they fit in
    ``max_cells`` floats; beyond that :meth:`taus` falls back to :func:`train_taus`."""

    def __init__(self, X, generated=None, *, max_cells: int = 8_000_000):
        X = np.asarray(X, dtype=float)
        self.X = X
        self.generated = generated
        dummy = np.zeros(X.shape[0])
        _, _, self.generated_, self.impute, self.mean, self.scale, self.usable, self.Z = prepare(X, dummy, generated)
        self.rho = abs_spearman(self.Z)
        n, p = X.shape
        self.signs = None
        if n * n * p <= max_cells:
            ok = np.isfinite(X)
            self.ok = ok.astype(np.float32)
            filled = np.where(ok, X, 0.0)
            S = np.sign(filled[:, None, :] - filled[None, :, :]) * (self.ok[:, None, :] * self.ok[None, :, :])
            self.signs = S.reshape(n * n, p).astype(np.float32)  # rows: pairs (i, j); columns: metrics
            self.n_x = np.abs(self.signs).sum(axis=0)

    def taus(self, y) -> np.ndarray:
        """Kendall τ-b of each usable metric with ``y`` (NaN for the others), as :func:`train_taus`."""
        y = np.asarray(y, dtype=float)
        cols = np.flatnonzero(self.usable)
        if self.signs is None:
            return train_taus(self.X, y, cols)
        sy = np.sign(y[:, None] - y[None, :])
        num = sy.reshape(-1).astype(np.float32) @ self.signs
        ny = ((np.abs(sy).astype(np.float32) @ self.ok) * self.ok).sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            tau = np.where((self.n_x > 0) & (ny > 0) & (self.ok.sum(axis=0) >= 3), num / np.sqrt(self.n_x * ny), np.nan)
        out = np.full(self.X.shape[1], np.nan)
        out[cols] = tau[cols]
        return out.astype(float)


def prepare_checked(prepared: PreparedMetrics, y):
    """:func:`~.regression.prepare`'s result for a prepared matrix and these labels."""
    y = np.asarray(y, dtype=float)
    if y.shape != (prepared.X.shape[0],):
        raise UserError(f"y must have one label per row of the prepared metrics ({prepared.X.shape[0]}), got {y.shape}")
    if np.isnan(y).any():
        raise UserError("y contains NaN: drop unlabelled rows before fitting")
    return (prepared.X, y, prepared.generated_, prepared.impute, prepared.mean, prepared.scale, prepared.usable,
            prepared.Z)


def _nnls(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    from scipy.optimize import nnls

    if A.shape[1] == 0:
        return np.zeros(0)
    return nnls(A, b, maxiter=50 * max(1, A.shape[1]))[0]


class NNLSMetricSelector(LinearSelector):
    """Sign-constrained two-stage NNLS (module docstring).

    Orientation: ``s_j = sign(train tau_j)``.  A metric whose train tau is 0 or undefined has no
    rank relation to orient by and is skipped (it could only enter with an arbitrary sign).  A
    generated metric (LLM judge, written so that higher = better) is oriented +1 only: with
    ``drop_negative_generated`` a judge with negative train tau is dropped, otherwise judges are
    oriented like existing metrics.

    Dedup (``dedup_threshold``, None = off): candidates are visited by decreasing |tau| and
    grouped with :func:`leader_clusters` on their train |Spearman rho|.  Each group is
    represented by the member with the largest weight in an NNLS over all candidates (the
    best-|tau| member when none gets weight), only representatives enter the stage-1 NNLS, and
    ``represents_[j]`` lists the metrics the selected metric j stands for.  Measured on the 16
    shared targets (tests/benchmarks/regression_compare.py, 25 splits): mean tau +0.001 over no
    dedup, no target worse beyond noise; choosing the best-|tau| member instead lost up to 0.006
    (simpda: BLEU and iBLEU are near-duplicates, and least squares prefers iBLEU's variant).

    Attributes beyond PLS's: ``tau_`` (train tau per metric), ``orientation_`` (+1/-1, 0 =
    skipped), ``represents_`` (selected index -> represented indices), ``clusters_`` (every
    representative -> its members).
    """

    def __init__(self, *, top_n: int = 5, drop_negative_generated: bool = True,
                 dedup_threshold: float | None = DEDUP_THRESHOLD, restore_alpha: float = RESTORE_ALPHA):
        self.top_n = top_n
        self.drop_negative_generated = drop_negative_generated
        self.dedup_threshold = dedup_threshold
        self.restore_alpha = restore_alpha

    def fit(self, X, y, *, generated=None, prepared: PreparedMetrics | None = None, required=()) -> NNLSMetricSelector:
        """``prepared``: the label-free work on this same ``X`` done once (:class:`PreparedMetrics`),
        for callers that refit on the same rows with other labels (cross-fitted permutation tests).
        ``required``: columns that earned their place elsewhere (judges that passed screening on
        their added value): each enters the final least squares oriented by its own train τ (a
        judge that reliably disagrees is used reversed), is never merged into a near-duplicate
        group and does not count against ``top_n``; the final fit may still give it no weight."""
        if self.top_n < 1:
            raise UserError(f"top_n must be >= 1, got {self.top_n}")
        if prepared is None:
            X, y, generated, impute, mean, scale, usable, Z = prepare(X, y, generated)
            tau = train_taus(X, y, np.flatnonzero(usable))
        else:
            X, y, generated, impute, mean, scale, usable, Z = prepare_checked(prepared, y)
            tau = prepared.taus(y)
        p = X.shape[1]
        sign = np.where(np.isfinite(tau), np.sign(np.nan_to_num(tau)), 0.0)
        forced = np.zeros(p, dtype=bool)
        forced[list(required)] = True
        if self.drop_negative_generated:
            sign = np.where(generated & (sign < 0) & ~forced, 0.0, sign)
        cands = [int(j) for j in np.flatnonzero(usable & (sign != 0))]
        if not cands:
            raise UserError("no candidate metric has a defined, non-zero Kendall tau with the labels "
                             "(or only judges that disagree with them)")
        cands.sort(key=lambda j: (-abs(tau[j]), j))
        yc = y - y.mean()
        w_all = _nnls(Z[:, cands] * sign[cands], yc)
        pool = [j for j in cands if not forced[j]]  # what competes for the top_n places
        if self.dedup_threshold is not None and len(pool) > 1:
            rho = abs_spearman(Z[:, pool]) if prepared is None else prepared.rho[np.ix_(pool, pool)]
            groups = leader_clusters(pool, rho, self.dedup_threshold)
            # each group is represented by the member least squares leans on most (ties: best |tau|)
            weight = dict(zip(cands, w_all, strict=True))
            clusters = {}
            for lead, members in groups.items():
                group = [lead, *members]
                rep = max(group, key=lambda j: (weight[j], -group.index(j)))
                clusters[rep] = [j for j in group if j != rep]
            clusters |= {j: [] for j in cands if forced[j]}
            reps = sorted(clusters, key=cands.index)
            w1 = _nnls(Z[:, reps] * sign[reps], yc)
        else:
            clusters, reps, w1 = {j: [] for j in cands}, cands, w_all
        stage1 = np.full(p, np.nan)
        stage1[reps] = w1 * sign[reps]
        ranked = [j for j, w in sorted(zip(reps, w1, strict=True), key=lambda t: (-t[1], -abs(tau[t[0]])))
                  if w > 0 and not forced[j]]
        must = [j for j in reps if forced[j]]
        selected = must + ranked[: self.top_n] or reps[:1]  # nothing helps least squares: the best-tau metric alone
        w = _nnls(Z[:, selected] * sign[selected], yc)
        if (w > 0).any():
            keep = w > 0
            selected = [j for j, k in zip(selected, keep, strict=True) if k]
            w = w[keep]
        else:  # its tau is positive but its covariance is not: keep it with a token weight, its own sign
            selected, w = selected[:1], np.array([1e-6 * max(float(y.std()), 1e-12)])

        restored: list[int] = []
        if self.dedup_threshold is not None and self.restore_alpha:
            selected, w, restored = self._restore(Z, yc, sign, selected, w, clusters)
        self._store(p, impute, mean, scale, usable, stage1, selected, w * sign[selected], y.mean())
        self.restored_ = restored
        self.tau_ = tau
        self.orientation_ = sign
        self.clusters_ = clusters
        self.represents_ = {int(j): [m for m in clusters.get(j, []) if m not in restored] for j in selected}
        return self

    def _restore(self, Z, yc, sign, selected, w, clusters):
        """Give back a collapsed near-duplicate whose added value is measured: each metric folded
        into a selected representative is tried as one more column of the final least squares, and
        the one with the smallest nested F-test p-value (its drop in residual sum of squares given
        the selected metrics) joins when p < ``restore_alpha``; repeated until none does.  Two
        metrics that rank the rows alike can still differ where it matters (output length and the
        output/input length ratio), and least squares given the others measures that difference."""
        from scipy.stats import f as f_dist

        n = len(yc)
        restored: list[int] = []
        while True:
            k = len(selected)
            resid = yc - (Z[:, selected] * sign[selected]) @ w
            sse0 = float(resid @ resid)
            folded = [m for j in selected for m in clusters.get(j, []) if sign[m] != 0 and m not in restored]
            if not folded or n - k - 2 < 1 or sse0 <= 0:
                return selected, w, restored
            best = None
            for m in folded:
                cols = [*selected, m]
                wm = _nnls(Z[:, cols] * sign[cols], yc)
                r = yc - (Z[:, cols] * sign[cols]) @ wm
                sse1 = float(r @ r)
                if wm[-1] <= 0 or sse1 <= 0:
                    continue
                pval = float(f_dist.sf((sse0 - sse1) / (sse1 / (n - k - 2)), 1, n - k - 2))
                if best is None or pval < best[0]:
                    best = (pval, m, cols, wm)
            if best is None or best[0] >= self.restore_alpha:
                return selected, w, restored
            _, m, cols, wm = best
            keep = wm > 0
            selected, w = [j for j, kk in zip(cols, keep, strict=True) if kk], wm[keep]
            restored.append(m)


class ElasticNetMetricSelector(LinearSelector):
    """Two-stage elastic net: ElasticNetCV (l1 ratios ``l1_ratios``, 5-fold CV, seeded) on every
    usable standardised metric, the top-n by |weight| (judges with a negative weight dropped),
    refitted with the chosen penalty (a judge turning negative in the refit is dropped and the
    refit repeated).  ``represents_`` is empty: the l1 part does its own dedup."""

    def __init__(self, *, top_n: int = 5, drop_negative_generated: bool = True,
                 l1_ratios: tuple[float, ...] = (0.2, 0.5, 0.8, 1.0), cv: int = 5, seed: int = 0):
        self.top_n = top_n
        self.drop_negative_generated = drop_negative_generated
        self.l1_ratios = l1_ratios
        self.cv = cv
        self.seed = seed

    def fit(self, X, y, *, generated=None) -> ElasticNetMetricSelector:
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.linear_model import ElasticNetCV
        from sklearn.model_selection import KFold

        if self.top_n < 1:
            raise UserError(f"top_n must be >= 1, got {self.top_n}")
        X, y, generated, impute, mean, scale, usable, Z = prepare(X, y, generated)
        p, n = X.shape[1], X.shape[0]
        cols = np.flatnonzero(usable)
        yc = y - y.mean()
        # explicit penalty grid (works across scikit-learn versions): alpha_max of the smallest ratio
        top = float(np.max(np.abs(Z[:, cols].T @ yc))) / (n * min(self.l1_ratios))
        alphas = np.geomspace(max(top, 1e-8), max(top, 1e-8) * 1e-3, 40)
        cv = KFold(n_splits=min(self.cv, n), shuffle=True, random_state=self.seed)
        cvfit = ElasticNetCV(l1_ratio=list(self.l1_ratios), alphas=alphas, cv=cv, max_iter=5000, n_jobs=1)
        with warnings.catch_warnings():  # the weakly penalised end of the path may stop early; CV rarely picks it
            warnings.simplefilter("ignore", ConvergenceWarning)
            cvfit.fit(Z[:, cols], yc)
            stage1, selected, coef, intercept = self._refit(cvfit, X, y, Z, cols, generated)
        self._store(p, impute, mean, scale, usable, stage1, selected, coef, y.mean() + intercept)
        self.alpha_, self.l1_ratio_ = float(cvfit.alpha_), float(cvfit.l1_ratio_)
        self.represents_ = {int(j): [] for j in self.selected_}
        return self

    def _refit(self, cvfit, X, y, Z, cols, generated):
        """Stage 2: top-n of the CV fit's weights, refitted with its penalty."""
        from sklearn.linear_model import ElasticNet

        p = X.shape[1]
        yc = y - y.mean()
        stage1 = np.full(p, np.nan)
        stage1[cols] = cvfit.coef_
        bad = self.drop_negative_generated & generated
        ranked = [j for j in sorted(cols, key=lambda j: -abs(stage1[j])) if stage1[j] != 0 and not (bad[j] and stage1[j] < 0)]
        selected = ranked[: self.top_n]
        while selected:
            model = ElasticNet(alpha=cvfit.alpha_, l1_ratio=cvfit.l1_ratio_, max_iter=5000).fit(Z[:, selected], yc)
            coef = np.asarray(model.coef_, dtype=float)
            drop = {j for j, c in zip(selected, coef, strict=True) if (bad[j] and c < 0) or c == 0}
            if not drop:
                return stage1, selected, coef, float(model.intercept_)
            selected = [j for j in selected if j not in drop]
        # the penalty leaves nothing: an unpenalised slope on the allowed metric with the largest |tau|
        tau = train_taus(X, y, cols)
        allowed = np.isfinite(tau) & ~(bad & (np.nan_to_num(tau) <= 0))
        if not allowed.any():
            raise UserError("no candidate metric has a defined Kendall tau with the labels (or only judges that disagree)")
        j = int(np.argmax(np.where(allowed, np.abs(np.nan_to_num(tau)), -1.0)))
        slope = float(Z[:, j] @ yc) / max(float(Z[:, j] @ Z[:, j]), 1e-12)
        if bad[j]:
            slope = max(slope, 1e-6 * max(float(y.std()), 1e-12))
        return stage1, [j], np.array([slope]), 0.0


class SingleMetricSelector(LinearSelector):
    """The best single metric on train by |Kendall tau|, with its sign (judges only with tau > 0):
    the "best existing metric" baseline as a one-weight linear selector (weight ±std(y), so the
    prediction is on the label scale).  ``top_n`` is accepted for the shared interface and
    ignored; ``stage1_coef_`` holds each metric's train tau."""

    def __init__(self, *, top_n: int = 1, drop_negative_generated: bool = True):
        self.top_n = top_n
        self.drop_negative_generated = drop_negative_generated

    def fit(self, X, y, *, generated=None) -> SingleMetricSelector:
        X, y, generated, impute, mean, scale, usable, Z = prepare(X, y, generated)
        tau = train_taus(X, y, np.flatnonzero(usable))
        ok = np.isfinite(tau) & ~(self.drop_negative_generated & generated & (np.nan_to_num(tau) < 0))
        if not ok.any():
            raise UserError("no metric has a defined Kendall tau with the training labels")
        j = int(np.argmax(np.where(ok, np.abs(np.nan_to_num(tau)), -1.0)))
        w = 1.0 if tau[j] >= 0 else -1.0
        self._store(X.shape[1], impute, mean, scale, usable, np.where(ok, tau, np.nan), [j], [w * y.std()], y.mean())
        self.represents_ = {j: []}
        return self


#: names :func:`make_selector` and :func:`choose_regression` accept
SELECTORS = ("nnls", "nnls_nodedup", "pls", "enet", "single", "ebm", "ebm_pairs")


def make_selector(name: str, *, top_n: int = 5, drop_negative_generated: bool = True):
    """A fresh selector by name: ``nnls``, ``nnls_nodedup``, ``pls``, ``enet``, ``single``, or a shape
    model (:mod:`.shapes`): ``ebm`` (additive shapes) or ``ebm_pairs`` (with up to 3 pairwise terms)."""
    if name == "nnls":
        return NNLSMetricSelector(top_n=top_n, drop_negative_generated=drop_negative_generated)
    if name == "nnls_nodedup":
        return NNLSMetricSelector(top_n=top_n, drop_negative_generated=drop_negative_generated, dedup_threshold=None)
    if name == "pls":
        from .regression import PLSMetricSelector

        return PLSMetricSelector(top_n=top_n, drop_negative_generated=drop_negative_generated)
    if name == "enet":
        return ElasticNetMetricSelector(top_n=top_n, drop_negative_generated=drop_negative_generated)
    if name == "single":
        return SingleMetricSelector(drop_negative_generated=drop_negative_generated)
    if name in ("ebm", "ebm_pairs"):
        from .shapes import ShapeSelector  # interpret-core loads only for a shape model

        return ShapeSelector(top_n=top_n, pairs=3 if name == "ebm_pairs" else 0)
    raise UserError(f"unknown regression {name!r}; choose from {', '.join(SELECTORS)}")


@dataclass
class RegressionChoice:
    """What :func:`choose_regression` picked: ``name``, its inner-CV mean tau, every candidate's
    per-fold taus, and a human-readable ``note`` on how the choice was made."""

    name: str
    tau: float
    scores: dict[str, list[float]] = field(default_factory=dict)
    note: str = ""

    def to_dict(self) -> dict:
        clean = {k: [None if not math.isfinite(v) else v for v in vs] for k, vs in self.scores.items()}
        return {"name": self.name, "tau": self.tau if math.isfinite(self.tau) else None, "scores": clean, "note": self.note}


def choose_regression(X, y, groups, generated=None, candidates=("nnls", "pls"), n_labels: int | None = None, *,
                      top_n: int = 5, n_splits: int = 5, small_data: int = SMALL_DATA_LABELS) -> RegressionChoice:
    """Pick a regression procedure by grouped K-fold CV over the TRAINING rows only.

    ``X``, ``y``, ``groups`` are the training split (the caller keeps its test split away: this
    function never sees it).  Each candidate is fitted on K-1 folds (GroupKFold over ``groups``,
    so an input never sits on both sides) and scored by Kendall tau-b on the held-out fold; the
    score is the mean over folds.  With ``n_labels`` (default ``len(y)``) below ``small_data``
    the mean-over-folds is too noisy to separate procedures, so the one-standard-error rule
    applies: the candidate with the fewest free parameters (:data:`COMPLEXITY`) whose score is
    within one standard error of the best wins.  A fold on which a candidate cannot fit
    (ValueError: nothing to regress on) scores tau 0 for it.

    Measured (regression_compare.py): the inner-CV choice is noisier than it is useful here.  At
    400 rows, auto over nnls/pls/enet/single averaged tau 0.325 vs 0.332 for always-NNLS; at
    100 rows (70 train labels, 10 splits) auto over nnls/pls scored 0.277 with the small-data
    rule and 0.278 without, always-NNLS 0.288.  Use it to check a default, not to replace it.
    """
    from sklearn.model_selection import GroupKFold

    X = np.asarray(X, dtype=float)
    y = np.asarray(y, dtype=float)
    groups = np.asarray(groups).astype(str)
    if not candidates:
        raise UserError("choose_regression needs at least one candidate")
    unknown = [c for c in candidates if c not in SELECTORS]
    if unknown:
        raise UserError(f"unknown regression {unknown[0]!r}; choose from {', '.join(SELECTORS)}")
    n_labels = len(y) if n_labels is None else int(n_labels)
    if len(candidates) == 1:  # nothing to choose between: no inner folds are fitted
        return RegressionChoice(name=candidates[0], tau=math.nan, scores={},
                                note=f"{n_labels} labels: {candidates[0]} is the only candidate at this size")
    k = min(n_splits, len(np.unique(groups)))
    if k < 2:
        raise UserError("choose_regression needs at least two distinct groups in the training rows")
    folds = list(GroupKFold(n_splits=k).split(X, y, groups))
    scores: dict[str, list[float]] = {}
    for name in candidates:
        taus = []
        for tr, te in folds:
            try:
                sel = make_selector(name, top_n=top_n).fit(X[tr], y[tr], generated=generated)
                taus.append(kendall_tau(sel.predict(X[te]), y[te])[0])
            except ValueError:  # a fold with nothing to regress on counts as no agreement
                taus.append(0.0)
        scores[name] = [float(t) if math.isfinite(t) else 0.0 for t in taus]
    means = {n: float(np.mean(v)) for n, v in scores.items()}
    best = max(means, key=lambda n: (means[n], -COMPLEXITY.get(n, 99)))
    if n_labels < small_data:
        se = float(np.std(scores[best], ddof=1) / math.sqrt(k)) if k > 1 else 0.0
        close = [n for n in candidates if means[n] >= means[best] - se]
        pick = min(close, key=lambda n: (COMPLEXITY.get(n, 99), -means[n]))
        note = (f"{n_labels} labels (< {small_data}): one-standard-error rule over {k} grouped folds; "
                f"{pick} is the simplest candidate within 1 SE ({se:.3f}) of the best ({best}, tau {means[best]:.3f})")
    else:
        pick = best
        note = f"{n_labels} labels: best mean tau over {k} grouped folds"
    return RegressionChoice(name=pick, tau=means[pick], scores=scores, note=note)
