"""Drift detection benchmark (issue #29): false alarms and detection delay of the sequential CUSUM
(:mod:`autometrics.evaluators.continuous.sequential`) against the windowed test
(:func:`~autometrics.evaluators.continuous.drift.drift_windows`) and river's PageHinkley and ADWIN.

    python tests/benchmarks/drift_detection.py [--null-streams 40] [--runs 40] [--quick]   # 3-6 min on 2 cores

Needs ``pip install river``.  Per dataset (simpeval, topical_chat, and drift_calibration's
three-style support bot, whose evaluator scores take three values: the lumpy case) an LLM-free
evaluator is fitted with ``fit_for_refit`` on ~150 labelled rows (whole inputs); the other rows
are the traffic pool, scored with ``score_texts`` (score + one column per metric; failed = empty
output or no score), also with every output cut to its first 3 words and replaced by "".
Traffic = pool rows drawn with replacement, fed in batches of 100 (worker ticks).

- False alarms: per reference size (200, 800) ``--null-streams`` streams of 10,000 watched
  unchanged traces; after an alarm the detector restarts with a fresh reference.  Alarms per
  10,000 traces with an exact Poisson 95 % CI, against the budget (1 per 10,000).  The windowed
  test (its defaults: reference 200, windows 200, persistence 2), PageHinkley and ADWIN get the
  same protocol with reference 200.
- Delay: reference 200, 300 unchanged traces, then the change for up to ``--horizon`` traces:
  outputs cut to 3 words, outputs empty, score shifted down by 0.2/0.5/1/2 SDs of the pool's
  scores (metrics and failure flags unchanged).  Delay = traces from the first changed one to the
  alarm (1 = alarm on the first changed trace); median, p90 (runs not detected within the horizon
  count as never) and share detected within 50/200/1,000.  Runs with an alarm before the change are
  counted apart.  "cusum+growth" replays the monitor's schedule (reference doubled 200 -> 1,600
  at ticks while nothing alarmed, detectors restarted on the longer reference).
- River: both see the score standardised by the run's reference (the CUSUM's ``z``), the
  reference fed first as warm-up; PageHinkley with ``delta`` = the CUSUM's k (0.25) and its
  ``threshold``, ADWIN with its ``delta``, each set to the smallest value on a grid whose
  false-alarm rate on separate unchanged streams (other seeds) is <= 1 per 10,000.

Prints a table; writes results/drift_detection.json (load average, seeds, run counts, datasets).

``--cusum-null-only`` measures only the CUSUM's false alarms, with more streams and the monitor's
reference sizes (200, 800, 1,600), and which detectors raised them (results/drift_null_cusum.json):

    python tests/benchmarks/drift_detection.py --cusum-null-only --null-streams 200 --seed 50 \
        --datasets simpeval topical_chat support_bot summeval realhumaneval_chat
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from autometrics.evaluators.continuous.drift import DriftThresholds, drift_windows
from autometrics.evaluators.continuous.refit import fit_for_refit
from autometrics.evaluators.continuous.sequential import SequentialSettings, start_state, update_state
from autometrics.evaluators.fit import SCORE_COLUMN

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from drift_calibration import JOBS, MIX, SHARED, support_bot  # noqa: E402  (the support bot and dataset jobs)

DATASETS = ["simpeval", "topical_chat", "support_bot"]
FIT_ROWS, TICK, PRE, MAX_REF = 150, 100, 300, 1_600
SHIFTS = [0.2, 0.5, 1.0, 2.0]
EFFECTS = ["cut_3_words", "empty", *[f"shift_{s:g}sd" for s in SHIFTS]]
SETTINGS = SequentialSettings()
BUDGET = SETTINGS.arl  # traces per false alarm
PH_THRESHOLDS = [10, 12, 15, 18, 20, 22, 25, 30, 35, 40, 50, 60, 80, 100]
ADWIN_DELTAS = [0.2, 0.1, 0.05, 0.02, 0.01, 0.005, 0.002, 5e-4, 1e-4, 1e-5, 1e-6, 1e-8]  # river's clock (32) kept


def cut3(text) -> str:
    return " ".join(str(text).split()[:3]) if isinstance(text, str) else ""


# ------------------------------------------------------------------ data
def score_frame(ev, outputs, inputs) -> dict:
    sc = ev.score_texts([o if isinstance(o, str) else "" for o in outputs], inputs=inputs)
    score = sc[SCORE_COLUMN].to_numpy(dtype=float)
    empty = np.array([not (isinstance(o, str) and o.strip()) for o in outputs])
    return {"score": score, "metrics": {c: sc[c].to_numpy(dtype=float) for c in sc.columns if c != SCORE_COLUMN},
            "failed": (empty | ~np.isfinite(score)).astype(float)}


def prepare(name: str, seed: int = 0) -> dict:
    """Fit on ~150 labelled rows (whole inputs), score the other rows: the pool, as is, cut, empty."""
    t0 = time.perf_counter()
    if name == "support_bot":
        from autometrics.metricbank import default_metrics

        target = "stars"
        fit_rows, pool = support_bot(FIT_ROWS, MIX, seed), support_bot(1000, MIX, seed + 1)
        fit = fit_for_refit(fit_rows, target, None, n_boot=200, seed=seed,
                            metrics=default_metrics(with_reference=False, with_input=False))
    else:
        target = JOBS[name][0]
        df = pd.read_csv(SHARED / f"{name}.csv")
        df = df[pd.to_numeric(df[target], errors="coerce").notna() & df["output"].notna()].reset_index(drop=True)
        key = df["input"].astype(str)
        sizes = key.value_counts()
        chosen, n = [], 0
        for inp in np.random.default_rng(seed).permutation(sizes.index.to_numpy()):
            if n >= FIT_ROWS:
                break
            chosen.append(inp)
            n += sizes[inp]
        in_fit = key.isin(set(chosen))
        fit = fit_for_refit(df[in_fit][["id", "input", "output", target]], target, None, n_boot=200, seed=seed)
        fit_rows, pool = df[in_fit], df[~in_fit].reset_index(drop=True)
    ev = fit.evaluator
    inputs = pool["input"].fillna("").astype(str).tolist()
    out = {"name": name, "target": target, "features": [f["feature"] for f in ev.features], "n_fit": int(len(fit_rows)),
           "n_pool": int(len(pool)), "fit_test_tau": (ev.statistics.get("test") or {}).get("tau"),
           "asis": score_frame(ev, pool["output"].tolist(), inputs),
           "cut_3_words": score_frame(ev, pool["output"].map(cut3).tolist(), inputs),
           "empty": score_frame(ev, [""] * len(pool), inputs),
           "labels": pd.to_numeric(pool[target], errors="coerce").to_numpy(dtype=float),  # validity_detection's
           "fit_labels": pd.to_numeric(fit_rows[target], errors="coerce").to_numpy(dtype=float),
           "fit_scores": score_frame(ev, fit_rows["output"].tolist(), fit_rows["input"].fillna("").astype(str).tolist())["score"]}
    s = out["asis"]["score"]
    out["sd_pool"] = float(np.nanstd(s, ddof=1))
    out["distinct_scores"] = int(len(np.unique(np.round(s[np.isfinite(s)], 9))))
    for eff in ("cut_3_words", "empty"):
        out[f"{eff}_mean_shift_sd"] = float((np.nanmean(out[eff]["score"]) - np.nanmean(s)) / out["sd_pool"])
    out["prepare_s"] = round(time.perf_counter() - t0, 1)
    return out



def source(d: dict, effect: str | None) -> dict:
    """Per-pool-row arrays of the traffic: unchanged, cut, empty, or the score shifted down."""
    if effect in ("cut_3_words", "empty"):
        return d[effect]
    src = d["asis"]
    if effect and effect.startswith("shift_"):
        shift = float(effect[6:-2]) * d["sd_pool"]
        return {**src, "score": src["score"] - shift}
    return src


def take(src: dict, idx) -> dict:
    return {"score": src["score"][idx], "metrics": {m: v[idx] for m, v in src["metrics"].items()}, "failed": src["failed"][idx]}


def cat(*parts: dict) -> dict:
    return {"score": np.concatenate([p["score"] for p in parts]),
            "metrics": {m: np.concatenate([p["metrics"][m] for p in parts]) for m in parts[0]["metrics"]},
            "failed": np.concatenate([p["failed"] for p in parts])}


def sl(rows: dict, a: int, b: int) -> dict:
    return {"score": rows["score"][a:b], "metrics": {m: v[a:b] for m, v in rows["metrics"].items()}, "failed": rows["failed"][a:b]}


def new_cusum(ref: dict, seed: int) -> dict:
    return start_state({"score": ref["score"], "metrics": ref["metrics"], "failed": ref["failed"].tolist()}, SETTINGS, seed=seed)


def feed(st: dict, rows: dict, t0: int) -> None:
    """One worker tick: ``rows`` are traces ``t0 + 1 ...`` after the reference."""
    n = len(rows["score"])
    update_state(st, np.arange(t0 + 1, t0 + n + 1, dtype=float), rows["score"], rows["metrics"], rows["failed"])


def z_of(ref_scores, scores):
    r = ref_scores[np.isfinite(ref_scores)]
    sd = r.std(ddof=1) or 1.0
    return np.nan_to_num((scores - r.mean()) / sd)  # a missing score moves nothing (as in the CUSUM)


def river_detector(kind: str, param: float):
    from river import drift

    return drift.PageHinkley(delta=SETTINGS.k, threshold=param) if kind == "ph" else drift.ADWIN(delta=param)


def river_first(det, z) -> int | None:
    """1-based position of the first alarm over ``z`` (None: none)."""
    for i, v in enumerate(z):
        det.update(float(v))
        if det.drift_detected:
            return i + 1
    return None


def poisson(k: int, traces: int) -> dict:
    from scipy.stats import chi2

    lo = chi2.ppf(0.025, 2 * k) / 2 if k else 0.0
    hi = chi2.ppf(0.975, 2 * k + 2) / 2
    per = 10_000 / traces
    return {"alarms": int(k), "traces": int(traces), "per_10k": k * per, "ci95_per_10k": [lo * per, hi * per],
            "within_budget": bool(k * per <= 10_000 / BUDGET)}


# ------------------------------------------------------------------ false alarms
def null_cusum(d: dict, ref_n: int, streams: int, seed: int) -> dict:
    src, n_pool = d["asis"], d["n_pool"]
    alarms, watched, by = 0, 0, {}
    for s in range(streams):
        rng = np.random.default_rng(seed + s)
        left, k = 10_000, 0
        while left > 0:
            st = new_cusum(take(src, rng.integers(0, n_pool, ref_n)), seed=(seed + s) * 1000 + k)
            k += 1
            while st["n"] < left and st["alarm"] is None:
                feed(st, take(src, rng.integers(0, n_pool, min(TICK, left - st["n"]))), st["n"])
            if st["alarm"] is not None:
                alarms += 1
                for det in st["alarm"]["detectors"]:
                    by[det] = by.get(det, 0) + 1
                used = st["alarm"]["at"]
            else:
                used = st["n"]
            watched += used
            left -= used
    return {**poisson(alarms, watched), "streams": streams, "by_detector": by}


def windowed_stream(ref_scores, scores_after, seed: int, stop_at_first: bool = True) -> int | None:
    """Traces after the reference at the windowed test's first alert (end of the alerting window)."""
    s = np.concatenate([ref_scores, scores_after])
    times = np.arange(1, len(s) + 1, dtype=float)
    state, r = None, len(ref_scores)
    for end in range(r + 200, len(s) + 1, 200):
        state = drift_windows(times[:end], s[:end], since_ns=0, reference_window=r, window=200,
                              thresholds=DriftThresholds(), seed=seed, previous=state)
        if state["alert"]:
            w = [x for x in state["windows"] if x["index"] == state["run"][-1]][0]
            return int(w["last_ns"]) - r
    return None


def null_windowed(d: dict, streams: int, seed: int) -> dict:
    sc, n_pool = d["asis"]["score"], d["n_pool"]
    alarms, watched = 0, 0
    for s in range(streams):
        rng = np.random.default_rng(seed + s)
        left, k = 10_000, 0
        while left >= 200:
            ref = sc[rng.integers(0, n_pool, 200)]
            at = windowed_stream(ref, sc[rng.integers(0, n_pool, left)], seed=(seed + s) * 1000 + k)
            k += 1
            alarms += at is not None
            used = at if at is not None else left
            watched += used
            left -= used
    return {**poisson(alarms, watched), "streams": streams}


def null_river(d: dict, kind: str, param: float, streams: int, seed: int) -> dict:
    sc, n_pool = d["asis"]["score"], d["n_pool"]
    alarms, watched = 0, 0
    for s in range(streams):
        rng = np.random.default_rng(seed + s)
        left = 10_000
        while left > 0:
            ref = sc[rng.integers(0, n_pool, 200)]
            det = river_detector(kind, param)
            river_first(det, z_of(ref, ref))  # warm-up on the reference (an alarm there is not counted)
            at = river_first(det, z_of(ref, sc[rng.integers(0, n_pool, left)]))
            alarms += at is not None
            used = at if at is not None else left
            watched += used
            left -= used
    return {**poisson(alarms, watched), "streams": streams}


def calibrate_river(d: dict, kind: str, streams: int, seed: int) -> dict:
    """The most sensitive grid value whose false-alarm rate on separate unchanged streams is within the budget."""
    grid = PH_THRESHOLDS if kind == "ph" else ADWIN_DELTAS
    tried = []
    for p in grid:  # from most to least sensitive
        r = null_river(d, kind, p, streams, seed)
        tried.append({"param": p, "per_10k": r["per_10k"], "alarms": r["alarms"], "traces": r["traces"]})
        if r["per_10k"] <= 10_000 / BUDGET:
            return {"param": p, "name": "threshold" if kind == "ph" else "delta", "grid": tried}
    return {"param": grid[-1], "name": "threshold" if kind == "ph" else "delta", "grid": tried, "note": "grid exhausted"}


# ------------------------------------------------------------------ delays
def monitor_feed(st: dict, ref_n: int, rows: dict, pos: int, stop: int, seed: int):
    """The monitor's schedule from absolute row ``pos`` to ``stop`` in ticks: the reference doubles
    (up to MAX_REF, all rows so far allowing) while nothing alarmed and every sum is below half its
    threshold, detectors restarted on it (Monitor._check_sequential)."""
    while pos < stop and st["alarm"] is None:
        end = min(pos + TICK, stop)
        quiet = all(max(x["s_up"], x.get("s_down", 0.0)) < x["h"] / 2 for x in st["detectors"].values())
        if quiet and ref_n * 2 <= MAX_REF and ref_n + st["n"] >= ref_n * 2:
            want = ref_n * 2
            while want * 2 <= min(end, MAX_REF):
                want *= 2
            st, ref_n = new_cusum(sl(rows, 0, want), seed), want
            feed(st, sl(rows, want, end), 0)
        else:
            feed(st, sl(rows, pos, end), st["n"])
        pos = end
    return st, ref_n


def delay_runs(d: dict, runs: int, horizon: int, seed: int, river_params: dict) -> dict:
    src, n_pool = d["asis"], d["n_pool"]
    detectors = ["cusum", "cusum+growth", "windowed", "pagehinkley", "adwin"]
    res = {e: {k: [] for k in detectors} for e in EFFECTS}
    fired = {e: {} for e in EFFECTS}
    cp_err = {e: [] for e in EFFECTS}
    pre_alarm = {k: 0 for k in detectors}
    for r in range(runs):
        rng = np.random.default_rng(seed + r)
        ri, pi, qi = rng.integers(0, n_pool, 200), rng.integers(0, n_pool, PRE), rng.integers(0, n_pool, horizon)
        ref, pre = take(src, ri), take(src, pi)
        cseed = (seed + r) * 1000
        # CUSUM, fixed reference of 200
        st0 = new_cusum(ref, cseed)
        for a in range(0, PRE, TICK):
            feed(st0, sl(pre, a, a + TICK), a)
        # the monitor's schedule: the same rows; the reference grows at ticks
        head = cat(ref, pre)
        g0, gref = monitor_feed(new_cusum(ref, cseed), 200, head, 200, 200 + PRE, cseed)
        # river: reference, then the unchanged part
        riv0 = {}
        for k, kind in (("pagehinkley", "ph"), ("adwin", "adwin")):
            det = river_detector(kind, river_params[k])
            river_first(det, z_of(ref["score"], ref["score"]))
            riv0[k] = det if river_first(det, z_of(ref["score"], pre["score"])) is None else None
        pre_alarm["cusum"] += st0["alarm"] is not None
        pre_alarm["cusum+growth"] += g0["alarm"] is not None
        for k in ("pagehinkley", "adwin"):
            pre_alarm[k] += riv0[k] is None
        for e in EFFECTS:
            post = take(source(d, e), qi)
            if st0["alarm"] is None:
                st = copy.deepcopy(st0)
                while st["n"] < PRE + horizon and st["alarm"] is None:
                    a = st["n"] - PRE
                    feed(st, sl(post, a, a + TICK), st["n"])
                if st["alarm"] is not None:
                    res[e]["cusum"].append(st["alarm"]["at"] - PRE)
                    cp_err[e].append(st["alarm"]["change_at"] - (PRE + 1))
                    for det in st["alarm"]["detectors"]:
                        fired[e][det] = fired[e].get(det, 0) + 1
                else:
                    res[e]["cusum"].append(math.inf)
            if g0["alarm"] is None:
                rows = cat(ref, pre, post)
                g, gn = monitor_feed(copy.deepcopy(g0), gref, rows, 200 + PRE, 200 + PRE + horizon, cseed)
                res[e]["cusum+growth"].append(gn + g["alarm"]["at"] - 200 - PRE if g["alarm"] else math.inf)
            at = windowed_stream(ref["score"], np.concatenate([pre["score"], post["score"]]), seed=cseed)
            res[e]["windowed"].append(at - PRE if at is not None else math.inf)  # a windowed alert needs 400 traces: never pre-change
            for k in ("pagehinkley", "adwin"):
                if riv0[k] is not None:
                    at = river_first(copy.deepcopy(riv0[k]), z_of(ref["score"], post["score"]))
                    res[e][k].append(at if at is not None else math.inf)
    out = {"runs": runs, "horizon": horizon, "alarm_before_change": pre_alarm, "effects": {}}
    for e in EFFECTS:
        out["effects"][e] = {k: summary(v, horizon) for k, v in res[e].items()}
        out["effects"][e]["cusum_first_detectors"] = fired[e]
        out["effects"][e]["cusum_change_point_error_median"] = float(np.median(cp_err[e])) if cp_err[e] else None
    return out


def summary(delays, horizon: int) -> dict:
    x = np.asarray(delays, dtype=float)
    if not len(x):
        return {"n": 0}
    med, p90 = np.quantile(x, 0.5, method="inverted_cdf"), np.quantile(x, 0.9, method="inverted_cdf")
    return {"n": int(len(x)), "median": None if math.isinf(med) else float(med), "p90": None if math.isinf(p90) else float(p90),
            **{f"within_{w}": float(np.mean(x <= w)) for w in (50, 200, 1000)},
            "detected_in_horizon": float(np.mean(np.isfinite(x)))}


# ------------------------------------------------------------------ report
def fmt_rate(r: dict) -> str:
    lo, hi = r["ci95_per_10k"]
    return f"{r['per_10k']:.2f} [{lo:.2f}, {hi:.2f}] ({r['alarms']}/{r['traces'] // 1000}k)"


def fmt_delay(s: dict, horizon: int) -> str:
    if not s.get("n"):
        return "–"
    f = lambda v: f">{horizon}" if v is None else f"{v:.0f}"  # noqa: E731
    return f"{f(s['median'])}/{f(s['p90'])} ({100 * s['within_50']:.0f}/{100 * s['within_200']:.0f}/{100 * s['within_1000']:.0f}%)"


def report(res: dict) -> None:
    print(f"\nFalse alarms per 10,000 unchanged traces [95 % Poisson CI] (alarms/traces); budget {10_000 / BUDGET:g}:\n")
    print("| dataset | scores | CUSUM ref 200 | CUSUM ref 800 | windowed (ref 200) | PageHinkley | ADWIN |")
    print("|---|---|---|---|---|---|---|")
    for name, r in res["datasets"].items():
        nl = r["null"]
        print(f"| {name} | {r['distinct_scores']} distinct / {r['n_pool']} | {fmt_rate(nl['cusum_ref200'])} | "
              f"{fmt_rate(nl['cusum_ref800'])} | {fmt_rate(nl['windowed'])} | {fmt_rate(nl['pagehinkley'])} "
              f"(thr {r['river']['pagehinkley']['param']:g}) | {fmt_rate(nl['adwin'])} (δ {r['river']['adwin']['param']:g}) |")
    print("\nDelay in traces after the change: median/p90 (% detected within 50/200/1000); "
          f"reference 200, change after {PRE} unchanged traces, horizon {res['settings']['horizon']}:\n")
    dets = ["cusum", "cusum+growth", "windowed", "pagehinkley", "adwin"]
    print("| dataset | effect | " + " | ".join(dets) + " |\n|---|---|" + "---|" * len(dets))
    for name, r in res["datasets"].items():
        for e, row in r["delay"]["effects"].items():
            print(f"| {name} | {e} | " + " | ".join(fmt_delay(row[k], r['delay']['horizon']) for k in dets) + " |")
        print(f"| {name} | alarm before the change (runs of {r['delay']['runs']}) | "
              + " | ".join(str(r["delay"]["alarm_before_change"][k]) for k in dets) + " |")


def finish(res: dict, t0: float, out: str | None) -> None:
    """Time and load after the run, printed; the results written to ``out`` (None: not written)."""
    res["seconds"], res["load_after"] = round(time.perf_counter() - t0, 1), os.getloadavg()
    print(f"\ntotal {res['seconds']} s; load average before {res['load_before']}, after {res['load_after']}")
    if out:
        Path(out).write_text(json.dumps(res, indent=1, default=float) + "\n")
        print(f"wrote {out}")


def cusum_null_only(a) -> None:
    """False alarms of the CUSUM alone at the monitor's reference sizes, per detector that fired."""
    t0, seed = time.perf_counter(), 10_000 + a.seed * 1000
    res = {"settings": {"sequential": SETTINGS.to_dict(), "budget_traces_per_false_alarm": BUDGET, "tick": TICK,
                        "fit_rows": FIT_ROWS, "null_streams": a.null_streams, "traces_per_stream": 10_000,
                        "seeds": {"fit": a.seed, "null": seed}}, "datasets": {}, "load_before": os.getloadavg()}
    print("| dataset | reference | false alarms per 10,000 [95 % CI] | detectors that fired most |\n|---|---|---|---|")
    for name in a.datasets:
        d = prepare(name, seed=a.seed)
        res["datasets"][name] = {}
        for ref_n in (200, 800, MAX_REF):
            r = null_cusum(d, ref_n, a.null_streams, seed)
            res["datasets"][name][f"ref{ref_n}"] = r
            top = ", ".join(f"{k.removeprefix('metric:')} {v}" for k, v in sorted(r["by_detector"].items(), key=lambda kv: -kv[1])[:3])
            print(f"| {name} | {ref_n} | {fmt_rate(r)} | {top} |", flush=True)
    finish(res, t0, a.out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=DATASETS)
    ap.add_argument("--null-streams", type=int, default=40, help="unchanged streams of 10,000 traces (CUSUM, river)")
    ap.add_argument("--window-null-streams", type=int, default=20, help="the same for the windowed test (slower)")
    ap.add_argument("--runs", type=int, default=40, help="delay runs per effect")
    ap.add_argument("--horizon", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 2 streams, 4 runs, no JSON")
    ap.add_argument("--cusum-null-only", action="store_true", help="only the CUSUM's false alarms, references 200/800/1,600")
    ap.add_argument("--out", default=None, help="JSON path (default results/drift_detection.json, "
                                                "results/drift_null_cusum.json with --cusum-null-only)")
    a = ap.parse_args()
    a.out = a.out or str(HERE / "results" / ("drift_null_cusum.json" if a.cusum_null_only else "drift_detection.json"))
    if a.cusum_null_only:
        return cusum_null_only(a)
    if a.quick:
        a.null_streams, a.window_null_streams, a.runs, a.horizon = 2, 1, 4, 1000
    t0 = time.perf_counter()
    seeds = {"fit": a.seed, "null": 10_000 + a.seed * 1000, "river_calibration": 20_000 + a.seed * 1000,
             "delay": 30_000 + a.seed * 1000}
    res = {"settings": {"sequential": SETTINGS.to_dict(), "budget_traces_per_false_alarm": BUDGET, "tick": TICK,
                        "fit_rows": FIT_ROWS, "pre_change": PRE, "horizon": a.horizon, "max_reference": MAX_REF,
                        "null_streams": a.null_streams, "window_null_streams": a.window_null_streams,
                        "traces_per_stream": 10_000, "delay_runs": a.runs, "shifts_sd": SHIFTS,
                        "shift_sd_of": "the held-out pool's scores (downward)", "windowed": DriftThresholds().to_dict(),
                        "pagehinkley": {"delta": SETTINGS.k, "grid": PH_THRESHOLDS}, "adwin": {"grid": ADWIN_DELTAS},
                        "seeds": seeds}, "datasets": {}, "load_before": os.getloadavg()}
    for name in a.datasets:
        t1 = time.perf_counter()
        d = prepare(name, seed=a.seed)
        r = {k: d[k] for k in ("target", "features", "n_fit", "n_pool", "fit_test_tau", "sd_pool", "distinct_scores",
                               "cut_3_words_mean_shift_sd", "empty_mean_shift_sd", "prepare_s")}
        r["river"] = {"pagehinkley": calibrate_river(d, "ph", a.null_streams, seeds["river_calibration"]),
                      "adwin": calibrate_river(d, "adwin", a.null_streams, seeds["river_calibration"])}
        tn = time.perf_counter()
        r["null"] = {"cusum_ref200": null_cusum(d, 200, a.null_streams, seeds["null"]),
                     "cusum_ref800": null_cusum(d, 800, a.null_streams, seeds["null"]),
                     "windowed": null_windowed(d, a.window_null_streams, seeds["null"]),
                     "pagehinkley": null_river(d, "ph", r["river"]["pagehinkley"]["param"], a.null_streams, seeds["null"]),
                     "adwin": null_river(d, "adwin", r["river"]["adwin"]["param"], a.null_streams, seeds["null"])}
        r["null_s"] = round(time.perf_counter() - tn, 1)
        td = time.perf_counter()
        r["delay"] = delay_runs(d, a.runs, a.horizon, seeds["delay"],
                                {k: r["river"][k]["param"] for k in ("pagehinkley", "adwin")})
        r["delay_s"] = round(time.perf_counter() - td, 1)
        r["seconds"], r["load_after"] = round(time.perf_counter() - t1, 1), os.getloadavg()
        res["datasets"][name] = r
        print(f"{name}: {r['seconds']} s (null {r['null_s']} s, delay {r['delay_s']} s), load {os.getloadavg()}", flush=True)
    report(res)
    finish(res, t0, None if a.quick else a.out)


if __name__ == "__main__":
    main()
