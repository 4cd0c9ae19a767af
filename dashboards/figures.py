"""Which data each τ, CI and p-value of an evaluator version was computed on, as one label per
figure, shared by the dashboard, ``autometrics versions`` and the Langfuse push.

Why: a refit stores three agreement figures computed on three different sets of feedback, and
shown side by side without saying so they read as contradictions (a significant headline τ next
to a "not significant" warning about another split).  The three, as the refit and the monitor
store them in a version's ``statistics``:

- ``fit.test`` — the fit's own test split, drawn from the *older* feedback the refit trains on
  (``fit_for_refit`` splits its training part again); the evaluator artifact's warnings
  (``artifact["warnings"]``, e.g. "held-out agreement is not significant") are about this split;
- ``holdout`` — the champion/challenger comparison on the *newest* feedback, held out of the
  fit entirely (``holdout.challenger``, ``holdout.champion``, the paired Δτ); the refit's own
  warnings ("... on the newest feedback ...", "small held-out set") are about this set;
- ``live_validity`` — the champion's online scores against feedback that arrived after its fit,
  updated by each drift check.

Every label has the form ``<which data> (n=…, …)`` so a page can be checked mechanically.
"""

from __future__ import annotations

import datetime as dt
import math

from ..evaluators.reading import metric_direction
from ..evaluators.validity import artifact_validity, data_label, legacy_validity

__all__ = ["FIT_TEST", "FIT_CROSS", "FIT_TRAIN", "HOLDOUT", "LIVE", "SCORES", "when", "fmt_stat", "fit_test", "holdout", "live",
           "labelled_warnings", "alert_figure", "drift_summary", "reconcile", "version_lines", "validity", "validity_label"]

FIT_TEST = "fit-time test split"
FIT_CROSS = "cross-fitted on the fit's feedback"
FIT_TRAIN = "fit-time training split"
HOLDOUT = "newest held-out feedback at refit"
LIVE = "live feedback since the fit"
SCORES = "score distribution"


def when(ns) -> str:
    if ns is None or (isinstance(ns, float) and not math.isfinite(ns)) or not ns:
        return "–"
    return dt.datetime.fromtimestamp(int(ns) / 1e9, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _num(v, digits=3) -> str:
    return "–" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{digits}f}"


def _p(v) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    return f"{v:.2g}" if v >= 1e-3 else f"{v:.1e}"


def fmt_stat(s: dict | None) -> str:
    """``τ 0.412 [95% CI 0.210, 0.600], p = 4.2e-04`` (n goes in the label, not here)."""
    s = s or {}
    if s.get("tau") is None:
        return "τ undefined"
    return f"τ {_num(s.get('tau'))} [95% CI {_num(s.get('ci_low'))}, {_num(s.get('ci_high'))}], p = {_p(s.get('p_value'))}"


def _stats(version: dict) -> dict:
    return version.get("statistics") or {}


def validity(version: dict) -> dict:
    """The version's validity verdict (``validated``, ``reason``, ...): from its artifact, else
    from its statistics (a version listed without the artifact); an evaluator fitted before
    validity was recorded gets the verdict read from its fit's held-out statistics."""
    if version.get("artifact"):
        return artifact_validity(version["artifact"])
    return _stats(version).get("validity") or legacy_validity((_stats(version).get("fit") or {}).get("test") or {})


def validity_label(version: dict) -> str:
    """The data the version's validity verdict was computed on, as a figure label."""
    v = validity(version)
    return data_label(v) if v.get("method") == "cross-fit" else fit_test(version)[1]


def fit_test(version: dict) -> tuple[dict, str]:
    """(agreement on the fit's own test split, or cross-fitted on the fit's feedback, its label)."""
    st = _stats(version)
    s = (st.get("fit") or {}).get("test") or {}
    if s.get("method") == "cross-fit":
        v = st.get("validity") or {}
        return s, (f"{FIT_CROSS} (n={s.get('n', 0)}, {v.get('folds', '?')} grouped folds × {v.get('repeats', '?')} repeats; "
                   "every row predicted by a fit without it)")
    older = st.get("n_train")
    of = f"; the fit's own split of the {older} older feedback points it trained on" if older is not None else ""
    return s, f"{FIT_TEST} (n={s.get('n', 0)}{of})"


def holdout(version: dict) -> tuple[dict, str]:
    """(the challenger's agreement on the newest held-out feedback at its refit, its label)."""
    h = _stats(version).get("holdout") or {}
    s = h.get("challenger") or {}
    n = s.get("n", h.get("n", 0))
    return s, f"{HOLDOUT} (n={n}, champion/challenger comparison)"


def live(version: dict) -> tuple[dict, str | None]:
    """(agreement of the online scores with feedback newer than the fit, its label); label None
    when no drift check has measured it yet.

    The window's bounds: the first and last feedback time the drift check stored; for figures
    stored without them, the interval that certainly contains the window, from the newest
    feedback the fit saw to the time of the check.
    """
    lv = _stats(version).get("live_validity") or {}
    if not lv:
        return {}, None
    w = lv.get("window") or {}
    lo, hi = _window_bounds(lv, version.get("feedback_max_ns"), lv.get("checked_at_ns"))
    return w, f"{LIVE} (n={w.get('n', 0)}, from {when(lo)} to {when(hi)})"


def _window_bounds(d: dict, lo, hi):
    """(first, last) feedback time of a live-validity window: as the drift check stored them
    (``feedback_first_ns`` / ``feedback_last_ns``), else the given bounds that contain it."""
    return d.get("feedback_first_ns") or lo, d.get("feedback_last_ns") or hi


def labelled_warnings(version: dict) -> list[tuple[str, str]]:
    """The version's stored warnings, each with the label of the figure it is about.

    Provenance, not wording, decides: warnings the evaluator artifact carries come from the fit
    (its test split, its data and metrics); the refit notes are about the fit pipeline; the rest
    were added by the refit about the champion/challenger comparison.  Without the artifact
    (a version listed without it) the fit's warnings cannot be told apart and are labelled
    ``refit``.
    """
    st = _stats(version)
    art = version.get("artifact")
    fit_w = set((art or {}).get("warnings") or [])
    notes = set(st.get("notes") or [])
    _, fit_label = fit_test(version)
    _, hold_label = holdout(version)
    out = []
    for w in st.get("warnings") or []:
        if w in fit_w:
            out.append((fit_label, w))
        elif w in notes:
            out.append(("refit note", w))
        elif art is None:
            out.append(("refit", w))
        else:
            out.append((hold_label, w))
    return out


def alert_figure(alert: dict, version: dict | None) -> str:
    """The label of the figure a stored monitor alert is about (from its details, then its kind)."""
    d = alert.get("details") or {}
    kind = alert.get("kind") or ""
    if isinstance(d, dict) and isinstance(d.get("window"), dict):
        w = d["window"]
        lo, hi = _window_bounds(d, (version or {}).get("feedback_max_ns"), alert.get("created_at_ns"))
        label = f"{LIVE} (n={w.get('n', 0)}, from {when(lo)} to {when(hi)})"
        ref = d.get("fit_tau")
        if isinstance(ref, int | float) and math.isfinite(ref) and version is not None:
            # the drift check compares with the champion/challenger figure, whatever its message calls it
            label += f", compared with τ {ref:.3f} on the {holdout(version)[1]}"
        return label
    if kind == "traffic_change" and isinstance(d, dict) and isinstance(d.get("alarm"), dict):  # sequential CUSUM
        a, ref = d["alarm"], d.get("reference") or {}
        return (f"{SCORES} (n={a['at'] - a['change_at'] + 1} online scores since the estimated change point vs the "
                f"reference of the first {ref.get('n', 0)} online scores after the fit's data; sequential CUSUM)")
    if kind == "validity_change" and isinstance(d, dict) and isinstance(d.get("alarm"), dict):  # sequential live validity
        a, ref = d["alarm"], d.get("reference") or {}
        return (f"{LIVE} (n={a.get('n_after', 0)} labels since the estimated change point vs the first {ref.get('n', 0)} "
                f"labels after the fit, each label's concordance with {d.get('pool_n', 0)} labels before it; sequential CUSUM)")
    if isinstance(d, dict) and isinstance(d.get("reference"), dict):  # windows of online scores (drift_windows)
        windows = d.get("windows") or []
        keep = set(d.get("run") or [])  # the consecutive significant windows the alert is about
        runs = [w for w in windows if w.get("index") in keep] or windows[-int((d.get("thresholds") or {}).get("persistence") or 1):]
        n_cur = sum(int(w.get("n") or 0) for w in runs)
        return (f"{SCORES} (n={n_cur} online scores in {len(runs)} window(s) vs the reference of the first "
                f"{d['reference'].get('n', 0)} online scores after the fit's data)")
    if isinstance(d, dict) and ("n_current" in d or kind == "score_drift"):
        return f"{SCORES} (n={d.get('n_current', 0)} newest online scores vs {d.get('n_reference', 0)} reference scores)"
    if kind == "unvalidated" and isinstance(d, dict) and d.get("method"):  # details: the version's validity verdict
        from ..evaluators.validity import data_label

        return data_label(d)
    if kind in ("low_significance", "small_n"):  # raised by the refit that promoted the version
        n = d.get("n") if isinstance(d, dict) else None
        if n is None and version is not None:
            n = holdout(version)[0].get("n")
        return f"{HOLDOUT} (n={n}, champion/challenger comparison)"
    return kind.replace("_", " ") or "monitor"


def drift_summary(drift: dict) -> str:
    """One line on the score-drift check stored in a version's statistics (``drift``): its state
    and, once windows were tested, the newest window's KS p and PSI with the data they compare."""
    ref = drift.get("reference") or {}
    runs = drift.get("windows") or []
    line = f"score drift check: {drift.get('state') or 'not run yet'}"
    if runs:
        w = runs[-1]
        line += (f"; newest window: KS {_num(w.get('ks'), 2)}, p = {_p(w.get('p_value'))}, PSI {_num(w.get('psi'), 2)} "
                 f"({_num(w.get('psi_null'), 2)} by chance) on the {SCORES} (n={w.get('n', 0)} online scores of window "
                 f"{w.get('index', '?')} vs the reference of the first {ref.get('n', 0)} online scores after the fit's data)")
    return line


def sequential_summary(seq: dict, validity: dict | None = None) -> str:
    """One line on the sequential detectors in a version's statistics (``sequential`` and
    ``sequential_validity``): what they watch, against which reference, and their budget."""
    arl = (seq.get("settings") or {}).get("arl")
    budget = f"false-alarm budget 1 per {arl:,} unchanged traces" if arl else "budget not set"
    dets = seq.get("detectors") or {}
    metrics = sum(1 for n in dets if n.startswith("metric:"))
    what = ", ".join(x for x in ("the score" if "score" in dets else "", f"{metrics} metric(s)" if metrics else "",
                                 "the failed/empty rate" if "failed_or_empty" in dets else "") if x)
    line = f"sequential detection (CUSUM; {budget}): {seq.get('state') or 'not run yet'}"
    if what:
        line += f" — watching {what}"
    if seq.get("constant"):
        line += f"; constant in the reference, not watched: {', '.join(n.split(':', 1)[-1] for n in seq['constant'])}"
    if validity:
        line += f"; live validity: {validity.get('state') or 'no feedback after the fit yet'}"
    return line


def _significant(s: dict) -> bool | None:
    p = s.get("p_value")
    return None if p is None or s.get("tau") is None else p <= 0.05


def reconcile(figures: list[tuple[dict, str | None]]) -> str | None:
    """One plain sentence when the figures disagree about significance: they are on different
    data, and whether their CIs overlap says whether they actually contradict each other."""
    figs = [(s, label) for s, label in figures if label and s and s.get("tau") is not None]
    sig = [f for f in figs if _significant(f[0])]
    weak = [f for f in figs if _significant(f[0]) is False]
    if not sig or not weak:
        return None
    parts = "; ".join(f"on the {label} τ = {_num(s['tau'])}, p = {_p(s.get('p_value'))}" for s, label in sig + weak)
    lows = [s.get("ci_low") for s, _ in figs]
    highs = [s.get("ci_high") for s, _ in figs]
    if None in lows or None in highs:
        verdict = "Each figure is computed on different feedback."
    elif max(lows) <= min(highs):
        verdict = ("They are computed on different feedback and their 95% CIs overlap, so they do not contradict each other: "
                   "the smaller or noisier set alone cannot show the agreement beyond noise.")
    else:
        verdict = ("They are computed on different feedback and their 95% CIs do not overlap: the evaluator agrees with "
                   "humans differently on these sets (older vs newer feedback?); collect more feedback before trusting either.")
    return f"Why these figures differ: {parts}. {verdict}"


def version_lines(x: dict, *, fmt=fmt_stat) -> list[str]:
    """``autometrics versions show N`` as lines: each agreement figure with the data it was
    computed on, each metric's direction read against its card, each warning with its figure.
    ``fmt`` formats one agreement dict (the CLI passes its ``tau ... p=... n=...`` form)."""
    st = x["statistics"]
    ho = st.get("holdout") or {}
    v = validity(x)
    out = [f"v{x['version']} ({x['status']}, {x['method']}): {x['reason']}",
           "  " + ("validated" if v.get("validated") else "NOT VALIDATED") + f" [{validity_label(x)}]: " + str(v.get("reason", "")),
           "  Kendall tau, by the data it was computed on:"]
    s, label = holdout(x)
    out.append(f"    {label}: {fmt(s)}")
    if ho.get("champion") and st.get("champion_version") is not None:
        delta = "" if ho.get("delta") is None or ho.get("ci_low") is None else (
            f"; difference {ho['delta']:+.3f}, 95% CI [{ho['ci_low']:+.3f}, {ho['ci_high']:+.3f}]")
        out.append(f"      champion v{st['champion_version']} on the same feedback: {fmt(ho['champion'])}{delta}")
    s, label = fit_test(x)
    out.append(f"    {label}: {fmt(s)}")
    s, label = live(x)
    if label:
        out.append(f"    {label}: {fmt(s)} (checked {when((st.get('live_validity') or {}).get('checked_at_ns'))})")
    elif x["status"] == "champion":
        out.append(f"    {LIVE}: not measured yet (no drift check found feedback newer than the fit with an online score)")
    else:
        out.append(f"    {LIVE}: not measured (only the champion scores traces online)")
    why = reconcile([holdout(x), fit_test(x), live(x)])
    if why:
        out.append(f"  {why}")
    n_train = ((x["artifact"].get("statistics") or {}).get("train") or {}).get("n")
    out.append("  metrics (score = intercept + sum of weight * z(metric); z is not flipped by the card's direction):")
    for f in x["artifact"]["features"]:
        d = metric_direction(f, n_train)
        out.append(f"    {f['feature']:<28} weight {f['weight']:+.4f}  {d['uses']} (card: {d['card']})")
        if d["contradicts"]:
            out.append(f"      ⚠ {d['reading']}")
    out += [f"  warning [{label}]: {w}" for label, w in labelled_warnings(x)]
    return out
