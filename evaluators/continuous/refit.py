"""Refit building blocks that do not touch a database: fit an evaluator on feedback collected
online, split off the newest held-out feedback, and decide champion vs challenger.

Why a separate module: the worker (``autometrics.evaluators.continuous.monitor``) owns scheduling,
locking and storage; this module owns the statistics, so they can be tested on plain frames.

- :func:`fit_for_refit` is the single place a refit fits.  Today it runs the LLM-free AutoMetrics
  pipeline (MetricBank + NNLS).  When the LLM pipeline is importable
  (``autometrics.evaluators.judges.pipeline``) *and* an LLM config is given, it is
  used instead, so the refit job never changes when that pipeline lands.
- :func:`newest_holdout` splits by time, grouped by input: champion and challenger are judged on
  the most recent feedback (what the application sees now), and no input is on both sides.
- :func:`compare` is a paired bootstrap of ``tau(challenger) - tau(champion)`` on that same
  held-out set; :func:`decide` promotes only a *validated* challenger (its cross-fitted
  agreement on its training feedback is above chance, :mod:`~autometrics.evaluators.validity`;
  ``promote_unvalidated`` lifts this), and only when the lower 95 % bound is above 0 (better
  beyond noise), when there is no champion yet, or when the champion itself is unvalidated.
"""

from __future__ import annotations

import importlib
import logging
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...metricbank import default_metrics
from ...metricbank.plain import plain_effect
from ..fit import SCORE_COLUMN, Evaluator, FitResult, fit_evaluator
from ..stats import agreement_from_boot, bootstrap_taus, paired_interval

__all__ = [
    "RefitFit",
    "Comparison",
    "fit_for_refit",
    "llm_pipeline_status",
    "newest_holdout",
    "compare",
    "decide",
    "explain_scores",
]

log = logging.getLogger("autometrics.refit")

LLM_MODULE = "autometrics.evaluators.judges.pipeline"
MIN_HOLDOUT = 12  # below this a tau difference is noise whatever the bootstrap says


@dataclass
class RefitFit:
    """What :func:`fit_for_refit` produced: the fit, which pipeline made it, and notes."""

    result: FitResult
    method: str  # "autometrics-<regression>" (LLM-free, e.g. autometrics-nnls) or "autometrics-llm"
    notes: list[str] = field(default_factory=list)

    @property
    def evaluator(self) -> Evaluator:
        return self.result.evaluator


def llm_pipeline_status(llm_config=None) -> tuple[bool, str]:
    """(usable, why) for the LLM pipeline: importable and, if it says so, a model is installed.

    The LLM pipeline may expose ``llm_available(llm_config) -> bool | (bool, str)``; without it,
    explicit options (not a string) count as usable, and ``"auto"``/``"embedded"`` only when the
    embedded model and llama.cpp are installed (``autometrics.evaluators.llm.local``).
    """
    try:
        mod = importlib.import_module(LLM_MODULE)
    except ImportError as exc:
        return False, f"the LLM pipeline is not installed ({LLM_MODULE}: {exc})"
    except Exception as exc:  # a half-written module must not break refits
        return False, f"the LLM pipeline failed to import ({type(exc).__name__}: {exc})"
    if not hasattr(mod, "fit_with_judges"):
        return False, f"{LLM_MODULE} has no fit_with_judges"
    probe = getattr(mod, "llm_available", None)
    if probe is not None:
        try:
            res = probe(llm_config)
        except Exception as exc:
            return False, f"LLM availability check failed ({type(exc).__name__}: {exc})"
        ok, why = (res if isinstance(res, tuple) else (bool(res), ""))
        return bool(ok), why or ("an LLM is available" if ok else "no LLM model is installed")
    if llm_config is None:
        return False, "no LLM configured"
    if not isinstance(llm_config, str):  # explicit options (an endpoint/model chosen by the caller)
        return True, "LLM pipeline with the given options"
    try:  # "auto"/"embedded": only when the embedded model and its runtime are installed
        from ..llm import local as local_llm

        if local_llm.model_path() is not None and local_llm.llama_cpp_available():
            return True, "embedded LLM installed"
        return False, "the embedded LLM is not installed (see `autometrics llm` to install it)"
    except Exception as exc:
        return False, f"cannot check the embedded LLM ({type(exc).__name__}: {exc})"


def _reference_free_metrics(frame: pd.DataFrame):
    """MetricBank metrics that online traces can feed: no references (traces have none), input
    only when the frame has inputs.  Scoring later must be able to run the same metrics."""
    has_input = "input" in frame.columns and frame["input"].notna().any()
    return default_metrics(with_reference=False, with_input=bool(has_input))


def fit_for_refit(
    frame: pd.DataFrame,
    target: str,
    task: str | None,
    llm_config=None,
    *,
    seed: int = 0,
    n_boot: int = 1000,
    top_n: int = 5,
    test_size: float | None = None,
    metrics=None,
    crossfit=None,
) -> RefitFit:
    """Fit one evaluator for ``target`` on a training frame (``id,input,output,<target>``).

    LLM path when ``llm_config`` is given and the LLM pipeline is usable; otherwise the LLM-free
    fit on reference-free MetricBank metrics (``metrics`` overrides the list).  A failing LLM
    path falls back to LLM-free and says so in ``notes`` (a refit should still produce a
    candidate; the champion/challenger test decides whether it is any good).
    """
    notes: list[str] = []
    frame = frame.reset_index(drop=True)
    # a store frame names each trace's conversation (its session, else its input): kept whole in splits
    group_col = "conversation" if "conversation" in frame.columns else None
    if llm_config is not None:
        ok, why = llm_pipeline_status(llm_config)
        if ok:
            try:
                from ..judges.options import LLMOptions

                data = frame[[c for c in ("id", "input", "output", target, "conversation") if c in frame.columns]]
                # "auto"/"embedded": the pipeline's defaults (the embedded local model)
                options = LLMOptions() if isinstance(llm_config, str) else llm_config
                result = fit_evaluator(data, target, task=task, llm_options=options, seed=seed, n_boot=n_boot, top_n=top_n,
                                       test_size=test_size, crossfit=crossfit, group_col=group_col)
                return RefitFit(result, "autometrics-llm", notes)
            except Exception as exc:
                log.warning("LLM refit failed, falling back to the LLM-free fit: %s: %s", type(exc).__name__, exc)
                notes.append(f"LLM pipeline failed ({type(exc).__name__}: {exc}); fitted LLM-free")
        else:
            notes.append(f"LLM pipeline not used: {why}; fitted LLM-free")
    data = frame[[c for c in ("id", "input", "output", target, "conversation") if c in frame.columns]]
    result = fit_evaluator(
        data,
        target,
        group_col=group_col,
        task=task,
        metrics=metrics if metrics is not None else _reference_free_metrics(frame),
        seed=seed,
        n_boot=n_boot,
        top_n=top_n,
        test_size=test_size,
        crossfit=crossfit,
    )
    return RefitFit(result, result.evaluator.artifact["method"]["name"], notes)


def newest_holdout(frame: pd.DataFrame, fraction: float = 0.3, *, time_col: str = "feedback_ns", group_col: str | None = None):
    """Split a labelled frame into (older train, newest held-out) positions.

    Groups (``group_col``; default the store frame's ``conversation`` — the session, else the
    input — or the input) are kept whole and ordered by their newest row, so the held-out part is
    the most recent feedback and no input is on both sides.  Returns two index arrays.
    """
    n = len(frame)
    if n == 0:
        return np.array([], dtype=int), np.array([], dtype=int)
    group_col = group_col or ("conversation" if "conversation" in frame.columns else "input")
    t = pd.to_numeric(frame[time_col], errors="coerce").fillna(0).to_numpy() if time_col in frame.columns else np.arange(n)
    groups = frame[group_col].fillna("").astype(str).to_numpy() if group_col in frame.columns else np.arange(n).astype(str)
    g = pd.DataFrame({"g": groups, "t": t, "pos": np.arange(n)})
    newest = g.groupby("g", sort=False)["t"].max().sort_values(kind="stable", ascending=False)
    want = max(1, int(math.ceil(fraction * n)))
    hold_groups, count = [], 0
    sizes = g.groupby("g", sort=False).size()
    for grp in newest.index:
        if count >= want:
            break
        hold_groups.append(grp)
        count += int(sizes[grp])
    hold_mask = g["g"].isin(set(hold_groups)).to_numpy()
    return np.flatnonzero(~hold_mask), np.flatnonzero(hold_mask)


@dataclass
class Comparison:
    """Challenger vs champion on the same held-out feedback."""

    n: int
    challenger: dict  # Agreement.to_dict()
    champion: dict | None
    delta: float | None  # tau(challenger) - tau(champion)
    ci_low: float | None
    ci_high: float | None
    n_boot: int

    def to_dict(self) -> dict:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in self.__dict__.items()}


def _agreement_dict(pred, y, boots: np.ndarray) -> dict:
    return agreement_from_boot(pred, y, boots).to_dict()


def compare(challenger_pred, champion_pred, human, *, n_boot: int = 1000, seed: int = 0) -> Comparison:
    """Paired bootstrap of the tau difference: the same resampled rows for both evaluators, so
    the noise they share (which examples happen to be held out) cancels.  Rows where the human
    label or either prediction is missing are dropped first."""
    y = np.asarray(human, dtype=float)
    c = np.asarray(challenger_pred, dtype=float)
    p = None if champion_pred is None else np.asarray(champion_pred, dtype=float)
    ok = np.isfinite(y) & np.isfinite(c) & (np.isfinite(p) if p is not None else True)
    y, c = y[ok], c[ok]
    p = p[ok] if p is not None else None
    if len(y) < 3:
        empty = {"n": int(len(y)), "tau": None, "ci_low": None, "ci_high": None, "p_value": None}
        return Comparison(len(y), empty, None if p is None else dict(empty), None, None, None, n_boot)
    boots = bootstrap_taus([c] if p is None else [c, p], y, n_boot, seed)
    ch = _agreement_dict(c, y, boots[:, 0])
    if p is None:
        return Comparison(len(y), ch, None, None, None, None, n_boot)
    cp = _agreement_dict(p, y, boots[:, 1])
    t_c = ch["tau"] if ch["tau"] is not None else float("nan")
    t_p = cp["tau"] if cp["tau"] is not None else 0.0  # a champion that cannot rank (constant) has no agreement
    delta = t_c - t_p
    # a champion that cannot rank on a resample counts as no agreement there (tau 0)
    lo, hi = paired_interval(boots[:, 0], np.where(np.isfinite(boots[:, 1]), boots[:, 1], 0.0))
    return Comparison(len(y), ch, cp, float(delta), lo, hi, n_boot)


def decide(cmp: Comparison, *, has_champion: bool, min_holdout: int = MIN_HOLDOUT, validity: dict | None = None,
           champion_validated: bool = True, promote_unvalidated: bool = False) -> tuple[bool, str]:
    """(promote, reason): never an unvalidated challenger (``validity``, its verdict) unless
    ``promote_unvalidated``; then promote when there is no champion or the champion is
    unvalidated, else only when the lower bound of the paired-bootstrap CI of the tau difference
    is above 0."""
    tau = cmp.challenger.get("tau")
    validated = True if validity is None else bool(validity.get("validated"))
    if not validated and not promote_unvalidated:
        return False, (f"not validated, so not promoted: {validity.get('reason', '')} "
                       "(--promote-unvalidated promotes it anyway, marked unvalidated)")
    tag = "" if validated else "UNVALIDATED (promoted by --promote-unvalidated): "
    if not has_champion:
        return True, tag + "first evaluator version for this target (no champion to beat)"
    replaces = validated and not champion_validated  # a validated challenger always replaces an unvalidated champion
    instead = "validated, replacing an unvalidated champion: " + (validity or {}).get("reason", "")
    if cmp.n < min_holdout:
        return (True, instead) if replaces else (False, f"held-out feedback too small to compare (n={cmp.n} < {min_holdout})")
    if tau is None or cmp.delta is None or not math.isfinite(cmp.delta):
        return (True, instead) if replaces else (False, "challenger's held-out tau is undefined")
    if cmp.ci_low is None or not math.isfinite(cmp.ci_low):
        return (True, instead) if replaces else (False, "bootstrap of the tau difference is undefined")
    champ = cmp.champion.get("tau") if cmp.champion else None
    what = (f"tau {tau:.3f} vs champion {champ:.3f}" if champ is not None else f"tau {tau:.3f} vs champion (undefined)")
    span = f"difference {cmp.delta:+.3f}, 95% CI [{cmp.ci_low:+.3f}, {cmp.ci_high:+.3f}], n={cmp.n}"
    if cmp.ci_low > 0:
        return True, tag + f"better than the champion beyond noise on the newest held-out feedback: {what}; {span}"
    if replaces:
        return True, f"{instead} (on the newest held-out feedback: {what}; {span})"
    return False, f"not better than the champion beyond noise on the newest held-out feedback: {what}; {span}"


def explain_scores(evaluator: Evaluator, scored: pd.DataFrame, *, top: int = 3) -> tuple[pd.DataFrame, list[list[dict]]]:
    """Per-row contributions (``weight * z``) of each selected metric and short rationales.

    For LLM-judge features the judge's own rationale column (``<feature>.rationale``, when the
    evaluator returns one) is used; for classic metrics the rationale says which metric pushed
    the score up or down and by how much.  Returns (contributions frame, rationales per row).
    """
    contrib = evaluator.contributions(scored)
    # "typical": the training mean the metric is standardised by (a shape model: the median it imputes)
    typical = {f["feature"]: f.get("mean", f.get("impute")) for f in evaluator.features}
    rationales: list[list[dict]] = []
    for i in range(len(scored)):
        row = []
        order = contrib.iloc[i].abs().sort_values(ascending=False).index.tolist() if len(contrib.columns) else []
        for name in order[:top]:
            c = float(contrib.iloc[i][name])
            judge = f"{name}.rationale"
            if judge in scored.columns and isinstance(scored.iloc[i][judge], str) and scored.iloc[i][judge].strip():
                text = scored.iloc[i][judge].strip()
            else:
                text = _plain_rationale(name, scored.iloc[i][name], c, typical.get(name))
            row.append({"metric": name, "contribution": round(c, 4), "text": text})
        rationales.append(row)
    return contrib, rationales


def _plain_rationale(name: str, value, c: float, typical) -> str:
    """"fewer distinct words and phrases than typical answers lowered the score by 0.12
    (DistinctNGrams.distinct4 = 0.61; typical 0.83)"; the metric's name and value alone when it
    has no plain phrase (a pairwise term) or the value is missing."""
    shown = "missing" if pd.isna(value) else f"{float(value):.3g}"
    plain = not pd.isna(value) and typical is not None and float(value) != float(typical)
    clause = plain_effect(name, float(value) > float(typical), c >= 0) if plain else None
    if clause is None:
        return f"{name} = {shown} {'raised' if c >= 0 else 'lowered'} the score by {abs(c):.2f}"
    return f"{clause} by {abs(c):.2f} ({name} = {shown}; typical {float(typical):.3g})"


def holdout_predictions(evaluator: Evaluator, frame: pd.DataFrame) -> np.ndarray:
    """Scores of ``evaluator`` on a frame (``output`` and, when present, ``input``)."""
    inputs = frame["input"].fillna("").astype(str).tolist() if "input" in frame.columns else None
    scored = evaluator.score_texts(frame["output"].fillna("").astype(str).tolist(), inputs=inputs)
    return scored[SCORE_COLUMN].to_numpy(dtype=float)
