"""Published formulas of the model metrics, checked by hand on small cases (no model needed)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from autometrics.metricbank.distribution import (
    divergence_curve,
    information_measure,
    mauve_from_features,
    mauve_from_histograms,
)
from autometrics.metricbank.embedding import (
    earth_movers_distance,
    greedy_match,
    mover_score,
    normalized_edit_distance,
    parascore_diversity,
    yisi_combine,
)


def unit(*v):
    a = np.array(v, dtype=float)
    return a / np.linalg.norm(a)


def test_bertscore_greedy_matching_two_tokens_by_hand():
    # candidate tokens c1=(1,0), c2=(0,1); reference tokens r1=(1,0), r2=(0.6,0.8)
    c = np.stack([unit(1, 0), unit(0, 1)])
    r = np.stack([unit(1, 0), unit(0.6, 0.8)])
    # sim = [[1, .6], [0, .8]]: P = (1 + .8)/2 = .9 ; R = (max(1,0) + max(.6,.8))/2 = .9
    p, rec, f = greedy_match(c, r)
    assert p == pytest.approx(0.9) and rec == pytest.approx(0.9) and f == pytest.approx(0.9)
    # drop c2: P = 1, R = (1 + .6)/2 = .8, F = 2*.8/(1.8)
    p, rec, f = greedy_match(c[:1], r)
    assert (p, rec) == pytest.approx((1.0, 0.8)) and f == pytest.approx(1.6 / 1.8)
    # idf weights: reference token r2 weighs 3 -> R = (1*1 + 3*.8)/4 = .85
    _, rec, _ = greedy_match(c, r, wr=np.array([1.0, 3.0]))
    assert rec == pytest.approx(0.85)
    assert greedy_match(c[:0], r) == (0.0, 0.0, 0.0)


def test_yisi_weighted_harmonic_mean():
    assert yisi_combine(0.5, 1.0, alpha=0.8) == pytest.approx(0.5 / (0.4 + 0.2))
    assert yisi_combine(0.3, 0.7, alpha=1.0) == pytest.approx(0.7)  # alpha=1 -> recall
    assert yisi_combine(0.3, 0.7, alpha=0.0) == pytest.approx(0.3)
    assert yisi_combine(0.6, 0.6, alpha=0.5) == pytest.approx(0.6)


def test_earth_movers_distance_by_hand():
    # two points each; moving mass .5 across distance 1 and .5 staying: EMD = .5
    d = np.array([[0.0, 1.0], [1.0, 0.0]])
    assert earth_movers_distance(np.array([1.0, 0.0]), np.array([0.5, 0.5]), d) == pytest.approx(0.5)
    assert earth_movers_distance(np.array([0.5, 0.5]), np.array([0.5, 0.5]), d) == pytest.approx(0.0)
    # 1 x 2: all mass splits by b
    assert earth_movers_distance(np.array([1.0]), np.array([0.25, 0.75]), np.array([[2.0, 4.0]])) == pytest.approx(3.5)


def test_moverscore_is_one_minus_wmd_of_unit_vectors():
    c = np.stack([unit(1, 0)])
    r = np.stack([unit(0, 1)])
    # Euclidean distance between orthogonal unit vectors = sqrt(2)
    assert mover_score(c, np.ones(1), r, np.ones(1)) == pytest.approx(1 - math.sqrt(2))
    assert mover_score(c, np.ones(1), c, np.ones(1)) == pytest.approx(1.0)
    # weights: half the candidate mass on an identical token, half on an orthogonal one
    c2 = np.stack([unit(1, 0), unit(0, 1)])
    assert mover_score(c2, np.array([1.0, 1.0]), c, np.ones(1)) == pytest.approx(1 - 0.5 * math.sqrt(2))
    assert mover_score(c2[:0], np.ones(0), c, np.ones(1)) == 0.0


def test_parascore_diversity_term():
    assert parascore_diversity(0.0) == pytest.approx(-1.0)  # verbatim copy is penalised
    assert parascore_diversity(0.35) == pytest.approx(0.35)
    assert parascore_diversity(0.9) == pytest.approx(0.35)  # capped at gamma
    assert parascore_diversity(0.175) == pytest.approx(0.175 * 1.35 / 0.35 - 1)
    assert normalized_edit_distance("a b c d".split(), "a x c d".split()) == pytest.approx(0.25)


def test_mauve_identical_and_disjoint_histograms():
    p = np.array([0.5, 0.5])
    assert mauve_from_histograms(p, p) == pytest.approx(1.0, abs=1e-6)
    disjoint = mauve_from_histograms(np.array([1.0, 0.0]), np.array([0.0, 1.0]))
    assert disjoint < 0.05
    curve = divergence_curve(p, p)
    assert curve[0] == pytest.approx([1.0, 0.0]) and curve[-1] == pytest.approx([0.0, 1.0])
    rng = np.random.default_rng(0)
    a = rng.normal(size=(60, 8))
    assert mauve_from_features(a, a.copy()) == pytest.approx(1.0, abs=1e-6)
    far = mauve_from_features(a, a + 10.0 * np.eye(8)[0])
    assert far < 0.5


def test_infolm_information_measures():
    p = np.array([0.5, 0.5, 0.0])
    q = np.array([0.0, 0.5, 0.5])
    assert information_measure(p, p, "fisher_rao") == pytest.approx(0.0, abs=1e-6)
    # Fisher-Rao = 2 arccos(sum sqrt(p q)) = 2 arccos(.5)
    assert information_measure(p, q, "fisher_rao") == pytest.approx(2 * math.acos(0.5))
    assert information_measure(p, q, "l1") == pytest.approx(1.0)
    assert information_measure(p, q, "linf") == pytest.approx(0.5)
    assert information_measure(p, q, "l2") == pytest.approx(math.sqrt(0.5))
    with pytest.raises(ValueError):
        information_measure(p, q, "nope")
