"""A shape-based regression: the evaluator adds one shape function per selected metric (and,
optionally, a few pairwise terms), read off an explainable boosting machine (interpret-core's
``ExplainableBoostingRegressor``).

Why shapes: past a few hundred labels a weighted sum leaves agreement on the table where a
metric's effect is not straight (length helps up to a point, then hurts) or flips sign given the
others; a black box recovers it but cannot be read.  An additive model keeps the reading — each
metric contributes ``shape_j(x_j)`` to the score, a curve one can draw — and the boosting machine
learns each curve jointly with the others, so a direction is the one the metric has *given the
rest*, not its marginal τ.

How it fits: a first additive machine over every usable metric ranks them by importance (mean
absolute contribution); the evaluator keeps the ``top_n`` and refits on those alone, with up to
``pairs`` pairwise terms.  What is stored is the machine's own lookup table — per term its bin
cut points and one score per bin (index 0 for a missing value) — so scoring is a
``searchsorted`` with numpy alone: no pickled model, no interpret-core at scoring time, and the
same numbers the machine predicts (checked in the tests).

The selector is a :class:`~.regression.LinearSelector` (``selected_``, ``coef_``, ``impute_``,
``mean_``, ``scale_``, ``intercept_``, ``importance_``) whose prediction is the shapes, so the fit,
the cross-fitted validity and the report treat it like the linear ones; its ``coef_`` is a
*signed strength* for reading (the standard deviation of the contribution, signed by how the
contribution moves with the metric), not a multiplier.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..metricbank.errors import Unavailable, UserError
from ..metricbank.install import install_hint, plain
from .regression import LinearSelector, prepare
from .stats import kendall_tau

__all__ = ["ShapeSelector", "shape_contribution", "pair_contribution", "SHAPE_SELECTORS"]

#: ``--regression`` names of the shape models: additive only, and with up to 3 pairwise terms
SHAPE_SELECTORS = ("ebm", "ebm_pairs")


def _bin_index(cuts, x: np.ndarray) -> np.ndarray:
    """The machine's bin of each value: 0 for a missing value, else 1 + the number of cuts <= x."""
    x = np.asarray(x, dtype=float)
    idx = np.searchsorted(np.asarray(cuts, dtype=float), np.where(np.isnan(x), 0.0, x), side="right") + 1
    return np.where(np.isnan(x), 0, idx)


def shape_contribution(shape: dict, x) -> np.ndarray:
    """One metric's contribution from its stored shape (``cuts``, ``scores``)."""
    return np.asarray(shape["scores"], dtype=float)[_bin_index(shape["cuts"], x)]


def pair_contribution(pair: dict, xa, xb) -> np.ndarray:
    """A pairwise term's contribution from its stored table (``cuts`` of both metrics, ``scores``)."""
    table = np.asarray(pair["scores"], dtype=float)
    return table[_bin_index(pair["cuts"][0], xa), _bin_index(pair["cuts"][1], xb)]


def _fit(machine, X, y):
    with warnings.catch_warnings():  # a missing value has its own bin here, which the warning is about
        warnings.filterwarnings("ignore", message="Missing values detected")
        return machine.fit(X, y)


def _machine(pairs: int, max_bins: int, outer_bags: int, seed: int):
    try:
        from interpret.glassbox import ExplainableBoostingRegressor
    except ModuleNotFoundError as exc:
        raise Unavailable(f"the shape regression needs interpret-core ({exc}); {plain(install_hint('interpret-core'))}") from exc
    return ExplainableBoostingRegressor(interactions=pairs, max_bins=max_bins, max_interaction_bins=16,
                                        outer_bags=outer_bags, random_state=seed, n_jobs=1)


class ShapeSelector(LinearSelector):
    """The shape regression (module docstring); ``fit(X, y)`` on raw metric values (NaN allowed)."""

    def __init__(self, *, top_n: int = 5, pairs: int = 0, max_bins: int = 64, outer_bags: int = 2, seed: int = 0,
                 drop_negative_generated: bool = True):
        self.top_n = top_n
        self.pairs = pairs
        self.max_bins = max_bins
        self.outer_bags = outer_bags
        self.seed = seed
        self.drop_negative_generated = drop_negative_generated  # kept for the common selector interface

    def fit(self, X, y, *, generated=None, required=()) -> ShapeSelector:
        if self.top_n < 1:
            raise UserError(f"top_n must be >= 1, got {self.top_n}")
        X, y, generated, impute, mean, scale, usable, _Z = prepare(X, y, generated)
        cols = np.flatnonzero(usable)
        first = _fit(_machine(0, self.max_bins, 1, self.seed), X[:, cols], y)  # ranking only: one bag is enough
        importance = np.asarray(first.term_importances(), dtype=float)
        stage1 = np.zeros(X.shape[1])
        stage1[cols] = importance
        ranked = [int(cols[i]) for i in np.argsort(-importance, kind="stable")]
        keep = list(dict.fromkeys([int(j) for j in required if usable[j]] + ranked))[: max(self.top_n, len(required))]
        machine = _fit(_machine(int(self.pairs), self.max_bins, self.outer_bags, self.seed), X[:, keep], y)
        shapes, pair_terms = [None] * len(keep), []
        for t, feats in enumerate(machine.term_features_):
            scores = np.asarray(machine.term_scores_[t], dtype=float)
            if len(feats) == 1:
                k = feats[0]
                shapes[k] = {"cuts": [float(c) for c in machine.bins_[k][0]], "scores": scores.tolist()}
            else:
                a, b = feats
                level = min(1, len(machine.bins_[a]) - 1), min(1, len(machine.bins_[b]) - 1)  # pairs use the coarser bins
                pair_terms.append({"features": [int(keep[a]), int(keep[b])],
                                   "cuts": [[float(c) for c in machine.bins_[a][level[0]]],
                                            [float(c) for c in machine.bins_[b][level[1]]]],
                                   "scores": scores.tolist()})
        self.n_features_in_ = X.shape[1]
        self.impute_, self.mean_, self.scale_, self.usable_ = impute, mean, scale, usable
        self.stage1_coef_ = stage1
        self.selected_ = np.asarray(keep, dtype=int)
        self.shapes_ = shapes
        self.pairs_ = pair_terms
        self.intercept_ = float(np.ravel(machine.intercept_)[0])
        self.coef_ = np.array([self._strength(X[:, j], s) for j, s in zip(keep, shapes, strict=True)])
        return self

    @staticmethod
    def _strength(x: np.ndarray, shape: dict) -> float:
        """Standard deviation of the metric's contribution on the training rows, signed by the
        direction the contribution moves with the metric (the sign of their Kendall tau-b)."""
        c = shape_contribution(shape, x)
        sd = float(np.std(c))
        tau = kendall_tau(c, x)[0]  # tau-b: a step shape ties many rows, which tau-b counts as ties
        return -sd if np.isfinite(tau) and tau < 0 else sd

    def contributions(self, X) -> np.ndarray:
        """Per row: one column per selected metric, then one per pairwise term."""
        self._check_fitted()
        X = np.asarray(X, dtype=float)
        if X.ndim != 2 or X.shape[1] != self.n_features_in_:
            raise UserError(f"X must have {self.n_features_in_} metric columns, got shape {X.shape}")
        cols = [shape_contribution(s, X[:, j]) for j, s in zip(self.selected_, self.shapes_, strict=True)]
        cols += [pair_contribution(p, X[:, p["features"][0]], X[:, p["features"][1]]) for p in self.pairs_]
        return np.column_stack(cols) if cols else np.zeros((len(X), 0))

    def predict(self, X) -> np.ndarray:
        return self.contributions(X).sum(axis=1) + self.intercept_
