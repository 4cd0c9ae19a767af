"""Data scaling (AutoMetrics paper, §4.6): held-out Kendall τ against the number of training
labels, to answer "how many more labels are worth collecting?".

One fixed held-out test split (the same grouped split ``fit_evaluator`` makes with ``seed`` and
``test_size``) and, for every seed, a seeded random order of the training rows; the training
set of size n is the first n rows of that order, so the sizes of one seed are nested (the
10-label set holds the 5-label set) and a step's gain is measured on the same rows plus new
ones.  The first two rows of an order carry different labels, so no training set is constant.
Sizes are 5, 10, 20, 40, 80, 160, ... below the training pool, plus the whole pool (every seed
gives the same set there, so it is fitted once).

Arms: ``bank`` — the LLM-free evaluator (:func:`.fit.fit_evaluator` on MetricBank scores,
computed once); with an LLM (``llm_options``) also ``generated`` and ``generated+bank`` —
:func:`~autometrics.evaluators.fit.fit_evaluator` with an LLM with ``use_bank="never"`` and ``"always"`` (judges are
generated from each training set, so this costs LLM calls per size and seed).

Each fit is the package's own fit on a dataset whose split is fixed to (training subset, test
split); the held-out predictions are then compared with the human scores.  Uncertainty: a
two-level percentile bootstrap that resamples the test rows (the same resample for every size,
so gains are paired) and the seeds; it gives a 95 % interval for each size's mean τ and for the
gain between the last two sizes, which the automatic reading reports.

Example::

    from autometrics.evaluators.analysis.scaling import run_scaling
    sc = run_scaling("simpeval.csv", "score", seeds=3)
    print(sc.summary, sc.reading)
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...collectors.files import json_safe
from ...metricbank import default_metrics, get_metric
from ...metricbank.errors import UserError
from ..data import Dataset, load_dataset
from ..fit import fit_evaluator, score_metrics
from ..stats import bootstrap_taus as _bootstrap
from ..stats import kendall_tau

__all__ = ["DEFAULT_SIZES", "ScalingResult", "run_scaling", "scaling_sizes", "taus_with_bootstrap", "markdown_section",
           "svg_plot"]

log = logging.getLogger("autometrics")

DEFAULT_SIZES = (5, 10, 20, 40, 80, 160, 320, 640, 1280, 2560)
#: a last-step gain whose upper 95 % bound is below this counts as a plateau in the reading
PLATEAU_TAU = 0.05
ARM_BANK = "bank"
ARM_GENERATED = "generated"
ARM_BOTH = "generated+bank"
ARM_TITLES = {ARM_BANK: "MetricBank + NNLS (no LLM)", ARM_GENERATED: "generated judges only (LLM)",
              ARM_BOTH: "generated judges + MetricBank (LLM)"}


def scaling_sizes(n_pool: int, sizes=None) -> list[int]:
    """The requested sizes below the training pool, then the pool itself."""
    sizes = sorted({int(s) for s in (sizes or DEFAULT_SIZES) if int(s) >= 2})
    out = [s for s in sizes if s < n_pool]
    return out + [n_pool]


def _order(pool: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A seeded random order of ``pool`` whose first two rows have different labels."""
    order = rng.permutation(pool)
    if len(order) > 2 and y[order[0]] == y[order[1]]:
        k = next((j for j in range(2, len(order)) if y[order[j]] != y[order[0]]), None)
        if k is not None:
            order[[1, k]] = order[[k, 1]]
    return order


# ---------------------------------------------------------------------------- bootstrap


def taus_with_bootstrap(preds: np.ndarray, y: np.ndarray, *, n_boot: int = 500, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Kendall τ-b of every row of ``preds`` (K × n) against ``y`` on the full test set and on
    ``n_boot`` shared bootstrap resamples of the test rows (:func:`autometrics.evaluators.stats.bootstrap_taus`).
    NaN predictions drop their row.  Returns (tau of shape K, boot of shape K × n_boot)."""
    preds = np.atleast_2d(np.asarray(preds, dtype=float))
    y = np.asarray(y, dtype=float)
    tau = np.array([kendall_tau(p, y)[0] for p in preds])
    return tau, _bootstrap(list(preds), y, n_boot, seed).T


# ------------------------------------------------------------------------------ result


@dataclass
class ScalingResult:
    """``table``: one row per fit (arm, n_train, seed, tau); ``summary``: one row per (arm,
    n_train) with the mean over seeds and its 95 % interval; ``gains``: per arm, the gain between
    the last two sizes; ``reading``: the automatic reading in words."""

    table: pd.DataFrame
    summary: pd.DataFrame
    gains: dict
    reading: list[str]
    settings: dict
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return json_safe({"table": self.table.to_dict(orient="records"), "summary": self.summary.to_dict(orient="records"),
                       "gains": self.gains, "reading": self.reading, "settings": self.settings, "notes": self.notes,
                       "seconds": round(self.seconds, 2)})

    def markdown(self, level: int = 2) -> str:
        return "\n".join(markdown_section(self.to_dict(), level=level)) + "\n"


# -------------------------------------------------------------------------------- driver


def _bank_features(lab: Dataset, metrics, progress: bool):
    if metrics is None:
        bank = default_metrics(with_reference=lab.has_references, with_input=lab.has_input)
    else:
        bank = [get_metric(m) if isinstance(m, str) else m for m in metrics]
    return score_metrics(bank, lab.outputs, lab.inputs if lab.has_input else None, lab.references, progress=progress)


def run_scaling(
    data,
    target: str,
    *,
    sizes=None,
    seeds: int = 3,
    test_size: float = 0.3,
    seed: int = 0,
    top_n: int = 5,
    metrics=None,
    features: tuple[pd.DataFrame, dict, list[str]] | None = None,
    llm_options=None,
    arms=None,
    task: str | None = None,
    n_boot: int = 500,
    dataset: Dataset | None = None,
    progress: bool = False,
    echo=lambda *a, **k: None,
    **columns,
) -> ScalingResult:
    """The scaling curve (module docstring).

    ``features``: MetricBank scores of the labelled rows as ``score_metrics`` returns them
    (computed here when None, from ``metrics`` or the default bank).  ``llm_options``: an
    :class:`~autometrics.evaluators.judges.options.LLMOptions`; adds the two LLM arms.  ``arms`` restricts the
    arms.  ``columns``: ``input_col``, ``output_col``, ``reference_cols``, ``id_col``,
    ``group_col`` as for :func:`~.data.load_dataset`."""
    started = time.perf_counter()
    ds = dataset or load_dataset(data, target, **columns)
    lab = ds.labelled(target)
    y = lab.y(target)
    train_pool, test_rows = lab.split_positions(test_size, seed)
    notes: list[str] = []
    all_sizes = scaling_sizes(len(train_pool), sizes)
    if arms is None:
        arms = [ARM_BANK] + ([ARM_GENERATED, ARM_BOTH] if llm_options is not None else [])
    arms = list(arms)
    if any(a in (ARM_GENERATED, ARM_BOTH) for a in arms) and llm_options is None:
        raise UserError("the generated-judge arms need llm_options (an LLMOptions)")

    if ARM_BANK in arms and features is None:
        echo(f"scaling: scoring MetricBank on {len(lab)} labelled rows ...")
        features = _bank_features(lab, metrics, progress)
    if features is not None and len(features[0]) != len(lab):
        raise UserError(f"features have {len(features[0])} rows, the labelled data has {len(lab)}")

    orders = [_order(train_pool, y, np.random.default_rng([seed, s])) for s in range(seeds)]
    y_test = y[test_rows]
    test_ids = lab.frame["id"].to_numpy()[test_rows].astype(str)

    def fit(arm: str, train_rows: np.ndarray) -> np.ndarray:
        fx = lab.with_split(np.sort(train_rows), test_rows)  # the package's own fit, on our split
        if arm == ARM_BANK:
            X, meta, fnotes = features
            rows = np.concatenate([np.sort(train_rows), test_rows])
            res = fit_evaluator(None, target, task=task, dataset=fx, top_n=top_n, n_boot=0,
                                features=(X.iloc[rows].reset_index(drop=True), meta, fnotes))
        else:
            opts = dataclasses.replace(llm_options, use_bank="never" if arm == ARM_GENERATED else "always")
            res = fit_evaluator(None, target, task=task, llm_options=opts, dataset=fx, top_n=top_n, n_boot=0)
        got = res.test["id"].astype(str).to_numpy()
        if not np.array_equal(got, test_ids):  # the fit must have used our split
            raise RuntimeError("the fit did not use the fixed test split")
        return res.test["score"].to_numpy(dtype=float)

    records, preds = [], []
    for arm in arms:
        for n in all_sizes:
            full = n >= len(train_pool)
            for s in ([0] if full else range(seeds)):
                t0 = time.perf_counter()
                try:
                    p = fit(arm, orders[s][:n])
                    err = None
                except Exception as exc:  # one failed fit is a missing point, not a crash
                    log.warning("scaling fit failed (%s, n=%d, seed %d): %s", arm, n, s, exc, exc_info=True)
                    p, err = np.full(len(test_rows), np.nan), f"{type(exc).__name__}: {exc}"
                    notes.append(f"{arm} n={n} seed {s}: fit failed ({err})")
                records.append({"arm": arm, "n_train": n, "seed": "all" if full else s, "error": err,
                                "seconds": round(time.perf_counter() - t0, 2)})
                preds.append(p)
            echo(f"scaling: {arm} n={n} done")

    tau, boot = taus_with_bootstrap(np.vstack(preds), y_test, n_boot=n_boot, seed=seed)
    table = pd.DataFrame(records)
    table["tau"] = tau
    table["n_test"] = len(test_rows)
    n_undef = int((table["error"].isna() & table["tau"].isna()).sum())
    if n_undef:
        notes.append(f"{n_undef} fit(s) predicted a constant on the test split: τ undefined, left out of the means")

    rng = np.random.default_rng([seed, 7])
    B = boot.shape[1]

    def seed_mean_boot(idx: np.ndarray) -> np.ndarray:
        """Per bootstrap draw: the mean τ over a resample (with replacement) of the seeds."""
        pick = idx[rng.integers(0, len(idx), (B, len(idx)))]  # B × seeds
        vals = boot[pick, np.arange(B)[:, None]]
        ok = np.isfinite(vals)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(ok, vals, 0.0).sum(axis=1) / ok.sum(axis=1)

    summary, draws = [], {}
    for arm in arms:
        for n in all_sizes:
            idx = np.flatnonzero((table["arm"] == arm).to_numpy() & (table["n_train"] == n).to_numpy())
            t = table["tau"].to_numpy()[idx]
            ok = np.isfinite(t)
            d = seed_mean_boot(idx[ok]) if ok.any() else np.full(B, np.nan)
            draws[(arm, n)] = d
            finite = d[np.isfinite(d)]
            lo, hi = (np.percentile(finite, [2.5, 97.5]) if len(finite) >= max(10, B // 2) else (math.nan, math.nan))
            summary.append({"arm": arm, "n_train": n, "fits": int(len(idx)), "defined": int(ok.sum()),
                            "tau_mean": float(np.mean(t[ok])) if ok.any() else math.nan,
                            "tau_sd": float(np.std(t[ok], ddof=1)) if ok.sum() > 1 else math.nan,
                            "ci_low": float(lo), "ci_high": float(hi)})
    summary = pd.DataFrame(summary)

    gains: dict[str, dict] = {}
    reading: list[str] = []
    for arm in arms:
        s = summary[summary["arm"] == arm].sort_values("n_train")
        s = s[np.isfinite(s["tau_mean"])]
        if len(s) < 2:
            reading.append(f"{ARM_TITLES.get(arm, arm)}: fewer than two sizes with a defined τ; no reading.")
            continue
        a, b = s.iloc[-2], s.iloc[-1]
        diff = draws[(arm, int(b["n_train"]))] - draws[(arm, int(a["n_train"]))]
        fin = diff[np.isfinite(diff)]
        lo, hi = (np.percentile(fin, [2.5, 97.5]) if len(fin) >= max(10, B // 2) else (math.nan, math.nan))
        g = {"from": int(a["n_train"]), "to": int(b["n_train"]), "gain": float(b["tau_mean"] - a["tau_mean"]),
             "ci_low": float(lo), "ci_high": float(hi), "p_not_positive": float(np.mean(fin <= 0)) if len(fin) else math.nan}
        last3 = s.iloc[-3:]
        if len(last3) >= 3:
            slope = np.polyfit(np.log2(last3["n_train"].to_numpy(dtype=float)), last3["tau_mean"].to_numpy(dtype=float), 1)[0]
            g["per_doubling"] = float(slope)
        gains[arm] = g
        reading.append(_read(arm, s, g))
    if len(test_rows) < 60:
        reading.append(f"The test split has only {len(test_rows)} rows: differences in τ below the interval widths above "
                       "cannot be resolved.")

    settings = {"target": target, "test_size": test_size, "split_seed": seed, "seeds": seeds, "sizes": all_sizes,
                "n_pool": int(len(train_pool)), "n_test": int(len(test_rows)), "top_n": top_n, "n_boot": n_boot,
                "arms": arms, "metrics": None if features is None else int(features[0].shape[1]),
                "llm": None if llm_options is None else {"generator": llm_options.llm, "judge": llm_options.judge_llm}}
    return ScalingResult(table, summary, gains, reading, settings, notes, time.perf_counter() - started)


def _read(arm: str, s: pd.DataFrame, g: dict) -> str:
    first, last = s.iloc[0], s.iloc[-1]
    head = (f"{ARM_TITLES.get(arm, arm)}: held-out τ {first['tau_mean']:.3f} with {int(first['n_train'])} labels → "
            f"{last['tau_mean']:.3f} with {int(last['n_train'])}. Last step {g['from']} → {g['to']} labels: "
            f"Δτ = {g['gain']:+.3f}")
    if not (math.isfinite(g["ci_low"]) and math.isfinite(g["ci_high"])):
        return head + " (no interval: too few defined bootstrap draws)."
    head += f" [95% CI {g['ci_low']:+.3f}, {g['ci_high']:+.3f}]"
    if "per_doubling" in g:
        head += f"; over the last three sizes {g['per_doubling']:+.3f} τ per doubling of the labels"
    if g["ci_low"] > 0:
        verdict = ("still rising beyond noise: more labels of this kind are likely worth collecting "
                   "(expect roughly the same gain per doubling, shrinking as the curve bends).")
    elif g["ci_high"] < 0:
        verdict = ("lower with more labels beyond noise: look for label noise or a shift between old and new feedback "
                   "before collecting more.")
    elif g["ci_high"] <= PLATEAU_TAU:
        verdict = (f"within noise and at most {g['ci_high']:+.3f}: the curve has flattened, more labels of the same kind "
                   "are unlikely to raise τ much (the AutoMetrics paper, §4.6, reports a plateau around 80 labels); "
                   "better candidate metrics (e.g. generated LLM judges) or cleaner labels are likelier to help.")
    else:
        verdict = (f"within noise, but the interval reaches {g['ci_high']:+.3f}: this data cannot tell yet whether the "
                   "curve has flattened; more labels may still help, and would also narrow the interval.")
    return f"{head} — {verdict}"


# ------------------------------------------------------------------------------ report

_COLORS = {ARM_BANK: "#3b7dd8", ARM_GENERATED: "#d8743b", ARM_BOTH: "#3ba55c"}


def _f(v, d: int = 3) -> str:
    return "–" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{d}f}"


def markdown_section(d: dict, level: int = 2, *, title: bool = True) -> list[str]:
    """The report's data-scaling section from :meth:`ScalingResult.to_dict` (empty if None)."""
    if not d:
        return []
    h = "#" * level
    st = d["settings"]
    lines = ([""] + ([f"{h} Data scaling: how many more labels are worth collecting?", ""] if title else []) + [
        f"Held-out Kendall τ on one fixed test split ({st['n_test']} rows, split seed {st['split_seed']}) against the "
        f"number of training labels drawn from the {st['n_pool']}-row training pool; {st['seeds']} seeds per size (nested "
        "training sets; the whole pool is one fit). Interval: 95% bootstrap over test rows and seeds. AutoMetrics paper §4.6.",
        ""])
    lines += ["**Reading.** " + r for r in d["reading"]]
    lines += ["", "| arm | labels | fits | mean τ | 95% CI | sd over seeds |", "|---|---:|---:|---:|---|---:|"]
    for r in d["summary"]:
        lines.append(f"| {ARM_TITLES.get(r['arm'], r['arm'])} | {r['n_train']} | {r['defined']}/{r['fits']} | "
                     f"{_f(r['tau_mean'])} | [{_f(r['ci_low'])}, {_f(r['ci_high'])}] | {_f(r['tau_sd'])} |")
    for n in d.get("notes") or []:
        lines.append(f"- note: {n}")
    lines += ["", f"{len(d['table'])} fits in {d.get('seconds')} s."]
    return lines


def svg_plot(d: dict, width: int = 600, height: int = 340) -> str:
    """Inline SVG: mean τ per size (log₂ axis) with its interval, one line per arm, single fits
    as faint dots.  No script, no external resource."""
    if not d or not d.get("summary"):
        return ""
    summ = pd.DataFrame(d["summary"])
    tab = pd.DataFrame(d["table"])
    sizes = sorted(summ["n_train"].unique())
    vals = pd.concat([summ["tau_mean"], summ["ci_low"], summ["ci_high"], tab["tau"]]).astype(float)
    vals = vals[np.isfinite(vals)]
    if not len(vals):
        return ""
    lo = math.floor(min(0.0, vals.min()) * 10) / 10
    hi = math.ceil(max(vals.max(), lo + 0.1) * 10) / 10
    ml, mr, mt, mb = 52, 16, 34, 44
    x0, x1 = math.log2(sizes[0]), math.log2(sizes[-1])
    x1 = x1 if x1 > x0 else x0 + 1

    def sx(n):
        return ml + (math.log2(n) - x0) / (x1 - x0) * (width - ml - mr)

    def sy(v):
        return height - mb - (v - lo) / (hi - lo) * (height - mt - mb)

    p = [f'<svg role="img" aria-label="data scaling curve: held-out Kendall tau against training labels" width="{width}" '
         f'height="{height}" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
         f'<rect x="{ml}" y="{mt}" width="{width - ml - mr}" height="{height - mt - mb}" fill="#fff" stroke="#c9ced4"/>']
    for t in np.linspace(lo, hi, 5):
        p.append(f'<line x1="{ml}" y1="{sy(t):.1f}" x2="{width - mr}" y2="{sy(t):.1f}" stroke="#eef1f4"/>')
        p.append(f'<text x="{ml - 6}" y="{sy(t) + 4:.1f}" text-anchor="end">{t:.2f}</text>')
    if lo < 0 < hi:
        p.append(f'<line x1="{ml}" y1="{sy(0):.1f}" x2="{width - mr}" y2="{sy(0):.1f}" stroke="#999" stroke-dasharray="3 3"/>')
    for n in sizes:
        p.append(f'<line x1="{sx(n):.1f}" y1="{height - mb}" x2="{sx(n):.1f}" y2="{height - mb + 4}" stroke="#888"/>')
        p.append(f'<text x="{sx(n):.1f}" y="{height - mb + 16}" text-anchor="middle">{n}</text>')
    p.append(f'<text x="{(ml + width - mr) / 2:.0f}" y="{height - 8}" text-anchor="middle">training labels (log scale)</text>')
    p.append(f'<text x="14" y="{(mt + height - mb) / 2:.0f}" text-anchor="middle" '
             f'transform="rotate(-90 14 {(mt + height - mb) / 2:.0f})">held-out Kendall τ</text>')
    for k, arm in enumerate(dict.fromkeys(summ["arm"])):
        color = _COLORS.get(arm, "#777")
        for r in tab[tab["arm"] == arm].itertuples():
            if r.tau is not None and math.isfinite(r.tau):
                p.append(f'<circle cx="{sx(r.n_train):.1f}" cy="{sy(r.tau):.1f}" r="2.2" fill="{color}" fill-opacity="0.3"/>')
        s = summ[(summ["arm"] == arm) & np.isfinite(summ["tau_mean"].astype(float))].sort_values("n_train")
        for r in s.itertuples():
            if math.isfinite(r.ci_low) and math.isfinite(r.ci_high):
                p.append(f'<line x1="{sx(r.n_train):.1f}" y1="{sy(r.ci_low):.1f}" x2="{sx(r.n_train):.1f}" '
                         f'y2="{sy(r.ci_high):.1f}" stroke="{color}" stroke-width="1.5"/>')
        pts = " ".join(f"{sx(r.n_train):.1f},{sy(r.tau_mean):.1f}" for r in s.itertuples())
        p.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2"/>')
        for r in s.itertuples():
            p.append(f'<circle cx="{sx(r.n_train):.1f}" cy="{sy(r.tau_mean):.1f}" r="3.5" fill="{color}"/>')
        lx = ml + 8 + k * 190
        p.append(f'<rect x="{lx}" y="10" width="12" height="4" fill="{color}"/>'
                 f'<text x="{lx + 16}" y="16">{ARM_TITLES.get(arm, arm)}</text>')
    p.append("</svg>")
    return "".join(p)
