"""Regression comparison: which way of combining MetricBank scores agrees best with humans?

    python tests/benchmarks/regression_compare.py [--datasets simpeval ...] [--seeds 25] [--max-rows 400]

For the 16 shared targets (every label of /work/shared/datasets/datasets.json), the labelled
rows are sampled as benchmarks/baselines.py samples them (seeded, at most --max-rows), scored
once per dataset with the CPU MetricBank (cached under /tmp/regcache, keyed by row content, so a
rerun skips scoring), and split with the dataset's grouped ``split_positions(test_size, seed)``
for seeds 0..k-1.  On every split each method is fitted on train and scored by held-out Kendall
tau-b:

- ``pls``: the current two-stage one-component PLS selector (top 5);
- ``nnls``: :class:`NNLSMetricSelector` (tau-oriented NNLS, near-duplicates collapsed, top 5);
- ``nnls_nodedup``: the same without the dedup;
- ``enet``: :class:`ElasticNetMetricSelector` (top 5);
- ``xgboost``: gradient-boosted trees over all metrics, MetaMetricsBaseline's fixed config;
- ``single``: the best single metric chosen on train by |tau|, with its sign;
- ``auto``: :func:`choose_regression` over nnls/pls/enet/single by inner grouped CV on train.

Reported per target: mean tau ± 95 % t-interval over splits, and the paired per-split
difference tau(nnls) - tau(pls) (and nnls - nnls_nodedup) with its 95 % t-interval.  The splits
overlap, so these intervals understate the variance of a fresh dataset; "beyond noise" below
means the paired interval excludes 0.  Prints a Markdown table; writes
results/regression_compare.json (every per-split number) and the table beside it (.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SHARED = Path(os.environ.get("AUTOMETRICS_SHARED", HERE.parents[2] / "shared")) / "datasets"
CACHE = Path(os.environ.get("AUTOMETRICS_REGCACHE", "/tmp/regcache"))
CACHE_VERSION = 1


def jobs() -> dict[str, list[str]]:
    """dataset name -> every target ``datasets.json`` lists for it."""
    cards = json.loads((SHARED / "datasets.json").read_text(encoding="utf-8"))
    return {name: list(card.get("labels", {})) for name, card in cards.items()}


def _rows_key(lab) -> list[tuple]:
    f = lab.frame
    return [(str(i), a, b, tuple(r)) for i, a, b, r in zip(f["id"], f["input"], f["output"], f["references"], strict=True)]


def dataset_features(name: str, targets: list[str], *, max_rows: int | None, cache_dir: Path | None) -> dict[str, dict]:
    """Per target: the sampled labelled rows' CPU-MetricBank scores ``X``, labels ``y``, input
    groups and the ``lab`` Dataset (for its grouped ``split_positions``).

    The union of every target's sampled rows is scored in ONE batch (corpus-level metrics see
    one corpus, as in ``fit_evaluator``), and the matrix is pickled under ``cache_dir`` keyed by
    the rows' content, so a rerun only reloads the CSV."""
    from autometrics.evaluators.data import load_dataset
    from autometrics.evaluators.sampling import sample_rows

    cards = json.loads((SHARED / "datasets.json").read_text(encoding="utf-8"))
    path = SHARED / cards[name]["file"]
    labs = {}
    for t in targets:  # loaded per target, as the harness does
        lab = load_dataset(path, t).labelled(t)
        labs[t] = lab if max_rows is None else sample_rows(lab, t, max_rows)  # the benchmark harness's rows
    union_pos: dict[tuple, tuple[str, int]] = {}
    for t, lab in labs.items():
        for i, k in enumerate(_rows_key(lab)):
            union_pos.setdefault(k, (t, i))
    h = hashlib.sha256(repr((CACHE_VERSION, name, sorted(union_pos))).encode("utf-8")).hexdigest()[:16]
    cache_file = cache_dir / f"{name}-{h}.pkl" if cache_dir is not None else None
    if cache_file is not None and cache_file.exists():
        cached = pickle.loads(cache_file.read_bytes())
    else:
        import pandas as pd
        from autometrics.evaluators.fit import score_metrics
        from autometrics.metricbank import default_metrics
        from autometrics.metricbank._models import ModelMetric

        first = labs[targets[0]]
        order = list(union_pos)
        # one Dataset holding every distinct sampled row of every target
        frame = pd.concat([labs[t].frame.iloc[[i]] for t, i in (union_pos[k] for k in order)], ignore_index=True)
        union = type(first)(frame=frame, targets=first.targets, labels=first.labels, source=first.source,
                            columns=first.columns, has_references=first.has_references,
                            has_input=first.has_input)
        # the "cpu" bank of benchmarks/baselines.py: every metric that runs here without model weights
        bank = [m for m in default_metrics(with_reference=union.has_references, with_input=union.has_input)
                if not isinstance(m, ModelMetric)]
        t0 = time.perf_counter()
        Xf, meta, notes = score_metrics(bank, union.outputs, union.inputs if union.has_input else None, union.references)
        values = Xf.to_numpy(dtype=float)
        names = list(Xf.columns)
        cached = {"rows": {k: values[r] for r, k in enumerate(order)}, "names": names,
                  "generated": [bool(meta[c]["generated"]) for c in names], "notes": notes,
                  "seconds": time.perf_counter() - t0}
        if cache_file is not None:
            cache_dir.mkdir(parents=True, exist_ok=True)
            tmp = cache_file.with_suffix(".tmp")
            tmp.write_bytes(pickle.dumps(cached))
            tmp.replace(cache_file)
    out = {}
    for t, lab in labs.items():
        X = np.vstack([cached["rows"][k] for k in _rows_key(lab)])
        out[t] = {"X": X, "y": lab.y(t), "groups": lab.frame["group"].astype(str).to_numpy(), "lab": lab,
                  "names": cached["names"], "generated": np.asarray(cached["generated"], dtype=bool),
                  "scoring_seconds": cached["seconds"]}
    return out


# ------------------------------------------------------------------------------ methods

METHODS = ("pls", "nnls", "nnls_nodedup", "enet", "xgboost", "single", "auto")
#: opt-in (--methods): the shape regressions (ebm: top-n additive shapes; ebm_pairs: with up to 3
#: pairwise terms), and interpret-core's machine over every metric (ebm_all, ebm_all_pairs: 5 pairs)
SHAPE_METHODS = ("ebm", "ebm_pairs")
#: NNLS without giving back collapsed near-duplicates whose added value is measured
EXTRA_METHODS = ("nnls_norestore",)
EBM_ALL = ("ebm_all", "ebm_all_pairs")
TITLES = {"pls": "PLS (current)", "nnls": "NNLS", "nnls_nodedup": "NNLS no dedup", "nnls_norestore": "NNLS, no restoring", "enet": "ElasticNet",
          "xgboost": "XGBoost", "single": "best single", "auto": "auto", "ebm": "shapes (top n)", "ebm_pairs": "shapes + 3 pairs",
          "ebm_all": "EBM all metrics", "ebm_all_pairs": "EBM all + 5 pairs"}
AUTO_CANDIDATES = ("nnls", "pls", "enet", "single")  # + "ebm" from 300 training labels (induce.auto_candidates)


def _xgb_model(seed: int):
    """The MetaMetrics-style regressor with MetaMetricsBaseline's own fixed hyperparameters."""
    try:
        from autometrics.evaluators.benchmark.baselines import MetaMetricsBaseline
    except ImportError:  # the module's pre-restructure home
        from autometrics.evaluators.baselines import MetaMetricsBaseline
    return MetaMetricsBaseline(backend="xgboost", seed=seed)._model(seed)


def fit_predict(method: str, Xtr, ytr, gtr, generated, Xte, seed: int, top_n: int) -> tuple[np.ndarray, dict]:
    """Held-out predictions of one method plus what it chose (JSON-safe)."""
    from autometrics.evaluators.selection import choose_regression, make_selector

    if method == "xgboost":
        return np.asarray(_xgb_model(seed).fit(Xtr, ytr).predict(Xte), dtype=float), {}
    if method == "nnls_norestore":  # NNLS whose collapsed near-duplicates never come back (the earlier rule)
        from autometrics.evaluators.selection import NNLSMetricSelector

        sel = NNLSMetricSelector(top_n=top_n, restore_alpha=0).fit(Xtr, ytr, generated=generated)
        return sel.predict(Xte), {"selected": [int(j) for j in sel.selected_],
                                  "represents": {str(k): v for k, v in sel.represents_.items() if v}}
    if method in SHAPE_METHODS:  # the package's shape selectors (top-n shapes, as an evaluator keeps them)
        from autometrics.evaluators.selection import make_selector

        sel = make_selector(method, top_n=top_n).fit(Xtr, ytr, generated=generated)
        return sel.predict(Xte), {"selected": [int(j) for j in sel.selected_], "pairs": len(sel.pairs_)}
    if method in ("ebm_all", "ebm_all_pairs"):  # the machine over every metric (not readable: the gap's upper end)
        from interpret.glassbox import ExplainableBoostingRegressor

        ebm = ExplainableBoostingRegressor(interactions=5 if method == "ebm_all_pairs" else 0, random_state=seed, n_jobs=1)
        return np.asarray(ebm.fit(Xtr, ytr).predict(Xte), dtype=float), {}
    info = {}
    name = method
    if method == "auto":
        from autometrics.evaluators.induce import auto_candidates

        choice = choose_regression(Xtr, ytr, gtr, generated, candidates=auto_candidates(len(ytr)), top_n=top_n)
        name = choice.name
        info = {"chosen": choice.name, "inner_tau": choice.tau, "note": choice.note}
    sel = make_selector(name, top_n=top_n).fit(Xtr, ytr, generated=generated)
    info["selected"] = [int(j) for j in sel.selected_]
    if hasattr(sel, "represents_"):
        info["represents"] = {str(k): v for k, v in sel.represents_.items() if v}
    return sel.predict(Xte), info


def t_interval(values) -> tuple[float, float]:
    """Mean and half-width of the 95 % Student-t interval over the finite values."""
    from scipy import stats

    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
    if len(v) < 2:
        return (float(v.mean()) if len(v) else float("nan")), float("nan")
    return float(v.mean()), float(stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v)))


def run_target(name: str, target: str, d: dict, seeds: int, test_size: float, top_n: int, methods) -> dict:
    from autometrics.evaluators.stats import kendall_tau

    X, y, lab, gen = d["X"], d["y"], d["lab"], d["generated"]
    groups, names = d["groups"], d["names"]
    per = {m: [] for m in methods}
    picks = {m: [] for m in methods}
    seconds = dict.fromkeys(methods, 0.0)
    for s in range(seeds):
        tr, te = lab.split_positions(test_size, s)
        for m in methods:
            t0 = time.perf_counter()
            pred, info = fit_predict(m, X[tr], y[tr], groups[tr], gen, X[te], s, top_n)
            seconds[m] += time.perf_counter() - t0
            tau = kendall_tau(pred, y[te])[0]
            per[m].append(float(tau) if np.isfinite(tau) else None)
            if "selected" in info:  # indices -> metric names, for the JSON
                info["selected"] = [names[j] for j in info["selected"]]
                info["represents"] = {names[int(k)]: [names[j] for j in v] for k, v in info.get("represents", {}).items()}
            picks[m].append(info)
    row = {"dataset": name, "target": target, "n": int(len(y)), "n_train": len(lab.split_positions(test_size, 0)[0]),
           "n_metrics": int(X.shape[1]), "metrics": list(names),
           "per_split": per, "seconds": {m: round(v, 2) for m, v in seconds.items()}, "choices": picks}
    row["tau"] = {m: dict(zip(("mean", "ci95"), t_interval(per[m]), strict=True)) for m in methods}
    for a, b in (("nnls", "pls"), ("nnls", "nnls_nodedup"), ("nnls", "xgboost"), ("auto", "nnls"), ("ebm", "xgboost"),
                 ("ebm_pairs", "xgboost"), ("ebm", "nnls"), ("auto", "xgboost"), ("nnls", "nnls_norestore"),
                 ("auto", "nnls_norestore")):
        if a in per and b in per:
            diffs = [x - z for x, z in zip(per[a], per[b], strict=True) if x is not None and z is not None]
            mean, half = t_interval(diffs)
            row.setdefault("paired", {})[f"{a}-{b}"] = {"mean": mean, "ci95": half, "low": mean - half, "high": mean + half}
    common: dict[str, int] = {}
    for info in picks.get("nnls", []):
        for nm in info.get("selected", []):
            common[nm] = common.get(nm, 0) + 1
    row["nnls_selected_most"] = sorted(common.items(), key=lambda kv: -kv[1])[:6]
    if "auto" in picks:
        chosen: dict[str, int] = {}
        for info in picks["auto"]:
            chosen[info["chosen"]] = chosen.get(info["chosen"], 0) + 1
        row["auto_chosen"] = chosen
    return row


# ------------------------------------------------------------------------------ report


def summarise(rows: list[dict], methods) -> dict:
    mean_tau = {m: float(np.mean([r["tau"][m]["mean"] for r in rows])) for m in methods}
    out = {"mean_tau": mean_tau, "n_targets": len(rows)}

    def count(pred):
        return int(sum(bool(pred(r)) for r in rows))

    if "nnls" in methods:
        for other in ("xgboost", "single", "pls", "nnls_nodedup", "enet"):
            if other in methods:
                out[f"nnls>={other}"] = count(lambda r, o=other: r["tau"]["nnls"]["mean"] >= r["tau"][o]["mean"])
        for key in ("nnls-pls", "nnls-nodedup"):
            k = key if key == "nnls-pls" else "nnls-nnls_nodedup"
            if rows and k in rows[0].get("paired", {}):
                out[f"{key}: better beyond noise"] = count(lambda r, k=k: r["paired"][k]["low"] > 0)
                out[f"{key}: worse beyond noise"] = count(lambda r, k=k: r["paired"][k]["high"] < 0)
                out[f"{key}: mean paired delta"] = float(np.mean([r["paired"][k]["mean"] for r in rows]))
    for m in ("ebm", "ebm_pairs"):
        if m in methods and "xgboost" in methods:
            out[f"{m}>=xgboost"] = count(lambda r, m=m: r["tau"][m]["mean"] >= r["tau"]["xgboost"]["mean"])
            out[f"{m}-xgboost: within 0.01"] = count(lambda r, m=m: r["paired"][f"{m}-xgboost"]["mean"] >= -0.01)
    if "auto" in methods:
        out["auto>=xgboost"] = count(lambda r: r["tau"]["auto"]["mean"] >= r["tau"].get("xgboost", {"mean": -9})["mean"])
        if "xgboost" in methods:
            big = [r for r in rows if r["n_train"] >= 300]
            out["auto-xgboost within 0.01 (>= 300 train labels)"] = (
                f"{sum(r['paired']['auto-xgboost']['mean'] >= -0.01 for r in big)} of {len(big)}")
    for k in ("nnls-nnls_norestore", "auto-nnls_norestore"):
        if rows and k in rows[0].get("paired", {}):
            out[f"{k}: better beyond noise"] = count(lambda r, k=k: r["paired"][k]["low"] > 0)
            out[f"{k}: worse beyond noise"] = count(lambda r, k=k: r["paired"][k]["high"] < 0)
            out[f"{k}: mean paired delta"] = float(np.mean([r["paired"][k]["mean"] for r in rows]))
    return out


def to_markdown(rows: list[dict], methods, summary: dict) -> str:
    keys = [k for k in ("nnls-pls", "nnls-nnls_nodedup", "nnls-xgboost", "ebm-xgboost", "ebm_pairs-xgboost", "ebm-nnls")
            if any(k in r.get("paired", {}) for r in rows)]
    head = ["dataset / target", "n", *(TITLES[m] for m in methods), *(f"Δτ {k} (95 %)" for k in keys)]
    out = ["| " + " | ".join(head) + " |", "|---|---:|" + "---:|" * (len(methods) + len(keys))]
    for r in rows:
        best = max(r["tau"][m]["mean"] for m in methods)
        cells = []
        for m in methods:
            t = r["tau"][m]
            txt = f"{t['mean']:.3f} ± {t['ci95']:.3f}"
            cells.append(f"**{txt}**" if t["mean"] >= best - 1e-12 else txt)
        for k in keys:
            p = r.get("paired", {}).get(k)
            cells.append(f"{p['mean']:+.3f} [{p['low']:+.3f}, {p['high']:+.3f}]" if p else "–")
        out.append(f"| {r['dataset']} / {r['target']} | {r['n']} | " + " | ".join(cells) + " |")
    top = max(summary["mean_tau"].values())
    means = [f"**{v:.3f}**" if v >= top - 1e-12 else f"{v:.3f}" for v in (summary["mean_tau"][m] for m in methods)]
    out.append("| **mean over targets** | | " + " | ".join(means + [""] * len(keys)) + " |")
    return "\n".join(out)


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    all_jobs = jobs()
    ap.add_argument("--datasets", nargs="*", default=list(all_jobs))
    ap.add_argument("--seeds", type=int, default=25)
    ap.add_argument("--max-rows", type=int, default=400)
    ap.add_argument("--test-size", type=float, default=0.3)
    ap.add_argument("--top-n", type=int, default=5)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--no-cache", action="store_true", help="score again instead of reading /tmp/regcache")
    ap.add_argument("--out", default=str(HERE / "results" / "regression_compare.json"))
    args = ap.parse_args()
    methods = [m for m in args.methods.split(",") if m]
    unknown = [m for m in methods if m not in METHODS + SHAPE_METHODS + EBM_ALL + EXTRA_METHODS]
    if unknown:
        raise SystemExit(f"unknown method(s) {unknown}; choose from {METHODS + SHAPE_METHODS + EBM_ALL + EXTRA_METHODS}")
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1)  # small models: one BLAS/OpenMP thread avoids oversubscribing 2 cores
    started = time.perf_counter()
    rows, scoring = [], {}
    for name in args.datasets:
        t0 = time.perf_counter()
        data = dataset_features(name, all_jobs[name], max_rows=args.max_rows, cache_dir=None if args.no_cache else CACHE)
        scoring[name] = {"load_seconds": round(time.perf_counter() - t0, 1),
                         "scoring_seconds_when_scored": round(next(iter(data.values()))["scoring_seconds"], 1)}
        for target, d in data.items():
            t1 = time.perf_counter()
            row = run_target(name, target, d, args.seeds, args.test_size, args.top_n, methods)
            rows.append(row)
            cells = ", ".join(f"{m} {row['tau'][m]['mean']:.3f}" for m in methods)
            print(f"  {name}/{target} (n={row['n']}, {row['n_metrics']} metrics): {cells}  [{time.perf_counter() - t1:.0f} s]",
                  flush=True)
    total = time.perf_counter() - started
    summary = summarise(rows, methods)
    table = to_markdown(rows, methods, summary)
    foot = (f"{args.seeds} grouped splits per target (seeds 0..{args.seeds - 1}, test {args.test_size:.0%}), at most "
            f"{args.max_rows} labelled rows per dataset (seeded sample, as baselines.py); ± is the 95 % Student-t "
            f"interval over splits; Δτ are paired per split (mean [95 % t-interval]); bold = best mean; auto = "
            f"choose_regression over {'/'.join(AUTO_CANDIDATES)} (+ ebm from 300 training labels) by 5-fold grouped CV inside each train split. "
            f"Total {total:.0f} s.")
    counts = "\n".join(f"- {k}: {v:.4f}" if isinstance(v, float) else f"- {k}: {v}" for k, v in summary.items()
                       if k != "mean_tau")
    print()
    print(table)
    print()
    print(foot)
    print(counts)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {"seeds": args.seeds, "max_rows": args.max_rows, "test_size": args.test_size, "top_n": args.top_n,
               "methods": methods, "auto_candidates": list(AUTO_CANDIDATES), "total_seconds": round(total, 1),
               "scoring": scoring, "summary": summary, "rows": rows}
    out.write_text(json.dumps(payload, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    out.with_suffix(".md").write_text(f"# Regression comparison\n\n{table}\n\n{foot}\n\n{counts}\n", encoding="utf-8")
    print(f"wrote {out} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
