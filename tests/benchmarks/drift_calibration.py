"""Drift calibration benchmark: how often the monitor's drift alerts fire on unchanged traffic
(false alarms) and on changed traffic (detection), at the documented window sizes.

    python tests/benchmarks/drift_calibration.py [--trials 200] [--quick]

Per shared dataset an LLM-free evaluator (MetricBank, reference-free metrics) is fitted with
``fit_for_refit`` on the rows of 40 % of the inputs; the rows of the other inputs are the
traffic pool, scored by that evaluator (out-of-sample, as the online scorer would).  A
"support bot" replays the issue's lumpy case: answers in three fixed styles, so the evaluator's
scores take three values.  Windows are drawn with replacement from a pool (continuous scores with
a little kernel noise: a smoothed bootstrap, see ``bandwidth``), then run through the
monitor's own functions (``drift_windows``, ``validity_decay``) with the defaults: reference
window 200, windows of 200, an alert after 2 significant windows in a row, KS alpha 0.01, PSI
0.1 above chance; validity on 200 feedback points, alpha 0.01.

- null: reference and 2 windows from the same pool → false-alarm rate (per 2-window check), and
  the rate at which a single window is significant (the per-window test's level);
- stream: reference and 20 consecutive windows of unchanged traffic → share of streams with any alert;
- truncated: every output (or 30 % of them) cut to its first half of words;
- generator: reference from one system's outputs (the first in the file), windows from another
  system's outputs for the same inputs; reported per system with the distance between the two
  score populations (KS distance and PSI on the full pools), since a system the evaluator scores
  alike is no drift it could see;
- label drop (validity decay): 50 % / 25 % of the new feedback replaced by random labels (drawn
  from the label distribution): careless raters.  The fit-time tau is measured per trial on 100
  held-out rows of the pool (as a version's test split + newest held-out feedback would be);
- lumpy replay: the previous detector (fit-time reference rounded to 5 decimals, reference-quantile
  PSI bins, asymptotic KS, both at every check) vs the current one on the support bot's unchanged traffic.

Prints Markdown tables and writes results/drift_calibration.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
from autometrics.evaluators.continuous.drift import DriftThresholds, drift_windows, psi, validity_decay
from autometrics.evaluators.continuous.refit import fit_for_refit, holdout_predictions
from scipy.stats import ks_2samp

HERE = Path(__file__).resolve().parent
SHARED = Path(os.environ.get("AUTOMETRICS_SHARED", HERE.parents[2] / "shared")) / "datasets"
JOBS = {"summeval": ("relevance", "system"), "simpeval": ("score", "system"), "topical_chat": ("overall", "system"),
        "realhumaneval_chat": ("copied", "model")}
REF, WIN, PERSIST, VALIDITY_N = 200, 200, 2, 200
FIT_HELDOUT_N = 100  # fit-time held-out feedback behind the validity reference (e.g. test split 40 + newest holdout 60)
TH = DriftThresholds()
STYLES = [  # the support bot's three answer styles and the satisfaction people give them (mean, 1-5)
    ("Thanks for reaching out! I can't help with that here, please open a ticket at support.example.com.", 2.0),
    ("Please restart the application and try again. If the problem continues, clear the cache from Settings > Storage.", 3.0),
    ("Here is what usually fixes this: 1. Sign out and sign back in. 2. Update the app to the latest version. 3. Check "
     "your network connection and turn off any VPN. 4. If you still see the error, send us the log file from Help > "
     "Export logs and we will look into it within one business day.", 4.0),
]
MIX = [0.3, 0.4, 0.3]  # the bot's style mix
NEW_MIXES = [[0.45, 0.35, 0.2], [0.6, 0.3, 0.1]]  # new model versions that deflect more (mildly, strongly)


def truncate(text: str) -> str:
    words = str(text).split()
    return " ".join(words[: max(1, len(words) // 2)])


def support_bot(n: int, mix, seed: int) -> pd.DataFrame:
    """The issue's support bot: programmers' questions (realhumaneval_chat inputs) answered in one of three styles."""
    rng = np.random.default_rng(seed)
    inputs = pd.read_csv(SHARED / "realhumaneval_chat.csv")["input"].sample(n, replace=True, random_state=seed).tolist()
    style = rng.choice(3, n, p=mix)
    label = np.clip(np.round([STYLES[k][1] + rng.normal(0, 0.8) for k in style]), 1, 5)
    return pd.DataFrame({"id": [f"bot-{seed}-{i}" for i in range(n)], "input": inputs,
                         "output": [STYLES[k][0] for k in style], "stars": label, "system": [f"style{k}" for k in style]})


def prepare(name: str, seed: int = 0) -> dict:
    """Fit on 40 % of the inputs, score the rest: the traffic pool (scores, truncated scores, labels, systems)."""
    t0 = time.perf_counter()
    if name == "support_bot":
        from autometrics.metricbank import default_metrics

        target, sys_col = "stars", "system"
        fit_rows, pool = support_bot(400, MIX, seed), support_bot(1000, MIX, seed + 1)
        fit = fit_for_refit(fit_rows, target, None, n_boot=500, seed=seed,
                            metrics=default_metrics(with_reference=False, with_input=False))  # output-only: 3 levels
        shifted = [support_bot(1000, mix, seed + 2) for mix in NEW_MIXES]
    else:
        target, sys_col = JOBS[name]
        df = pd.read_csv(SHARED / f"{name}.csv")
        df = df[pd.to_numeric(df[target], errors="coerce").notna() & df["output"].notna()].reset_index(drop=True)
        inputs = df["input"].astype(str).unique()
        fit_inputs = set(np.random.default_rng(seed).permutation(inputs)[: int(0.4 * len(inputs))])
        in_fit = df["input"].astype(str).isin(fit_inputs)
        fit = fit_for_refit(df[in_fit][["id", "input", "output", target]], target, None, n_boot=500, seed=seed)
        pool, shifted = df[~in_fit].reset_index(drop=True), None
    ev = fit.evaluator
    score = holdout_predictions(ev, pool)
    trunc = holdout_predictions(ev, pool.assign(output=pool["output"].map(truncate)))
    out = {"name": name, "target": target, "evaluator": [f["feature"] for f in ev.features],
           "fit_heldout": {k: ev.statistics["test"].get(k) for k in ("tau", "ci_low", "ci_high", "n", "p_value")},
           "score": score, "truncated": trunc, "label": pool[target].to_numpy(dtype=float),
           "system": pool[sys_col].astype(str).to_numpy(), "n_pool": int(len(pool)),
           "distinct_scores": int(len(np.unique(np.round(score[np.isfinite(score)], 9))))}
    if shifted is not None:
        out["shifted_score"] = [holdout_predictions(ev, x) for x in shifted]
    out["prepare_s"] = round(time.perf_counter() - t0, 1)
    return out


def check(ref, windows, seed: int) -> dict:
    """The monitor's drift state after the reference and these windows (one call, every window tested)."""
    s = np.concatenate([ref, *windows])
    return drift_windows(np.arange(1, len(s) + 1), s, since_ns=0, reference_window=len(ref), window=WIN, thresholds=TH,
                         seed=seed, max_new_windows=len(windows))


def rate(hits) -> dict:
    hits = np.asarray(hits, dtype=bool)
    n, k = len(hits), int(hits.sum())
    lo, hi = wilson(k, n)
    return {"rate": k / n if n else None, "k": k, "n": n, "ci95": [lo, hi]}


def wilson(k: int, n: int) -> tuple[float, float]:
    if n == 0:
        return (float("nan"),) * 2
    z, p = 1.959964, k / n
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return round(c - h, 4), round(c + h, 4)


def bandwidth(scores) -> float:
    """Smoothed-bootstrap jitter for continuous scores (Silverman's rule; 0 for lumpy ones).

    Resampling a pool of a few dozen rows per system makes every system a handful of atoms, and
    two systems' atoms never coincide: a test then tells them apart more easily than it could
    tell two overlapping continuous populations apart.  A little kernel noise restores that."""
    x = scores[np.isfinite(scores)]
    if len(np.unique(x)) < 0.5 * len(x):
        return 0.0
    iqr = np.subtract(*np.percentile(x, [75, 25]))
    return float(0.9 * min(x.std(), iqr / 1.34) * len(x) ** -0.2)


def draw(rng, pool, n: int, h: float):
    x = rng.choice(pool[np.isfinite(pool)], n)
    return x + rng.normal(0, h, n) if h else x


def drift_trials(ref_pool, cur_pool, trials: int, seed: int, h: float, n_windows: int = PERSIST) -> tuple[dict, dict]:
    """(alert rate, first-window significance rate) over ``trials`` resampled streams."""
    rng = np.random.default_rng(seed)
    alerts, first = [], []
    for i in range(trials):
        ref = draw(rng, ref_pool, REF, h)
        st = check(ref, [draw(rng, cur_pool, WIN, h) for _ in range(n_windows)], seed=seed * 100_000 + i * 100)
        alerts.append(st["alert"])
        first.append(st["windows"][0]["alert"])
    return rate(alerts), rate(first)


def old_score_drift(reference, current) -> bool:
    """The detector before this change (reference-quantile PSI bins clipped at 1e-4, asymptotic KS,
    alert when KS p < 0.01 and PSI >= 0.2), kept here to show what it did on lumpy scores."""
    ref, cur = np.asarray(reference, dtype=float), np.asarray(current, dtype=float)
    edges = np.unique(np.quantile(ref, np.linspace(0, 1, 11)))
    if len(edges) < 2:
        p = 0.0 if np.allclose(cur, ref[0]) else float("inf")
    else:
        edges[0], edges[-1] = -np.inf, np.inf
        r = np.clip(np.histogram(ref, edges)[0] / len(ref), 1e-4, None)
        c = np.clip(np.histogram(cur, edges)[0] / len(cur), 1e-4, None)
        p = float(np.sum((c - r) * np.log(c / r)))
    return bool(ks_2samp(ref, cur, method="asymp").pvalue < 0.01 and p >= 0.2)


def validity_trials(d: dict, drop: float, trials: int, seed: int) -> dict:
    """Validity-decay alerts: per trial a fresh fit-time held-out set (``FIT_HELDOUT_N`` rows,
    true labels) and a new feedback window of 200 whose labels are random for a share ``drop``.
    ``old_rule``: the previous alert rule (fit tau above the new window's CI) on the same trials."""
    from autometrics.evaluators.stats import agreement

    rng = np.random.default_rng(seed)
    ok = np.flatnonzero(np.isfinite(d["score"]) & np.isfinite(d["label"]))
    n_hold = FIT_HELDOUT_N
    hits, old, taus = [], [], []
    for i in range(trials):
        hold = rng.choice(ok, n_hold)
        fit = agreement(d["score"][hold], d["label"][hold], n_boot=500, seed=i).to_dict()
        rows = rng.choice(ok, VALIDITY_N)
        y = d["label"][rows].copy()
        noisy = rng.random(VALIDITY_N) < drop
        y[noisy] = rng.choice(d["label"][ok], int(noisy.sum()))
        vd = validity_decay(d["score"][rows], y, fit["tau"], fit=fit, n_boot=500, seed=i, thresholds=TH)
        hits.append(vd["level"] == "alert")
        old.append(vd["window"]["ci_high"] is not None and fit["tau"] is not None and fit["tau"] > vd["window"]["ci_high"])
        taus.append(vd["window"]["tau"] if vd["window"]["tau"] is not None else np.nan)
    return {**rate(hits), "mean_tau": float(np.nanmean(taus)), "n_fit_heldout": n_hold, "old_rule": rate(old)}


def run(names: list[str], trials: int, stream_trials: int, pair_trials: int) -> dict:
    results = {"settings": {"reference_window": REF, "window": WIN, "persistence": PERSIST, "validity_window": VALIDITY_N,
                            "fit_heldout_n": FIT_HELDOUT_N,
                            "thresholds": TH.to_dict(), "trials": trials, "stream_trials": stream_trials,
                            "stream_windows": 20, "pair_trials": pair_trials}, "datasets": {}}
    for k, name in enumerate(names):
        t0 = time.perf_counter()
        d = prepare(name)
        r = {key: d[key] for key in ("target", "evaluator", "fit_heldout", "n_pool", "distinct_scores", "prepare_s")}
        s = d["score"]
        h = r["jitter"] = bandwidth(s)
        r["null"], r["null_single_window"] = drift_trials(s, s, trials, seed=10 + k, h=h)
        rng = np.random.default_rng(20 + k)
        stream = [check(draw(rng, s, REF, h), [draw(rng, s, WIN, h) for _ in range(20)], seed=i * 1000)["alert"]
                  for i in range(stream_trials)]
        r["stream_20_windows"] = rate(stream)
        r["truncated_all"], _ = drift_trials(s, d["truncated"], trials // 2, seed=30 + k, h=h)
        part = np.where(np.random.default_rng(31 + k).random(len(s)) < 0.3, d["truncated"], s)
        r["truncated_30pct"], _ = drift_trials(s, part, trials // 2, seed=32 + k, h=h)
        r["truncated_all"]["distance"], r["truncated_30pct"]["distance"] = distance(s, d["truncated"], h), distance(s, part, h)
        if "shifted_score" in d:  # the bot: a new model version with another style mix
            r["generator"] = [{"system": f"style mix {MIX} -> {mix}", **distance(s, x, h),
                               "detection": drift_trials(s, x, trials // 2, seed=40 + k + j, h=h)[0]}
                              for j, (mix, x) in enumerate(zip(NEW_MIXES, d["shifted_score"], strict=True))]
        else:
            systems = list(dict.fromkeys(d["system"]))
            base = s[d["system"] == systems[0]]
            r["generator_base"] = systems[0]
            r["generator_null"] = drift_trials(base, base, pair_trials, seed=41 + k, h=h)[0]
            r["generator"] = [{"system": other, **distance(base, s[d["system"] == other], h),
                               "detection": drift_trials(base, s[d["system"] == other], pair_trials, seed=42 + k + j, h=h)[0]}
                              for j, other in enumerate(systems[1:])]
        r["validity_null"] = validity_trials(d, 0.0, trials, seed=50 + k)
        r["label_drop_50pct"] = validity_trials(d, 0.5, trials, seed=51 + k)
        r["label_drop_25pct"] = validity_trials(d, 0.25, trials, seed=52 + k)
        if name == "support_bot":
            r["lumpy_replay"] = lumpy_replay(max(4, trials // 5), 5, seed=60)
        r["seconds"] = round(time.perf_counter() - t0, 1)
        results["datasets"][name] = r
        print(f"{name}: done in {r['seconds']} s", flush=True)
    return results


def distance(a, b, h: float) -> dict:
    """KS distance and PSI between the two populations the windows are drawn from (large draws,
    so chance adds ~0.001 to the PSI)."""
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    big = np.random.default_rng(0)
    x, y = draw(big, a, 20_000, h), draw(big, b, 20_000, h)
    return {"ks_population": float(ks_2samp(x, y).statistic), "psi_population": float(psi(x, y)),
            "mean_base": float(a.mean()), "mean_other": float(b.mean())}


def lumpy_replay(fits: int, per_fit: int, seed: int) -> dict:
    """The issue's case on the bot's unchanged traffic, over ``fits`` evaluators (fitted on 400
    labelled traces each, so the three score levels differ by fit) and ``per_fit`` checks each:
    before = the previous detector on the newest 200 scores against the stored fit-time scores
    (rounded) or against online scores; now = reference 200, two windows of 200."""
    from autometrics.metricbank import default_metrics

    metrics = default_metrics(with_reference=False, with_input=False)
    rng = np.random.default_rng(seed)
    old_fit_ref, old_online_ref, new, fits_alarmed = [], [], [], 0
    for f in range(fits):
        fit = fit_for_refit(support_bot(400, MIX, seed + f), "stars", None, n_boot=0, seed=f, metrics=metrics)
        levels = holdout_predictions(fit.evaluator, pd.DataFrame({"output": [s for s, _ in STYLES], "input": ""}))
        hits = []
        for i in range(per_fit):
            fit_time = np.round(levels[rng.choice(3, 400, p=MIX)], 5)  # what refit stored: in-sample predictions, rounded
            online = levels[rng.choice(3, REF + 2 * WIN, p=MIX)]
            hits.append(old_score_drift(fit_time, online[-WIN:]))
            old_online_ref.append(old_score_drift(online[:REF], online[-WIN:]))
            new.append(check(online[:REF], [online[REF:REF + WIN], online[REF + WIN:]], seed=f * 1000 + i)["alert"])
        old_fit_ref += hits
        fits_alarmed += any(hits)
    return {"fits": fits, "checks_per_fit": per_fit, "before_fit_time_reference": rate(old_fit_ref),
            "fits_with_a_false_alarm_before": fits_alarmed, "before_online_reference": rate(old_online_ref),
            "after": rate(new)}


def pct(r: dict | None) -> str:
    if not r or r.get("rate") is None:
        return "–"
    return f"{100 * r['rate']:.1f} % [{100 * r['ci95'][0]:.0f}, {100 * r['ci95'][1]:.0f}]"


def report(res: dict) -> None:
    st = res["settings"]
    print(f"\nWindows: reference {st['reference_window']}, window {st['window']}, alert after {st['persistence']} in a row; "
          f"KS alpha {st['thresholds']['ks_alpha']}, PSI {st['thresholds']['psi_alert']} above chance; validity on "
          f"{st['validity_window']} feedback points, alpha {st['thresholds']['validity_alpha']}. Rates with 95 % Wilson CIs.\n")
    print("| dataset (evaluator scores) | false alarms, unchanged traffic | single window significant | any alert in a "
          "20-window stream | truncated (all) | truncated (30 %) | validity: false alarms | label drop 50 % | label drop 25 % |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, r in res["datasets"].items():
        kind = f"{r['distinct_scores']} distinct of {r['n_pool']}"
        print(f"| {name} ({kind}) | {pct(r['null'])} | {pct(r['null_single_window'])} | {pct(r['stream_20_windows'])} | "
              f"{pct(r['truncated_all'])} | {pct(r['truncated_30pct'])} | {pct(r['validity_null'])} | "
              f"{pct(r['label_drop_50pct'])} (τ {r['label_drop_50pct']['mean_tau']:.2f}) | "
              f"{pct(r['label_drop_25pct'])} (τ {r['label_drop_25pct']['mean_tau']:.2f}) |")
    print(f"\nValidity: the fit-time reference is τ on {FIT_HELDOUT_N} held-out rows drawn per trial; the previous rule "
          "(fit τ above the new window's CI) on the same null trials: " + "; ".join(
              f"{n} {pct(r['validity_null']['old_rule'])}" for n, r in res["datasets"].items()))
    print("\nHow far truncation moves the evaluator's scores (population KS distance / PSI): " + "; ".join(
        f"{n} all {r['truncated_all']['distance']['ks_population']:.2f} / {r['truncated_all']['distance']['psi_population']:.2f}, "
        f"30 % {r['truncated_30pct']['distance']['ks_population']:.2f} / {r['truncated_30pct']['distance']['psi_population']:.2f}"
        for n, r in res["datasets"].items()))
    print("\nThe evaluator's own held-out τ at fit time, per dataset: " + "; ".join(
        f"{n} {r['fit_heldout']['tau']:.3f} [{r['fit_heldout']['ci_low']:.3f}, {r['fit_heldout']['ci_high']:.3f}] n={r['fit_heldout']['n']}"
        for n, r in res["datasets"].items()))
    print("\nA different generator (windows from another system than the reference's):\n")
    print("| dataset | reference system → other | KS distance (population) | PSI (population) | mean | detected |")
    print("|---|---|---:|---:|---|---|")
    for name, r in res["datasets"].items():
        if "generator_null" in r:
            print(f"| {name} | {r['generator_base']} → {r['generator_base']} (unchanged) | 0 | 0 | – | {pct(r['generator_null'])} |")
        for g in r["generator"]:
            print(f"| {name} | {r.get('generator_base', '')} → {g['system']} | {g['ks_population']:.2f} | {g['psi_population']:.2f} | "
                  f"{g['mean_base']:.3g} → {g['mean_other']:.3g} | {pct(g['detection'])} |")
    summary = generator_summary(res)
    res["generator_summary"] = summary
    print("\nGenerator detection by how far apart the two systems' score populations are (population PSI):\n")
    print("| PSI between the populations | system pairs | their KS distances | detected (mean over pairs) |\n|---|---:|---|---:|")
    for row in summary:
        ks = "–" if not row["ks_range"] else f"{row['ks_range'][0]:.2f}–{row['ks_range'][1]:.2f}"
        det = "–" if row["mean_detection"] is None else f"{100 * row['mean_detection']:.1f} %"
        print(f"| {row['psi_band']} | {row['pairs']} | {ks} | {det} |")
    lr = res["datasets"].get("support_bot", {}).get("lumpy_replay")
    if lr:
        print(f"\nLumpy replay (support bot, unchanged traffic, {lr['fits']} fits x {lr['checks_per_fit']} checks): false alarms "
              f"before, against the stored (rounded) fit-time scores: {pct(lr['before_fit_time_reference'])} "
              f"({lr['fits_with_a_false_alarm_before']} of {lr['fits']} fits alarmed); before, against online scores: "
              f"{pct(lr['before_online_reference'])}; now: {pct(lr['after'])}")


def generator_summary(res: dict) -> list[dict]:
    """Mean detection over system pairs, banded by the PSI between the two score populations
    (the rule of thumb's bands: < 0.1 no real change, 0.1-0.25 moderate, >= 0.25 large)."""
    pairs = [(g["psi_population"], g["ks_population"], g["detection"]["rate"])
             for r in res["datasets"].values() for g in r["generator"]]
    out = []
    for lo, hi in ((0, 0.1), (0.1, 0.25), (0.25, math.inf)):
        sel = [(k, d) for p, k, d in pairs if lo <= p < hi]
        out.append({"psi_band": f"{lo:g}–{hi:g}", "pairs": len(sel),
                    "ks_range": [min(k for k, _ in sel), max(k for k, _ in sel)] if sel else None,
                    "mean_detection": float(np.mean([d for _, d in sel])) if sel else None})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=[*JOBS, "support_bot"])
    ap.add_argument("--trials", type=int, default=200, help="null trials per dataset (shifted scenarios use half)")
    ap.add_argument("--stream-trials", type=int, default=20)
    ap.add_argument("--pair-trials", type=int, default=50, help="trials per system pair")
    ap.add_argument("--quick", action="store_true", help="a few trials each (a smoke run, not figures)")
    ap.add_argument("--out", default=str(HERE / "results" / "drift_calibration.json"))
    a = ap.parse_args()
    if a.quick:
        a.trials, a.stream_trials, a.pair_trials = 20, 3, 6
    t0 = time.perf_counter()
    res = run(a.datasets, a.trials, a.stream_trials, a.pair_trials)
    report(res)
    res["seconds"] = round(time.perf_counter() - t0, 1)
    print(f"\ntotal {res['seconds']} s")
    if not a.quick:
        Path(a.out).write_text(json.dumps(res, indent=1, default=float) + "\n")
        print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
