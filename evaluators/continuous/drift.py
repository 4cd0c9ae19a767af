"""Drift statistics for a deployed evaluator (pure functions; the monitor stores the alerts).

Two different questions, two signals:

- **Score drift**: did the traffic change, as the evaluator's own scores see it?  Compared are
  two windows of *online, out-of-sample* scores of the same evaluator version: the **reference
  window** (the first ``reference_window`` traces that started after the newest trace its fit
  used) and **current windows** (consecutive, non-overlapping blocks of ``drift_window`` traces
  after the reference).  Why not the fit-time predictions: they are scores of the labelled
  traces only (people give feedback selectively), partly in-sample, of older traffic, and were
  stored rounded to 5 decimals — on lumpy scores (answers in a few styles) rounding alone moves
  every reference value of a level to one side of the current ones, so KS sees a gap the size
  of that level's share and reference-quantile PSI bins can split a level.  Each block is tested
  once, by permutations of the window labels over the pooled scores (exact under ties, so
  discrete scores are fine): the two-sample KS statistic (good at shifts of location) and the
  Population Stability Index (good at mass moving between levels, which KS can miss) on bins of
  the pooled scores (distinct values when few; otherwise equal-mass bins that never split a
  value and hold at least 5 expected scores of the smaller window), with additive smoothing.
  The window's p-value is the smaller of the two permutation p-values, calibrated for taking
  the smaller over the same permutations (min-p).  PSI grows with noise alone as about
  ``(bins - 1) * (1/n_ref + 1/n_cur)``; the permutations give its chance level (``psi_null``),
  and the effect that counts is ``psi - psi_null``.  A block is *significant* when p <
  ``ks_alpha`` and ``psi - psi_null >= psi_alert`` (real, and at least what the rule of thumb
  calls a moderate shift).  Repeated testing over time: every block is tested once (no
  overlapping re-tests), and an alert needs ``persistence`` consecutive significant blocks
  (default 2 at 0.01: about 1e-4 per block by chance if blocks were independent; they share
  the reference, which raises it — measured in tests/benchmarks/drift_calibration.py).
  Drift does not prove the evaluator is wrong: it says the traffic changed.
- **Validity decay**: does the evaluator still agree with *new* human feedback?  Kendall tau of
  its online scores against feedback that arrived after the fit, with a bootstrap CI, compared
  to the fit-time tau (:func:`fit_agreement`: the version's two held-out measurements, its
  fit's test split and the refit's newest held-out feedback, pooled by inverse variance).  Both
  taus are estimates, so the test is on their difference:
  ``z = (tau_fit - tau_new) / sqrt(se_fit^2 + se_new^2)`` with each SE from its 95 % CI; an
  alert when the one-sided p < ``validity_alpha``; a warning when the new window's agreement is
  not significant (p > ``validity_p``).  (The old rule, fit tau above the new window's CI,
  ignored the fit tau's own noise and fired more often than its 2.5 % by chance.)  A promoted
  challenger's newest-held-out tau is the one that won the comparison, so it leans high; the
  test split it is pooled with does not.  A drop means either the evaluator no longer tracks
  people on current traffic or the feedback got noisier (a label-quality drop); the alert says both.

Every threshold is a field of :class:`DriftThresholds`; ``autometrics worker`` sets them with
``--drift-*`` / ``--validity-*`` flags.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

from ...metricbank.errors import UserError

__all__ = ["DriftThresholds", "psi", "psi_bins", "score_drift", "drift_windows", "validity_decay", "fit_agreement",
           "score_drift_message", "validity_message"]

SMOOTHING = 0.5  # added to every bin count before PSI (Jeffreys): no log(0), no infinite PSI
MIN_EXPECTED = 5  # a bin holds at least this many expected scores of the smaller window
PERMUTATIONS = 999  # p-value resolution 0.001
MAX_NEW_WINDOWS = 20  # windows tested per check at most (a backlog beyond this is skipped, and counted)
KEEP_WINDOWS = 10  # tested windows kept in the state (for the dashboard and the persistence rule)


@dataclass(frozen=True)
class DriftThresholds:
    """When drift statistics raise an alert or a warning.

    - ``ks_alpha``: a window is significant only with a p-value below this (default 0.01): the smaller of the KS
      and PSI permutation p-values, calibrated for taking the smaller (named for KS, the first test it set) ...
    - ``psi_alert``: ... and a PSI at least this much above its value by chance at these window sizes
      (default 0.1: where the usual rule of thumb starts calling a shift moderate).
    - ``min_scores``: no score-drift test with fewer scores than this on either side (default 30).
    - ``persistence``: a score-drift alert needs this many consecutive significant windows (default 2).
    - ``validity_alpha``: validity-decay alert when the one-sided p of ``tau_fit > tau_new`` is below this (default 0.01).
    - ``validity_min_n``: no validity verdict on fewer new feedback points than this (default 20).
    - ``validity_p``: the new window's agreement is "not significant" (a warning) above this
      p-value (default 0.05).
    """

    ks_alpha: float = 0.01
    psi_alert: float = 0.1
    min_scores: int = 30
    validity_min_n: int = 20
    validity_p: float = 0.05
    persistence: int = 2
    validity_alpha: float = 0.01

    def __post_init__(self):
        for name in ("ks_alpha", "validity_p", "validity_alpha"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and 0 < v < 1):
                raise UserError(f"drift threshold {name} must be a probability in (0, 1), got {v!r}")
        if not (isinstance(self.psi_alert, int | float) and math.isfinite(self.psi_alert) and self.psi_alert >= 0):
            raise UserError(f"drift threshold psi_alert must be a finite number >= 0, got {self.psi_alert!r}")
        for name, low in (("min_scores", 2), ("validity_min_n", 3), ("persistence", 1)):
            v = getattr(self, name)
            if not (isinstance(v, int) and not isinstance(v, bool) and v >= low):
                raise UserError(f"drift threshold {name} must be an integer >= {low}, got {v!r}")

    def to_dict(self) -> dict:
        return asdict(self)


def _clean(x):
    import numpy as np

    x = np.asarray(x, dtype=float).ravel()
    return x[np.isfinite(x)]


def _layout(ref, cur, bins: int):
    """Pooled scores sorted, with: where each distinct value ends, the PSI bin edges, where each
    bin ends, and the window label (1 = current) of each sorted score.

    Values closer than a thousandth of the mean gap count as one value (float noise must not
    split a level of lumpy scores; the monitor keeps its reference in full precision).  Bins come from the *pooled* sample, so permuting the labels (the null)
    leaves them unchanged; each distinct value goes to the equal-mass slot holding the middle of
    its mass (a bin never splits a value), then bins with fewer than ``MIN_EXPECTED`` expected
    scores of the smaller window merge into their smaller neighbour."""
    import numpy as np

    pooled = np.concatenate([ref, cur])
    labels = np.concatenate([np.zeros(len(ref), dtype=np.int32), np.ones(len(cur), dtype=np.int32)])
    order = np.argsort(pooled, kind="stable")
    s, labels = pooled[order], labels[order]
    n = len(s)
    tol = 1e-3 * (s[-1] - s[0]) / n  # a thousandth of the mean gap: float noise, never two real values
    atom_end = np.flatnonzero(np.concatenate([np.diff(s) > tol, [True]]))  # last position of each distinct value
    counts = np.diff(np.concatenate([[-1], atom_end]))
    slot = np.floor((np.cumsum(counts) - counts / 2) / n * bins).astype(int)
    groups = [np.flatnonzero(slot == k) for k in np.unique(slot)]
    sizes = [int(counts[g].sum()) for g in groups]
    min_count = MIN_EXPECTED * n / min(len(ref), len(cur))
    while len(groups) > 1 and min(sizes) < min_count:
        i = int(np.argmin(sizes))
        j = i - 1 if i == len(groups) - 1 or (i > 0 and sizes[i - 1] <= sizes[i + 1]) else i + 1
        a, b = min(i, j), max(i, j)
        groups[a:b + 1] = [np.concatenate([groups[a], groups[b]])]
        sizes[a:b + 1] = [sizes[a] + sizes[b]]
    bin_end = np.array([atom_end[g[-1]] for g in groups])
    edges = [float(s[e]) for e in bin_end]
    edges[-1] = math.inf
    return s, labels, atom_end, edges, bin_end


def psi_bins(reference, current, *, bins: int = 10) -> list[float]:
    """Upper edges of the PSI bins for two samples (the last is +inf; a value ``v`` falls in the
    first bin whose edge is >= ``v``): see :func:`_layout`."""
    ref, cur = _clean(reference), _clean(current)
    if len(ref) == 0 or len(cur) == 0:
        return [math.inf]
    return _layout(ref, cur, bins)[3]


def _psi_from_counts(r, c, n_r, n_c):
    import numpy as np

    k = r.shape[-1]
    pr = (r + SMOOTHING) / (n_r + SMOOTHING * k)
    pc = (c + SMOOTHING) / (n_c + SMOOTHING * k)
    return np.sum((pc - pr) * np.log(pc / pr), axis=-1)


def psi(reference, current, *, bins: int = 10) -> float:
    """Population Stability Index of ``current`` against ``reference`` on :func:`psi_bins` with
    additive smoothing (0.1 = small shift, 0.25 = large shift by the usual rule of thumb, for
    large samples: by chance alone it is about ``(bins - 1) * (1/n_ref + 1/n_cur)``)."""
    import numpy as np

    ref, cur = _clean(reference), _clean(current)
    if len(ref) < 2 or len(cur) < 2:
        return float("nan")
    _, labels, _, _, bin_end = _layout(ref, cur, bins)
    c = np.diff(np.concatenate([[0], np.cumsum(labels)[bin_end]]))
    tot = np.diff(np.concatenate([[-1], bin_end]))
    return float(_psi_from_counts(tot - c, c, len(ref), len(cur)))


def score_drift(reference, current, *, thresholds: DriftThresholds | None = None, alpha: float | None = None,
                psi_alert: float | None = None, min_n: int | None = None, permutations: int = PERMUTATIONS,
                seed: int = 0, bins: int = 10) -> dict:
    """One window against the reference: KS and PSI, both calibrated by the same permutations.

    ``alert`` (this window is significant): min-p of KS and PSI < ``ks_alpha`` and
    ``psi - psi_null >= psi_alert``.  Thresholds come from ``thresholds`` (default
    :class:`DriftThresholds`); ``alpha``, ``psi_alert`` and ``min_n`` override single fields.
    The result records the thresholds used and how the test was done (``method``).  P-values are
    multiples of ``1 / (permutations + 1)``: keep ``permutations`` well above ``1 / alpha``.
    """
    import numpy as np

    th = thresholds or DriftThresholds()
    alpha = th.ks_alpha if alpha is None else alpha
    psi_alert = th.psi_alert if psi_alert is None else psi_alert
    min_n = th.min_scores if min_n is None else min_n
    ref, cur = _clean(reference), _clean(current)
    out = {"n_reference": int(len(ref)), "n_current": int(len(cur)), "ks": None, "p_value": None, "p_ks": None,
           "p_psi": None, "psi": None,
           "psi_null": None, "psi_excess": None, "bins": None,
           "mean_reference": float(ref.mean()) if len(ref) else None, "mean_current": float(cur.mean()) if len(cur) else None,
           "alert": False, "reason": None, "thresholds": {"ks_alpha": alpha, "psi_alert": psi_alert, "min_scores": min_n},
           "method": {"test": "permutations of the window labels over the pooled scores: KS and PSI p-values, "
                              "p_value = the smaller, calibrated over the same permutations (min-p)",
                      "psi": f"pooled bins (at most {bins}), +{SMOOTHING} per bin", "permutations": int(permutations),
                      "seed": int(seed)}}
    if len(ref) < min_n or len(cur) < min_n:
        out["reason"] = f"too few scores to test (reference {len(ref)}, current {len(cur)}; need {min_n} each)"
        return out
    n_r, n_c, n = len(ref), len(cur), len(ref) + len(cur)
    _, labels, atom_end, edges, bin_end = _layout(ref, cur, bins)
    rng = np.random.default_rng(seed)
    P = max(0, int(permutations))
    small = np.int16 if n < 32000 else np.int32
    lab = np.tile(labels.astype(small), (P + 1, 1))
    if P:
        rng.permuted(lab[1:], axis=1, out=lab[1:])
    cum_c = np.cumsum(lab, axis=1, dtype=small)  # current scores at or below each position (row 0: observed)
    pos = np.arange(1, n + 1)
    at = cum_c[:, atom_end]
    ks = np.max(np.abs(at / n_c - (pos[atom_end] - at) / n_r), axis=1)
    cb = cum_c[:, bin_end]
    c_counts = np.diff(np.concatenate([np.zeros((len(cb), 1)), cb], axis=1), axis=1)
    tot = np.diff(np.concatenate([[-1], bin_end]))
    psis = _psi_from_counts(tot - c_counts, c_counts, n_r, n_c)
    out["ks"], out["psi"], out["bins"] = float(ks[0]), float(psis[0]), int(len(edges))
    if P:
        p_ks, p_psi = _perm_p(ks), _perm_p(psis)
        m = np.minimum(p_ks, p_psi)  # the smaller p of the two, itself calibrated over the same permutations
        out["p_value"] = float(np.sum(m <= m[0] + 1e-12) / (P + 1))
        out["p_ks"], out["p_psi"] = float(p_ks[0]), float(p_psi[0])
        out["psi_null"] = float(np.mean(psis[1:]))
    else:  # no permutations: asymptotic KS p, analytic PSI expectation
        from scipy.stats import kstwo

        out["p_value"] = float(kstwo.sf(ks[0], round(n_r * n_c / n)))
        out["psi_null"] = (len(edges) - 1) * (1 / n_r + 1 / n_c)
    out["psi_excess"] = out["psi"] - out["psi_null"]
    out["alert"] = bool(out["p_value"] < alpha and out["psi_excess"] >= psi_alert)
    return out


def _perm_p(stat):
    """Permutation p-value of every entry of ``stat`` (row 0 observed, rows 1.. permuted): the
    share of all ``P + 1`` values at least as large, itself included (so the observed p is never 0)."""
    import numpy as np

    ordered = np.sort(stat)
    return (len(stat) - np.searchsorted(ordered, stat - 1e-12, side="left")) / len(stat)


def drift_windows(times, scores, *, since_ns: int, reference_window: int, window: int,
                  thresholds: DriftThresholds | None = None, seed: int = 0, permutations: int = PERMUTATIONS,
                  previous: dict | None = None, max_new_windows: int = MAX_NEW_WINDOWS) -> dict:
    """Score drift over time for one evaluator version: the next state from its online scores.

    ``times``/``scores``: trace start (ns) and online score of the traces it scored.  The
    reference is the first ``reference_window`` scores of traces started after ``since_ns`` (the
    newest trace its fit used), frozen once complete (kept in the state with its scores, so
    pruning old traces does not move it).  After it come consecutive blocks of ``window``
    scores; each complete block is tested once (``previous`` is the last state: blocks up to
    its ``tested_until_ns`` are done; its own seed, so a repeat gives the same answer).  At most
    ``max_new_windows`` blocks per call (older untested ones are skipped and counted); after a
    change of the thresholds or window sizes only the newest ``persistence`` blocks are tested
    again.  ``alert`` when ``persistence`` consecutive blocks are significant; ``since_ns`` is
    the start of the first of them.  Traces scored after their block was tested are not counted.
    """
    import numpy as np

    th = thresholds or DriftThresholds()
    settings = {"reference_window": int(reference_window), "window": int(window), "since_fit_data_ns": int(since_ns),
                "ks_alpha": th.ks_alpha, "psi_alert": th.psi_alert, "min_scores": th.min_scores,
                "persistence": th.persistence, "permutations": int(permutations), "seed": int(seed)}
    prev = previous or {}
    same_ref = (prev.get("reference") or {}).get("scores") is not None and all(
        (prev.get("settings") or {}).get(k) == settings[k] for k in ("reference_window", "since_fit_data_ns"))
    same_all = same_ref and prev.get("settings") == settings
    t = np.asarray(times, dtype=float)
    s = np.asarray(scores, dtype=float)
    keep = np.isfinite(s) & np.isfinite(t) & (t > since_ns)
    order = np.argsort(t[keep], kind="stable")
    t, s = t[keep][order], s[keep][order]
    out = {"state": None, "settings": settings, "reference": None, "windows": [], "n_windows": 0,
           "tested_until_ns": None, "skipped_windows": 0, "alert": False, "since_ns": None,
           "thresholds": {k: settings[k] for k in ("ks_alpha", "psi_alert", "min_scores", "persistence")}}
    if same_ref:
        out["reference"] = prev["reference"]
    elif len(s) >= reference_window:
        out["reference"] = {"n": int(reference_window), "first_ns": int(t[0]), "last_ns": int(t[reference_window - 1]),
                            "mean": float(s[:reference_window].mean()), "scores": [float(x) for x in s[:reference_window]]}
    else:
        out["state"] = f"collecting reference ({len(s)}/{reference_window} scores after the fit's data)"
        return out
    ref = out["reference"]
    if same_all:
        out.update(windows=list(prev.get("windows") or []), n_windows=int(prev.get("n_windows") or 0),
                   tested_until_ns=prev.get("tested_until_ns"), skipped_windows=int(prev.get("skipped_windows") or 0))
    start = max(ref["last_ns"], out["tested_until_ns"] or ref["last_ns"])
    t, s = t[t > start], s[t > start]
    k = len(s) // window
    limit = max_new_windows if same_all or not prev else th.persistence
    first = max(0, k - limit)
    out["skipped_windows"] += first
    new_streaks = []
    for b in range(first, k):
        a = b * window
        out["n_windows"] += 1
        d = score_drift(ref["scores"], s[a:a + window], thresholds=th, seed=seed + out["n_windows"], permutations=permutations)
        out["windows"].append({"index": out["n_windows"], "n": int(window), "first_ns": int(t[a]),
                               "last_ns": int(t[a + window - 1]), "mean": float(s[a:a + window].mean()),
                               "after_gap": b == first and first > 0,
                               **{key: d[key] for key in ("ks", "p_value", "psi", "psi_null", "psi_excess", "bins", "alert")}})
        out["tested_until_ns"] = int(t[a + window - 1])
        new_streaks.append(_streak(out["windows"]))
    run = max(new_streaks or [_streak(out["windows"])], key=len)
    if len(run) >= th.persistence:
        out["alert"], out["since_ns"], out["run"] = True, run[0]["first_ns"], [w["index"] for w in run]
    out["windows"] = out["windows"][-max(KEEP_WINDOWS, th.persistence):]
    pending = len(s) - k * window
    out["state"] = (f"tested {out['n_windows']} window(s) of {window}; {pending}/{window} scores in the next" if out["n_windows"]
                    else f"waiting for a window ({pending}/{window} scores after the reference)")
    return out


def _streak(windows: list[dict]) -> list[dict]:
    """The trailing run of significant windows (a skipped stretch ends a run)."""
    run: list[dict] = []
    for w in reversed(windows):
        if not w["alert"]:
            break
        run.insert(0, w)
        if w.get("after_gap"):
            break
    return run


def validity_decay(pred, human, fit_tau: float | None, *, n_boot: int = 500, seed: int = 0, min_n: int | None = None,
                   thresholds: DriftThresholds | None = None, fit: dict | None = None) -> dict:
    """Tau of online scores against new feedback vs the fit-time held-out tau.

    ``fit``: the held-out agreement (``tau``, ``ci_low``, ``ci_high``, ``n``); without its CI the
    fit tau is taken as exact.  ``level``: ``alert`` (drop beyond noise: one-sided p of the
    difference < ``validity_alpha``), ``warning`` (new window not significant, p >
    ``validity_p``) or ``ok``; ``None`` below ``validity_min_n`` points (``min_n`` overrides it).
    """
    import numpy as np
    from scipy.stats import norm

    from ..stats import agreement_from_boot, bootstrap_taus

    th = thresholds or DriftThresholds()
    min_n = th.validity_min_n if min_n is None else min_n
    fit = dict(fit or {})
    if fit_tau is None:
        fit_tau = fit.get("tau")
    x, y = np.asarray(pred, dtype=float), np.asarray(human, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if len(y) >= 3:
        a = agreement_from_boot(x, y, bootstrap_taus([x], y, n_boot, seed)[:, 0]).to_dict()
    else:
        a = {"n": int(len(y)), "tau": None, "ci_low": None, "ci_high": None, "p_value": None}
    out = {"window": a, "fit_tau": fit_tau, "fit": {k: fit.get(k) for k in ("tau", "ci_low", "ci_high", "n", "sources")},
           "level": None, "drop": None, "z": None, "p_drop": None,
           "thresholds": {"validity_min_n": min_n, "validity_p": th.validity_p, "validity_alpha": th.validity_alpha}}
    if a["n"] < min_n or a["tau"] is None:
        return out

    if fit_tau is not None and math.isfinite(fit_tau):
        out["drop"] = fit_tau - a["tau"]
        se_new, se_fit = _se(a) or 0.0, _se(fit) or 0.0  # a CI of width 0 (e.g. tau -1 on every resample): no noise
        if a["ci_low"] is not None and se_new + se_fit > 0:
            out["z"] = out["drop"] / math.sqrt(se_new ** 2 + se_fit ** 2)
            out["p_drop"] = float(norm.sf(out["z"]))
    if out["p_drop"] is not None and out["p_drop"] < th.validity_alpha:
        out["level"] = "alert"
    elif a["p_value"] is None or a["p_value"] > th.validity_p:
        out["level"] = "warning"
    else:
        out["level"] = "ok"
    return out


def _se(a: dict) -> float | None:
    lo, hi = a.get("ci_low"), a.get("ci_high")
    return (hi - lo) / (2 * 1.959964) if lo is not None and hi is not None and hi > lo else None


def fit_agreement(*parts: tuple[str, dict | None]) -> dict:
    """One fit-time tau from the version's held-out measurements (``(name, agreement dict)``:
    its fit's test split, the newest held-out feedback of the refit), weighted by inverse
    variance (SE from each 95 % CI).  Independent held-out sets of one evaluator measure the
    same agreement, so pooling them halves the noise that limits how small a validity drop can
    be seen; parts without a tau or CI are left out (``sources`` says which were used)."""
    use = [(name, a) for name, a in parts if a and a.get("tau") is not None and _se(a)]
    if not use:
        first = next((a for _, a in parts if a and a.get("tau") is not None), None)
        return {**({k: first.get(k) for k in ("tau", "ci_low", "ci_high", "n")} if first else {}), "sources": []}
    w = [1 / _se(a) ** 2 for _, a in use]
    tau = sum(wi * a["tau"] for wi, (_, a) in zip(w, use, strict=True)) / sum(w)
    se = 1 / math.sqrt(sum(w))
    return {"tau": tau, "ci_low": tau - 1.959964 * se, "ci_high": tau + 1.959964 * se,
            "n": sum(int(a.get("n") or 0) for _, a in use), "sources": [f"{name} (n={a.get('n')})" for name, a in use]}


def _when(ns) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime((ns or 0) / 1e9))


def _span(w: dict) -> str:
    return f"{w['n']} traces started {_when(w['first_ns'])} – {_when(w['last_ns'])}"


def score_drift_message(d: dict) -> str:
    """What changed, how much, since when and what to do, for a :func:`drift_windows` alert."""
    ref = d["reference"]
    run = [w for w in d["windows"] if w["index"] in set(d.get("run") or [])] or d["windows"][-d["thresholds"]["persistence"]:]
    last = run[-1]
    worst_p = max(w["p_value"] for w in run)
    blocks = "; ".join(f"window {w['index']}: {_span(w)}, mean {w['mean']:.3g}, KS {w['ks']:.2f}, "
                       f"PSI {w['psi']:.2f} ({w['psi_null']:.2f} by chance)" for w in run)
    return (f"score drift since {_when(d['since_ns'])}: the evaluator's scores moved in {len(run)} consecutive "
            f"window(s) of {d['settings']['window']} traces (each permutation p <= {worst_p:.2g}): mean {ref['mean']:.3g} -> "
            f"{last['mean']:.3g} ({last['mean'] - ref['mean']:+.3g}). Reference: the first {_span(ref)} after the fit's "
            f"data. {blocks}. What to do: look at recent traces for what changed (a new prompt, model or app version, "
            "another kind of request, truncated or empty outputs); collect feedback on recent traces to see whether "
            "the evaluator still agrees with people there (validity decay); refit once that feedback exists "
            "(`autometrics refit`).")


def validity_message(vd: dict, window_times: tuple[int, int] | None = None) -> str:
    """Message for a validity-decay alert (``level == 'alert'``) of :func:`validity_decay`."""
    w, f = vd["window"], vd.get("fit") or {}
    when = f" received {_when(window_times[0])} – {_when(window_times[1])}" if window_times else ""
    fit_ci = f" [95% CI {f['ci_low']:.3f}, {f['ci_high']:.3f}]" if f.get("ci_low") is not None else ""
    held = ", ".join(f.get("sources") or []) or f"n={f.get('n')}"
    return (f"validity decay: on {w['n']} feedback points{when} (after the fit), Kendall tau = {w['tau']:.3f} "
            f"[95% CI {w['ci_low']:.3f}, {w['ci_high']:.3f}] vs {vd['fit_tau']:.3f}{fit_ci} on the fit's held-out "
            f"feedback ({held}): a drop of {vd['drop']:.3f} (one-sided p = {vd['p_drop']:.2g}). Either the "
            "evaluator no longer tracks people on current traffic or the feedback got noisier. What to do: read a "
            "sample of recent feedback next to the evaluator's scores and rationales; if the feedback is sound, "
            "refit on it (`autometrics refit`); if it is not (careless or automated labels), fix the feedback "
            "source first.")
